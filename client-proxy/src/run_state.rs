//! The states of a graph's tasks while the proxy runs it, after Dask's scheduler: a task is
//! `Waiting` for producers, `Ready` once they are all done, `Running` once issued, then `Done`
//! or `Failed`. Faults add two transitions back: a `Running` task whose call was lost is
//! retried (to `Ready`, or `Waiting` if an input must be made again), and a `Done` task whose
//! kept outputs were lost with their server, while something still needs them, is invalidated
//! and runs again (lineage: its own lost inputs are regenerated first, recursively). Pure
//! bookkeeping: the proxy's async loop asks it what to issue next.

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Waiting,
    Ready,
    Running,
    Done,
    Failed,
}

/// The tasks of one graph run.
#[derive(Debug, Clone)]
pub struct GraphRun {
    states: Vec<TaskState>,
    /// Producers not yet done, per task.
    missing: Vec<usize>,
    /// Distinct consumers, per task.
    consumers: Vec<Vec<usize>>,
    /// Distinct producers, per task.
    producers: Vec<Vec<usize>>,
    ready: std::collections::VecDeque<usize>,
    done: usize,
}

impl GraphRun {
    /// A run of `tasks` tasks with these (producer, consumer) dependencies; several edges
    /// between the same two tasks count once. Ids must be below `tasks`.
    pub fn new(tasks: usize, dependencies: impl IntoIterator<Item = (usize, usize)>) -> GraphRun {
        let mut consumers = vec![Vec::new(); tasks];
        for (from, to) in dependencies {
            if from < tasks && to < tasks {
                consumers[from].push(to);
            }
        }
        let mut missing = vec![0; tasks];
        let mut producers = vec![Vec::new(); tasks];
        for (from, list) in consumers.iter_mut().enumerate() {
            list.sort_unstable();
            list.dedup();
            for &to in list.iter() {
                missing[to] += 1;
                producers[to].push(from);
            }
        }
        let mut states = vec![TaskState::Waiting; tasks];
        let mut ready = std::collections::VecDeque::new();
        for t in 0..tasks {
            if missing[t] == 0 {
                states[t] = TaskState::Ready;
                ready.push_back(t);
            }
        }
        GraphRun {
            states,
            missing,
            consumers,
            producers,
            ready,
            done: 0,
        }
    }

    /// A run picked up again after the proxy restarted: the tasks `done` says are done, the
    /// others waiting for their producers that are not, or ready. A task counts as done
    /// whatever its producers' states (its outputs survived; theirs may not have); call
    /// [`GraphRun::regenerate`] next for the done tasks whose outputs were lost.
    pub fn restore(
        tasks: usize,
        dependencies: impl IntoIterator<Item = (usize, usize)>,
        done: impl Fn(usize) -> bool,
    ) -> GraphRun {
        let mut run = GraphRun::new(tasks, dependencies);
        run.ready.clear();
        for t in 0..tasks {
            if done(t) {
                run.states[t] = TaskState::Done;
                run.done += 1;
            }
        }
        for t in 0..tasks {
            if run.states[t] != TaskState::Done {
                run.enter_waiting(t);
            }
        }
        run
    }

    /// The ready tasks, in the order they became ready; they are now running.
    pub fn take_ready(&mut self) -> Vec<usize> {
        let tasks: Vec<usize> = self.ready.drain(..).collect();
        for &t in &tasks {
            self.states[t] = TaskState::Running;
        }
        tasks
    }

    /// A running task finished; its consumers whose producers are all done become ready.
    pub fn complete(&mut self, task: usize) {
        if self.states.get(task) != Some(&TaskState::Running) {
            return;
        }
        self.states[task] = TaskState::Done;
        self.done += 1;
        for &next in &self.consumers[task] {
            // Consumers past waiting (running again, or done with an earlier copy of this
            // output) count nothing.
            if self.states[next] != TaskState::Waiting {
                continue;
            }
            self.missing[next] = self.missing[next].saturating_sub(1);
            if self.missing[next] == 0 {
                self.states[next] = TaskState::Ready;
                self.ready.push_back(next);
            }
        }
    }

    /// A running (or failed) task runs again: `Ready` if its producers are all done,
    /// `Waiting` for the rest otherwise.
    pub fn retry(&mut self, task: usize) {
        if !matches!(
            self.states.get(task),
            Some(TaskState::Running | TaskState::Failed)
        ) {
            return;
        }
        self.enter_waiting(task);
    }

    /// Puts `task` back to `Waiting` (or straight to `Ready`) with its missing producers
    /// counted afresh.
    fn enter_waiting(&mut self, task: usize) {
        let missing = self.producers[task]
            .iter()
            .filter(|&&p| self.states[p] != TaskState::Done)
            .count();
        self.missing[task] = missing;
        if missing == 0 {
            self.states[task] = TaskState::Ready;
            self.ready.push_back(task);
        } else {
            self.states[task] = TaskState::Waiting;
        }
    }

