//! `ninf sim`: runs the scheduling simulator (`ninf-sim`) over a workload for each policy and
//! load asked, over several seeds, and reports the means with 95% confidence intervals.

use std::time::Instant;

pub use ninf_sim::hetero::LoadBasis;
pub use ninf_sim::workload::RunTimes;

use anyhow::Context;
use ninf_sim::swf;
use ninf_sim::{Job, Metrics, simulate};
use serde::Serialize;

/// Workloads by name.
pub enum Workload {
    /// The FPMPFS paper's: 8 PEs (the Cenju-3), 500 jobs, demand uniform 1..8, mean run 32 s.
    Cenju3,
    /// The gang thesis's DQT workload: 128 processors, power-of-two sizes ∝ 1/size, run times
    /// uniform 500..19,999 units, arrivals over 10^6 units.
    Dqt,
    /// The migration paper's heterogeneous workload: 512 fast + 512 slow resources, 100,000 jobs, (a)
    /// mostly small or (b) mostly large power-of-two sizes.
    Hetero(ninf_sim::hetero::SizeMix),
    /// The Lublin-Feitelson model: 128 processors, 10,000 jobs, arrivals scaled to the load.
    Lublin,
    Swf(std::path::PathBuf),
}

/// The gang thesis's simulated time (units of one slot).
const DQT_HORIZON: f64 = 1e6;

