//! Hand-computed traces with exact start times, SWF round trips, and properties every policy
//! must keep on random workloads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ninf_sim::policy::{Easy, GangAdmission};
use ninf_sim::swf::{self, SwfError};
use ninf_sim::{Job, Metrics, SimError, simulate};
use proptest::prelude::*;

fn job(id: u64, submit: f64, processors: u32, run: f64) -> Job {
    Job {
        id,
        submit,
        run,
        processors,
        requested: run,
    }
}

fn starts(jobs: &[Job], processors: u32, policy: &mut dyn ninf_sim::SpacePolicy) -> Vec<f64> {
    simulate(jobs, processors, policy)
        .unwrap()
        .iter()
        .map(|o| o.start)
        .collect()
}

fn gang(policy: ninf_gang::Policy, processors: u32, wait_limit: f64) -> GangAdmission {
    GangAdmission::new(policy, processors, wait_limit)
}

/// 4 processors. J1 takes 3; J2 needs 2 and must wait; J3 needs 1, which is free.
#[test]
fn fpfs_starts_a_later_job_that_fits_and_fcfs_does_not() {
    let jobs = [
        job(1, 0.0, 3, 10.0),
        job(2, 1.0, 2, 5.0),
        job(3, 2.0, 1, 4.0),
    ];
    use ninf_gang::Policy::*;
    assert_eq!(
        starts(&jobs, 4, &mut gang(Fcfs, 4, 600.0)),
        vec![0.0, 10.0, 10.0]
    );
    assert_eq!(
        starts(&jobs, 4, &mut gang(Fpfs, 4, 600.0)),
        vec![0.0, 10.0, 2.0]
    );
    assert_eq!(
        starts(&jobs, 4, &mut gang(Fpmpfs, 4, 600.0)),
        vec![0.0, 10.0, 2.0]
    );
}

/// J2 has waited past its WaitLimit (5 s) when J3 arrives at t = 7: the FPFS scan stops at
/// J2, so J3 waits although a processor is free, until J1 ends.
#[test]
fn a_job_past_its_wait_limit_stops_the_fpfs_scan() {
    let jobs = [
        job(1, 0.0, 3, 10.0),
        job(2, 1.0, 2, 20.0),
        job(3, 7.0, 1, 1.0),
    ];
    use ninf_gang::Policy::Fpfs;
    assert_eq!(
        starts(&jobs, 4, &mut gang(Fpfs, 4, 5.0)),
        vec![0.0, 10.0, 10.0]
    );
    assert_eq!(
        starts(&jobs, 4, &mut gang(Fpfs, 4, 600.0)),
        vec![0.0, 10.0, 7.0]
    );
}

/// 4 processors. J2 needs all 4 and gets a reservation at t = 10 (J1's end). J3 ends by then,
/// so it is backfilled at once; J4 would not, so it waits for J2.
#[test]
fn easy_backfills_only_jobs_that_do_not_delay_the_reservation() {
    let jobs = [
        job(1, 0.0, 2, 10.0),
        job(2, 1.0, 4, 5.0),
        job(3, 2.0, 2, 5.0),
        job(4, 3.0, 2, 20.0),
    ];
    assert_eq!(
        starts(&jobs, 4, &mut Easy::default()),
        vec![0.0, 10.0, 2.0, 15.0]
    );
    use ninf_gang::Policy::Fcfs;
    assert_eq!(
        starts(&jobs, 4, &mut gang(Fcfs, 4, 600.0)),
        vec![0.0, 10.0, 15.0, 15.0],
        "the head starts at the same time under both"
    );
    // A job using processors left over at the reservation may run past it.
    let jobs = [
        job(1, 0.0, 2, 10.0),
        job(2, 1.0, 3, 5.0),
        job(3, 2.0, 1, 50.0),
    ];
    assert_eq!(starts(&jobs, 4, &mut Easy::default()), vec![0.0, 10.0, 2.0]);
}