    /// A done task must run again (its outputs were lost): its waiting and ready consumers
    /// wait for it once more.
    fn invalidate(&mut self, task: usize) {
        if self.states.get(task) != Some(&TaskState::Done) {
            return;
        }
        self.done -= 1;
        for i in 0..self.consumers[task].len() {
            let next = self.consumers[task][i];
            match self.states[next] {
                TaskState::Waiting => self.missing[next] += 1,
                TaskState::Ready => {
                    self.ready.retain(|&t| t != next);
                    self.states[next] = TaskState::Waiting;
                    self.missing[next] = 1;
                }
                _ => {}
            }
        }
        self.enter_waiting(task);
    }

    /// Invalidates every done task whose outputs are `lost` while something still needs
    /// them: a consumer not yet done or running, or the end of the graph (`needed_at_end`,
    /// for outputs fetched for the client after the last task). Invalidating a task makes its
    /// own lost inputs needed, so producers are regenerated back to data that survived.
    /// Returns the tasks invalidated.
    pub fn regenerate(
        &mut self,
        lost: impl Fn(usize) -> bool,
        needed_at_end: impl Fn(usize) -> bool,
    ) -> Vec<usize> {
        let mut invalidated = Vec::new();
        loop {
            let found = (0..self.states.len()).find(|&t| {
                self.states[t] == TaskState::Done
                    && lost(t)
                    && (needed_at_end(t)
                        || self.consumers[t].iter().any(|&c| {
                            matches!(self.states[c], TaskState::Waiting | TaskState::Ready)
                        }))
            });
            let Some(task) = found else {
                return invalidated;
            };
            self.invalidate(task);
            invalidated.push(task);
        }
    }

    /// `task` failed: its call, or, once done, its output lost after the last call (it no
    /// longer counts as done, so that the run completes once it is done again).
    pub fn fail(&mut self, task: usize) {
        if let Some(state) = self.states.get_mut(task) {
            if *state == TaskState::Done {
                self.done -= 1;
            }
            *state = TaskState::Failed;
        }
    }

    pub fn state(&self, task: usize) -> Option<TaskState> {
        self.states.get(task).copied()
    }

    /// Tasks done now (a task invalidated or retried counts again once it is done again).
    pub fn done(&self) -> usize {
        self.done
    }

