//! Scheduling on a heterogeneous machine with migration (the migration paper): a pool of fast
//! (accelerated) resources and a pool of slow ones; a job needs R units of one kind at a time
//! and runs X times faster on the fast kind. Jobs are placed online, at arrival, on plans of
//! each pool's future use, by one of four policies:
//!
//! - **MCT**: the kind that completes the job first, starting no earlier than the jobs already
//!   placed on that kind (first come, first served per kind).
//! - **MCTB**: MCT with backfilling: the job may take any hole in a kind's plan that it fits
//!   without moving anyone (so no one is delayed).
//! - **MCTM**: MCT with migration: a job whose MCT start is later may first run on the other
//!   kind's resources that are idle now, then checkpoint and restart on its MCT kind.
//! - **MCTBM** (the seed's proposal): preemptive backfilling across idle regions of either
//!   kind in time order, preferring faster regions, paying a checkpoint and a restart for each
//!   region, then the rest of the job on the kind MCT picks; kept only if it ends sooner.
//!
//! Migration costs follow the seed's model, checkpoint C = αC·M + βC on the kind left and
//! restart R = αR·M + βR + K on the kind entered, for the job's maximum memory M. Plans are made
//! with the predicted model (which may over-estimate) and executed with the actual one; run
//! times are known exactly, as the seed assumes, so a plan made at arrival is what happens.

use serde::Serialize;

use crate::engine::{Outcome, SimError};
use crate::random::{Random, WeightedSizes};

/// The two kinds of resource.
pub const FAST: usize = 0;
pub const SLOW: usize = 1;
const KINDS: [usize; 2] = [FAST, SLOW];

/// A job of the heterogeneous workload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HeteroJob {
    pub id: u64,
    pub submit: f64,
    /// Resources it needs (of one kind at a time).
    pub resources: u32,
    /// Run time on the slow kind, seconds.
    pub slow_run: f64,
    /// How many times faster it runs on the fast kind (≥ 1).
    pub acceleration: f64,
    /// Its maximum memory, all resources together, in MB.
    pub memory_mb: f64,
}

impl HeteroJob {
    /// Run time on `kind`.
    pub fn run_on(&self, kind: usize) -> f64 {
        if kind == FAST {
            self.slow_run / self.acceleration
        } else {
            self.slow_run
        }
    }
}

/// One kind's linear cost constants (the migration paper, Table 3): seconds per MB and seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostConstants {
    pub checkpoint_per_mb: f64,
    pub checkpoint_fixed: f64,
    pub restart_per_mb: f64,
    pub restart_fixed: f64,
}

/// The migration cost model, per kind (index [`FAST`], [`SLOW`]), plus the per-program
/// kernel compilation time K paid on every restart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MigrationModel {
    pub kinds: [CostConstants; 2],
    pub kernel_compile: f64,
}

impl MigrationModel {
    /// The migration paper's measured constants: the GPU for the fast kind, the CPU for the slow one.
    /// Checkpoint and restart together cost about 24.7 s per GB.
    pub fn seed002() -> MigrationModel {
        MigrationModel {
            kinds: [
                CostConstants {
                    checkpoint_per_mb: 1.4e-2,
                    checkpoint_fixed: 0.85,
                    restart_per_mb: 9.6e-3,
                    restart_fixed: 0.89,
                },
                CostConstants {
                    checkpoint_per_mb: 1.5e-2,
                    checkpoint_fixed: 0.92,
                    restart_per_mb: 9.7e-3,
                    restart_fixed: 0.18,
                },
            ],
            kernel_compile: 0.0,
        }
    }

    /// Checkpoint and restart per GB, averaged over the two kinds.
    pub fn seconds_per_gb(&self) -> f64 {
        self.kinds
            .iter()
            .map(|k| (k.checkpoint_per_mb + k.restart_per_mb) * 1024.0)
            .sum::<f64>()
            / 2.0
    }

    /// The same model with its per-MB terms scaled so that it costs `per_gb` seconds per GB.
    pub fn scaled_to(&self, per_gb: f64) -> MigrationModel {
        let mut scaled = *self;
        let current = self.seconds_per_gb();
        if !(current > 0.0 && per_gb.is_finite()) {
            return scaled;
        }
        let factor = per_gb / current;
        for k in &mut scaled.kinds {
            k.checkpoint_per_mb *= factor;
            k.restart_per_mb *= factor;
        }
        scaled
    }

