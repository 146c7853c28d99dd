//! When an allocation queue submits jobs, how many, and when it lets them go: pure, from the
//! queue's settings, its jobs as the batch system and the registry see them, the grid's
//! demand and the time. No I/O: [`super::run`] applies what [`decide`] returns.

use super::{JobState, QueueSpec};

/// Failures in a row (submissions refused, jobs that ended before any of their servers
/// registered) after which a queue pauses until `ninf alloc resume`.
pub const PAUSE_AFTER_FAILURES: u32 = 3;

/// One job of the queue as the decision sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    pub id: String,
    pub state: JobState,
    /// Whether any of its servers has registered.
    pub registered: bool,
    /// Its servers up now, taking calls.
    pub servers: Vec<ServerView>,
}

/// One server of a job, as the registry sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerView {
    /// Since when it has had nothing to do (Unix seconds); `None` while it is busy.
    pub idle_since: Option<f64>,
    /// When its job ends (Unix seconds), if it has an end.
    pub walltime_end: Option<f64>,
}

/// What the grid asks of the queues now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Demand {
    /// Requests (graphs, descriptions) waiting for a server that no live server can take.
    pub waiting: usize,
    /// Whether the grid has run work within the queue's idle timeout: servers about to end
    /// are then replaced before they go.
    pub busy: bool,
}

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Submit this many jobs (one `sbatch`, an array when more than one).
    Submit(u32),
    /// Cancel a job, saying why.
    Cancel { job: String, reason: String },
}

/// A server is replaced this long before its job ends: a quarter of the time limit, at
/// least a minute, so that the replacement has time to queue and start.
fn replace_lead(spec: &QueueSpec) -> f64 {
    (f64::from(spec.time_limit_minutes) * 15.0).max(60.0)
}

/// Whether the server's job ends within the replacement lead.
fn ending(spec: &QueueSpec, server: &ServerView, now: f64) -> bool {
    server
        .walltime_end
        .is_some_and(|end| end - now <= replace_lead(spec))
}

/// What the queue should do now. A paused queue does nothing; an active one cancels jobs
/// whose servers have all been idle past the idle timeout while nothing waits, and submits
/// while work waits (or, on a busy grid, while servers are about to end), keeping at most
/// `backlog` jobs pending or starting (running, no server registered yet) and at most
/// `max_servers` servers counted, theirs included.
pub fn decide(
    spec: &QueueSpec,
    paused: bool,
    jobs: &[JobView],
    demand: Demand,
    now: f64,
) -> Vec<Decision> {
    if paused {
        return Vec::new();
    }
    let mut decisions = idle_cancellations(spec, jobs, demand, now);
    let cancelled: Vec<&str> = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Cancel { job, .. } => Some(job.as_str()),
            Decision::Submit(_) => None,
        })
        .collect();
    let live = jobs.iter().filter(|j| !cancelled.contains(&j.id.as_str()));
    let per_job = spec.servers_per_job.max(1);
    let mut pending = 0;
    let mut counted = 0;
    let mut ending_servers = 0;
    for job in live {
        match job.state {
            JobState::Pending => {
                pending += 1;
                counted += per_job;
            }
            // A running job counts its servers once they register, all it asked for
            // before; until then it is one of the backlog, as a pending job is.
            JobState::Running if !job.registered => {
                pending += 1;
                counted += per_job;
            }
            JobState::Running => {
                let ends = job.servers.iter().filter(|s| ending(spec, s, now)).count() as u32;
                ending_servers += ends;
                counted += job.servers.len() as u32 - ends;
            }
            JobState::Ended | JobState::Failed | JobState::Cancelled => {}
        }
    }
    let wanted = demand.waiting > 0 || (demand.busy && ending_servers > 0);
    if wanted {
        let room = spec.max_servers.saturating_sub(counted) / per_job;
        let backlog_room = spec.backlog.max(1).saturating_sub(pending);
        let count = room.min(backlog_room);
        if count > 0 {
            decisions.push(Decision::Submit(count));
        }
    }
    decisions
}

/// Running jobs whose every server has been idle for the idle timeout, while nothing waits.
fn idle_cancellations(
    spec: &QueueSpec,
    jobs: &[JobView],
    demand: Demand,
    now: f64,
) -> Vec<Decision> {
    let timeout = spec.idle_timeout_seconds;
    if timeout <= 0.0 || demand.waiting > 0 {
        return Vec::new();
    }
    jobs.iter()
        .filter(|j| j.state == JobState::Running && !j.servers.is_empty())
        .filter(|j| {
            j.servers
                .iter()
                .all(|s| s.idle_since.is_some_and(|since| now - since >= timeout))
        })
        .map(|j| Decision::Cancel {
            job: j.id.clone(),
            reason: format!("its servers were idle for {timeout} s"),
        })
        .collect()
}

