//! Network preemption and the global state of jobs spread over nodes (the gang thesis), under
//! numbers for time: two jobs time-sharing two nodes, ranks talking across them, nodes whose
//! clocks disagree by up to a few milliseconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use ninf_gang::network::{
    DeliveryLedger, Envelope, NetworkGate, RankTraffic, SpreadJob, Verdict, globally_deadlocked,
    job_runs_at,
};
use ninf_gang::{TableJob, TableSlot, TimeTable};

/// Jobs 1 and 2, each with one rank per node, alternating 20 ms slots from t = 0.
fn two_jobs() -> TimeTable {
    let job = |processes: [u32; 2]| TableJob {
        columns: vec![0, 1],
        processes: processes.to_vec(),
    };
    TimeTable {
        version: 1,
        epoch: 0.0,
        quantum: 0.02,
        prefix: Vec::new(),
        cycle: vec![
            TableSlot {
                row: 0,
                running: vec![1],
            },
            TableSlot {
                row: 1,
                running: vec![2],
            },
        ],
        jobs: BTreeMap::from([(1, job([100, 101])), (2, job([200, 201]))]),
    }
}

fn message(job: u64, seq: u32) -> Envelope<u32> {
    Envelope {
        job,
        from: 0,
        to: 1,
        bytes: 1000,
        payload: seq,
    }
}

#[test]
fn a_message_outside_its_jobs_slot_waits_for_the_next_one() {
    let table = two_jobs();
    let mut gate = NetworkGate::new(true);
    // Job 1 runs in [0, 20) ms, job 2 in [20, 40) ms.
    assert!(gate.arrive(Some(&table), 0.005, message(1, 0)).is_some());
    assert!(gate.arrive(Some(&table), 0.025, message(1, 1)).is_none());
    assert_eq!(gate.held(), 1);
    assert!((gate.next_release(Some(&table), 0.025).unwrap() - 0.04).abs() < 1e-12);
    assert!(gate.release(Some(&table), 0.039).is_empty());
    let released = gate.release(Some(&table), 0.040);
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].payload, 1);
    let ledger = gate.ledger();
    assert_eq!((ledger.messages, ledger.messages_outside_slot), (2, 0));
    assert_eq!(ledger.messages_held, 1);
    assert_eq!(ledger.per_slot[&(0, 1)], 1000);
    assert_eq!(ledger.per_slot[&(2, 1)], 1000);
}

#[test]
fn without_preemption_the_ledger_counts_what_arrives_in_another_jobs_slot() {
    let table = two_jobs();
    let mut gate = NetworkGate::new(false);
    assert!(gate.arrive(Some(&table), 0.025, message(1, 0)).is_some());
    assert!(gate.arrive(Some(&table), 0.026, message(2, 0)).is_some());
    let ledger = gate.ledger();
    assert_eq!(ledger.messages_outside_slot, 1);
    assert_eq!(ledger.bytes_outside_slot, 1000);
    assert_eq!(gate.held(), 0);
}

#[test]
fn a_held_job_keeps_its_order_even_when_its_slot_comes_round() {
    let table = two_jobs();
    let mut gate = NetworkGate::new(true);
    assert!(gate.arrive(Some(&table), 0.030, message(1, 0)).is_none());
    // Its slot began but the gate has not been released yet: the newer message queues behind.
    assert!(gate.arrive(Some(&table), 0.041, message(1, 1)).is_none());
    let order: Vec<u32> = gate
        .release(Some(&table), 0.041)
        .into_iter()
        .map(|e| e.payload)
        .collect();
    assert_eq!(order, vec![0, 1]);
}

#[test]
fn jobs_the_node_does_not_know_yet_and_nodes_without_a_table_pass() {
    let table = two_jobs();
    assert!(
        job_runs_at(Some(&table), 9, 0.025),
        "started in the slot in progress"
    );
    assert!(job_runs_at(None, 1, 0.025));
    assert!(!job_runs_at(Some(&table), 1, 0.025));
}

#[test]
fn messages_of_an_ended_job_are_dropped() {
    let mut table = two_jobs();
    let mut gate = NetworkGate::new(true);
    gate.arrive(Some(&table), 0.025, message(1, 0));
    gate.arrive(Some(&table), 0.005, message(2, 0));
    table.jobs.remove(&1);
    table.cycle.remove(0);
    assert_eq!(gate.forget_ended(&table), 1);
    assert_eq!(gate.held(), 1);
}

