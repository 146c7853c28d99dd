//! A node agent's ranks (`[gang] ranks = "nodes"`): the server sends each rank of a parallel
//! job to the agent of the node holding the rank's column, so that on separate hosts every
//! rank runs where its processor is. The agent starts the executable (from a warm pool per
//! executable), tells the server its process id, and sends it the request only when the
//! server says the job's first slot has come: until then the rank has no input and cannot
//! run outside its slots. Then it returns the reply. Closing a job kills its ranks still
//! running; ranks die with their agent, since nobody else could continue them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninf_executable::rlimits::ProcessLimits;
use ninf_proto::v1;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tonic::Status;

use crate::pool::{ExecutablePool, Outgoing, PoolOptions, pool_status};

/// Where this node's ranks find their executables and their broker.
#[derive(Debug, Clone, Default)]
pub struct NodeRanksOptions {
    /// A directory holding the executables under the server's file names; `None`: the
    /// server's own paths (one host, or the same installation everywhere).
    pub executables: Option<PathBuf>,
    /// The node broker's socket, the default in the ranks' environment.
    pub broker_socket: Option<PathBuf>,
    /// Warm processes kept per executable: the node's columns.
    pub keep: usize,
}

/// One job's ranks on this node.
struct JobRanks {
    /// Turns `true` when the server says the job's first slot has come.
    go: watch::Sender<bool>,
    tasks: Vec<AbortHandle>,
}

/// The ranks one agent runs.
pub struct NodeRanks {
    options: NodeRanksOptions,
    pools: Mutex<HashMap<PathBuf, Arc<ExecutablePool>>>,
    jobs: Mutex<HashMap<u64, JobRanks>>,
    outgoing: mpsc::UnboundedSender<v1::AgentMessage>,
    started: AtomicU64,
}

impl NodeRanks {
    pub fn new(
        options: NodeRanksOptions,
        outgoing: mpsc::UnboundedSender<v1::AgentMessage>,
    ) -> Arc<NodeRanks> {
        Arc::new(NodeRanks {
            options,
            pools: Mutex::new(HashMap::new()),
            jobs: Mutex::new(HashMap::new()),
            outgoing,
            started: AtomicU64::new(0),
        })
    }

    /// Ranks started since the agent began.
    pub fn ranks_run(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Starts a rank; its process id and later its result go to the server.
    pub fn run(self: &Arc<Self>, run: v1::SpmdRunRank) {
        let (job, rank) = (run.job, run.rank);
        let mut jobs = ninf_proto::sync::lock(&self.jobs);
        let entry = jobs.entry(job).or_insert_with(|| JobRanks {
            go: watch::channel(false).0,
            tasks: Vec::new(),
        });
        let go = entry.go.subscribe();
        let this = self.clone();
        let task = tokio::spawn(async move {
            let result = this.run_rank(run, go).await;
            let (success, code, message) = match result {
                Ok(success) => (Some(success), 0, String::new()),
                Err(status) => (None, status.code() as i32, status.message().to_string()),
            };
            this.send(v1::agent_message::Kind::RankResult(v1::SpmdRankResult {
                job,
                rank,
                success,
                code,
                message,
            }));
        });
        entry.tasks.push(task.abort_handle());
    }

    /// The job's first slot has come: its ranks get their requests.
    pub fn start(&self, job: u64) {
        if let Some(ranks) = ninf_proto::sync::lock(&self.jobs).get(&job) {
            ranks.go.send_replace(true);
        }
    }

    /// The job ended: any of its ranks still running are killed (their executables are
    /// replaced in the pool).
    pub fn close(&self, job: u64) {
        if let Some(ranks) = ninf_proto::sync::lock(&self.jobs).remove(&job) {
            for task in ranks.tasks {
                task.abort();
            }
        }
    }

    async fn run_rank(
        &self,
        run: v1::SpmdRunRank,
        mut go: watch::Receiver<bool>,
    ) -> Result<v1::ExecSuccess, Status> {
        let pool = self.pool(&run).await?;
        let function = run
            .request
            .as_ref()
            .map(|r| r.function.clone())
            .unwrap_or_default();
        let mut checkout = pool.checkout().map_err(|e| pool_status(&function, e))?;
        let pid = checkout
            .pid()
            .ok_or_else(|| Status::internal("the rank's executable has no process id"))?;
        self.started.fetch_add(1, Ordering::Relaxed);
        self.send(v1::agent_message::Kind::RankStarted(v1::SpmdRankStarted {
            job: run.job,
            rank: run.rank,
            pid,
        }));
        go.wait_for(|&go| go)
            .await
            .map_err(|_| Status::aborted("the job ended before its first slot"))?;
        let request = run
            .request
            .ok_or_else(|| Status::invalid_argument("a rank without its request"))?;
        let timeout = Duration::from_secs_f64(run.timeout_seconds.clamp(0.001, 1e9));
        let reply = checkout
            .exchange(Outgoing::Message(Box::new(request)), false, timeout)
            .await
            .map_err(|e| pool_status(&function, e))?;
        checkout
            .finish(reply)
            .map_err(|e| pool_status(&function, e))
    }

    /// The warm pool of the rank's executable, started on first use.
    async fn pool(&self, run: &v1::SpmdRunRank) -> Result<Arc<ExecutablePool>, Status> {
        let path = self.executable(Path::new(&run.executable));
        if let Some(pool) = ninf_proto::sync::lock(&self.pools).get(&path) {
            return Ok(pool.clone());
        }
        let limit = |value: u64| (value > 0).then_some(value);
        let options = PoolOptions {
            warm: 1,
            size: self.options.keep,
            spmd_socket: self.options.broker_socket.clone(),
            cpu_slowdown: run.cpu_slowdown,
            limits: ProcessLimits {
                memory_bytes: limit(run.memory_bytes),
                open_files: limit(run.open_files),
                cpu_seconds_per_call: limit(run.cpu_seconds_per_call),
            },
            die_with_parent: true,
            store: None,
        };
        let pool = ExecutablePool::start(&run.module, &path, options)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        // Two ranks may have started a pool at once; the first one stays.
        Ok(ninf_proto::sync::lock(&self.pools)
            .entry(path)
            .or_insert(pool)
            .clone())
    }

    fn executable(&self, server_path: &Path) -> PathBuf {
        match (&self.options.executables, server_path.file_name()) {
            (Some(dir), Some(name)) => dir.join(name),
            _ => server_path.to_path_buf(),
        }
    }

    fn send(&self, kind: v1::agent_message::Kind) {
        let _ = self.outgoing.send(v1::AgentMessage { kind: Some(kind) });
    }

    /// Kills every idle executable (the agent is stopping).
    pub async fn shutdown(&self) {
        let jobs: Vec<u64> = ninf_proto::sync::lock(&self.jobs).keys().copied().collect();
        for job in jobs {
            self.close(job);
        }
        let pools: Vec<_> = ninf_proto::sync::lock(&self.pools).drain().collect();
        for (_, pool) in pools {
            pool.shutdown().await;
        }
    }
}