    pub fn checkpoint(&self, kind: usize, memory_mb: f64) -> f64 {
        let k = &self.kinds[kind];
        k.checkpoint_per_mb * memory_mb + k.checkpoint_fixed
    }

    pub fn restart(&self, kind: usize, memory_mb: f64) -> f64 {
        let k = &self.kinds[kind];
        k.restart_per_mb * memory_mb + k.restart_fixed + self.kernel_compile
    }
}

/// The four policies of the migration paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HeteroPolicy {
    Mct,
    Mctb,
    Mctm,
    Mctbm,
}

impl HeteroPolicy {
    pub const ALL: [HeteroPolicy; 4] = [
        HeteroPolicy::Mct,
        HeteroPolicy::Mctb,
        HeteroPolicy::Mctm,
        HeteroPolicy::Mctbm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HeteroPolicy::Mct => "mct",
            HeteroPolicy::Mctb => "mctb",
            HeteroPolicy::Mctm => "mctm",
            HeteroPolicy::Mctbm => "mctbm",
        }
    }

    fn backfills(self) -> bool {
        matches!(self, HeteroPolicy::Mctb | HeteroPolicy::Mctbm)
    }
}

impl std::str::FromStr for HeteroPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<HeteroPolicy, String> {
        HeteroPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown heterogeneous policy `{s}` (mct, mctb, mctm, mctbm)"))
    }
}

/// The machine and the cost models.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HeteroMachine {
    /// Units of each kind ([`FAST`], [`SLOW`]).
    pub units: [u32; 2],
    /// What migrations really cost.
    pub actual: MigrationModel,
    /// What the scheduler plans with (at least `actual`: the seed's worst-case estimate).
    pub predicted: MigrationModel,
}

/// Where a job ran: `resources` units of `kind` from `start` to `end`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Piece {
    pub kind: usize,
    pub start: f64,
    pub end: f64,
}

/// A job's turnaround, broken down as in the migration paper's Fig. 8.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Breakdown {
    /// Computing.
    pub run: f64,
    /// Checkpointing and restarting.
    pub migration: f64,
    /// Waiting while some kind had enough idle resources for the job ("wait A").
    pub wait_idle_present: f64,
    /// Waiting while no kind had enough idle resources ("wait B").
    pub wait_no_resources: f64,
}

/// One job's schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeteroOutcome {
    pub id: u64,
    pub submit: f64,
    pub resources: u32,
    pub pieces: Vec<Piece>,
    pub breakdown: Breakdown,
}

impl HeteroOutcome {
    pub fn end(&self) -> f64 {
        self.pieces.last().map_or(self.submit, |p| p.end)
    }

    pub fn turnaround(&self) -> f64 {
        self.end() - self.submit
    }

