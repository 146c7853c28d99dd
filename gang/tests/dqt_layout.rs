//! The live time table laid out by the gang thesis's Distributed Queue Tree instead of the
//! Ousterhout matrix, under a fake clock: its slots are the tree's, no two jobs of a slot share
//! a processor, every job runs within one pass, and events keep the slot in progress.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use ninf_gang::{
    Allocation, DqtConfig, FakeClock, GangConfig, GangScheduler, JobState, Layout, QueueTree,
};

fn dqt_scheduler(clock: &FakeClock, processors: u32, fair: bool) -> GangScheduler<&FakeClock> {
    let config = GangConfig {
        quantum: 0.1,
        layout: Layout::Dqt {
            width: 2,
            allocation: Allocation::Apa,
            fair,
        },
        ..GangConfig::new(processors)
    };
    GangScheduler::new(config, clock)
}

#[test]
fn the_table_follows_the_trees_pattern_and_slots_never_share_a_processor() {
    let clock = FakeClock::new(0.0);
    let mut gang = dqt_scheduler(&clock, 4, false);
    // Sizes 4, 2, 1, 1, 3: the 3-processor job takes a 4-partition's first three columns.
    for (id, size) in [(1, 4), (2, 2), (3, 1), (4, 1), (5, 3)] {
        assert_eq!(gang.submit(id, size).unwrap(), vec![id], "admitted at once");
    }
    assert!(gang.queue().is_empty());
    assert_eq!(gang.matrix().placement(5).unwrap().columns, vec![0, 1, 2]);
    let table = gang.table();
    // The same jobs through the tree alone, as the simulator runs it.
    let mut tree =
        QueueTree::new(DqtConfig::for_processors(4, 2, Allocation::Apa, false).unwrap()).unwrap();
    for (id, size) in [(1, 4), (2, 2), (3, 1), (4, 1), (5, 4)] {
        tree.add(id, size).unwrap();
    }
    let (prefix, pattern) = tree.cycle(4096);
    let pattern: Vec<Vec<u64>> = prefix
        .into_iter()
        .chain(pattern)
        .map(|(_, runs)| {
            let mut jobs: Vec<u64> = runs.iter().map(|r| r.job).collect();
            jobs.sort_unstable();
            jobs
        })
        .filter(|jobs| !jobs.is_empty())
        .collect();
    let slots: Vec<Vec<u64>> = table
        .prefix
        .iter()
        .chain(&table.cycle)
        .map(|s| s.running.clone())
        .collect();
    assert_eq!(slots, pattern);
    let mut seen = BTreeSet::new();
    for slot in &table.cycle {
        let mut used = BTreeSet::new();
        for job in &slot.running {
            seen.insert(*job);
            for column in &table.jobs[job].columns {
                assert!(
                    used.insert(*column),
                    "slot {slot:?} uses column {column} twice"
                );
            }
        }
    }
    assert_eq!(
        seen,
        BTreeSet::from([1, 2, 3, 4, 5]),
        "every job runs in a pass"
    );
    // The 4-processor jobs run alone.
    for slot in &table.cycle {
        if slot.running.contains(&1) || slot.running.contains(&5) {
            assert_eq!(slot.running.len(), 1, "{slot:?}");
        }
    }
}

#[test]
fn an_event_mid_slot_keeps_the_slot_in_progress_and_idle_jobs_give_theirs_away() {
    let clock = FakeClock::new(10.0);
    let mut gang = dqt_scheduler(&clock, 2, true);
    gang.submit(1, 2).unwrap();
    gang.submit(2, 1).unwrap();
    gang.submit(3, 1).unwrap();
    let first = gang.table();
    assert_eq!(first.epoch, 10.0);
    let slots: Vec<Vec<u64>> = first.cycle.iter().map(|s| s.running.clone()).collect();
    assert_eq!(slots.len(), 2, "{slots:?}");
    assert!(
        slots.contains(&vec![1]) && slots.contains(&vec![2, 3]),
        "{slots:?}"
    );
    // Mid-way through the second slot, job 2 becomes idle: a new table, from the slot in
    // progress, which keeps its start.
    clock.set(10.15);
    let in_progress = first.running_at(10.15).to_vec();
    gang.set_state(2, JobState::Idle);
    let second = gang.table();
    assert_eq!(second.version, 2);
    assert!((second.epoch - 10.1).abs() < 1e-9, "{}", second.epoch);
    let expected: Vec<u64> = in_progress.into_iter().filter(|&j| j != 2).collect();
    assert_eq!(second.running_at(10.15), expected.as_slice());
    assert!(second.cycle.iter().all(|s| !s.running.contains(&2)));
    // Job 1 leaves; the others go on.
    gang.set_state(2, JobState::Runnable);
    gang.finish(1);
    let third = gang.table();
    assert!(third.cycle.iter().all(|s| !s.running.contains(&1)));
    assert_eq!(third.jobs.len(), 2);
    assert!(gang.matrix().placement(1).is_none());
    assert_eq!(gang.tree().unwrap().jobs(), 2);
}

#[test]
fn a_dqt_needs_a_power_of_its_width_or_the_matrix_is_used() {
    let clock = FakeClock::new(0.0);
    let config = GangConfig {
        layout: Layout::Dqt {
            width: 2,
            allocation: Allocation::FirstFit,
            fair: false,
        },
        ..GangConfig::new(3)
    };
    let gang = GangScheduler::new(config, &clock);
    assert!(gang.tree().is_none());
}

/// The live table and the simulator's way of running the tree (one decision per slot, a job
/// joining the tree when it arrives and counting from the next decision) give the same slots,
/// across an arrival mid-slot.
#[test]
fn the_live_table_runs_the_same_slots_as_the_tree_stepped_slot_by_slot() {
    let clock = FakeClock::new(0.0);
    let mut gang = dqt_scheduler(&clock, 4, false);
    let mut tree =
        QueueTree::new(DqtConfig::for_processors(4, 2, Allocation::Apa, false).unwrap()).unwrap();
    for (id, size) in [(1, 2), (2, 1), (3, 1), (4, 4), (5, 2)] {
        gang.submit(id, size).unwrap();
        tree.add(id, size).unwrap();
    }
    let sorted = |runs: Vec<ninf_gang::SlotRun>| {
        let mut jobs: Vec<u64> = runs.into_iter().map(|r| r.job).collect();
        jobs.sort_unstable();
        jobs
    };
    let table = gang.table();
    let mut simulated = Vec::new();
    for n in 0..6 {
        let decided = sorted(tree.slot());
        assert_eq!(table.slot(n).unwrap().running, decided, "slot {n}");
        simulated.push(decided);
    }
    // Job 6 arrives in the middle of slot 5.
    clock.set(0.55);
    gang.submit(6, 1).unwrap();
    tree.add(6, 1).unwrap();
    let after = gang.table();
    assert!(
        (after.epoch - 0.5).abs() < 1e-9,
        "the slot in progress keeps its start"
    );
    assert_eq!(after.slot(0).unwrap().running, simulated[5], "and its jobs");
    let mut ran_six = false;
    for n in 1..60 {
        let decided = sorted(tree.slot());
        ran_six |= decided.contains(&6);
        assert_eq!(
            after.slot(n).unwrap().running,
            decided,
            "slot {n} after the arrival"
        );
    }
    assert!(ran_six);
}