/// 4 processors. J1 holds 2 until 10. J2 needs all 4 (reserved at 10..15), J3 needs 2 for
/// 20 s (reserved after J2, at 15), and J4 needs 2 for 5 s: it fits now and ends before 10,
/// so it starts at once.
#[test]
fn conservative_backfilling_protects_every_reservation() {
    use ninf_sim::policy::Conservative;
    let jobs = [
        job(1, 0.0, 2, 10.0),
        job(2, 1.0, 4, 5.0),
        job(3, 2.0, 2, 20.0),
        job(4, 3.0, 2, 5.0),
    ];
    assert_eq!(
        starts(&jobs, 4, &mut Conservative::default()),
        vec![0.0, 10.0, 15.0, 3.0]
    );
    // 5 processors: J1 holds 3 until 10; J2 needs all 5 (reserved at 10..12); J3 (2 for
    // 10 s) would fit now but run past 10, delaying J2, so it is reserved at 12; J4 (2 for
    // 1 s) fits now and ends before 10, so it starts at 3.
    let jobs = [
        job(1, 0.0, 3, 10.0),
        job(2, 1.0, 5, 2.0),
        job(3, 2.0, 2, 10.0),
        job(4, 3.0, 2, 1.0),
    ];
    assert_eq!(
        starts(&jobs, 5, &mut Conservative::default()),
        vec![0.0, 10.0, 12.0, 3.0]
    );
    // EASY reserves only for the head, but with no processors left over at 10 it keeps J3
    // waiting too: the same answer here.
    assert_eq!(
        starts(&jobs, 5, &mut Easy::default()),
        vec![0.0, 10.0, 12.0, 3.0]
    );
}

/// Jobs of no length at a late time (where 1e-9 s is below the clock's resolution) still
/// hold their processor for an instant: two of them on one processor do not start together.
#[test]
fn zero_length_jobs_late_in_a_trace_do_not_share_a_processor() {
    use ninf_sim::policy::Conservative;
    let jobs = [
        job(1, 1e7, 1, 0.0),
        job(2, 1e7, 1, 0.0),
        job(3, 1e7, 1, 5.0),
    ];
    let outcomes = simulate(&jobs, 1, &mut Conservative::default()).unwrap();
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes.iter().all(|o| o.start == 1e7));
}

/// Where the two differ. 4 processors; J1 holds 3 until 10. J2 (2 for 10 s) is the head,
/// reserved at 10..20; J3 (all 4 for 5 s) is reserved at 20..25 under conservative. J4 (1
/// for 25 s) arrives at 3 with one processor free. EASY protects only the head: J4 fits in
/// the processors left over at J2's start, so it runs at once and pushes J3 back to 28.
/// Conservative protects J3 too and starts J4 only at 25.
#[test]
fn easy_may_delay_a_later_reservation_and_conservative_does_not() {
    use ninf_sim::policy::Conservative;
    let jobs = [
        job(1, 0.0, 3, 10.0),
        job(2, 1.0, 2, 10.0),
        job(3, 2.0, 4, 5.0),
        job(4, 3.0, 1, 25.0),
    ];
    assert_eq!(
        starts(&jobs, 4, &mut Easy::default()),
        vec![0.0, 10.0, 28.0, 3.0]
    );
    assert_eq!(
        starts(&jobs, 4, &mut Conservative::default()),
        vec![0.0, 10.0, 20.0, 25.0]
    );
}

#[test]
fn bad_workloads_are_refused_with_the_job_named() {
    let error = simulate(&[job(7, 0.0, 9, 1.0)], 8, &mut Easy::default()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "job 7 needs 9 processors; the machine has 8"
    );
    let error = simulate(&[job(3, 0.0, 1, f64::NAN)], 8, &mut Easy::default()).unwrap_err();
    assert!(matches!(error, SimError::BadJob { id: 3, .. }), "{error}");
}

#[test]
fn swf_round_trips_and_names_bad_fields() {
    let text = "; Version: 2.2\n; MaxProcs: 8\n\
        1 0 5 100 4 -1 -1 4 120 -1 1 3 1 -1 1 -1 -1 -1\n\
        2 10.5 0 3600 8 3000 2048 8 7200 -1 1 4 1 2 1 1 1 0\n";
    let workload = swf::parse(text).unwrap();
    assert_eq!(workload.header, vec![" Version: 2.2", " MaxProcs: 8"]);
    assert_eq!(workload.records.len(), 2);
    assert_eq!(workload.records[1].submit_time, 10.5);
    assert_eq!(workload.records[1].requested_time, 7200.0);
    assert_eq!(workload.records[0].used_memory, -1.0);
    let written = swf::write(&workload);
    assert_eq!(written, text);
    assert_eq!(swf::parse(&written).unwrap(), workload);
    let (jobs, skipped) = workload.jobs();
    assert_eq!(skipped, 0);
    assert_eq!(
        (jobs[0].processors, jobs[0].run, jobs[0].requested),
        (4, 100.0, 120.0)
    );

    let error = swf::parse("; x\n1 0 5 abc 4 -1 -1 4 120 -1 1 3 1 -1 1 -1 -1 -1\n").unwrap_err();
    assert_eq!(
        error,
        SwfError::NotANumber {
            line: 2,
            column: 7,
            field: 4,
            name: "run time",
            text: "abc".into()
        }
    );
    assert_eq!(
        error.to_string(),
        "2:7: field 4 (`run time`): `abc` is not a number"
    );
    assert_eq!(
        swf::parse("1 2 3\n").unwrap_err(),
        SwfError::FieldCount { line: 1, found: 3 }
    );
}

