#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Distributed Queue Tree against the thesis's worked example (the gang thesis, Fig. 7.2) and
//! its stated properties.

use ninf_gang::{Allocation, DqtConfig, QueueTree};

/// Job j of node i's queue is `10 * i + j`, as the thesis writes Q_i(j).
fn q(node: u64, index: u64) -> u64 {
    10 * node + index
}

/// The 4-PE tree of Fig. 7.1: queue lengths root 2, halves 2 and 1, leaves 1, 2, 3, 2.
fn figure_7_1(fair: bool) -> QueueTree {
    let config = DqtConfig::for_processors(4, 2, Allocation::Apa, fair).unwrap();
    let mut tree = QueueTree::new(config).unwrap();
    for (node, length) in [(0, 2), (1, 2), (2, 1), (3, 1), (4, 2), (5, 3), (6, 2)] {
        for j in 0..length {
            tree.add_to(q(node as u64, j), node).unwrap();
        }
    }
    tree
}

/// Which job runs on each PE in a slot (None: idle).
fn by_processor(tree: &mut QueueTree) -> Vec<Option<u64>> {
    let mut pes = vec![None; 4];
    for run in tree.slot() {
        for pe in run.first..run.first + run.size {
            assert!(pes[pe as usize].is_none(), "PE {pe} given twice");
            pes[pe as usize] = Some(run.job);
        }
    }
    pes
}

#[test]
fn figure_7_2_schedule_exactly_with_period_six() {
    let mut tree = figure_7_1(false);
    assert_eq!(tree.max_tqlb(), 6);
    assert_eq!(tree.min_tqlb(), 5);
    let all = |j| vec![Some(j); 4];
    let halves = |a, b| vec![Some(a), Some(a), Some(b), Some(b)];
    let expected: Vec<Vec<Option<u64>>> = vec![
        all(q(0, 0)),
        all(q(0, 1)),
        halves(q(1, 0), q(2, 0)),
        vec![Some(q(1, 1)), Some(q(1, 1)), Some(q(5, 0)), Some(q(6, 0))],
        vec![Some(q(3, 0)), Some(q(4, 0)), Some(q(5, 1)), Some(q(6, 1))],
        vec![Some(q(3, 0)), Some(q(4, 1)), Some(q(5, 2)), Some(q(6, 0))],
        all(q(0, 0)),
        all(q(0, 1)),
        halves(q(1, 0), q(2, 0)),
        vec![Some(q(1, 1)), Some(q(1, 1)), Some(q(5, 0)), Some(q(6, 1))],
        vec![Some(q(3, 0)), Some(q(4, 0)), Some(q(5, 1)), Some(q(6, 0))],
        vec![Some(q(3, 0)), Some(q(4, 1)), Some(q(5, 2)), Some(q(6, 1))],
        all(q(0, 0)),
    ];
    for (slot, want) in expected.iter().enumerate() {
        assert_eq!(&by_processor(&mut tree), want, "slot {slot}");
    }
    // Every job ran at least once in every window of max-TQLB (6) slots, for a long time.
    let mut last_run = std::collections::HashMap::new();
    for slot in 13..1_000 {
        for run in tree.slot() {
            if let Some(previous) = last_run.insert(run.job, slot) {
                assert!(
                    slot - previous <= 6,
                    "job {} waited {} slots",
                    run.job,
                    slot - previous
                );
            }
        }
    }
    assert_eq!(last_run.len(), 13);
}

#[test]
fn fair_dqt_runs_every_job_once_per_round_and_leaves_processors_idle() {
    let mut tree = figure_7_1(true);
    let mut counts = std::collections::HashMap::new();
    let mut idle = 0;
    // A Fair-DQT round here takes 6 slots (the longest branch: 2 + 1 + 3 or 2 + 2 + 2).
    for _ in 0..60 {
        let pes = by_processor(&mut tree);
        idle += pes.iter().filter(|p| p.is_none()).count();
        let mut seen = std::collections::HashSet::new();
        for job in pes.into_iter().flatten() {
            if seen.insert(job) {
                *counts.entry(job).or_insert(0) += 1;
            }
        }
    }
    assert_eq!(counts.len(), 13);
    assert!(counts.values().all(|&c| c == 10), "{counts:?}");
    // Ordinary DQT never idles on this tree; Fair-DQT idles PE 0 while node 4 finishes its
    // round and PE 3 while node 5 does: 2 processor-slots per round.
    assert_eq!(idle, 2 * 10);
    let mut ordinary = figure_7_1(false);
    for _ in 0..60 {
        assert!(by_processor(&mut ordinary).iter().all(Option::is_some));
    }
}

#[test]
fn jobs_leaving_mid_round_and_arriving_keep_the_front_moving() {
    let mut tree = figure_7_1(false);
    for _ in 0..3 {
        tree.slot();
    }
    // Node 5's three jobs: one leaves; node 6 gains one. Nothing ends up run twice in a slot.
    assert!(tree.remove(q(5, 1)));
    assert!(!tree.remove(q(5, 1)));
    tree.add_to(q(6, 2), 6).unwrap();
    let mut ran = std::collections::HashSet::new();
    for _ in 0..40 {
        for run in tree.slot() {
            ran.insert(run.job);
        }
    }
    assert!(!ran.contains(&q(5, 1)));
    assert!(ran.contains(&q(6, 2)));
    // Emptying the tree stops everything; a new job starts a round at once.
    for node in 0..7u64 {
        for j in 0..3 {
            tree.remove(q(node, j));
        }
    }
    assert_eq!(tree.jobs(), 0);
    assert!(tree.slot().is_empty());
    tree.add(99, 2).unwrap();
    let runs = tree.slot();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].job, runs[0].size), (99, 2));
}

#[test]
fn allocation_policies_differ_as_the_thesis_describes() {
    // MAX looks at a subtree's longest branch, MIN at its shortest: with the left half holding
    // one long leaf queue and the right half a 2-job queue on its own node, MAX sends a
    // 1-processor job right (max 2 < 3) and MIN sends it left (min 0 < 2).
    let build = |allocation| {
        let config = DqtConfig::for_processors(4, 2, allocation, false).unwrap();
        let mut tree = QueueTree::new(config).unwrap();
        for j in 0..3 {
            tree.add_to(q(3, j), 3).unwrap();
        }
        for j in 0..2 {
            tree.add_to(q(2, j), 2).unwrap();
        }
        tree
    };
    let mut max = build(Allocation::Max);
    let mut min = build(Allocation::Min);
    let mut apa = build(Allocation::Apa);
    assert_eq!(max.add(1, 1).unwrap(), 5);
    assert_eq!(min.add(1, 1).unwrap(), 4);
    // APA: left has 3 processor-jobs assigned, right 4: left, then its emptier leaf.
    assert_eq!(apa.add(1, 1).unwrap(), 4);
}
