//! Time-space sharing by the Distributed Queue Tree (the gang thesis, chapter 7) in the simulator:
//! the gang core's [`QueueTree`] decides every slot; a job makes progress only in the slots it
//! runs, and ends when it has run for its run time. Jobs whose size is not a partition size
//! get the next larger partition (the buddy system's internal fragmentation), so any workload
//! can be run; the seed's own workload has power-of-two sizes only.

use std::collections::HashMap;

use ninf_gang::{DqtConfig, QueueTree};
use serde::Serialize;

use crate::engine::{Outcome, SimError};
use crate::workload::Job;

/// Remaining work below this counts as done.
const EPSILON: f64 = 1e-9;

/// What a DQT run measured beyond the jobs' outcomes.
#[derive(Debug, Clone, Serialize)]
pub struct DqtRun {
    pub outcomes: Vec<Outcome>,
    /// Processors in running partitions, averaged over the slots from the first arrival to
    /// the last (the thesis's mean processor utilisation Ũ over its simulated time, during
    /// which jobs keep arriving); over the whole run if all arrive at once.
    pub utilization: f64,
    /// The largest total queue length of a branch seen at any time.
    pub max_tqlb: usize,
    /// Slots simulated.
    pub slots: u64,
}

fn policy_name(config: &DqtConfig) -> String {
    format!(
        "{}dqt-{}",
        if config.fair { "fair-" } else { "" },
        config.allocation.name()
    )
}

/// The smallest partition of a `width`-ary tree that holds `processors`.
fn partition(processors: u32, width: u32) -> u32 {
    let mut size = 1u32;
    while size < processors {
        size = size.saturating_mul(width);
    }
    size
}

/// Runs `jobs` on a DQT of `config`, one slot every `quantum` seconds from time 0.
pub fn simulate_dqt(jobs: &[Job], config: DqtConfig, quantum: f64) -> Result<DqtRun, SimError> {
    simulate_dqt_with(jobs, config, quantum, SlotEnd::Quantum)
}

/// When a slot ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotEnd {
    /// Every slot lasts the quantum, and a job ends at the end of its last slot (the thesis's
    /// model, in whole slots).
    Quantum,
    /// As the live gang master does: a slot whose jobs have all ended ends then, and the next
    /// decision is taken at once; a job ends when its work is done, and an idle machine
    /// starts an arriving job at once.
    WhenItsJobsEnd,
}

/// Refuses a quantum that is not a positive number, and jobs the machine cannot hold or
/// whose times make no sense.
fn check_jobs(jobs: &[Job], quantum: f64, machine: u32) -> Result<(), SimError> {
    if !(quantum.is_finite() && quantum > 0.0) {
        return Err(SimError::BadQuantum(quantum));
    }
    for job in jobs {
        if job.processors == 0 || job.processors > machine {
            return Err(SimError::TooLarge {
                id: job.id,
                processors: job.processors,
                machine,
            });
        }
        crate::engine::check_times(job)?;
    }
    Ok(())
}

/// The time utilisation is measured over: the window of arrivals, or (when every job
/// arrived at once) until the last job ended.
fn measured_span(window_start: f64, window_end: f64, outcomes: &HashMap<u64, Outcome>) -> f64 {
    if window_end > window_start {
        window_end - window_start
    } else {
        outcomes
            .values()
            .map(|o| o.end)
            .fold(window_start, f64::max)
            - window_start
    }
}

/// [`simulate_dqt`] with a choice of when slots end.
pub fn simulate_dqt_with(
    jobs: &[Job],
    config: DqtConfig,
    quantum: f64,
    slot_end: SlotEnd,
) -> Result<DqtRun, SimError> {
    let early = slot_end == SlotEnd::WhenItsJobsEnd;
    let machine = config.processors();
    let policy = policy_name(&config);
    check_jobs(jobs, quantum, machine)?;
    let mut order: Vec<&Job> = jobs.iter().collect();
    order.sort_by(|a, b| a.submit.total_cmp(&b.submit).then(a.id.cmp(&b.id)));
    let mut tree = QueueTree::new(config).map_err(|_| SimError::Stuck {
        policy: policy.clone(),
        waiting: jobs.len(),
    })?;
    let by_id: HashMap<u64, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut remaining: HashMap<u64, f64> = HashMap::new();
    let mut started: HashMap<u64, f64> = HashMap::new();
    let mut outcomes: HashMap<u64, Outcome> = HashMap::new();
    let mut next = 0;
    let mut slot: u64 = 0;
    let mut busy_processor_seconds = 0.0;
    let mut counted_slots: u64 = 0;
    let mut now = 0.0;
    let mut max_tqlb = 0;
    let window_start = order.first().map_or(0.0, |j| j.submit);
    let window_end = order.last().map_or(0.0, |j| j.submit);
    loop {
        if !early {
            now = slot as f64 * quantum;
        }
        let mut changed = false;
        while next < order.len() && order[next].submit <= now + EPSILON {
            let job = order[next];
            tree.add(job.id, partition(job.processors, config.width))
                .map_err(|_| SimError::NotWaiting {
                    policy: policy.clone(),
                    id: job.id,
                })?;
            remaining.insert(job.id, job.run);
            next += 1;
            changed = true;
        }
        if changed {
            max_tqlb = max_tqlb.max(tree.max_tqlb());
        }
        if tree.jobs() == 0 {
            match order.get(next) {
                None => break,
                Some(job) => {
                    slot = ((job.submit / quantum) - EPSILON).ceil().max(0.0) as u64;
                    now = now.max(job.submit);
                    continue;
                }
            }
        }
        let runs = tree.slot();
        counted_slots += 1;
        let mut finished = Vec::new();
        let mut longest = 0.0f64;
        for run in &runs {
            started.entry(run.job).or_insert(now);
            let Some(r) = remaining.get_mut(&run.job) else {
                continue;
            };
            let used = if early { r.min(quantum) } else { quantum };
            if now < window_end || window_end <= window_start {
                busy_processor_seconds += f64::from(run.size) * used;
            }
            longest = longest.max(used);
            *r -= quantum;
            if *r <= EPSILON {
                finished.push((run.job, used));
            }
        }
        let length = if early && finished.len() == runs.len() {
            longest
        } else {
            quantum
        };
        for &(id, used) in &finished {
            let end = if early { now + used } else { now + quantum };
            tree.remove(id);
            remaining.remove(&id);
            if let Some(job) = by_id.get(&id) {
                outcomes.insert(
                    id,
                    Outcome {
                        id,
                        submit: job.submit,
                        start: started.get(&id).copied().unwrap_or(now),
                        end,
                        processors: job.processors,
                        run: job.run,
                    },
                );
            }
        }
        slot += 1;
        if early {
            now += length;
        }
    }
    let span = measured_span(window_start, window_end, &outcomes);
    Ok(DqtRun {
        outcomes: jobs.iter().filter_map(|j| outcomes.remove(&j.id)).collect(),
        utilization: if span > 0.0 {
            busy_processor_seconds / (f64::from(machine) * span)
        } else {
            0.0
        },
        max_tqlb,
        slots: counted_slots,
    })
}
