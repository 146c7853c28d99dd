//! Space-sharing policies the simulator runs. FCFS, FPFS and FPMPFS are the live gang core's
//! own admission queue over its own time table with one row (the FPMPFS paper: space sharing), so the
//! simulated and the live servers make the same decisions. EASY backfilling is the standard
//! baseline: the first waiting job gets a reservation at the earliest time enough processors
//! will be free (by the running jobs' requested times), and later jobs may start now if they
//! do not delay it. Conservative backfilling gives every waiting job such a reservation.

use std::collections::VecDeque;

use ninf_gang::{AdmissionQueue, GangMatrix, QueuedJob};

use crate::workload::Job;

/// A job in progress, as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Running {
    pub id: u64,
    pub processors: u32,
    /// Its start plus its requested time.
    pub expected_end: f64,
}

/// A space-sharing scheduling policy, as event handlers.
pub trait Policy {
    fn name(&self) -> String;
    /// A job arrived.
    fn arrive(&mut self, job: &Job, now: f64);
    /// A job ended; its processors are free.
    fn finish(&mut self, id: u64, now: f64);
    /// Which waiting jobs start now, with `free` processors idle and `running` in progress.
    fn schedule(&mut self, now: f64, free: u32, running: &[Running]) -> Vec<u64>;
    /// Jobs waiting.
    fn waiting(&self) -> usize;
}

/// FCFS, FPFS or FPMPFS: the gang core's admission over a one-row time table.
pub struct GangAdmission {
    queue: AdmissionQueue,
    matrix: GangMatrix,
}

impl GangAdmission {
    pub fn new(policy: ninf_gang::Policy, processors: u32, wait_limit: f64) -> GangAdmission {
        GangAdmission {
            queue: AdmissionQueue::new(policy, wait_limit),
            matrix: GangMatrix::new(processors, 1),
        }
    }
}

impl Policy for GangAdmission {
    fn name(&self) -> String {
        format!("{:?}", self.queue.policy).to_lowercase()
    }

    fn arrive(&mut self, job: &Job, now: f64) {
        self.queue.push(
            QueuedJob {
                id: job.id,
                processors: job.processors,
                arrival: job.submit,
            },
            now,
        );
    }

    fn finish(&mut self, id: u64, _now: f64) {
        self.matrix.remove(id);
    }

    fn schedule(&mut self, now: f64, _free: u32, _running: &[Running]) -> Vec<u64> {
        self.queue
            .admit(&mut self.matrix, now)
            .into_iter()
            .map(|j| j.id)
            .collect()
    }

    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// EASY backfilling (Lifka 1995; Mu'alem and Feitelson 2001).
#[derive(Default)]
pub struct Easy {
    queue: VecDeque<Job>,
}

impl Policy for Easy {
    fn name(&self) -> String {
        "easy".to_string()
    }

    fn arrive(&mut self, job: &Job, _now: f64) {
        self.queue.push_back(*job);
    }

    fn finish(&mut self, _id: u64, _now: f64) {}

    fn schedule(&mut self, now: f64, free: u32, running: &[Running]) -> Vec<u64> {
        let mut free = free;
        let mut started = Vec::new();
        // Running jobs' expected ends, including those started here; a job past its
        // estimate is expected to end now.
        let mut ends: Vec<(f64, u32)> = running
            .iter()
            .map(|r| (r.expected_end.max(now), r.processors))
            .collect();
        while let Some(head) = self.queue.front() {
            if head.processors > free {
                break;
            }
            free -= head.processors;
            ends.push((now + head.requested, head.processors));
            started.push(head.id);
            self.queue.pop_front();
        }
        let Some(head) = self.queue.front().copied() else {
            return started;
        };
        // The head's reservation: the earliest time enough processors are free.
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut available = free;
        let mut shadow = f64::INFINITY;
        for &(end, processors) in &ends {
            available += processors;
            if available >= head.processors {
                shadow = end;
                break;
            }
        }
        // Processors left over at the shadow time, which backfilled jobs may keep.
        let mut extra = available.saturating_sub(head.processors);
        let mut i = 1;
        while i < self.queue.len() && free > 0 {
            let job = self.queue[i];
            let ends_in_time = now + job.requested <= shadow;
            if job.processors <= free && (ends_in_time || job.processors <= extra) {
                free -= job.processors;
                if !ends_in_time {
                    extra -= job.processors;
                }
                started.push(job.id);
                self.queue.remove(i);
            } else {
                i += 1;
            }
        }
        started
    }

    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// Free processors over time, as a step function: `(time, free from then on)`, by time.
#[derive(Debug, Clone)]
struct Profile(Vec<(f64, i64)>);

impl Profile {
    fn new(now: f64, free: u32, running: &[Running]) -> Profile {
        let mut profile = Profile(vec![(now, i64::from(free))]);
        for r in running {
            let end = r.expected_end.max(now);
            profile.split(end);
            for step in profile.0.iter_mut().filter(|(t, _)| *t >= end) {
                step.1 += i64::from(r.processors);
            }
        }
        profile
    }

