//! The gang core under a fake clock, against layouts, slot sequences and admission orders
//! worked out by hand from the gang thesis and the FPMPFS paper.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ninf_gang::{
    FakeClock, GangConfig, GangMatrix, GangScheduler, JobState, MatrixError, Policy, Switch,
};

#[test]
fn jobs_take_the_first_row_with_room_and_empty_rows_close() {
    let mut m = GangMatrix::new(4, 3);
    for (job, p) in [(1, 2), (2, 2), (3, 4), (4, 1), (5, 3)] {
        assert!(m.place(job, p).unwrap().is_some(), "job {job}");
    }
    assert_eq!(m.layout(), vec!["1 1 2 2", "3 3 3 3", "4 5 5 5"]);
    assert!(
        m.place(6, 1).unwrap().is_none(),
        "the multiprogramming level is reached"
    );
    assert_eq!(
        m.place(7, 5),
        Err(MatrixError::TooLarge {
            job: 7,
            processors: 5,
            columns: 4
        })
    );
    assert_eq!(m.place(1, 1), Err(MatrixError::Duplicate(1)));
    m.remove(3);
    assert_eq!(m.layout(), vec!["1 1 2 2", "4 5 5 5"]);
    assert_eq!(m.placement(5).unwrap().row, 1);
    assert_eq!(m.placement(5).unwrap().columns, vec![1, 2, 3]);
    assert!(m.place(6, 4).unwrap().is_some());
    assert_eq!(m.layout(), vec!["1 1 2 2", "4 5 5 5", "6 6 6 6"]);
}

/// Rows `1 1 . .`, `3 3 3 3`, `. . 5 5`.
fn table_with_holes() -> GangMatrix {
    let mut m = GangMatrix::new(4, 3);
    for (job, p) in [(1, 2), (2, 2), (3, 4), (4, 2), (5, 2)] {
        m.place(job, p).unwrap();
    }
    m.remove(2);
    m.remove(4);
    assert_eq!(m.layout(), vec!["1 1 . .", "3 3 3 3", ". . 5 5"]);
    m
}

#[test]
fn idle_columns_are_lent_to_jobs_of_other_rows_that_fit_there() {
    let mut m = table_with_holes();
    let slots: Vec<(usize, Vec<u64>, Vec<u32>)> = (0..4)
        .map(|_| {
            let s = m.advance().unwrap();
            (s.row, s.running, s.idle_columns)
        })
        .collect();
    assert_eq!(
        slots,
        vec![
            (0, vec![1, 5], vec![]),
            (1, vec![3], vec![]),
            (2, vec![5, 1], vec![]),
            (0, vec![1, 5], vec![]),
        ]
    );
}

#[test]
fn rows_whose_jobs_are_all_idle_are_skipped() {
    let mut m = table_with_holes();
    m.set_state(3, JobState::Idle);
    let rows: Vec<usize> = (0..4).map(|_| m.advance().unwrap().row).collect();
    assert_eq!(rows, vec![0, 2, 0, 2]);
    // Job 3's columns are lent to nobody else: jobs keep their own processors.
    m.set_state(1, JobState::Stopped { since: 0.0 });
    m.set_state(5, JobState::Idle);
    assert_eq!(m.advance(), None, "nothing is runnable");
    m.set_state(3, JobState::Runnable);
    assert_eq!(m.advance().unwrap().running, vec![3]);
}

fn scheduler(
    clock: &FakeClock,
    processors: u32,
    rows: usize,
    policy: Policy,
) -> GangScheduler<&FakeClock> {
    let config = GangConfig {
        max_rows: rows,
        policy,
        wait_limit: 10.0,
        ..GangConfig::new(processors)
    };
    GangScheduler::new(config, clock)
}