/// Whether `failures` in a row pause the queue.
pub fn pauses(failures: u32) -> bool {
    failures >= PAUSE_AFTER_FAILURES
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> QueueSpec {
        QueueSpec {
            name: "q".into(),
            time_limit_minutes: 60,
            servers_per_job: 1,
            max_servers: 3,
            backlog: 1,
            idle_timeout_seconds: 120.0,
            data_dir: String::new(),
            grid_file: String::new(),
            batch_args: Vec::new(),
        }
    }

    fn job(id: &str, state: JobState, servers: Vec<ServerView>) -> JobView {
        JobView {
            id: id.into(),
            state,
            registered: !servers.is_empty(),
            servers,
        }
    }

    fn server(idle_since: Option<f64>, walltime_end: f64) -> ServerView {
        ServerView {
            idle_since,
            walltime_end: Some(walltime_end),
        }
    }

    const WAITING: Demand = Demand {
        waiting: 2,
        busy: true,
    };
    const NOTHING: Demand = Demand {
        waiting: 0,
        busy: false,
    };

    #[test]
    fn nothing_is_submitted_without_work_and_a_backlog_is_kept_while_work_waits() {
        let now = 1000.0;
        assert_eq!(decide(&spec(), false, &[], NOTHING, now), vec![]);
        assert_eq!(
            decide(&spec(), false, &[], WAITING, now),
            vec![Decision::Submit(1)]
        );
        // One pending: the backlog of one is there.
        let pending = [job("1_0", JobState::Pending, vec![])];
        assert_eq!(decide(&spec(), false, &pending, WAITING, now), vec![]);
        // Running but no server yet: still the backlog.
        let starting = [job("1_0", JobState::Running, vec![])];
        assert_eq!(decide(&spec(), false, &starting, WAITING, now), vec![]);
        // Its server is up and work still waits: one more, up to the maximum.
        let up = [job(
            "1_0",
            JobState::Running,
            vec![server(None, now + 3000.0)],
        )];
        assert_eq!(
            decide(&spec(), false, &up, WAITING, now),
            vec![Decision::Submit(1)]
        );
        let full = [
            job("1_0", JobState::Running, vec![server(None, now + 3000.0)]),
            job("2_0", JobState::Running, vec![server(None, now + 3000.0)]),
            job("3_0", JobState::Pending, vec![]),
        ];
        assert_eq!(decide(&spec(), false, &full, WAITING, now), vec![]);
        // A paused queue decides nothing.
        assert_eq!(decide(&spec(), true, &[], WAITING, now), vec![]);
    }

    #[test]
    fn a_larger_backlog_and_servers_per_job_are_counted_in_servers() {
        let spec = QueueSpec {
            servers_per_job: 2,
            max_servers: 5,
            backlog: 3,
            ..spec()
        };
        // Room for two jobs of two servers under five.
        assert_eq!(
            decide(&spec, false, &[], WAITING, 0.0),
            vec![Decision::Submit(2)]
        );
    }

    #[test]
    fn idle_servers_go_after_the_timeout_unless_work_waits() {
        let now = 1000.0;
        let jobs = [
            job(
                "1_0",
                JobState::Running,
                vec![server(Some(now - 130.0), now + 3000.0)],
            ),
            job(
                "2_0",
                JobState::Running,
                vec![server(Some(now - 60.0), now + 3000.0)],
            ),
            job("3_0", JobState::Running, vec![server(None, now + 3000.0)]),
        ];
        assert_eq!(
            decide(&spec(), false, &jobs, NOTHING, now),
            vec![Decision::Cancel {
                job: "1_0".into(),
                reason: "its servers were idle for 120 s".into()
            }]
        );
        let waiting = Demand {
            waiting: 1,
            busy: true,
        };
        let decided = decide(&spec(), false, &jobs, waiting, now);
        assert!(
            decided.iter().all(|d| matches!(d, Decision::Submit(_))),
            "{decided:?}"
        );
        let never = QueueSpec {
            idle_timeout_seconds: 0.0,
            ..spec()
        };
        assert_eq!(decide(&never, false, &jobs, NOTHING, now), vec![]);
    }

    #[test]
    fn a_server_about_to_end_is_replaced_on_a_busy_grid() {
        let now = 1000.0;
        // 60 minutes: replaced 15 minutes before the end.
        let ending = [job(
            "1_0",
            JobState::Running,
            vec![server(None, now + 600.0)],
        )];
        let busy = Demand {
            waiting: 0,
            busy: true,
        };
        assert_eq!(
            decide(&spec(), false, &ending, busy, now),
            vec![Decision::Submit(1)]
        );
        assert_eq!(decide(&spec(), false, &ending, NOTHING, now), vec![]);
        let later = [job(
            "1_0",
            JobState::Running,
            vec![server(None, now + 1200.0)],
        )];
        assert_eq!(decide(&spec(), false, &later, busy, now), vec![]);
        // Its replacement pending: nothing more.
        let replaced = [ending[0].clone(), job("2_0", JobState::Pending, vec![])];
        assert_eq!(decide(&spec(), false, &replaced, busy, now), vec![]);
    }

    #[test]
    fn three_failures_in_a_row_pause() {
        assert!(!pauses(2));
        assert!(pauses(PAUSE_AFTER_FAILURES));
    }
}
