//! The states of a graph's tasks while the proxy runs it, after Dask's scheduler: a task is
//! `Waiting` for producers, `Ready` once they are all done, `Running` once issued, then `Done`
//! or `Failed`. Pure bookkeeping: the proxy's async loop asks it what to issue next.

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
        for list in &mut consumers {
            list.sort_unstable();
            list.dedup();
            for &to in list.iter() {
                missing[to] += 1;
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
            ready,
            done: 0,
        }
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
            self.missing[next] -= 1;
            if self.missing[next] == 0 && self.states[next] == TaskState::Waiting {
                self.states[next] = TaskState::Ready;
                self.ready.push_back(next);
            }
        }
    }

    pub fn fail(&mut self, task: usize) {
        if let Some(state) = self.states.get_mut(task) {
            *state = TaskState::Failed;
        }
    }

    pub fn state(&self, task: usize) -> Option<TaskState> {
        self.states.get(task).copied()
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