    pub fn migrations(&self) -> usize {
        self.pieces.len().saturating_sub(1)
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct HeteroRun {
    pub outcomes: Vec<HeteroOutcome>,
    /// Busy unit-seconds (computing and migrating) over all units × (last end − first submit).
    pub utilization: f64,
    /// Means over the jobs.
    pub mean: Breakdown,
    pub mean_turnaround_s: f64,
    /// Jobs that ran in more than one piece, and pieces on the fast kind's share of work.
    pub migrated_jobs: usize,
    pub fast_share: f64,
}

impl HeteroRun {
    /// As space-sharing outcomes (start of the first piece, end of the last, run = compute
    /// time), for the common metrics.
    pub fn as_outcomes(&self) -> Vec<Outcome> {
        self.outcomes
            .iter()
            .map(|o| Outcome {
                id: o.id,
                submit: o.submit,
                start: o.pieces.first().map_or(o.submit, |p| p.start),
                end: o.end(),
                processors: o.resources,
                run: o.breakdown.run,
            })
            .collect()
    }
}

/// Where a reservation from `start` for `duration` ends: at least the next representable
/// time, so nothing is ever reserved for no time at all.
fn span_end(start: f64, duration: f64) -> f64 {
    (start + duration).max(start.next_up())
}

/// One pool's plan: units in use from each step's time until the next step's (the last step
/// lasts forever and is always 0 once every plan has ended).
#[derive(Debug, Clone)]
pub struct Timeline {
    capacity: u32,
    steps: Vec<(f64, u32)>,
}

impl Timeline {
    pub fn new(capacity: u32) -> Timeline {
        Timeline {
            capacity,
            steps: vec![(0.0, 0)],
        }
    }

    /// Forgets the plan before `now` (arrivals come in time order, so it is never needed).
    pub fn forget_before(&mut self, now: f64) {
        let keep = self.steps.partition_point(|&(t, _)| t <= now);
        if keep > 1 {
            self.steps.drain(..keep - 1);
        }
        if let Some(first) = self.steps.first_mut()
            && first.0 < now
        {
            first.0 = now;
        }
    }

    fn index_at(&self, t: f64) -> usize {
        self.steps
            .partition_point(|&(s, _)| s <= t)
            .saturating_sub(1)
    }

    fn step_end(&self, i: usize) -> f64 {
        self.steps.get(i + 1).map_or(f64::INFINITY, |s| s.0)
    }

    /// The earliest time from `not_before` at which `units` stay free for `duration`.
    pub fn earliest_fit(&self, units: u32, duration: f64, not_before: f64) -> f64 {
        let limit = self.capacity.saturating_sub(units);
        let mut candidate = not_before;
        for i in self.index_at(not_before)..self.steps.len() {
            let end = self.step_end(i);
            if self.steps[i].1 > limit {
                candidate = end;
            } else if end >= span_end(candidate, duration) {
                return candidate;
            }
        }
        candidate
    }

    /// Maximal intervals within [`from`, `until`) where at least `units` are free.
    pub fn regions(&self, units: u32, from: f64, until: f64) -> Vec<(f64, f64)> {
        let limit = self.capacity.saturating_sub(units);
        let mut regions: Vec<(f64, f64)> = Vec::new();
        let mut open: Option<f64> = None;
        for i in self.index_at(from)..self.steps.len() {
            let start = self.steps[i].0.max(from);
            if start >= until {
                break;
            }
            if self.steps[i].1 <= limit {
                open.get_or_insert(start);
            } else if let Some(s) = open.take() {
                regions.push((s, start));
            }
        }
        if let Some(s) = open {
            regions.push((s, until));
        }
        regions
    }

    /// Units free at `t`.
    pub fn free_at(&self, t: f64) -> u32 {
        self.capacity.saturating_sub(self.steps[self.index_at(t)].1)
    }

    fn split(&mut self, t: f64) -> usize {
        let i = self.steps.partition_point(|&(s, _)| s < t);
        if self.steps.get(i).is_some_and(|s| s.0 == t) {
            return i;
        }
        let used = if i == 0 { 0 } else { self.steps[i - 1].1 };
        self.steps.insert(i, (t, used));
        i
    }

    /// Takes `units` from `start` to `end`. False (and nothing taken) if they are not free.
    pub fn reserve(&mut self, start: f64, end: f64, units: u32) -> bool {
        let first = self.index_at(start);
        let limit = self.capacity.saturating_sub(units);
        let mut i = first;
        while i < self.steps.len() && self.steps[i].0 < end {
            if self.steps[i].1 > limit && self.step_end(i) > start {
                return false;
            }
            i += 1;
        }
        let a = self.split(start);
        let b = self.split(end);
        for step in &mut self.steps[a..b] {
            step.1 += units;
        }
        true
    }
}

/// A plan for one job before it is committed: pieces with the work done in each (a fraction
/// of the job).
#[derive(Debug, Clone)]
struct Plan {
    pieces: Vec<Piece>,
    end: f64,
}

/// The scheduler's state: both pools' plans and the last start placed on each (for MCT's
/// first come, first served order per kind).
struct Scheduler {
    machine: HeteroMachine,
    policy: HeteroPolicy,
    pools: [Timeline; 2],
    last_start: [f64; 2],
}

impl Scheduler {
    /// The earliest placement of `duration` on `kind` from `from` under the policy's order.
    fn fit(&self, kind: usize, units: u32, duration: f64, from: f64) -> f64 {
        let not_before = if self.policy.backfills() {
            from
        } else {
            from.max(self.last_start[kind])
        };
        self.pools[kind].earliest_fit(units, duration, not_before)
    }

    /// MCT: the kind finishing `fraction` of the job soonest from `from` (`restart`: the job
    /// resumes from a checkpoint and pays the predicted restart cost first).
    fn best(&self, job: &HeteroJob, fraction: f64, from: f64, restart: bool) -> (usize, f64, f64) {
        let mut best = (FAST, f64::INFINITY, 0.0);
        for kind in KINDS {
            if self.machine.units[kind] < job.resources {
                continue;
            }
            let cost = if restart {
                self.machine.predicted.restart(kind, job.memory_mb)
            } else {
                0.0
            };
            let duration = cost + fraction * job.run_on(kind);
            let start = self.fit(kind, job.resources, duration, from);
            if start + duration < best.1 {
                best = (kind, start + duration, start);
            }
        }
        best
    }

    /// Idle regions usable before `horizon`, in the order the migration paper's step 2 takes them:
    /// earliest start first; a region on a slower kind is cut where a faster kind's region
    /// begins inside it.
    fn regions(
        &self,
        job: &HeteroJob,
        from: f64,
        horizon: f64,
        kinds: &[usize],
    ) -> Vec<(usize, f64, f64)> {
        let mut all: Vec<(usize, f64, f64)> = Vec::new();
        for &kind in kinds {
            if self.machine.units[kind] < job.resources {
                continue;
            }
            for (s, e) in self.pools[kind].regions(job.resources, from, horizon) {
                all.push((kind, s, e));
            }
        }
        let fast_starts: Vec<f64> = all.iter().filter(|r| r.0 == FAST).map(|r| r.1).collect();
        for region in all.iter_mut().filter(|r| r.0 == SLOW) {
            if let Some(&cut) = fast_starts
                .iter()
                .filter(|&&t| t > region.1 && t < region.2)
                .min_by(|a, b| a.total_cmp(b))
            {
                region.2 = cut;
            }
        }
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        all
    }

    /// The plan for `job` arriving now (its submit time).
    fn plan(&self, job: &HeteroJob) -> Plan {
        let now = job.submit;
        let (kind, end, start) = self.best(job, 1.0, now, false);
        let base = Plan {
            pieces: vec![Piece { kind, start, end }],
            end,
        };
        let kinds: Vec<usize> = match self.policy {
            HeteroPolicy::Mct | HeteroPolicy::Mctb => return base,
            // Migration alone: only the other kind's resources idle right now.
            HeteroPolicy::Mctm => KINDS.into_iter().filter(|&k| k != kind).collect(),
            HeteroPolicy::Mctbm => KINDS.to_vec(),
        };
        let predicted = &self.machine.predicted;
        let mut pieces: Vec<Piece> = Vec::new();
        let mut progress = 0.0;
        let mut cursor = now;
        for (rkind, s, e) in self.regions(job, now, start, &kinds) {
            if self.policy == HeteroPolicy::Mctm && (s > now || !pieces.is_empty()) {
                break;
            }
            let s = s.max(cursor);
            let overhead = predicted.checkpoint(rkind, job.memory_mb)
                + predicted.restart(rkind, job.memory_mb);
            if e - s <= overhead {
                continue;
            }
            let gain = (e - s - overhead) / job.run_on(rkind);
            if progress + gain >= 1.0 {
                // The job can finish by backfilling alone: the last region only as long as
                // it needs (the restart is still paid if it is not the first).
                let restart = if pieces.is_empty() {
                    0.0
                } else {
                    predicted.restart(rkind, job.memory_mb)
                };
                let end = s + restart + (1.0 - progress) * job.run_on(rkind);
                pieces.push(Piece {
                    kind: rkind,
                    start: s,
                    end,
                });
                return if end < base.end && self.policy == HeteroPolicy::Mctbm {
                    Plan { pieces, end }
                } else {
                    base
                };
            }
            progress += gain;
            pieces.push(Piece {
                kind: rkind,
                start: s,
                end: e,
            });
            cursor = e;
        }
        if pieces.is_empty() {
            return base;
        }
        // Step 7: the rest where MCT finishes it first, after the last region.
        let (rest_kind, rest_end, rest_start) = self.best(job, 1.0 - progress, cursor, true);
        if rest_end >= base.end {
            return base;
        }
        pieces.push(Piece {
            kind: rest_kind,
            start: rest_start,
            end: rest_end,
        });
        Plan {
            pieces,
            end: rest_end,
        }
    }

    fn overcommit(&self, job: &HeteroJob, piece: &Piece) -> SimError {
        SimError::Overcommit {
            policy: self.policy.name().to_string(),
            id: job.id,
            processors: job.resources,
            free: self.pools[piece.kind].free_at(piece.start),
        }
    }

    /// Executes `plan` with the actual costs (never above the predicted ones, so every piece
    /// fits where it was planned), books it, and returns the pieces actually used.
    fn commit(&mut self, job: &HeteroJob, plan: Plan) -> Result<(Vec<Piece>, f64, f64), SimError> {
        let actual = &self.machine.actual;
        let count = plan.pieces.len();
        let mut done = 0.0;
        let mut run = 0.0;
        let mut migration = 0.0;
        let mut pieces = Vec::with_capacity(count);
        for (i, piece) in plan.pieces.iter().enumerate() {
            let restart = if i > 0 {
                actual.restart(piece.kind, job.memory_mb)
            } else {
                0.0
            };
            let full = job.run_on(piece.kind);
            let mut p = *piece;
            let checkpoint = actual.checkpoint(piece.kind, job.memory_mb);
            let available = (p.end - p.start - restart - checkpoint).max(0.0);
            let last = i + 1 == count || available >= (1.0 - done) * full;
            if last {
                // The last piece, or an earlier one that finishes the job because migrating
                // cost less than planned: it ends as soon as the work is done (never later
                // than planned, since the actual costs are at most the predicted ones).
                let computed = (1.0 - done).max(0.0) * full;
                p.end = span_end(p.start, restart + computed).min(piece.end.max(p.start.next_up()));
                run += computed;
                migration += restart;
            } else {
                done += available / full;
                run += available;
                migration += restart + checkpoint;
            }
            if !self.pools[p.kind].reserve(p.start, p.end, job.resources) {
                return Err(self.overcommit(job, &p));
            }
            self.last_start[p.kind] = self.last_start[p.kind].max(p.start);
            pieces.push(p);
            if last {
                break;
            }
        }
        Ok((pieces, run, migration))
    }
}

/// Runs `jobs` on `machine` under `policy`.
pub fn simulate_hetero(
    jobs: &[HeteroJob],
    machine: HeteroMachine,
    policy: HeteroPolicy,
) -> Result<HeteroRun, SimError> {
    let widest = machine.units[FAST].max(machine.units[SLOW]);
    for job in jobs {
        if job.resources == 0 || job.resources > widest {
            return Err(SimError::TooLarge {
                id: job.id,
                processors: job.resources,
                machine: widest,
            });
        }
        for (what, value, ok, expected) in [
            (
                "submit time",
                job.submit,
                job.submit >= 0.0,
                "a finite non-negative number",
            ),
            (
                "run time",
                job.slow_run,
                job.slow_run > 0.0,
                "a finite positive number",
            ),
            (
                "acceleration",
                job.acceleration,
                job.acceleration >= 1.0,
                "at least 1",
            ),
            (
                "memory",
                job.memory_mb,
                job.memory_mb >= 0.0,
                "a finite non-negative number",
            ),
        ] {
            if !(value.is_finite() && ok) {
                return Err(SimError::BadJob {
                    id: job.id,
                    what,
                    value,
                    expected,
                });
            }
        }
    }
    let mut order: Vec<&HeteroJob> = jobs.iter().collect();
    order.sort_by(|a, b| a.submit.total_cmp(&b.submit).then(a.id.cmp(&b.id)));
    let mut scheduler = Scheduler {
        machine,
        policy,
        pools: [
            Timeline::new(machine.units[FAST]),
            Timeline::new(machine.units[SLOW]),
        ],
        last_start: [0.0; 2],
    };
    let mut history: Vec<(usize, f64, f64, u32)> = Vec::with_capacity(jobs.len() * 2);
    let mut outcomes = Vec::with_capacity(jobs.len());
    for job in order {
        for pool in &mut scheduler.pools {
            pool.forget_before(job.submit);
        }
        let plan = scheduler.plan(job);
        let (pieces, run, migration) = scheduler.commit(job, plan)?;
        for p in &pieces {
            history.push((p.kind, p.start, p.end, job.resources));
        }
        outcomes.push(HeteroOutcome {
            id: job.id,
            submit: job.submit,
            resources: job.resources,
            pieces,
            breakdown: Breakdown {
                run,
                migration,
                ..Breakdown::default()
            },
        });
    }
    split_waits(&mut outcomes, &history, machine.units);
    Ok(summarise(outcomes, &history, machine.units))
}

/// Splits each job's waiting (turnaround less its pieces) into time when some kind had
/// enough idle units for it and time when none had, from the whole run's use of each kind.
fn split_waits(
    outcomes: &mut [HeteroOutcome],
    history: &[(usize, f64, f64, u32)],
    units: [u32; 2],
) {
    // Every change of use on either kind, in time order, with the free units after it.
    let mut events: Vec<(f64, usize, i64)> = Vec::with_capacity(history.len() * 2);
    for &(kind, start, end, n) in history {
        events.push((start, kind, i64::from(n)));
        events.push((end, kind, -i64::from(n)));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut times: Vec<f64> = Vec::new();
    let mut most_free: Vec<u32> = Vec::new();
    let mut used = [0i64; 2];
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            used[events[i].1] += events[i].2;
            i += 1;
        }
        let free = KINDS
            .iter()
            .map(|&k| (i64::from(units[k]) - used[k]).max(0) as u32)
            .max()
            .unwrap_or(0);
        times.push(t);
        most_free.push(free);
    }
    // For each size class a job may need, the running total of time with enough free.
    let mut sizes: Vec<u32> = outcomes.iter().map(|o| o.resources).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let prefix: Vec<Vec<f64>> = sizes
        .iter()
        .map(|&need| {
            let mut acc = vec![0.0; times.len()];
            for k in 1..times.len() {
                let enough = most_free[k - 1] >= need;
                acc[k] = acc[k - 1] + if enough { times[k] - times[k - 1] } else { 0.0 };
            }
            acc
        })
        .collect();
    let idle_time = |class: usize, from: f64, to: f64| -> f64 {
        if to <= from || times.is_empty() {
            return 0.0;
        }
        let at = |t: f64| -> f64 {
            let k = times.partition_point(|&x| x <= t);
            if k == 0 {
                // Before anything ran everything was free.
                return 0.0;
            }
            let base = prefix[class][k - 1];
            let enough = most_free[k - 1] >= sizes[class];
            base + if enough { t - times[k - 1] } else { 0.0 }
        };
        let before_first = (times[0].min(to) - from).max(0.0);
        at(to) - at(from) + before_first
    };
    for o in outcomes.iter_mut() {
        let class = sizes.partition_point(|&s| s < o.resources);
        let mut gaps = Vec::with_capacity(o.pieces.len());
        let mut cursor = o.submit;
        for p in &o.pieces {
            gaps.push((cursor, p.start));
            cursor = p.end;
        }
        let mut idle = 0.0;
        let mut waited = 0.0;
        for (from, to) in gaps {
            waited += (to - from).max(0.0);
            idle += idle_time(class, from, to);
        }
        o.breakdown.wait_idle_present = idle.min(waited);
        o.breakdown.wait_no_resources = (waited - idle).max(0.0);
    }
}

fn summarise(
    outcomes: Vec<HeteroOutcome>,
    history: &[(usize, f64, f64, u32)],
    units: [u32; 2],
) -> HeteroRun {
    let n = outcomes.len().max(1) as f64;
    let first = outcomes
        .iter()
        .map(|o| o.submit)
        .fold(f64::INFINITY, f64::min);
    let last = outcomes.iter().map(HeteroOutcome::end).fold(0.0, f64::max);
    let busy: f64 = history
        .iter()
        .map(|&(_, s, e, n)| (e - s) * f64::from(n))
        .sum();
    let fast: f64 = history
        .iter()
        .filter(|h| h.0 == FAST)
        .map(|&(_, s, e, n)| (e - s) * f64::from(n))
        .sum();
    let mut mean = Breakdown::default();
    for o in &outcomes {
        mean.run += o.breakdown.run / n;
        mean.migration += o.breakdown.migration / n;
        mean.wait_idle_present += o.breakdown.wait_idle_present / n;
        mean.wait_no_resources += o.breakdown.wait_no_resources / n;
    }
    let span = last - first;
    HeteroRun {
        utilization: if span > 0.0 {
            busy / (f64::from(units[FAST] + units[SLOW]) * span)
        } else {
            0.0
        },
        mean,
        mean_turnaround_s: outcomes.iter().map(HeteroOutcome::turnaround).sum::<f64>() / n,
        migrated_jobs: outcomes.iter().filter(|o| o.migrations() > 0).count(),
        fast_share: if busy > 0.0 { fast / busy } else { 0.0 },
        outcomes,
    }
}

/// The migration paper's two size distributions (its Fig. 8): how we chose them is in
/// `docs/experiments.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SizeMix {
    /// (a) mostly small jobs: a power of two 2^k with probability ∝ 4^-k.
    Small,
    /// (b) mostly large jobs: probability ∝ 2^k.
    Large,
    /// (b) read as every size equally likely: 2^k with k uniform over 0..=9, mean 102.
    LargeEven,
}

