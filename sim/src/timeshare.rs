//! Gang time-sharing in the simulator: the live gang core's `GangScheduler` (time table,
//! alternative scheduling, admission with WaitLimit) on a fake clock. A job makes progress only
//! while its slot runs; it ends when it has run for its run time. Switches cost nothing here,
//! which the live overhead benchmark shows is within about 1-2% at quanta of 10 ms and up.

use std::collections::{BTreeMap, HashMap};

use ninf_gang::{Clock, FakeClock, GangConfig, GangScheduler};

use crate::engine::{Outcome, SimError};
use crate::workload::Job;

/// Remaining work below this counts as done (rounding of slot arithmetic).
const EPSILON: f64 = 1e-9;

/// Runs `jobs` time-shared under `config` (its `processors` is the machine's size).
pub fn simulate_gang(jobs: &[Job], config: GangConfig) -> Result<Vec<Outcome>, SimError> {
    let policy = format!("gang-{:?}", config.policy).to_lowercase();
    for job in jobs {
        if job.processors == 0 || job.processors > config.processors {
            return Err(SimError::TooLarge {
                id: job.id,
                processors: job.processors,
                machine: config.processors,
            });
        }
        crate::engine::check_times(job)?;
    }
    let mut order: Vec<&Job> = jobs.iter().collect();
    order.sort_by(|a, b| a.submit.total_cmp(&b.submit).then(a.id.cmp(&b.id)));
    let clock = FakeClock::new(order.first().map_or(0.0, |j| j.submit));
    let mut gang = GangScheduler::new(config, &clock);
    let by_id: HashMap<u64, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut remaining: BTreeMap<u64, f64> = BTreeMap::new();
    let mut started: HashMap<u64, f64> = HashMap::new();
    let mut outcomes: HashMap<u64, Outcome> = HashMap::new();
    let mut next = 0;
    let mut now = clock.now();
    loop {
        // Jobs that arrived by now enter the queue (or the table).
        while next < order.len() && order[next].submit <= now {
            let job = order[next];
            gang.submit(job.id, job.processors)
                .map_err(|_| SimError::NotWaiting {
                    policy: policy.clone(),
                    id: job.id,
                })?;
            remaining.insert(job.id, job.run);
            next += 1;
        }
        gang.tick();
        for &id in gang.running() {
            started.entry(id).or_insert(now);
        }
        // Zero-length jobs end as soon as they run.
        let finished: Vec<u64> = gang
            .running()
            .iter()
            .copied()
            .filter(|id| remaining.get(id).is_some_and(|r| *r <= EPSILON))
            .collect();
        if !finished.is_empty() {
            for id in finished {
                end_job(
                    &mut gang,
                    &mut remaining,
                    &started,
                    &mut outcomes,
                    &by_id,
                    id,
                    now,
                );
            }
            continue;
        }
        if next == order.len() && remaining.is_empty() {
            break;
        }
        // The next event: an arrival, the slot's end, or a running job's completion.
        let arrival = order.get(next).map_or(f64::INFINITY, |j| j.submit);
        let completion = gang
            .running()
            .iter()
            .filter_map(|id| remaining.get(id))
            .fold(f64::INFINITY, |m, r| m.min(now + r));
        let boundary = if gang.running().is_empty() {
            f64::INFINITY
        } else {
            gang.next_boundary()
        };
        let t = arrival.min(completion).min(boundary);
        if !t.is_finite() {
            return Err(SimError::Stuck {
                policy,
                waiting: remaining.len(),
            });
        }
        let elapsed = (t - now).max(0.0);
        for id in gang.running().clone() {
            if let Some(r) = remaining.get_mut(&id) {
                *r -= elapsed;
            }
        }
        now = t;
        clock.set(now);
        let done: Vec<u64> = gang
            .running()
            .iter()
            .copied()
            .filter(|id| remaining.get(id).is_some_and(|r| *r <= EPSILON))
            .collect();
        for id in done {
            end_job(
                &mut gang,
                &mut remaining,
                &started,
                &mut outcomes,
                &by_id,
                id,
                now,
            );
        }
    }
    Ok(jobs.iter().filter_map(|j| outcomes.remove(&j.id)).collect())
}

fn end_job(
    gang: &mut GangScheduler<&FakeClock>,
    remaining: &mut BTreeMap<u64, f64>,
    started: &HashMap<u64, f64>,
    outcomes: &mut HashMap<u64, Outcome>,
    by_id: &HashMap<u64, &Job>,
    id: u64,
    now: f64,
) {
    remaining.remove(&id);
    gang.finish(id);
    if let Some(job) = by_id.get(&id) {
        outcomes.insert(
            id,
            Outcome {
                id,
                submit: job.submit,
                start: started.get(&id).copied().unwrap_or(now),
                end: now,
                processors: job.processors,
                run: job.run,
            },
        );
    }
}