    /// Every task is done.
    pub fn is_complete(&self) -> bool {
        self.done == self.states.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_done_task_that_fails_at_the_end_runs_again_and_the_run_completes_once() {
        let mut run = GraphRun::new(2, [(0, 1)]);
        for task in [0, 1] {
            assert_eq!(run.take_ready(), vec![task]);
            run.complete(task);
        }
        assert!(run.is_complete());
        // Task 1's output is lost after the last call (fetched at the end, say).
        run.fail(1);
        assert!(!run.is_complete());
        assert_eq!(run.done(), 1);
        run.retry(1);
        assert_eq!(run.take_ready(), vec![1]);
        run.complete(1);
        assert!(run.is_complete());
        assert_eq!(run.done(), 2);
    }

    #[test]
    fn diamond_runs_in_waves() {
        // 0 -> 1, 0 -> 2, 1 -> 3, 2 -> 3 (twice: two edges between the same tasks).
        let mut run = GraphRun::new(4, [(0, 1), (0, 2), (1, 3), (2, 3), (2, 3)]);
        assert_eq!(run.take_ready(), vec![0]);
        assert_eq!(run.take_ready(), Vec::<usize>::new());
        run.complete(0);
        assert_eq!(run.take_ready(), vec![1, 2]);
        run.complete(2);
        assert_eq!(run.state(3), Some(TaskState::Waiting));
        run.complete(1);
        assert_eq!(run.take_ready(), vec![3]);
        assert!(!run.is_complete());
        run.complete(3);
        assert!(run.is_complete());
    }

    #[test]
    fn a_lost_call_is_retried_once_its_inputs_exist() {
        let mut run = GraphRun::new(2, [(0, 1)]);
        assert_eq!(run.take_ready(), vec![0]);
        run.retry(0);
        assert_eq!(run.state(0), Some(TaskState::Ready));
        assert_eq!(run.take_ready(), vec![0]);
        run.complete(0);
        assert_eq!(run.take_ready(), vec![1]);
        // Task 1's input was lost with its server: 0 runs again, then 1.
        let lost = run.regenerate(|t| t == 0, |_| false);
        assert_eq!(
            lost,
            Vec::<usize>::new(),
            "a running consumer needs nothing now"
        );
        run.retry(1);
        let lost = run.regenerate(|t| t == 0, |_| false);
        assert_eq!(lost, vec![0]);
        assert_eq!(run.state(1), Some(TaskState::Waiting));
        assert_eq!(run.take_ready(), vec![0]);
        run.complete(0);
        assert_eq!(run.take_ready(), vec![1]);
        run.complete(1);
        assert!(run.is_complete());
    }

    #[test]
    fn lineage_goes_back_to_data_that_survived() {
        // A chain 0 -> 1 -> 2 -> 3 and a side task 4 -> 3. Tasks 1 and 2 stored their
        // outputs on a server that died; 0 and 4 on one that lives.
        let mut run = GraphRun::new(5, [(0, 1), (1, 2), (2, 3), (4, 3)]);
        let mut order = Vec::new();
        while order.len() < 4 {
            for t in run.take_ready() {
                order.push(t);
                run.complete(t);
            }
        }
        assert_eq!(run.take_ready(), vec![3]);
        run.retry(3);
        let dead = [false, true, true, false, false];
        let mut lost = run.regenerate(|t| dead[t], |_| false);
        lost.sort_unstable();
        // 2 is needed by 3, then 1 by 2; 0 and 4 survived and are not re-run.
        assert_eq!(lost, vec![1, 2]);
        assert_eq!(run.take_ready(), vec![1]);
        assert_eq!(run.state(2), Some(TaskState::Waiting));
        assert_eq!(run.state(3), Some(TaskState::Waiting));
        run.complete(1);
        assert_eq!(run.take_ready(), vec![2]);
        run.complete(2);
        assert_eq!(run.take_ready(), vec![3]);
        run.complete(3);
        assert!(run.is_complete());
    }

    #[test]
    fn outputs_nobody_needs_are_not_regenerated_unless_the_client_wants_them() {
        let mut run = GraphRun::new(3, [(0, 1), (0, 2)]);
        run.take_ready();
        run.complete(0);
        let next = run.take_ready();
        assert_eq!(next, vec![1, 2]);
        run.complete(1);
        run.complete(2);
        assert!(run.is_complete());
        // Everything is done: lost intermediates matter only if the client fetches them.
        assert!(run.regenerate(|_| true, |_| false).is_empty());
        // The client wants 2's output: 2 runs again, and so does 0, whose output 2 reads.
        assert_eq!(run.regenerate(|_| true, |t| t == 2), vec![2, 0]);
        assert!(!run.is_complete());
        assert_eq!(run.take_ready(), vec![0]);
        run.complete(0);
        assert_eq!(run.take_ready(), vec![2]);
        run.complete(2);
        assert!(run.is_complete());
    }

    #[test]
    fn invalidating_a_producer_takes_back_a_ready_consumer() {
        let mut run = GraphRun::new(3, [(0, 2), (1, 2)]);
        run.take_ready();
        run.complete(0);
        run.complete(1);
        assert_eq!(run.state(2), Some(TaskState::Ready));
        assert_eq!(run.regenerate(|t| t == 1, |_| false), vec![1]);
        assert_eq!(run.state(2), Some(TaskState::Waiting));
        assert_eq!(run.take_ready(), vec![1]);
        run.complete(1);
        assert_eq!(run.take_ready(), vec![2]);
    }

    #[test]
    fn a_restored_run_starts_where_its_outputs_survived() {
        // 0 -> 1 -> 3, 2 -> 3. Tasks 0, 1 and 2 were done before the proxy died; 1's output
        // was lost meanwhile, and 3 returns its result to the client.
        let done = [true, true, true, false];
        let mut run = GraphRun::restore(4, [(0, 1), (1, 3), (2, 3)], |t| done[t]);
        assert_eq!(run.done(), 3);
        assert_eq!(run.state(3), Some(TaskState::Ready));
        let lost = run.regenerate(|t| t == 1, |t| t == 3);
        assert_eq!(lost, vec![1]);
        assert_eq!(run.state(3), Some(TaskState::Waiting));
        assert_eq!(run.take_ready(), vec![1], "0 survived and is not run again");
        run.complete(1);
        assert_eq!(run.take_ready(), vec![3]);
        run.complete(3);
        assert!(run.is_complete());
    }

    #[test]
    fn a_done_task_whose_producer_was_lost_stays_done() {
        // 0 -> 1 -> 2: 1's output survived though 0's did not; only 2 runs.
        let done = [true, true, false];
        let mut run = GraphRun::restore(3, [(0, 1), (1, 2)], |t| done[t]);
        assert!(run.regenerate(|t| t == 0, |t| t == 2).is_empty());
        assert_eq!(run.take_ready(), vec![2]);
        run.complete(2);
        assert!(run.is_complete());
    }

    #[test]
    fn completing_a_task_twice_or_before_it_runs_changes_nothing() {
        let mut run = GraphRun::new(2, [(0, 1)]);
        run.complete(1);
        assert_eq!(run.state(1), Some(TaskState::Waiting));
        assert_eq!(run.take_ready(), vec![0]);
        run.complete(0);
        run.complete(0);
        assert_eq!(run.take_ready(), vec![1]);
        run.fail(1);
        assert_eq!(run.state(1), Some(TaskState::Failed));
        assert!(!run.is_complete());
    }
}
