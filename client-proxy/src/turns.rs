//! A graph's long calls take turns on their server (`TaskPlacement.turns`, the
//! metaserver's `turns` module says which): at most as many of them are out on a server as
//! it has processors; the others wait here, ready, and leave as calls end, in the order of
//! their predicted starts. A graph's calls issued at once would time-share the server among
//! themselves for the same total work: each would end as late as the last, and a short
//! call after one of them (a solve after its LU) would wait stopped behind the others'
//! slots. Calls with no turns (short ones, tiny ones that leave in batches) go at once.
//!
//! Pure: the execution tells it which tasks are ready, which calls it issued and which
//! ended.

use std::cmp::Ordering;
use std::collections::HashMap;

/// One graph's turns: each task's, the calls out on each server, the tasks waiting.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// Per task: how many turn-taking calls its server runs at once (0: none, it goes when
    /// ready), and its predicted start, which orders the waiting.
    tasks: Vec<(u32, f64)>,
    /// Turn-taking calls out, by server.
    out: HashMap<String, u32>,
    /// Ready tasks waiting for a turn.
    waiting: Vec<usize>,
    /// When each task that waited began to wait (seconds from the graph's start).
    since: HashMap<usize, f64>,
    /// Whether any task takes turns: when none does, ready tasks leave as they come.
    any: bool,
}

impl Turns {
    /// The turns of a placement: `(turns, predicted start)` of each task.
    pub(crate) fn new(tasks: Vec<(u32, f64)>) -> Turns {
        Turns {
            any: tasks.iter().any(|&(turns, _)| turns > 0),
            tasks,
            ..Turns::default()
        }
    }

    /// Of `ready` (with the tasks that waited), the tasks to issue now, in the order of
    /// their predicted starts, each to `server_of(task)`; the others wait for a call to end
    /// from `now` (seconds from the graph's start), unless they waited already.
    pub(crate) fn take(
        &mut self,
        mut ready: Vec<usize>,
        server_of: impl Fn(usize) -> String,
        now: f64,
    ) -> Vec<usize> {
        if !self.any {
            return ready;
        }
        ready.append(&mut self.waiting);
        ready.sort_by(|&a, &b| self.order(a, b));
        let mut out = self.out.clone();
        let mut issued = Vec::with_capacity(ready.len());
        for task in ready {
            let turns = self.turns(task);
            if turns == 0 {
                issued.push(task);
                continue;
            }
            let on_server = out.entry(server_of(task)).or_default();
            if *on_server < turns {
                *on_server += 1;
                issued.push(task);
            } else {
                self.since.entry(task).or_insert(now);
                self.waiting.push(task);
            }
        }
        issued
    }

    /// Task `task`'s call went out to `server`; when it waited for its turn, since when
    /// (its call is timed from then, as the model times it from when it was ready).
    pub(crate) fn issued(&mut self, task: usize, server: &str) -> Option<f64> {
        if self.turns(task) > 0 {
            *self.out.entry(server.to_string()).or_default() += 1;
        }
        self.since.remove(&task)
    }

    /// Task `task`'s call to `server` ended (answered or failed).
    pub(crate) fn ended(&mut self, task: usize, server: &str) {
        if self.turns(task) == 0 {
            return;
        }
        if let Some(out) = self.out.get_mut(server) {
            *out = out.saturating_sub(1);
        }
    }

    /// Whether ready tasks wait for a turn.
    pub(crate) fn holds_tasks(&self) -> bool {
        !self.waiting.is_empty()
    }

    fn turns(&self, task: usize) -> u32 {
        self.tasks.get(task).map_or(0, |&(turns, _)| turns)
    }