/// 10,000 switches under traffic on two nodes whose clocks are 3 ms apart: every message
/// sent by a rank running by its own node's clock reaches the other node through its gate.
/// The receiver's node hands each job only its own slots' bytes, and every message arrives
/// once, in order, with its checksum intact.
#[test]
fn ten_thousand_switches_with_skewed_nodes_lose_nothing_and_leak_no_slot() {
    let table = two_jobs();
    let skew = [0.0, 0.003];
    let mut gates: [NetworkGate<(u32, u64)>; 2] = [NetworkGate::new(true), NetworkGate::new(true)];
    let mut next_seq = BTreeMap::<(u64, usize), u32>::new();
    let mut expected = BTreeMap::<(u64, usize), u32>::new();
    let step = 0.001;
    let switches = 10_000;
    let end = switches as f64 * table.quantum;
    let mut t = 0.0;
    let mut delivered = 0u64;
    while t < end {
        for (node, gate) in gates.iter_mut().enumerate() {
            let local = t + skew[node];
            // Ranks on the other node that run by their own clock send one message here.
            let sender_time = t + skew[1 - node];
            for &job in table.running_at(sender_time) {
                let seq = next_seq.entry((job, node)).or_default();
                let envelope = Envelope {
                    job,
                    from: (1 - node) as u32,
                    to: node as u32,
                    bytes: 64,
                    payload: (*seq, checksum(job, *seq)),
                };
                *seq += 1;
                let now = gate.arrive(Some(&table), local, envelope);
                for e in now.into_iter().chain(gate.release(Some(&table), local)) {
                    assert!(job_runs_at(Some(&table), e.job, local));
                    let want = expected.entry((e.job, node)).or_default();
                    assert_eq!(
                        e.payload.0, *want,
                        "order of job {} into node {node}",
                        e.job
                    );
                    assert_eq!(e.payload.1, checksum(e.job, e.payload.0));
                    *want += 1;
                    delivered += 1;
                }
            }
        }
        t += step;
    }
    let ledgers: Vec<&DeliveryLedger> = gates.iter().map(NetworkGate::ledger).collect();
    assert!(ledgers.iter().all(|l| l.bytes_outside_slot == 0));
    assert!(
        ledgers.iter().all(|l| l.messages_held > 0),
        "the skew makes some messages wait"
    );
    let held: usize = gates.iter().map(NetworkGate::held).sum();
    let sent: u32 = next_seq.values().sum();
    assert_eq!(delivered + held as u64, u64::from(sent));
}

fn checksum(job: u64, seq: u32) -> u64 {
    (job.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(seq)).rotate_left(17)
}

fn traffic(
    waiting: &[(u32, u32)],
    sent: &[((u32, u32), u64)],
    consumed: &[((u32, u32), u64)],
) -> RankTraffic {
    RankTraffic {
        waiting: waiting.iter().copied().collect(),
        sent: sent.iter().copied().collect(),
        consumed: consumed.iter().copied().collect(),
    }
}

#[test]
fn ranks_on_two_nodes_waiting_for_each_other_with_nothing_in_flight_are_deadlocked() {
    let none = BTreeSet::new();
    let node0 = traffic(&[(0, 1)], &[((0, 1), 2)], &[((1, 0), 2)]);
    let node1 = traffic(&[(1, 0)], &[((1, 0), 2)], &[((0, 1), 2)]);
    assert!(globally_deadlocked(2, &none, [&node0, &node1]));
}

#[test]
fn a_message_in_flight_or_a_stale_view_is_not_a_deadlock() {
    let none = BTreeSet::new();
    // Rank 1 sent a third message that node 0 has not handed over yet.
    let node0 = traffic(&[(0, 1)], &[((0, 1), 2)], &[((1, 0), 2)]);
    let node1 = traffic(&[(1, 0)], &[((1, 0), 3)], &[((0, 1), 2)]);
    assert!(!globally_deadlocked(2, &none, [&node0, &node1]));
    // Node 0 consumed a message node 1's (older) view has not counted as sent yet.
    let stale1 = traffic(&[(1, 0)], &[((1, 0), 1)], &[((0, 1), 2)]);
    assert!(!globally_deadlocked(2, &none, [&node0, &stale1]));
    // A rank whose node has not said it waits.
    let running1 = traffic(&[], &[((1, 0), 2)], &[((0, 1), 2)]);
    assert!(!globally_deadlocked(2, &none, [&node0, &running1]));
}

#[test]
fn a_rank_that_returned_does_not_count_but_waiting_for_it_does() {
    let done = BTreeSet::from([1]);
    let node0 = traffic(&[(0, 1)], &[], &[]);
    assert!(globally_deadlocked(2, &done, [&node0]));
    assert!(!globally_deadlocked(2, &BTreeSet::from([0, 1]), [&node0]));
}

#[test]
fn the_server_declares_a_spread_deadlock_only_after_a_second_look_with_no_news() {
    let mut job = SpreadJob::new(2);
    let node0 = traffic(&[(0, 1)], &[((0, 1), 1)], &[((1, 0), 1)]);
    let node1 = traffic(&[(1, 0)], &[((1, 0), 1)], &[((0, 1), 1)]);
    assert_eq!(job.update("node-0", node0.clone()), Verdict::Unchanged);
    assert_eq!(job.update("node-1", node1), Verdict::Unchanged);
    assert_eq!(job.confirm(), Verdict::Deadlocked);
    assert!(job.deadlocked());
    assert_eq!(job.confirm(), Verdict::Unchanged, "said once");
    // Rank 1 got a message after all (node 1 saw it sent by a rank that was not waiting).
    let moved = traffic(&[], &[((1, 0), 2)], &[((0, 1), 1)]);
    assert_eq!(job.update("node-1", moved), Verdict::Revived);
    assert_eq!(job.confirm(), Verdict::Unchanged);
}

#[test]
fn news_between_two_looks_clears_the_suspicion() {
    let mut job = SpreadJob::new(2);
    job.update("node-0", traffic(&[(0, 1)], &[], &[]));
    job.update("node-1", traffic(&[(1, 0)], &[], &[]));
    // Before the second look, node 1 reports that rank 1 sent after all.
    job.update("node-1", traffic(&[], &[((1, 0), 1)], &[]));
    assert_eq!(job.confirm(), Verdict::Unchanged);
    assert!(!job.deadlocked());
    assert_eq!(job.rank_done(1), Verdict::Unchanged);
}