#[test]
fn the_seed001_workload_has_the_papers_shape_and_is_reproducible() {
    let exponential = ninf_sim::workload::RunTimes::Exponential;
    let jobs = ninf_sim::workload::seed001(8, 500, 32.0, exponential, 0.5, 7);
    assert_eq!(
        jobs,
        ninf_sim::workload::seed001(8, 500, 32.0, exponential, 0.5, 7)
    );
    assert!(jobs.iter().all(|j| (1..=8).contains(&j.processors)));
    let mean_run = jobs.iter().map(|j| j.run).sum::<f64>() / 500.0;
    assert!((mean_run - 32.0).abs() < 5.0, "{mean_run}");
    // Offered load = total work / (processors × arrival span) ≈ 0.5.
    let work: f64 = jobs.iter().map(|j| j.run * f64::from(j.processors)).sum();
    let offered = work / (8.0 * jobs[499].submit);
    assert!((offered - 0.5).abs() < 0.1, "{offered}");
}

#[test]
fn policies_are_chosen_by_name_and_unknown_ones_are_named() {
    for name in ["fcfs", "fpfs", "fpmpfs", "easy", "conservative"] {
        assert_eq!(
            ninf_sim::policy_by_name(name, 8, 600.0).unwrap().name(),
            name
        );
    }
    let error = ninf_sim::policy_by_name("mctbm", 8, 600.0).err().unwrap();
    assert_eq!(
        error,
        "unknown policy `mctbm` (simulated: fcfs, fpfs, fpmpfs, easy, conservative)"
    );
    let error = ninf_sim::policy_by_name("gang", 8, 600.0).err().unwrap();
    assert!(error.contains("simulate_gang"), "{error}");
    let error = ninf_sim::policy_by_name("sjf", 8, 600.0).err().unwrap();
    assert!(error.starts_with("unknown policy `sjf`"), "{error}");
}

fn policies(processors: u32) -> Vec<Box<dyn ninf_sim::SpacePolicy>> {
    ["fcfs", "fpfs", "fpmpfs", "easy", "conservative"]
        .iter()
        .map(|name| ninf_sim::policy_by_name(name, processors, 60.0).unwrap())
        .collect()
}

proptest! {
    /// No policy over-commits the machine, every job runs exactly its run time after its
    /// arrival, and all jobs finish.
    #[test]
    fn policies_keep_the_machine_and_the_work_intact(
        raw in proptest::collection::vec((0u32..200, 1u32..=8, 0u32..100), 1..40)
    ) {
        let jobs: Vec<Job> = raw
            .iter()
            .enumerate()
            .map(|(i, &(submit, p, run))| job(i as u64 + 1, f64::from(submit), p, f64::from(run)))
            .collect();
        for mut policy in policies(8) {
            let outcomes = simulate(&jobs, 8, policy.as_mut()).unwrap();
            prop_assert_eq!(outcomes.len(), jobs.len());
            let mut events: Vec<(f64, i64)> = Vec::new();
            for (o, j) in outcomes.iter().zip(&jobs) {
                prop_assert_eq!(o.id, j.id);
                prop_assert!(o.start >= j.submit);
                prop_assert_eq!(o.end - o.start, j.run);
                if j.run > 0.0 {
                    events.push((o.start, i64::from(o.processors)));
                    events.push((o.end, -i64::from(o.processors)));
                }
            }
            // Ends before starts at the same instant.
            events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let mut used = 0;
            for (_, delta) in events {
                used += delta;
                prop_assert!(used <= 8, "{} over-committed", policy.name());
            }
            let metrics = Metrics::of(&outcomes, 8);
            prop_assert!(metrics.utilization <= 1.0 + 1e-9);
        }
    }
}