    /// Makes `t` a breakpoint (the step before it continues).
    fn split(&mut self, t: f64) {
        match self.0.binary_search_by(|(x, _)| x.total_cmp(&t)) {
            Ok(_) => {}
            Err(i) => {
                let free = if i == 0 { self.0[0].1 } else { self.0[i - 1].1 };
                self.0.insert(i, (t, free));
            }
        }
    }

    /// The earliest breakpoint from which `processors` stay free for `duration`.
    fn earliest(&self, processors: u32, duration: f64) -> f64 {
        let need = i64::from(processors);
        for (i, &(start, _)) in self.0.iter().enumerate() {
            let end = span_end(start, duration);
            let fits = self.0[i..]
                .iter()
                .take_while(|(t, _)| *t < end)
                .all(|&(_, free)| free >= need);
            if fits {
                return start;
            }
        }
        self.0.last().map_or(0.0, |(t, _)| *t)
    }

    fn reserve(&mut self, start: f64, duration: f64, processors: u32) {
        let end = span_end(start, duration);
        self.split(start);
        self.split(end);
        for step in self.0.iter_mut().filter(|(t, _)| *t >= start && *t < end) {
            step.1 -= i64::from(processors);
        }
    }
}

/// Where a reservation from `start` for `duration` ends: at least the next representable
/// time, so a job of no length (or one too short to register at a late `start`) still holds
/// its processors for an instant.
fn span_end(start: f64, duration: f64) -> f64 {
    (start + duration).max(start.next_up())
}

/// Conservative backfilling (Mu'alem and Feitelson 2001): every waiting job, in arrival order,
/// gets the earliest reservation that fits the free-processor profile left by running jobs
/// and earlier reservations; a job starts now only if its reservation is now, so no job is
/// ever delayed by one that arrived after it. The profile is rebuilt at every event, which
/// also moves reservations earlier when jobs end before their estimates.
#[derive(Default)]
pub struct Conservative {
    queue: VecDeque<Job>,
}

impl Policy for Conservative {
    fn name(&self) -> String {
        "conservative".to_string()
    }

    fn arrive(&mut self, job: &Job, _now: f64) {
        self.queue.push_back(*job);
    }

    fn finish(&mut self, _id: u64, _now: f64) {}

    fn schedule(&mut self, now: f64, free: u32, running: &[Running]) -> Vec<u64> {
        let mut profile = Profile::new(now, free, running);
        let mut started = Vec::new();
        self.queue.retain(|job| {
            let at = profile.earliest(job.processors, job.requested);
            profile.reserve(at, job.requested, job.processors);
            if at <= now {
                started.push(job.id);
                false
            } else {
                true
            }
        });
        started
    }

    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// Space-sharing policies by their lower-case names (time-sharing ones, `gang` and the DQT's,
/// and the heterogeneous `mct` family have their own drivers).
pub const IMPLEMENTED: [&str; 5] = ["fcfs", "fpfs", "fpmpfs", "easy", "conservative"];

pub fn policy_by_name(
    name: &str,
    processors: u32,
    wait_limit: f64,
) -> Result<Box<dyn Policy>, String> {
    match name {
        "easy" => Ok(Box::new(Easy::default())),
        "conservative" => Ok(Box::new(Conservative::default())),
        "gang" => Err(
            "`gang` time-shares the machine; it is simulated by `simulate_gang`, not as a space-sharing policy"
                .to_string(),
        ),
        _ => match name.parse::<ninf_gang::Policy>() {
            Ok(policy) => Ok(Box::new(GangAdmission::new(policy, processors, wait_limit))),
            Err(_) => Err(format!(
                "unknown policy `{name}` (simulated: {})",
                IMPLEMENTED.join(", ")
            )),
        },
    }
}
