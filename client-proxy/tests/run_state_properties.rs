//! Property test of the proxy's task states under random faults: on a random DAG, calls
//! fail and are retried, servers lose the outputs of finished tasks and lineage regenerates
//! them, in any order. Whatever happens, a task is only issued once every producer is done,
//! and once faults stop the graph runs to completion.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ninf_client_proxy::run_state::{GraphRun, TaskState};
use proptest::prelude::*;

/// What happens to one issued call, or to the finished tasks, at a step.
#[derive(Debug, Clone)]
enum Event {
    Complete,
    /// The call is lost with its server and retried.
    Retry,
    /// A server dies: the finished tasks whose number has this remainder lose their outputs.
    Lose(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => Just(Event::Complete),
        1 => Just(Event::Retry),
        1 => (0usize..3).prop_map(Event::Lose),
    ]
}

proptest! {
    #[test]
    fn tasks_run_only_after_their_producers_and_the_graph_always_finishes(
        tasks in 1usize..10,
        raw_edges in prop::collection::vec((0usize..10, 0usize..10), 0..20),
        events in prop::collection::vec(event(), 0..60),
        wanted in prop::collection::vec(any::<bool>(), 10),
    ) {
        // Edges go from lower to higher ids: a DAG.
        let edges: Vec<(usize, usize)> = raw_edges
            .into_iter()
            .filter(|&(a, b)| a < b && b < tasks)
            .collect();
        let producers = |t: usize| edges.iter().filter(move |e| e.1 == t).map(|e| e.0);
        let mut run = GraphRun::new(tasks, edges.iter().copied());
        let mut running: Vec<usize> = Vec::new();
        let mut lost = vec![false; tasks];
        let issue = |run: &mut GraphRun, running: &mut Vec<usize>| -> Result<(), TestCaseError> {
            for t in run.take_ready() {
                for p in producers(t) {
                    prop_assert_eq!(run.state(p), Some(TaskState::Done), "task {} issued before {}", t, p);
                }
                running.push(t);
            }
            Ok(())
        };
        issue(&mut run, &mut running)?;
        for event in events {
            match event {
                Event::Complete | Event::Retry if running.is_empty() => {}
                Event::Complete => {
                    let t = running.remove(0);
                    lost[t] = false;
                    run.complete(t);
                }
                Event::Retry => {
                    let t = running.remove(0);
                    run.fail(t);
                    run.retry(t);
                }
                Event::Lose(k) => {
                    for (t, lost) in lost.iter_mut().enumerate() {
                        if t % 3 == k && run.state(t) == Some(TaskState::Done) {
                            *lost = true;
                        }
                    }
                    let lost_now = lost.clone();
                    for t in run.regenerate(|t| lost_now[t], |t| wanted[t]) {
                        prop_assert!(lost_now[t]);
                        prop_assert_ne!(run.state(t), Some(TaskState::Done));
                    }
                }
            }
            issue(&mut run, &mut running)?;
        }
        // Faults stop: everything issued completes, wanted outputs that were lost come back.
        let lost_now = lost.clone();
        run.regenerate(|t| lost_now[t], |t| wanted[t]);
        issue(&mut run, &mut running)?;
        let mut steps = 0;
        while let Some(t) = running.pop() {
            lost[t] = false;
            run.complete(t);
            issue(&mut run, &mut running)?;
            steps += 1;
            prop_assert!(steps < 1000, "the graph never finished");
        }
        prop_assert!(run.is_complete(), "stuck with nothing running");
        for (t, (&wanted, &lost)) in wanted.iter().zip(&lost).enumerate() {
            prop_assert!(!(wanted && lost), "task {}'s wanted output stayed lost", t);
        }
    }
}