const AVAILABLE: &str = "cenju3, dqt, hetero-a, hetero-b, hetero-b-even, lublin, swf:PATH";

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Workload, String> {
        match s {
            "cenju3" | "seed001" => Ok(Workload::Cenju3),
            "dqt" | "seed000" => Ok(Workload::Dqt),
            "hetero-a" => Ok(Workload::Hetero(ninf_sim::hetero::SizeMix::Small)),
            "hetero-b" => Ok(Workload::Hetero(ninf_sim::hetero::SizeMix::Large)),
            "hetero-b-even" => Ok(Workload::Hetero(ninf_sim::hetero::SizeMix::LargeEven)),
            "lublin" => Ok(Workload::Lublin),
            other => match other.strip_prefix("swf:") {
                Some(path) => Ok(Workload::Swf(path.into())),
                None => Err(format!(
                    "unknown workload `{other}` (available: {AVAILABLE})"
                )),
            },
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimOptions {
    pub policies: Vec<String>,
    pub loads: Vec<f64>,
    pub seed: u64,
    pub seeds: u64,
    pub wait_limit: f64,
    /// Processors of the machine (default: the workload's).
    pub processors: Option<u32>,
    pub jobs: Option<usize>,
    /// Gang and DQT time-sharing: slot length (seconds; default 1 for the `dqt` workload,
    /// whose times are in slots, and 0.1 otherwise).
    pub quantum: Option<f64>,
    /// Gang: rows of the time table.
    pub rows: usize,
    /// DQT: children per tree node.
    pub width: u32,
    /// MCT policies: the migration cost the scheduler predicts, seconds per GB (the actual
    /// cost is the migration paper's measured model, about 24.7 s/GB).
    pub migration_cost: f64,
    /// Hetero workloads: whether `loads` are loads of the fast pool or of both pools.
    pub load_basis: ninf_sim::hetero::LoadBasis,
    /// The cenju3 workload: how run times are drawn.
    pub run_times: RunTimes,
}

/// Means over the seeds of one (policy, load).
#[derive(Debug, Clone, Serialize)]
pub struct SimResult {
    pub workload: String,
    pub policy: String,
    /// Offered load for generated workloads; absent for SWF files.
    pub load: Option<f64>,
    pub processors: u32,
    pub seeds: u64,
    pub jobs: usize,
    pub utilization: f64,
    pub utilization_ci95: f64,
    pub mean_response_s: f64,
    pub mean_response_ci95: f64,
    pub mean_wait_s: f64,
    /// 95th percentiles over the jobs (averaged over seeds).
    pub p95_response_s: f64,
    pub p95_wait_s: f64,
    pub mean_bounded_slowdown: f64,
    pub mean_turnaround_s: f64,
    /// Wall-clock seconds the simulations took (all seeds).
    pub sim_wall_s: f64,
    /// Generated workloads: the work offered over processors × arrival span, as measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_factor: Option<f64>,
    /// DQT policies: the largest total queue length of a branch seen (over all seeds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tqlb: Option<usize>,
    /// DQT policies: each seed's largest, averaged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tqlb_mean: Option<f64>,
    /// Heterogeneous policies: the mean turnaround broken down as in the migration paper's Fig. 8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<HeteroSummary>,
    /// The cenju3 workload: the run-time distribution and its coefficient of variation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_times: Option<RunTimes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_time_cv: Option<f64>,
}

/// The migration paper's breakdown of turnaround (means over jobs and seeds).
#[derive(Debug, Clone, Serialize)]
pub struct HeteroSummary {
    pub run_s: f64,
    pub migration_s: f64,
    /// Waiting while some kind had enough idle resources ("wait A").
    pub wait_idle_present_s: f64,
    /// Waiting while none had ("wait B").
    pub wait_no_resources_s: f64,
    /// Jobs that migrated at least once, per seed.
    pub migrated_jobs: f64,
    /// Share of busy resource-time on the fast kind.
    pub fast_share: f64,
    /// Mean turnaround over MCT's on the same jobs (when `mct` is among the policies run).
    pub normalized_turnaround: Option<f64>,
}

/// One simulation's measures.
struct Run {
    metrics: Metrics,
    max_tqlb: Option<usize>,
    hetero: Option<ninf_sim::HeteroRun>,
}

/// A DQT policy name: `dqt-ALLOCATION` or `fair-dqt-ALLOCATION`.
fn dqt_policy(name: &str) -> Option<Result<(ninf_gang::Allocation, bool), String>> {
    let (fair, allocation) = match name.strip_prefix("fair-dqt-") {
        Some(rest) => (true, rest),
        None => (false, name.strip_prefix("dqt-")?),
    };
    Some(allocation.parse().map(|a| (a, fair)))
}

fn simulate_one(
    policy: &str,
    jobs: &[Job],
    processors: u32,
    quantum: f64,
    options: &SimOptions,
) -> anyhow::Result<Run> {
    if let Some(parsed) = dqt_policy(policy) {
        let (allocation, fair) = parsed.map_err(|e| anyhow::anyhow!(e))?;
        let config =
            ninf_gang::DqtConfig::for_processors(processors, options.width, allocation, fair)?;
        let run = ninf_sim::simulate_dqt(jobs, config, quantum)?;
        let mut metrics = Metrics::of(&run.outcomes, processors);
        metrics.utilization = run.utilization;
        return Ok(Run {
            metrics,
            max_tqlb: Some(run.max_tqlb),
            hetero: None,
        });
    }
    if policy.parse::<ninf_sim::HeteroPolicy>().is_ok() {
        anyhow::bail!(
            "policy `{policy}` schedules a heterogeneous machine; use --workload hetero-a or hetero-b"
        );
    }
    let outcomes = if policy == "gang" {
        let mut config = ninf_gang::GangConfig::new(processors);
        config.quantum = quantum;
        config.max_rows = options.rows.max(1);
        config.wait_limit = options.wait_limit;
        ninf_sim::simulate_gang(jobs, config)?
    } else {
        let mut chosen = ninf_sim::policy_by_name(policy, processors, options.wait_limit)
            .map_err(|e| anyhow::anyhow!(e))?;
        simulate(jobs, processors, chosen.as_mut())?
    };
    Ok(Run {
        metrics: Metrics::of(&outcomes, processors),
        max_tqlb: None,
        hetero: None,
    })
}

/// The migration paper's machine: half the processors fast, half slow.
fn hetero_machine(processors: u32, migration_cost: f64) -> anyhow::Result<ninf_sim::HeteroMachine> {
    use ninf_sim::hetero::MigrationModel;
    let actual = MigrationModel::seed002();
    if !(migration_cost.is_finite() && migration_cost >= actual.seconds_per_gb() - 0.5) {
        anyhow::bail!(
            "--migration-cost {migration_cost} s/GB is below the actual {:.1} s/GB; the model predicts the worst case, so it may only over-estimate",
            actual.seconds_per_gb()
        );
    }
    let predicted = actual.scaled_to(migration_cost.max(actual.seconds_per_gb()));
    Ok(ninf_sim::HeteroMachine {
        units: [processors / 2, processors - processors / 2],
        actual,
        predicted,
    })
}

fn simulate_hetero_one(
    policy: &str,
    jobs: &[ninf_sim::HeteroJob],
    processors: u32,
    options: &SimOptions,
) -> anyhow::Result<Run> {
    let chosen: ninf_sim::HeteroPolicy = policy
        .parse()
        .map_err(|e: String| anyhow::anyhow!("{e}; the hetero workloads run only these"))?;
    let machine = hetero_machine(processors, options.migration_cost)?;
    let run = ninf_sim::simulate_hetero(jobs, machine, chosen)?;
    let mut metrics = Metrics::of(&run.as_outcomes(), processors);
    metrics.utilization = run.utilization;
    Ok(Run {
        metrics,
        max_tqlb: None,
        hetero: Some(run),
    })
}

/// Mean and the half-width of its 95% confidence interval (normal approximation).
fn mean_ci(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n.max(1.0);
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, 1.96 * (variance / n).sqrt())
}

/// A workload's name, its jobs when they come from a file (generated workloads are drawn per
/// seed and load), and the processors the papers ran it on.
fn workload_setting(workload: &Workload) -> anyhow::Result<(String, Option<Vec<Job>>, u32)> {
    Ok(match workload {
        Workload::Cenju3 => ("cenju3".to_string(), None, 8),
        Workload::Dqt => ("dqt".to_string(), None, 128),
        Workload::Lublin => ("lublin".to_string(), None, 128),
        Workload::Hetero(mix) => (
            match mix {
                ninf_sim::hetero::SizeMix::Small => "hetero-a",
                ninf_sim::hetero::SizeMix::Large => "hetero-b",
                ninf_sim::hetero::SizeMix::LargeEven => "hetero-b-even",
            }
            .to_string(),
            None,
            1024,
        ),
        Workload::Swf(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let parsed =
                swf::parse(&text).map_err(|e| anyhow::anyhow!("{}:{e}", path.display()))?;
            let (jobs, skipped) = parsed.jobs();
            if skipped > 0 {
                tracing::warn!(
                    skipped,
                    "SWF records without run time or processors skipped"
                );
            }
            let widest = jobs.iter().map(|j| j.processors).max().unwrap_or(1);
            let declared = parsed.header.iter().find_map(|h| {
                h.trim()
                    .strip_prefix("MaxProcs:")
                    .and_then(|v| v.trim().parse::<u32>().ok())
            });
            (
                format!("swf:{}", path.display()),
                Some(jobs),
                declared.unwrap_or(widest).max(widest),
            )
        }
    })
}

pub fn run(workload: &Workload, options: &SimOptions) -> anyhow::Result<Vec<SimResult>> {
    let (name, swf_jobs, default_processors) = workload_setting(workload)?;
    let processors = options.processors.unwrap_or(default_processors);
    let loads: Vec<Option<f64>> = if swf_jobs.is_some() {
        vec![None]
    } else {
        options.loads.iter().copied().map(Some).collect()
    };
    let mut results = Vec::new();
    for policy in &options.policies {
        for &load in &loads {
            let started = Instant::now();
            let mut runs: Vec<Metrics> = Vec::new();
            let mut max_tqlb: Option<usize> = None;
            let mut tqlbs: Vec<f64> = Vec::new();
            let mut factors: Vec<f64> = Vec::new();
            let mut hetero_runs: Vec<ninf_sim::HeteroRun> = Vec::new();
            let seeds = if swf_jobs.is_some() {
                1
            } else {
                options.seeds.max(1)
            };
            for k in 0..seeds {
                let seed = options.seed + k;
                let load = load.unwrap_or(0.5);
                if let Workload::Hetero(mix) = workload {
                    let jobs = ninf_sim::hetero::seed002(
                        *mix,
                        options.jobs.unwrap_or(100_000),
                        processors / 2,
                        processors / 2,
                        (load, options.load_basis),
                        seed,
                    );
                    let mut run = simulate_hetero_one(policy, &jobs, processors, options)?;
                    if let Some(h) = run.hetero.take() {
                        hetero_runs.push(h);
                    }
                    runs.push(run.metrics);
                    continue;
                }
                let jobs: Vec<Job> = match (&swf_jobs, workload) {
                    (Some(jobs), _) => jobs.clone(),
                    (None, Workload::Dqt) => {
                        let mut jobs =
                            ninf_sim::workload::seed000(processors, load, DQT_HORIZON, seed);
                        if let Some(n) = options.jobs {
                            jobs.truncate(n);
                        }
                        let span = jobs.last().map_or(DQT_HORIZON, |j| j.submit);
                        factors.push(ninf_sim::workload::workload_factor(&jobs, processors, span));
                        jobs
                    }
                    (None, Workload::Lublin) => ninf_sim::lublin::lublin(
                        processors,
                        options.jobs.unwrap_or(10_000),
                        load,
                        seed,
                    ),
                    (None, _) => ninf_sim::workload::seed001(
                        processors,
                        options.jobs.unwrap_or(500),
                        32.0,
                        options.run_times,
                        load,
                        seed,
                    ),
                };
                let quantum = options.quantum.unwrap_or(match workload {
                    Workload::Dqt => 1.0,
                    _ => 0.1,
                });
                let run = simulate_one(policy, &jobs, processors, quantum, options)?;
                if let Some(m) = run.max_tqlb {
                    max_tqlb = Some(max_tqlb.map_or(m, |x| x.max(m)));
                    tqlbs.push(m as f64);
                }
                runs.push(run.metrics);
            }
            let field = |f: fn(&Metrics) -> f64| mean_ci(&runs.iter().map(f).collect::<Vec<_>>());
            let (utilization, utilization_ci95) = field(|m| m.utilization);
            let (mean_response_s, mean_response_ci95) = field(|m| m.mean_response_s);
            results.push(SimResult {
                workload: name.clone(),
                policy: policy.clone(),
                load,
                processors,
                seeds,
                jobs: runs.first().map_or(0, |m| m.jobs),
                utilization,
                utilization_ci95,
                mean_response_s,
                mean_response_ci95,
                mean_wait_s: field(|m| m.mean_wait_s).0,
                p95_response_s: field(|m| m.p95_response_s).0,
                p95_wait_s: field(|m| m.p95_wait_s).0,
                mean_bounded_slowdown: field(|m| m.mean_bounded_slowdown).0,
                mean_turnaround_s: field(|m| m.mean_turnaround_s).0,
                sim_wall_s: started.elapsed().as_secs_f64(),
                workload_factor: (!factors.is_empty())
                    .then(|| factors.iter().sum::<f64>() / factors.len() as f64),
                max_tqlb,
                max_tqlb_mean: (!tqlbs.is_empty())
                    .then(|| tqlbs.iter().sum::<f64>() / tqlbs.len() as f64),
                breakdown: summarise_hetero(&hetero_runs),
                run_times: matches!(workload, Workload::Cenju3).then_some(options.run_times),
                run_time_cv: matches!(workload, Workload::Cenju3).then(|| options.run_times.cv()),
            });
        }
    }
    normalise_to_mct(&mut results);
    Ok(results)
}

fn summarise_hetero(runs: &[ninf_sim::HeteroRun]) -> Option<HeteroSummary> {
    if runs.is_empty() {
        return None;
    }
    let n = runs.len() as f64;
    let mean = |f: fn(&ninf_sim::HeteroRun) -> f64| runs.iter().map(f).sum::<f64>() / n;
    Some(HeteroSummary {
        run_s: mean(|r| r.mean.run),
        migration_s: mean(|r| r.mean.migration),
        wait_idle_present_s: mean(|r| r.mean.wait_idle_present),
        wait_no_resources_s: mean(|r| r.mean.wait_no_resources),
        migrated_jobs: mean(|r| r.migrated_jobs as f64),
        fast_share: mean(|r| r.fast_share),
        normalized_turnaround: None,
    })
}

/// The migration paper reports turnaround relative to MCT's on the same workload and load.
fn normalise_to_mct(results: &mut [SimResult]) {
    let baselines: Vec<(String, Option<f64>, f64)> = results
        .iter()
        .filter(|r| r.policy == "mct")
        .map(|r| (r.workload.clone(), r.load, r.mean_turnaround_s))
        .collect();
    for r in results.iter_mut() {
        let base = baselines
            .iter()
            .find(|(w, l, _)| *w == r.workload && *l == r.load)
            .map(|b| b.2);
        if let (Some(summary), Some(base)) = (r.breakdown.as_mut(), base)
            && base > 0.0
        {
            summary.normalized_turnaround = Some(r.mean_turnaround_s / base);
        }
    }
}

/// Writes `utilization.svg` and `response.svg` into `dir`: one line per policy against load.
pub fn plot(
    results: &[SimResult],
    dir: &std::path::Path,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use ninf_sim::plot::{Chart, Series};
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut policies: Vec<&str> = Vec::new();
    for r in results {
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    let workload = results.first().map_or("", |r| r.workload.as_str());
    let series = |value: fn(&SimResult) -> f64| {
        policies
            .iter()
            .map(|p| Series {
                name: p.to_string(),
                points: results
                    .iter()
                    .filter(|r| r.policy == *p)
                    .filter_map(|r| r.load.map(|l| (l, value(r))))
                    .collect(),
            })
            .collect()
    };
    let charts = [
        (
            "utilization.svg",
            Chart {
                title: format!("Utilisation vs load ({workload})"),
                x_label: "offered load".into(),
                y_label: "utilisation (%)".into(),
                series: series(|r| r.utilization * 100.0),
            },
        ),
        (
            "response.svg",
            Chart {
                title: format!("Mean response time vs load ({workload})"),
                x_label: "offered load".into(),
                y_label: "mean response time (s)".into(),
                series: series(|r| r.mean_response_s),
            },
        ),
    ];
    let mut written = Vec::new();
    // The migration paper's Fig. 8 style: turnaround normalised to MCT's, broken down, one bar per policy.
    let mut cases: Vec<(String, Option<f64>)> = Vec::new();
    for r in results.iter().filter(|r| r.breakdown.is_some()) {
        if !cases.contains(&(r.workload.clone(), r.load)) {
            cases.push((r.workload.clone(), r.load));
        }
    }
    for (workload, load) in cases {
        let group: Vec<&SimResult> = results
            .iter()
            .filter(|r| r.workload == workload && r.load == load)
            .collect();
        let Some(base) = group
            .iter()
            .find(|r| r.policy == "mct")
            .map(|r| r.mean_turnaround_s)
            .filter(|t| *t > 0.0)
        else {
            continue;
        };
        let bars = group
            .iter()
            .filter_map(|r| {
                r.breakdown.as_ref().map(|b| {
                    (
                        r.policy.to_uppercase(),
                        [
                            b.run_s,
                            b.migration_s,
                            b.wait_idle_present_s,
                            b.wait_no_resources_s,
                        ]
                        .iter()
                        .map(|v| v / base)
                        .collect(),
                    )
                })
            })
            .collect();
        let chart = ninf_sim::plot::BarChart {
            title: format!(
                "Turnaround normalised to MCT ({workload}, load {})",
                load.map_or("-".to_string(), |l| l.to_string())
            ),
            y_label: "turnaround / MCT's".into(),
            parts: vec![
                "run".into(),
                "migration".into(),
                "wait, idle present".into(),
                "wait, none free".into(),
            ],
            bars,
        };
        let path = dir.join(format!(
            "turnaround-{workload}-load{}.svg",
            load.map_or("-".to_string(), |l| l.to_string())
        ));
        std::fs::write(&path, chart.svg())
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    for (name, chart) in charts {
        let path = dir.join(name);
        std::fs::write(&path, chart.svg())
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
