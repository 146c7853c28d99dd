//! A graph's long calls take turns on their server (`TaskPlacement.turns`, the
//! metaserver's `turns` module says which): at most as many of them are out on a server as
//! it has processors; the others wait here, ready, and leave as calls end, in the order of
//! their predicted starts. A graph's calls issued at once would time-share the server among
//! themselves for the same total work: each would end as late as the last, and a short
//! call after one of them (a solve after its LU) would wait stopped behind the others'
//! slots. Calls with no turns (short ones, tiny ones that leave in batches) go at once.
//!
//! Where the servers lend each other idle cores (one host), the graph's last long call may
//! wait a little more: when the graph's other calls are expected to end within a quarter
//! of its own time alone, it waits for them (at most a third of it), so that it leaves
//! alone and borrows the cores they free. Five LUs on two one-core servers then take two
//! rounds on one thread and the fifth on two, not three rounds with a core idle in the
//! last (docs/scheduling.md, "Turns").
//!
//! Pure: the execution tells it which tasks are ready, which calls it issued and which
//! ended, and the time.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

/// Of a call's time alone, how soon the graph's other calls must be expected to end for
/// its last long call to wait for them so as to borrow their cores. A call on two threads
/// took 0.55-0.65 of its time on one here (an LU and a product at n = 2000), so waiting a
/// quarter still gains a tenth or more.
const BORROW_WAIT_OF_ALONE: f64 = 0.25;

/// Of a call's time alone, the longest it waits to borrow: about where waiting stops paying
/// (the model's times are off by a few tens of milliseconds either way on a busy host, so
/// the calls it waits for may end a little after they were expected).
const LONGEST_BORROW_WAIT_OF_ALONE: f64 = 0.33;

/// One task's turns, from its placement.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct TaskTurn {
    /// How many turn-taking calls its server runs at once (0: none, it goes when ready).
    pub turns: u32,
    /// Its predicted start, which orders the waiting.
    pub start: f64,
    /// The model's seconds for it alone on its server.
    pub alone: f64,
}

/// One graph's turns: each task's, the calls out on each server, the tasks waiting.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    tasks: Vec<TaskTurn>,
    /// Turn-taking calls out, by server.
    out: HashMap<String, u32>,
    /// Every call out, turn-taking or not.
    calls_out: usize,
    /// When each turn-taking call out is expected to end (seconds from the graph's start).
    ends: HashMap<usize, f64>,
    /// Turn-taking tasks never issued yet.
    never_issued: HashSet<usize>,
    /// Ready tasks waiting for a turn.
    waiting: Vec<usize>,
    /// The graph's last long call, held for the others to end so as to borrow their cores.
    held: Option<usize>,
    /// Until when at most a call may be held, from when it was first held.
    held_until: HashMap<usize, f64>,
    /// When each task that waited began to wait (seconds from the graph's start).
    since: HashMap<usize, f64>,
    /// Whether any task takes turns: when none does, ready tasks leave as they come.
    any: bool,
    /// Whether the graph's last long call may wait to borrow cores (the proxy's
    /// `wait_to_borrow_cores`: its servers lend each other cores).
    wait_to_borrow: bool,
}