/// What a workload's load is a load of. The migration paper's equation (7) divides "the system's"
/// processing rate by the work arriving; which resources that counts is not said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LoadBasis {
    /// The fast pool alone: the load if every job ran on fast resources.
    FastPool,
    /// Both pools, of equal size: a slow unit does 1 / acceleration of a fast unit's work
    /// on a job, E[1/X] = ln 10 / 9 = 0.256 on average, so the system is 1.256 fast pools.
    System,
}

impl std::str::FromStr for LoadBasis {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fast" => Ok(LoadBasis::FastPool),
            "system" => Ok(LoadBasis::System),
            other => Err(format!(
                "unknown load basis `{other}` (known: fast, system)"
            )),
        }
    }
}

/// The migration paper's workload (its Table 4): `jobs` jobs needing a power of two up to `widest`
/// resources, run time on a slow resource uniform up to 1,440 minutes, acceleration uniform
/// over 1..10, memory per resource uniform up to 4 GB, Poisson arrivals at `load` of the
/// fast pool, or of both pools (`basis`): mean interval = E[resources] × E[fast run time] /
/// (capacity in fast units × load).
pub fn seed002(
    mix: SizeMix,
    jobs: usize,
    fast_units: u32,
    widest: u32,
    (load, basis): (f64, LoadBasis),
    seed: u64,
) -> Vec<HeteroJob> {
    let mut random = Random::new(seed);
    let sizes = WeightedSizes::powers_of_two(widest, |s| match mix {
        SizeMix::Small => 1.0 / (f64::from(s) * f64::from(s)),
        SizeMix::Large => f64::from(s),
        SizeMix::LargeEven => 1.0,
    });
    let mean_size = sizes.mean();
    let longest = 1440.0 * 60.0;
    let max_acceleration = 10.0f64;
    // E[t / X] for t uniform on (0, longest] and X uniform on [1, 10].
    let mean_inverse_acceleration = max_acceleration.ln() / (max_acceleration - 1.0);
    let mean_fast = longest / 2.0 * mean_inverse_acceleration;
    let capacity = f64::from(fast_units.max(1))
        * match basis {
            LoadBasis::FastPool => 1.0,
            LoadBasis::System => 1.0 + mean_inverse_acceleration,
        };
    let interval = mean_size * mean_fast / (capacity * load.max(1e-6));
    let mut at = 0.0;
    (0..jobs)
        .map(|i| {
            at += random.exponential(interval);
            let resources = sizes.draw(&mut random);
            let slow_run = (1.0 - random.uniform()) * longest;
            let acceleration = 1.0 + random.uniform() * (max_acceleration - 1.0);
            let memory_mb = (1.0 - random.uniform()) * 4096.0 * f64::from(resources);
            HeteroJob {
                id: i as u64 + 1,
                submit: at,
                resources,
                slow_run,
                acceleration,
                memory_mb,
            }
        })
        .collect()
}