#[test]
fn charts_are_svg_with_a_line_and_a_legend_entry_per_series() {
    use ninf_sim::plot::{Chart, Series};
    let chart = Chart {
        title: "Response <time>".into(),
        x_label: "load".into(),
        y_label: "seconds".into(),
        series: vec![
            Series {
                name: "fcfs".into(),
                points: vec![(0.1, 36.0), (0.5, 89.0), (0.95, 1437.0)],
            },
            Series {
                name: "fpfs".into(),
                points: vec![(0.1, 35.0), (0.5, 67.0), (0.95, 876.0)],
            },
        ],
    };
    let svg = chart.svg();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("stroke-width=\"2\"/>").count(),
        4,
        "two lines, two legend keys"
    );
    assert_eq!(svg.matches("<circle").count(), 6);
    assert!(svg.contains(">fcfs</text>") && svg.contains(">fpfs</text>"));
    assert!(svg.contains("Response &lt;time&gt;"), "labels are escaped");
    assert!(
        svg.contains(">1500</text>"),
        "the y axis reaches a round value above the data"
    );
}

fn gang_config(processors: u32, rows: usize, quantum: f64) -> ninf_gang::GangConfig {
    let mut config = ninf_gang::GangConfig::new(processors);
    config.max_rows = rows;
    config.quantum = quantum;
    config
}

/// Two identical 1 s jobs on one processor with 0.1 s slots alternate: the first ends after
/// 19 slots, the second after 20.
#[test]
fn gang_time_sharing_alternates_identical_jobs_slot_by_slot() {
    let jobs = [job(1, 0.0, 1, 1.0), job(2, 0.0, 1, 1.0)];
    let outcomes = ninf_sim::simulate_gang(&jobs, gang_config(1, 2, 0.1)).unwrap();
    assert!((outcomes[0].end - 1.9).abs() < 1e-9, "{:?}", outcomes[0]);
    assert!((outcomes[1].end - 2.0).abs() < 1e-9, "{:?}", outcomes[1]);
    assert_eq!(outcomes[0].start, 0.0);
    assert!(
        (outcomes[1].start - 0.1).abs() < 1e-9,
        "the second first runs in the second slot"
    );
}

/// A short job arriving behind a long one gets every other 0.5 s slot instead of waiting
/// for the long one to end (space-shared FCFS: it would end at 11 s).
#[test]
fn gang_time_sharing_lets_a_short_job_through_a_long_one() {
    let jobs = [job(1, 0.0, 1, 10.0), job(2, 1.0, 1, 1.0)];
    let outcomes = ninf_sim::simulate_gang(&jobs, gang_config(1, 2, 0.5)).unwrap();
    assert_eq!(outcomes[1].start, 1.0);
    assert!((outcomes[1].end - 2.5).abs() < 1e-9, "{:?}", outcomes[1]);
    assert!((outcomes[0].end - 11.0).abs() < 1e-9, "{:?}", outcomes[0]);
    use ninf_gang::Policy::Fcfs;
    let fcfs = simulate(&jobs, 1, &mut gang(Fcfs, 1, 600.0)).unwrap();
    assert_eq!(fcfs[1].end, 11.0);
    // One row: the gang core space-shares, exactly as FCFS/FPFS.
    let one_row = ninf_sim::simulate_gang(&jobs, gang_config(1, 1, 0.5)).unwrap();
    assert_eq!(one_row[1].start, 10.0);
}

proptest! {
    /// Time-shared, every job still finishes, never before it could have run alone, and
    /// never starts before it arrives.
    #[test]
    fn gang_time_sharing_finishes_every_job(
        raw in proptest::collection::vec((0u32..100, 1u32..=4, 0u32..20), 1..25),
        rows in 1usize..4,
    ) {
        let jobs: Vec<Job> = raw
            .iter()
            .enumerate()
            .map(|(i, &(submit, p, run))| job(i as u64 + 1, f64::from(submit), p, f64::from(run)))
            .collect();
        let outcomes = ninf_sim::simulate_gang(&jobs, gang_config(4, rows, 0.5)).unwrap();
        prop_assert_eq!(outcomes.len(), jobs.len());
        for (o, j) in outcomes.iter().zip(&jobs) {
            prop_assert!(o.start >= j.submit);
            prop_assert!(o.end - j.submit >= j.run - 1e-6, "{:?} {:?}", o, j);
        }
    }
}

mod dqt {
    use ninf_gang::{Allocation, DqtConfig};
    use ninf_sim::{Job, SlotEnd, simulate_dqt, simulate_dqt_with};
    use proptest::prelude::*;

    /// The file's `job` with this module's argument order (run before processors).
    fn job(id: u64, submit: f64, run: f64, processors: u32) -> Job {
        super::job(id, submit, processors, run)
    }