impl Turns {
    /// The turns of a placement, one per task; with `wait_to_borrow`, the graph's last long
    /// call may wait for the others to end so as to borrow their cores.
    pub(crate) fn new(tasks: Vec<TaskTurn>, wait_to_borrow: bool) -> Turns {
        Turns {
            any: tasks.iter().any(|t| t.turns > 0),
            never_issued: (0..tasks.len()).filter(|&t| tasks[t].turns > 0).collect(),
            tasks,
            wait_to_borrow,
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
        ready.extend(self.held.take());
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
        self.hold_to_borrow(&mut issued, now);
        issued
    }

    /// Holds back, from `issued`, the graph's last long call while the graph's other calls
    /// out are expected to end within a quarter of its time alone, so that it leaves alone
    /// and borrows the cores they free; lets it go once they have ended, or a third of its
    /// time alone after it was first held.
    fn hold_to_borrow(&mut self, issued: &mut Vec<usize>, now: f64) {
        if !self.wait_to_borrow || !self.waiting.is_empty() || self.never_issued.len() != 1 {
            return;
        }
        let Some(at) = issued.iter().position(|t| self.never_issued.contains(t)) else {
            return;
        };
        let task = issued[at];
        if self.calls_out + issued.len() == 1 {
            return;
        }
        let until = match self.held_until.get(&task) {
            Some(&until) => until,
            None => {
                let alone = self.tasks[task].alone;
                let latest_end = self.ends.values().fold(now, |a, &b| a.max(b));
                if !alone.is_finite() || latest_end - now > BORROW_WAIT_OF_ALONE * alone {
                    return;
                }
                let until = now + LONGEST_BORROW_WAIT_OF_ALONE * alone;
                self.held_until.insert(task, until);
                until
            }
        };
        if now < until {
            issued.remove(at);
            self.since.entry(task).or_insert(now);
            self.held = Some(task);
        }
    }

    /// Task `task`'s call went out to `server` at `now`; when it waited for its turn, since
    /// when (its call is timed from then, as the model times it from when it was ready).
    pub(crate) fn issued(&mut self, task: usize, server: &str, now: f64) -> Option<f64> {
        self.calls_out += 1;
        if self.turns(task) > 0 {
            *self.out.entry(server.to_string()).or_default() += 1;
            let alone = self.tasks[task].alone;
            self.ends.insert(task, now + alone);
            self.never_issued.remove(&task);
        }
        self.since.remove(&task)
    }

    /// Task `task`'s call to `server` ended (answered or failed).
    pub(crate) fn ended(&mut self, task: usize, server: &str) {
        self.calls_out = self.calls_out.saturating_sub(1);
        if self.turns(task) == 0 {
            return;
        }
        self.ends.remove(&task);
        if let Some(out) = self.out.get_mut(server) {
            *out = out.saturating_sub(1);
        }
    }

    /// Whether ready tasks wait for a turn, or the last long call to borrow cores.
    pub(crate) fn holds_tasks(&self) -> bool {
        !self.waiting.is_empty() || self.held.is_some()
    }

    /// When the call held to borrow cores leaves at the latest (seconds from the graph's
    /// start), if one is held.
    pub(crate) fn held_until(&self) -> Option<f64> {
        self.held_until.get(&self.held?).copied()
    }

    fn turns(&self, task: usize) -> u32 {
        self.tasks.get(task).map_or(0, |t| t.turns)
    }

    fn order(&self, a: usize, b: usize) -> Ordering {
        let start = |t: usize| self.tasks.get(t).map_or(0.0, |t| t.start);
        start(a).total_cmp(&start(b)).then(a.cmp(&b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(turns, predicted start)` of each task, each alone for one second.
    fn placed(tasks: &[(u32, f64)]) -> Vec<TaskTurn> {
        tasks
            .iter()
            .map(|&(turns, start)| TaskTurn {
                turns,
                start,
                alone: 1.0,
            })
            .collect()
    }

    /// Five LUs and their solves, as the peers' pairs: LU `i` is task `2i`, its solve
    /// `2i + 1`; LUs take turns on one processor, solves go at once.
    fn pairs() -> (Turns, impl Fn(usize) -> String) {
        let tasks: Vec<(u32, f64)> = (0..10)
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
        (Turns::new(placed(&tasks), false), server)
    }

    /// The pairs on servers that lend each other cores: the last LU may wait to borrow.
    fn pairs_lending() -> (Turns, impl Fn(usize) -> String) {
        let (turns, server) = pairs();
        (Turns::new(turns.tasks, true), server)
    }

    fn issue_at(
        turns: &mut Turns,
        ready: Vec<usize>,
        server: &impl Fn(usize) -> String,
        now: f64,
    ) -> Vec<usize> {
        let issued = turns.take(ready, server, now);
        for &t in &issued {
            turns.issued(t, &server(t), now);
        }
        issued
    }

    fn issue(
        turns: &mut Turns,
        ready: Vec<usize>,
        server: &impl Fn(usize) -> String,
    ) -> Vec<usize> {
        let issued = turns.take(ready, server, 0.0);
        for &t in &issued {
            turns.issued(t, &server(t), 0.0);
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
        let mut turns = Turns::new(placed(&[(1, 0.0), (1, 3.0), (1, 1.0), (1, 2.0)]), false);
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
        let mut turns = Turns::new(placed(&[(1, 0.0), (1, 0.0)]), false);
        let one = |_: usize| "a".to_string();
        assert_eq!(turns.take(vec![0, 1], one, 0.5), [0]);
        assert_eq!(turns.issued(0, "a", 0.0), None);
        // Still waiting at 0.7 s: it has waited since 0.5 s.
        assert_eq!(turns.take(vec![], one, 0.7), Vec::<usize>::new());
        turns.ended(0, "a");
        assert_eq!(turns.take(vec![], one, 0.9), [1]);
        assert_eq!(turns.issued(1, "a", 0.0), Some(0.5));
        assert_eq!(turns.issued(1, "a", 0.0), None);
    }

    #[test]
    fn a_server_of_two_processors_takes_two_turns_and_calls_without_turns_do_not_count() {
        let mut turns = Turns::new(
            placed(&[(2, 0.0), (2, 0.0), (2, 0.0), (0, 0.0), (0, 0.0)]),
            false,
        );
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
        let mut turns = Turns::new(placed(&[(1, 0.0), (1, 0.0)]), false);
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
        let mut turns = Turns::new(placed(&[(0, 2.0), (0, 1.0), (0, 0.0)]), false);
        assert_eq!(issue(&mut turns, vec![2, 0, 1], &one), [2, 0, 1]);
    }

    /// The pairs' first LUs, then the second on "a" at 1 s and the second on "b" (LU 6) at
    /// `at`, up to LU 4's end at 2 s; LU 8 waits for its turn on "a".
    fn second_lu_on_b_at(turns: &mut Turns, server: &impl Fn(usize) -> String, at: f64) {
        assert_eq!(issue_at(turns, vec![0, 2, 4, 6, 8], server, 0.0), [0, 2]);
        turns.ended(0, "a");
        assert_eq!(issue_at(turns, vec![1], server, 1.0), [1, 4]);
        turns.ended(2, "b");
        assert_eq!(issue_at(turns, vec![3], server, at), [3, 6]);
        turns.ended(1, "a");
        turns.ended(3, "b");
        turns.ended(4, "a");
    }

    #[test]
    fn the_last_lu_waits_for_the_other_servers_lu_and_every_solve_then_leaves_alone() {
        let (mut turns, server) = pairs_lending();
        second_lu_on_b_at(&mut turns, &server, 1.0);
        // LU 4 ends on "a" at 2.0 s: LU 8's turn, but LU 6 on "b" is expected to end by
        // then too, so LU 8 waits while the solve after LU 4 goes.
        assert_eq!(issue_at(&mut turns, vec![5], &server, 2.0), [5]);
        assert!(turns.holds_tasks());
        assert!(
            turns
                .held_until()
                .is_some_and(|until| (until - 2.33).abs() < 1e-9)
        );
        turns.ended(5, "a");
        assert_eq!(
            issue_at(&mut turns, vec![], &server, 2.01),
            Vec::<usize>::new()
        );
        // LU 6 ends: its solve goes, LU 8 still waits for it.
        turns.ended(6, "b");
        assert_eq!(issue_at(&mut turns, vec![7], &server, 2.05), [7]);
        turns.ended(7, "b");
        // Nothing else out: LU 8 leaves alone, timed from when it began to wait (for its
        // turn, at the start).
        assert_eq!(turns.take(vec![], &server, 2.06), [8]);
        assert_eq!(turns.issued(8, "a", 2.06), Some(0.0));
        assert!(!turns.holds_tasks());
        assert_eq!(turns.held_until(), None);
    }

    /// Two rounds of the pairs' LUs, the second issued at 1 s, up to LU 4's end at 2 s; LU 6
    /// is still out on "b" (expected to end at 2 s), LU 8 waits for its turn on "a".
    fn two_rounds(turns: &mut Turns, server: &impl Fn(usize) -> String) {
        assert_eq!(issue_at(turns, vec![0, 2, 4, 6, 8], server, 0.0), [0, 2]);
        turns.ended(0, "a");
        turns.ended(2, "b");
        assert_eq!(issue_at(turns, vec![1, 3], server, 1.0), [1, 3, 4, 6]);
        turns.ended(1, "a");
        turns.ended(3, "b");
        turns.ended(4, "a");
    }

    #[test]
    fn the_last_lu_waits_a_third_of_its_time_alone_at_most() {
        let (mut turns, server) = pairs_lending();
        two_rounds(&mut turns, &server);
        assert_eq!(issue_at(&mut turns, vec![5], &server, 2.0), [5]);
        turns.ended(5, "a");
        // LU 6 on "b" runs late: at 2.3 s LU 8 still waits, a third of a second after it
        // began to wait it goes.
        assert_eq!(
            issue_at(&mut turns, vec![], &server, 2.3),
            Vec::<usize>::new()
        );
        assert_eq!(issue_at(&mut turns, vec![], &server, 2.34), [8]);
        assert!(!turns.holds_tasks());
    }

    #[test]
    fn the_last_lu_does_not_wait_for_calls_that_end_late_nor_without_lent_cores() {
        let (mut turns, server) = pairs_lending();
        // LU 6 starts half a second after LU 4: when LU 4 ends, LU 6 has half its time
        // left, more than LU 8 would gain on two cores.
        second_lu_on_b_at(&mut turns, &server, 1.5);
        assert_eq!(issue_at(&mut turns, vec![5], &server, 2.0), [5, 8]);
        // Where servers lend nothing, it never waits.
        let (mut turns, server) = pairs();
        two_rounds(&mut turns, &server);
        assert_eq!(issue_at(&mut turns, vec![5], &server, 2.0), [5, 8]);
    }

    #[test]
    fn a_call_the_model_cannot_time_never_waits_to_borrow() {
        let mut tasks = placed(&[(1, 0.0), (1, 0.0)]);
        tasks[1].alone = f64::INFINITY;
        let mut turns = Turns::new(tasks, true);
        let server = |t: usize| if t == 0 { "a" } else { "b" }.to_string();
        assert_eq!(issue_at(&mut turns, vec![0], &server, 0.0), [0]);
        assert_eq!(issue_at(&mut turns, vec![1], &server, 0.9), [1]);
    }
}