    fn order(&self, a: usize, b: usize) -> Ordering {
        let start = |t: usize| self.tasks.get(t).map_or(0.0, |&(_, start)| start);
        start(a).total_cmp(&start(b)).then(a.cmp(&b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five LUs and their solves, as the peers' pairs: LU `i` is task `2i`, its solve
    /// `2i + 1`; LUs take turns on one processor, solves go at once.
    fn pairs() -> (Turns, impl Fn(usize) -> String) {
        let tasks = (0..10)
            .map(|t: usize| {
                if t.is_multiple_of(2) {
                    (1, 0.0)
                } else {
                    (0, 0.0)
                }
            })
            .collect();
        // LUs 0, 2, 4 on "a"; 1, 3 on "b".
        let server = |t: usize| if (t / 2).is_multiple_of(2) { "a" } else { "b" }.to_string();
        (Turns::new(tasks), server)
    }

    fn issue(
        turns: &mut Turns,
        ready: Vec<usize>,
        server: &impl Fn(usize) -> String,
    ) -> Vec<usize> {
        let issued = turns.take(ready, server, 0.0);
        for &t in &issued {
            turns.issued(t, &server(t));
        }
        issued
    }

    #[test]
    fn a_servers_long_calls_go_one_per_processor_and_the_rest_as_calls_end() {
        let (mut turns, server) = pairs();
        // All five LUs ready: one per server goes.
        assert_eq!(issue(&mut turns, vec![0, 2, 4, 6, 8], &server), [0, 2]);
        assert!(turns.holds_tasks());
        // LU 0 ends on "a": its solve goes at once, and the next LU for "a" with it.
        turns.ended(0, "a");
        assert_eq!(issue(&mut turns, vec![1], &server), [1, 4]);
        // Nothing ended: nothing more leaves.
        assert_eq!(issue(&mut turns, vec![], &server), Vec::<usize>::new());
        turns.ended(2, "b");
        assert_eq!(issue(&mut turns, vec![3], &server), [3, 6]);
        turns.ended(4, "a");
        assert_eq!(issue(&mut turns, vec![5], &server), [5, 8]);
        assert!(!turns.holds_tasks());
    }

    #[test]
    fn waiting_tasks_leave_in_the_order_of_their_predicted_starts() {
        let mut turns = Turns::new(vec![(1, 0.0), (1, 3.0), (1, 1.0), (1, 2.0)]);
        let one = |_: usize| "a".to_string();
        assert_eq!(issue(&mut turns, vec![3, 1, 2, 0], &one), [0]);
        turns.ended(0, "a");
        assert_eq!(issue(&mut turns, vec![], &one), [2]);
        turns.ended(2, "a");
        assert_eq!(issue(&mut turns, vec![], &one), [3]);
        turns.ended(3, "a");
        assert_eq!(issue(&mut turns, vec![], &one), [1]);
    }

    #[test]
    fn a_call_that_waited_is_timed_from_when_it_began_to_wait() {
        let mut turns = Turns::new(vec![(1, 0.0), (1, 0.0)]);
        let one = |_: usize| "a".to_string();
        assert_eq!(turns.take(vec![0, 1], one, 0.5), [0]);
        assert_eq!(turns.issued(0, "a"), None);
        // Still waiting at 0.7 s: it has waited since 0.5 s.
        assert_eq!(turns.take(vec![], one, 0.7), Vec::<usize>::new());
        turns.ended(0, "a");
        assert_eq!(turns.take(vec![], one, 0.9), [1]);
        assert_eq!(turns.issued(1, "a"), Some(0.5));
        assert_eq!(turns.issued(1, "a"), None);
    }

    #[test]
    fn a_server_of_two_processors_takes_two_turns_and_calls_without_turns_do_not_count() {
        let mut turns = Turns::new(vec![(2, 0.0), (2, 0.0), (2, 0.0), (0, 0.0), (0, 0.0)]);
        let one = |_: usize| "a".to_string();
        assert_eq!(issue(&mut turns, vec![0, 1, 2, 3, 4], &one), [0, 1, 3, 4]);
        // A call without turns ending frees no turn.
        turns.ended(3, "a");
        assert_eq!(issue(&mut turns, vec![], &one), Vec::<usize>::new());
        turns.ended(1, "a");
        assert_eq!(issue(&mut turns, vec![], &one), [2]);
    }

    #[test]
    fn a_task_that_moved_counts_on_the_server_its_call_went_to() {
        let mut turns = Turns::new(vec![(1, 0.0), (1, 0.0)]);
        // Task 0 was moved off "a" to "b" after a fault: "a" is free for task 1.
        let moved = |t: usize| if t == 0 { "b" } else { "a" }.to_string();
        assert_eq!(issue(&mut turns, vec![0, 1], &moved), [0, 1]);
        turns.ended(0, "b");
        turns.ended(1, "a");
        assert_eq!(issue(&mut turns, vec![], &moved), Vec::<usize>::new());
        assert!(!turns.holds_tasks());
    }

    #[test]
    fn a_placement_without_turns_issues_every_ready_task_as_it_comes() {
        let one = |_: usize| "a".to_string();
        let mut turns = Turns::default();
        assert_eq!(issue(&mut turns, vec![2, 0, 1], &one), [2, 0, 1]);
        let mut turns = Turns::new(vec![(0, 2.0), (0, 1.0), (0, 0.0)]);
        assert_eq!(issue(&mut turns, vec![2, 0, 1], &one), [2, 0, 1]);
    }
}