    #[test]
    fn two_halves_and_a_whole_share_the_machine_by_rounds() {
        // 4 processors. A 4-processor job (2 s) and two 2-processor jobs (1 s, 3 s) at 0.
        // Rounds: root runs the big job (slot 0); then the halves run side by side (slot 1):
        // the 1-second job ends. Slot 2: the big job ends. Slots 3-4: the last half job alone.
        let config = DqtConfig::for_processors(4, 2, Allocation::Apa, false).unwrap();
        let jobs = [
            job(1, 0.0, 2.0, 4),
            job(2, 0.0, 1.0, 2),
            job(3, 0.0, 3.0, 2),
        ];
        let run = simulate_dqt(&jobs, config, 1.0).unwrap();
        let ends: Vec<(u64, f64, f64)> = run
            .outcomes
            .iter()
            .map(|o| (o.id, o.start, o.end))
            .collect();
        assert_eq!(ends, vec![(1, 0.0, 3.0), (2, 1.0, 2.0), (3, 1.0, 5.0)]);
        assert_eq!(run.max_tqlb, 2);
        // A 3-processor job takes a 4-processor partition.
        let run = simulate_dqt(&[job(1, 0.5, 2.0, 3)], config, 1.0).unwrap();
        assert_eq!((run.outcomes[0].start, run.outcomes[0].end), (1.0, 3.0));
        assert!(simulate_dqt(&[job(1, 0.0, 1.0, 5)], config, 1.0).is_err());
    }

    #[test]
    fn slots_whose_jobs_all_end_early_end_with_them_as_in_the_live_master() {
        // 2 processors: two 1-processor jobs of a quarter slot at 0, a 2-processor job of
        // half a slot at 0.5.
        let config = DqtConfig::for_processors(2, 2, Allocation::Apa, false).unwrap();
        let jobs = [
            job(1, 0.0, 0.25, 1),
            job(2, 0.0, 0.25, 1),
            job(3, 0.5, 0.5, 2),
        ];
        let ends = |slot_end| {
            simulate_dqt_with(&jobs, config, 1.0, slot_end)
                .unwrap()
                .outcomes
                .iter()
                .map(|o| (o.id, o.start, o.end))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ends(SlotEnd::Quantum),
            vec![(1, 0.0, 1.0), (2, 0.0, 1.0), (3, 1.0, 2.0)]
        );
        assert_eq!(
            ends(SlotEnd::WhenItsJobsEnd),
            vec![(1, 0.0, 0.25), (2, 0.0, 0.25), (3, 0.5, 1.0)]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        /// Every job finishes, after exactly as many slots of running as its run time needs,
        /// never before it arrives; utilisation never exceeds the machine.
        #[test]
        fn every_job_gets_exactly_its_work(
            specs in proptest::collection::vec((0u32..40, 1u32..6, 0u32..4), 1..40),
            allocation in 0usize..5,
            fair in any::<bool>(),
        ) {
            let jobs: Vec<Job> = specs
                .iter()
                .enumerate()
                .map(|(i, &(at, run, log))| job(i as u64 + 1, f64::from(at), f64::from(run), 1 << log))
                .collect();
            let config = DqtConfig::for_processors(8, 2, Allocation::ALL[allocation], fair).unwrap();
            let run = simulate_dqt(&jobs, config, 1.0).unwrap();
            prop_assert_eq!(run.outcomes.len(), jobs.len());
            for (o, j) in run.outcomes.iter().zip(&jobs) {
                prop_assert!(o.start >= j.submit);
                prop_assert!(o.end - o.start >= j.run - 1e-9);
            }
            prop_assert!(run.utilization <= 1.0 + 1e-9);
        }
    }
}

#[test]
fn seed001_run_times_keep_their_mean_and_have_the_variability_they_say() {
    use ninf_sim::workload::RunTimes;
    for text in ["fixed", "erlang:4", "exponential", "hyper:2", "hyper:4"] {
        let run_times: RunTimes = text.parse().unwrap();
        let jobs = ninf_sim::workload::seed001(8, 200_000, 32.0, run_times, 0.8, 11);
        let runs: Vec<f64> = jobs.iter().map(|j| j.run).collect();
        let n = runs.len() as f64;
        let mean = runs.iter().sum::<f64>() / n;
        let cv = (runs.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt() / mean;
        assert!(
            (mean - 32.0).abs() < 0.02 * 32.0 + 0.3,
            "{text}: mean {mean}"
        );
        assert!(
            (cv - run_times.cv()).abs() < 0.05 * run_times.cv().max(1.0),
            "{text}: CV {cv}, expected {}",
            run_times.cv()
        );
    }
    for bad in ["erlang:0", "hyper:0.5", "gamma", "hyper:x"] {
        let error = bad.parse::<RunTimes>().unwrap_err();
        assert!(error.contains(bad), "{error}");
    }
}