#[test]
fn two_full_width_jobs_alternate_every_quantum() {
    let clock = FakeClock::new(0.0);
    let mut s = scheduler(&clock, 2, 2, Policy::Fpfs);
    assert_eq!(s.submit(1, 2).unwrap(), vec![1]);
    assert_eq!(s.submit(2, 2).unwrap(), vec![2]);
    let switch = |at: f64, stop: Vec<u64>, resume: Vec<u64>, row| Switch {
        at,
        row: Some(row),
        stop,
        resume,
    };
    assert_eq!(s.tick(), Some(switch(0.0, vec![], vec![1], 0)));
    clock.set(0.05);
    assert_eq!(s.tick(), None, "mid-slot, nothing changed");
    clock.set(0.1);
    assert_eq!(s.tick(), Some(switch(0.1, vec![1], vec![2], 1)));
    clock.set(0.2);
    assert_eq!(s.tick(), Some(switch(0.2, vec![2], vec![1], 0)));
    // Job 1 ends mid-slot: job 2 gets the processors at once, not at the next boundary.
    clock.set(0.25);
    s.finish(1);
    assert_eq!(s.matrix().layout(), vec!["2 2"]);
    assert_eq!(s.tick(), Some(switch(0.25, vec![], vec![2], 0)));
    clock.set(0.3);
    assert_eq!(s.tick(), None, "a lone job is never stopped");
    let counters = s.counters();
    assert_eq!(
        (counters.switches, counters.admitted, counters.finished),
        (4, 2, 1)
    );
}

/// Starts jobs (id, processors) at successive instants; returns what each submission admitted.
fn submit_all(
    s: &mut GangScheduler<&FakeClock>,
    clock: &FakeClock,
    jobs: &[(u64, u32)],
) -> Vec<u64> {
    let mut started = Vec::new();
    for &(id, p) in jobs {
        clock.advance(1.0);
        started.extend(s.submit(id, p).unwrap());
    }
    started
}

#[test]
fn fcfs_waits_for_the_head_fpfs_passes_it() {
    for (policy, expected) in [(Policy::Fcfs, vec![10]), (Policy::Fpfs, vec![10, 12])] {
        let clock = FakeClock::new(0.0);
        let mut s = scheduler(&clock, 8, 1, policy);
        let started = submit_all(&mut s, &clock, &[(10, 6), (11, 4), (12, 2), (13, 1)]);
        assert_eq!(started, expected, "{policy:?}");
    }
}

#[test]
fn fpmpfs_serves_the_largest_demands_first() {
    // The machine is full; 13, 11, 12 arrive; then the big job ends.
    let arrivals = [(10, 8), (13, 1), (11, 4), (12, 4)];
    let clock = FakeClock::new(0.0);
    let mut fpfs = scheduler(&clock, 8, 1, Policy::Fpfs);
    submit_all(&mut fpfs, &clock, &arrivals);
    assert_eq!(fpfs.finish(10), vec![13, 11]);
    let clock = FakeClock::new(0.0);
    let mut fpmpfs = scheduler(&clock, 8, 1, Policy::Fpmpfs);
    submit_all(&mut fpmpfs, &clock, &arrivals);
    let order: Vec<u64> = fpmpfs.queue().jobs().iter().map(|j| j.id).collect();
    assert_eq!(
        order,
        vec![11, 12, 13],
        "kept sorted by non-increasing demand"
    );
    assert_eq!(fpmpfs.finish(10), vec![11, 12]);
}

#[test]
fn fpmpfs_never_inserts_ahead_of_a_job_past_its_wait_limit() {
    let clock = FakeClock::new(0.0);
    let mut s = scheduler(&clock, 4, 1, Policy::Fpmpfs);
    s.submit(1, 4).unwrap();
    s.submit(2, 2).unwrap();
    clock.set(5.0);
    s.submit(3, 3).unwrap();
    let order: Vec<u64> = s.queue().jobs().iter().map(|j| j.id).collect();
    assert_eq!(
        order,
        vec![3, 2],
        "before WaitLimit, 3 goes ahead of the smaller 2"
    );
    clock.set(20.0);
    s.submit(4, 4).unwrap();
    let order: Vec<u64> = s.queue().jobs().iter().map(|j| j.id).collect();
    assert_eq!(order, vec![3, 2, 4], "3 and 2 have waited past WaitLimit");
}

