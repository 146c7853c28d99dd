//! `ninf alloc`: allocation queues, which start compute servers as batch jobs (docs/slurm.md).
//! `add slurm` sends the queue's settings to the metaserver, which refuses them with sbatch's
//! own message if a dry run of its job script fails; `list`, `pause`, `resume` and `remove`
//! (which cancels the queue's jobs) act on the queues the metaserver keeps.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use ninf_grid::embedded::Endpoints;
use ninf_proto::net::auth::AttachToken;
use ninf_proto::v1;
use serde_json::json;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

#[derive(Args)]
pub struct AllocArgs {
    /// The grid's data directory (its `grid.toml`); default as `ninf status`.
    #[arg(long, global = true, conflicts_with = "grid")]
    pub data_dir: Option<PathBuf>,
    /// The grid file of the grid (as `ninf up` writes it); its servers read it too.
    #[arg(long, global = true, value_name = "FILE")]
    pub grid: Option<PathBuf>,
    #[command(subcommand)]
    pub command: AllocCommand,
}

#[derive(Subcommand)]
pub enum AllocCommand {
    /// Add an allocation queue (a dry-run submission first).
    Add {
        #[command(subcommand)]
        manager: Manager,
    },
    /// The queues, their jobs and their servers.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Cancel a queue's jobs and forget it.
    Remove { name: String },
    /// Stop a queue submitting jobs.
    Pause { name: String },
    /// Let a paused queue submit again, its failures forgotten.
    Resume { name: String },
}

#[derive(Subcommand)]
pub enum Manager {
    /// Servers as Slurm jobs (`sbatch`); arguments after `--` go to sbatch as they are.
    Slurm(SlurmArgs),
}

#[derive(Args)]
pub struct SlurmArgs {
    /// The queue's name (letters, digits, `-`, `_`).
    #[arg(long, default_value = "slurm")]
    pub name: String,
    /// Each job's time limit (sbatch --time).
    #[arg(long, value_name = "MINUTES", default_value_t = 60)]
    pub time_limit: u32,
    /// Servers each job starts (one per task).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub servers_per_job: u32,
    /// Servers the queue keeps at most, pending jobs' included.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub max_servers: u32,
    /// Jobs kept pending while work waits for servers.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub backlog: u32,
    /// Seconds a job's servers may sit idle before it is cancelled (0: never).
    #[arg(long, value_name = "SECONDS", default_value_t = 300.0)]
    pub idle_timeout: f64,
    /// sbatch's own options, e.g. `-- --partition=debug --cpus-per-task=2`.
    #[arg(last = true, value_name = "SBATCH ARGS")]
    pub batch_args: Vec<String>,
}

type AllocationClient =
    v1::allocation_client::AllocationClient<InterceptedService<Channel, AttachToken>>;

pub fn run(args: AllocArgs) -> anyhow::Result<()> {
    let (endpoints, grid_file) = match &args.grid {
        Some(file) => (Endpoints::read_file(file)?, std::path::absolute(file)?),
        None => {
            let dir = args
                .data_dir
                .clone()
                .unwrap_or_else(ninf_grid::default_data_dir);
            (
                Endpoints::read(&dir)?,
                std::path::absolute(Endpoints::file(&dir))?,
            )
        }
    };
    super::runtime()?.block_on(async move {
        let mut client = connect(&endpoints).await?;
        let answer = |status: tonic::Status| anyhow::anyhow!("{}", status.message());
        match args.command {
            AllocCommand::Add {
                manager: Manager::Slurm(slurm),
            } => {
                let spec = slurm.spec(&grid_file);
                let queue = client.add_queue(spec).await.map_err(answer)?.into_inner();
                println!(
                    "queue {} added: sbatch accepted a dry run of its job script",
                    queue.spec.map(|s| s.name).unwrap_or_default()
                );
            }
            AllocCommand::List { json } => {
                let queues = client
                    .list_queues(v1::ListQueuesRequest {})
                    .await
                    .map_err(answer)?
                    .into_inner()
                    .queues;
                if json {
                    println!("{}", serde_json::to_string_pretty(&queues_json(&queues))?);
                } else {
                    print!("{}", queues_text(&queues));
                }
            }
            AllocCommand::Remove { name } => {
                let queue = client
                    .remove_queue(v1::QueueName { name })
                    .await
                    .map_err(answer)?;
                let queue = queue.into_inner();
                let cancelled = queue
                    .jobs
                    .iter()
                    .filter(|j| j.reason == "the queue was removed");
                let ids: Vec<&str> = cancelled.map(|j| j.job_id.as_str()).collect();
                println!("queue removed; cancelled jobs: [{}]", ids.join(", "));
            }
            AllocCommand::Pause { name } => {
                client
                    .pause_queue(v1::QueueName { name: name.clone() })
                    .await
                    .map_err(answer)?;
                println!("queue {name} paused");
            }
            AllocCommand::Resume { name } => {
                client
                    .resume_queue(v1::QueueName { name: name.clone() })
                    .await
                    .map_err(answer)?;
                println!("queue {name} resumed");
            }
        }
        anyhow::Ok(())
    })
}

impl SlurmArgs {
    fn spec(self, grid_file: &std::path::Path) -> v1::AllocQueueSpec {
        v1::AllocQueueSpec {
            name: self.name,
            manager: "slurm".into(),
            time_limit_minutes: self.time_limit,
            servers_per_job: self.servers_per_job,
            max_servers: self.max_servers,
            backlog: self.backlog,
            idle_timeout_seconds: self.idle_timeout,
            data_dir: String::new(),
            grid_file: grid_file.display().to_string(),
            batch_args: self.batch_args,
        }
    }
}

async fn connect(endpoints: &Endpoints) -> anyhow::Result<AllocationClient> {
    let (channel, token) = endpoints.metaserver_channel().await?;
    Ok(v1::allocation_client::AllocationClient::with_interceptor(
        channel, token,
    ))
}

/// The queues as JSON, for scripts (`ninf alloc list --json`, `ninf status --json`).
pub fn queues_json(queues: &[v1::AllocQueue]) -> serde_json::Value {
    let queues: Vec<serde_json::Value> = queues
        .iter()
        .map(|q| {
            let spec = q.spec.clone().unwrap_or_default();
            let jobs: Vec<serde_json::Value> = q
                .jobs
                .iter()
                .map(|j| {
                    json!({
                        "job_id": j.job_id, "state": j.state, "servers": j.servers,
                        "submitted_unix": j.submitted_unix, "script": j.script,
                        "output": j.output, "reason": j.reason,
                    })
                })
                .collect();
            json!({
                "name": spec.name, "manager": spec.manager, "state": q.state,
                "time_limit_minutes": spec.time_limit_minutes,
                "servers_per_job": spec.servers_per_job, "max_servers": spec.max_servers,
                "backlog": spec.backlog, "idle_timeout_seconds": spec.idle_timeout_seconds,
                "grid_file": spec.grid_file, "batch_args": spec.batch_args,
                "failures": q.failures, "last_error": q.last_error, "jobs": jobs,
            })
        })
        .collect();
    serde_json::Value::Array(queues)
}

/// The queues for people: one line per queue, its live jobs under it, its last error.
pub fn queues_text(queues: &[v1::AllocQueue]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if queues.is_empty() {
        out.push_str("no allocation queues (add one with `ninf alloc add slurm`)\n");
    }
    for q in queues {
        let spec = q.spec.clone().unwrap_or_default();
        let live = |state: &str| q.jobs.iter().filter(|j| j.state == state).count();
        let servers: u32 = q.jobs.iter().map(|j| j.servers).sum();
        let _ = writeln!(
            out,
            "queue {} ({}, {}): {} pending, {} running jobs; {} servers up; limit {} min, at most {} servers; {} failures in a row",
            spec.name,
            spec.manager,
            q.state,
            live("pending"),
            live("running"),
            servers,
            spec.time_limit_minutes,
            spec.max_servers,
            q.failures
        );
        for j in q
            .jobs
            .iter()
            .filter(|j| j.state == "pending" || j.state == "running")
        {
            let _ = writeln!(
                out,
                "  job {} {} ({} servers), output {}",
                j.job_id, j.state, j.servers, j.output
            );
        }
        if !q.last_error.is_empty() {
            let _ = writeln!(
                out,
                "  last error: {}",
                q.last_error.replace('\n', "\n    ")
            );
        }
    }
    out
}