/// A large job among a stream of small ones: returns when it started, if it did by `until`.
fn large_job_start(wait_limit: f64, until: f64) -> Option<f64> {
    let clock = FakeClock::new(0.0);
    let config = GangConfig {
        max_rows: 1,
        policy: Policy::Fpfs,
        wait_limit,
        ..GangConfig::new(4)
    };
    let mut s = GangScheduler::new(config, &clock);
    // Small jobs (1 processor, 3 s) arrive every second; the large one (4) at 0.5 s.
    let mut running: Vec<(u64, f64)> = Vec::new();
    let mut next_small = 100u64;
    let mut t = 0.0;
    let mut large_started = None;
    let mut note = |started: Vec<u64>, t: f64, running: &mut Vec<(u64, f64)>| {
        for id in started {
            if id == 1 {
                large_started.get_or_insert(t);
            }
            running.push((id, t + 3.0));
        }
    };
    while t <= until {
        clock.set(t);
        let done: Vec<u64> = running
            .iter()
            .filter(|(_, end)| *end <= t)
            .map(|(id, _)| *id)
            .collect();
        running.retain(|(_, end)| *end > t);
        for id in done {
            let started = s.finish(id);
            note(started, t, &mut running);
        }
        if (t - 0.5).abs() < 1e-9 {
            let started = s.submit(1, 4).unwrap();
            note(started, t, &mut running);
        }
        if t.fract() == 0.0 {
            let started = s.submit(next_small, 1).unwrap();
            next_small += 1;
            note(started, t, &mut running);
        }
        t += 0.5;
    }
    large_started
}

#[test]
fn wait_limit_bounds_the_starvation_of_a_large_job() {
    assert_eq!(
        large_job_start(f64::INFINITY, 60.0),
        None,
        "without WaitLimit it starves"
    );
    let started = large_job_start(10.0, 60.0).expect("with WaitLimit it starts");
    // It arrived at 0.5; after 10 s no small job may pass it, and the last ones end 3 s later.
    assert!(started <= 0.5 + 10.0 + 3.0, "started at {started}");
    assert!(
        started >= 10.5,
        "it cannot start before the limit stops the scan: {started}"
    );
}

#[test]
fn deadlocked_jobs_are_reported_after_the_grace() {
    let clock = FakeClock::new(0.0);
    let mut s = scheduler(&clock, 2, 2, Policy::Fpfs);
    s.submit(1, 1).unwrap();
    s.submit(2, 1).unwrap();
    s.tick();
    s.set_state(1, JobState::Stopped { since: 0.0 });
    s.set_state(2, JobState::Idle);
    assert_eq!(
        s.tick().unwrap().stop,
        vec![1, 2],
        "neither keeps its processors"
    );
    clock.set(9.9);
    assert!(s.stopped_beyond_grace().is_empty());
    clock.set(10.0);
    assert_eq!(s.stopped_beyond_grace(), vec![1], "idle is not deadlock");
    s.set_state(2, JobState::Runnable);
    assert_eq!(s.tick().unwrap().resume, vec![2]);
}

#[test]
fn impossible_jobs_are_refused_at_submission() {
    let clock = FakeClock::new(0.0);
    let mut s = scheduler(&clock, 2, 2, Policy::Fcfs);
    assert_eq!(
        s.submit(1, 3),
        Err(MatrixError::TooLarge {
            job: 1,
            processors: 3,
            columns: 2
        })
    );
    assert_eq!(s.submit(1, 0), Err(MatrixError::NoProcessors { job: 1 }));
    s.submit(1, 2).unwrap();
    assert_eq!(s.submit(1, 1), Err(MatrixError::Duplicate(1)));
}
