//! Warm pools of executables, one per module. A call takes an idle process (or starts one),
//! runs one request on it and gives it back. A process that crashed, broke the protocol or ran
//! past its time limit is killed and dropped; the next call starts a fresh one, so a failure
//! costs only its own call. How many calls run at once is the gang scheduler's business
//! (`crate::gang`): a call takes processes only once its job is in the time table.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ninf_executable::frame::SHARED_MARKER;
use ninf_executable::rlimits::ProcessLimits;
use ninf_executable::shared::{HostRegions, SHARED_THRESHOLD, StoreWindow, restore_reply_outputs};
use ninf_proto::v1::{self, ExecErrorKind};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tonic::{Code, Status};

use crate::storage::region::StoreRegion;

/// Why a call through the pool failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The executable refused the request or the routine failed; the process lives on.
    #[error("{message}")]
    Routine {
        kind: ExecErrorKind,
        message: String,
    },
    /// The process died or broke the protocol during the call; it was replaced.
    #[error("executable of module `{module}` crashed during the call: {reason}")]
    Crashed { module: String, reason: String },
    #[error("call exceeded its time limit of {seconds:.3} s and was killed")]
    Timeout { seconds: f64 },
    #[error("cannot start the executable of module `{module}` ({path}): {reason}")]
    Spawn {
        module: String,
        path: PathBuf,
        reason: String,
    },
}

/// One running executable speaking the frame protocol.
struct Process {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Shared memory for large requests and replies.
    regions: HostRegions,
    /// Where the server's store region lies here, to name stored arguments by offset.
    store: Option<StoreWindow>,
    /// Stored arrays the request in flight names in the store region: held until the next
    /// request, so that none is freed (and its room reused) while the executable reads it.
    pinned: Vec<bytes::Bytes>,
    next_call_id: u64,
    /// The largest request sent for each routine it has run (bytes).
    largest_request: HashMap<String, usize>,
}

const MAX_REPLY_FRAME: usize = 2 << 30;

impl Process {
    fn spawn(path: &Path, options: &PoolOptions) -> std::io::Result<Process> {
        let mut regions = HostRegions::create_with_store(options.store.as_ref().map(|s| s.file()))?
            .with_lent_socket()?;
        let mut command = ninf_executable::process::executable_command(path, &regions);
        if let Some(socket) = &options.spmd_socket {
            command.env(ninf_executable::spmd::SOCKET_ENV, socket);
        }
        if options.cpu_slowdown > 1.0 {
            command.env(
                ninf_executable::slowdown::SLOWDOWN_ENV,
                options.cpu_slowdown.to_string(),
            );
        }
        options.limits.apply(&mut command);
        if options.die_with_parent {
            die_with_parent(&mut command);
        }
        let mut child = Command::from(command).kill_on_drop(true).spawn()?;
        regions.spawned();
        let (stdin, stdout) =
            ninf_executable::process::take_pipes(child.stdin.take(), child.stdout.take())?;
        Ok(Process {
            child,
            stdin: BufWriter::with_capacity(1 << 20, stdin),
            stdout: BufReader::with_capacity(1 << 20, stdout),
            regions,
            store: options.store.as_ref().map(|s| s.window()),
            pinned: Vec::new(),
            next_call_id: 1,
            largest_request: HashMap::new(),
        })
    }

    /// Sends a request: through the shared region when large, inline otherwise.
    async fn send(&mut self, request: &mut v1::ExecRequest) -> std::io::Result<()> {
        self.pinned.clear();
        if request.encoded_len() >= SHARED_THRESHOLD {
            let requests = &mut self.regions.requests;
            let (len, pinned) = requests.write_request_with_store(request, self.store.as_ref())?;
            self.pinned = pinned;
            return self.send_prepared(len).await;
        }
        let body = request.encode_to_vec();
        let len = u32::try_from(body.len())
            .ok()
            .filter(|&l| l != SHARED_MARKER)
            .ok_or_else(|| std::io::Error::other("request larger than 4 GiB"))?;
        self.stdin.write_all(&len.to_le_bytes()).await?;
        self.stdin.write_all(&body).await?;
        self.stdin.flush().await
    }

    /// Announces a request of `len` bytes already written into the request region.
    async fn send_prepared(&mut self, len: usize) -> std::io::Result<()> {
        self.stdin.write_all(&SHARED_MARKER.to_le_bytes()).await?;
        self.stdin.write_all(&(len as u64).to_le_bytes()).await?;
        self.stdin.flush().await
    }

    /// Reads the reply's bytes. A reply in the shared region is copied out unless
    /// `in_place`: then it stays valid only until this process's next request.
    async fn receive(&mut self, in_place: bool) -> std::io::Result<bytes::Bytes> {
        let mut header = [0u8; 4];
        self.stdout.read_exact(&mut header).await?;
        match u32::from_le_bytes(header) {
            SHARED_MARKER => {
                let mut size = [0u8; 8];
                self.stdout.read_exact(&mut size).await?;
                let len = u64::from_le_bytes(size) as usize;
                if len > MAX_REPLY_FRAME {
                    return Err(std::io::Error::other(format!("reply frame of {len} bytes")));
                }
                if in_place {
                    self.regions.replies.view(len)
                } else {
                    self.regions.replies.copy(len)
                }
            }
            len => {
                let len = len as usize;
                if len > MAX_REPLY_FRAME {
                    return Err(std::io::Error::other(format!("reply frame of {len} bytes")));
                }
                let mut body = vec![0u8; len];
                self.stdout.read_exact(&mut body).await?;
                Ok(bytes::Bytes::from(body))
            }
        }
    }

    /// How the process ended, once it has (waits briefly for the kernel to reap it).
    async fn exit_description(&mut self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await {
            Ok(Ok(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(signal)) => {
                    format!("killed by signal {signal} ({})", signal_name(signal))
                }
                _ => "exited".to_string(),
            },
            _ => "still running".to_string(),
        }
    }
}

/// Has the kernel kill the executable when the thread that started it ends (with its
/// process). Pools that use it start executables only from threads that live as long as the
/// process: a node agent's runtime workers.
fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl,
    // which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        24 => "SIGXCPU",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// How a pool starts its executables.
#[derive(Debug, Clone, Default)]
pub struct PoolOptions {
    /// Processes started at once (at least one).
    pub warm: usize,
    /// Idle processes kept at most.
    pub size: usize,
    /// The message broker parallel ranks connect to, passed in their environment.
    pub spmd_socket: Option<PathBuf>,
    /// Emulated processor slowdown passed to every executable.
    pub cpu_slowdown: f64,
    /// Resource limits every executable starts under.
    pub limits: ProcessLimits,
    /// Kill each executable when its starter dies: a node agent's ranks, which would
    /// otherwise stay stopped for ever once the agent that stopped them is gone.
    pub die_with_parent: bool,
    /// The server's store region, which every executable gets as descriptor 5.
    pub store: Option<Arc<StoreRegion>>,
}

/// The pool of one module.
pub struct ExecutablePool {
    module: String,
    path: PathBuf,
    options: PoolOptions,
    idle: std::sync::Mutex<Vec<Process>>,
    running: AtomicUsize,
    spawned: AtomicUsize,
    /// Executables killed because a call failed midway (and replaced).
    replaced: AtomicUsize,
    /// Process ids of executables running a call right now.
    busy: std::sync::Mutex<Vec<u32>>,
}

impl ExecutablePool {
    /// A pool for the executable at `path`, its warm processes started now.
    pub async fn start(
        module: &str,
        path: &Path,
        mut options: PoolOptions,
    ) -> Result<Arc<ExecutablePool>, PoolError> {
        options.size = options.size.max(1);
        let warm = options.warm.clamp(1, options.size);
        let pool = Arc::new(ExecutablePool {
            module: module.to_string(),
            path: path.to_path_buf(),
            options,
            idle: std::sync::Mutex::new(Vec::new()),
            running: AtomicUsize::new(0),
            spawned: AtomicUsize::new(0),
            replaced: AtomicUsize::new(0),
            busy: std::sync::Mutex::new(Vec::new()),
        });
        let mut started = Vec::new();
        for _ in 0..warm {
            started.push(pool.spawn()?);
        }
        *ninf_proto::sync::lock(&pool.idle) = started;
        Ok(pool)
    }

    fn spawn(&self) -> Result<Process, PoolError> {
        self.spawned.fetch_add(1, Ordering::Relaxed);
        Process::spawn(&self.path, &self.options).map_err(|e| PoolError::Spawn {
            module: self.module.clone(),
            path: self.path.clone(),
            reason: e.to_string(),
        })
    }

    pub fn module(&self) -> &str {
        &self.module
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn options(&self) -> &PoolOptions {
        &self.options
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Processes started since the pool was created (warm ones and replacements).
    pub fn spawned(&self) -> usize {
        self.spawned.load(Ordering::Relaxed)
    }

    /// Executables killed and replaced because a call failed midway (a crash, a timeout,
    /// a cancelled call). Extra processes let go after a burst of time-shared jobs are not
    /// counted.
    pub fn replaced(&self) -> usize {
        self.replaced.load(Ordering::Relaxed)
    }

    /// Process ids of the executables running a call now.
    pub fn busy_pids(&self) -> Vec<u32> {
        ninf_proto::sync::lock(&self.busy).clone()
    }

    /// Takes an idle executable, or starts one.
    pub fn checkout(&self) -> Result<Checkout<'_>, PoolError> {
        let taken = ninf_proto::sync::lock(&self.idle).pop();
        let process = match taken {
            Some(p) => p,
            None => self.spawn()?,
        };
        let pid = process.child.id();
        if let Some(pid) = pid {
            let mut busy = ninf_proto::sync::lock(&self.busy);
            busy.push(pid);
        }
        self.running.fetch_add(1, Ordering::Relaxed);
        Ok(Checkout {
            pool: self,
            process: Some(process),
            pid,
        })
    }

    /// Takes `n` executables (the ranks of a parallel job).
    pub fn checkout_many(&self, n: usize) -> Result<Vec<Checkout<'_>>, PoolError> {
        (0..n).map(|_| self.checkout()).collect()
    }

    fn give_back(&self, mut process: Process) {
        {
            let mut idle = ninf_proto::sync::lock(&self.idle);
            if idle.len() < self.options.size {
                idle.push(process);
                return;
            }
        }
        // More processes than the pool keeps warm ran at once (time-shared jobs); let the
        // extra one go.
        let _ = process.child.start_kill();
    }

    /// Kills every idle process (on shutdown).
    /// Whether the warm executables are still running: one that crashed or exited at
    /// start-up says why (its exit status).
    pub fn check_started(&self) -> Result<(), PoolError> {
        let mut idle = ninf_proto::sync::lock(&self.idle);
        for process in idle.iter_mut() {
            if let Ok(Some(status)) = process.child.try_wait() {
                return Err(PoolError::Spawn {
                    module: self.module.clone(),
                    path: self.path.clone(),
                    reason: format!("it exited at start-up ({status})"),
                });
            }
        }
        Ok(())
    }

    pub async fn shutdown(&self) {
        let idle: Vec<Process> = ninf_proto::sync::lock(&self.idle).drain(..).collect();
        for mut p in idle {
            let _ = p.child.start_kill();
            let _ = p.child.wait().await;
        }
    }
}

/// What a checked-out executable is sent.
pub enum Outgoing {
    /// A request message, sent inline or through the region as its size decides (boxed:
    /// the message is large beside the other variant).
    Message(Box<v1::ExecRequest>),
    /// A request already written into the region: its length and the call id it carries
    /// (from [`Checkout::next_call_id`]).
    Prepared { len: usize, call_id: u64 },
}

/// An executable taken from the pool for one call. Dropping it without [`Checkout::finish`]
/// kills the process (its protocol state is unknown) and starts a replacement.
pub struct Checkout<'a> {
    pool: &'a ExecutablePool,
    process: Option<Process>,
    pid: Option<u32>,
}

impl Checkout<'_> {
    /// The executable's process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// A fresh call id for a prepared request.
    pub fn next_call_id(&mut self) -> u64 {
        match self.process.as_mut() {
            Some(p) => {
                p.next_call_id += 1;
                p.next_call_id
            }
            None => 0,
        }
    }

    /// Records that the executable is about to run `function` on a request of `len` bytes
    /// and says whether it is cold for it: it has not run `function` yet, or only on
    /// requests less than half as large, so this call pays for loading the routine or for
    /// first touches of the memory it grows into.
    pub fn note_call(&mut self, function: &str, len: usize) -> bool {
        let Some(process) = self.process.as_mut() else {
            return true;
        };
        match process.largest_request.get_mut(function) {
            Some(largest) => {
                let cold = len / 2 > *largest;
                *largest = (*largest).max(len);
                cold
            }
            None => {
                process.largest_request.insert(function.to_string(), len);
                true
            }
        }
    }

    /// Gives back an executable that was sent nothing (the call failed before it ran).
    pub fn release_unused(mut self) {
        if let Some(process) = self.process.take() {
            self.pool.give_back(process);
        }
    }

    /// Passes `files` to the executable for the prepared request of `call_id`, which names
    /// them in its `lent_arrays`; false when the executable takes no lent files.
    pub fn lend(
        &self,
        call_id: u64,
        files: &[std::os::fd::BorrowedFd<'_>],
    ) -> std::io::Result<bool> {
        match self.process.as_ref() {
            Some(p) if p.regions.lends() => p.regions.lend(call_id, files).map(|()| true),
            _ => Ok(false),
        }
    }

    /// Whether the executable takes lent files.
    pub fn lends(&self) -> bool {
        self.process.as_ref().is_some_and(|p| p.regions.lends())
    }

    /// The region to write a prepared request of `len` bytes into.
    pub fn request_region(&mut self, len: usize) -> std::io::Result<&mut [u8]> {
        match self.process.as_mut() {
            Some(p) => p.regions.requests.reserve(len),
            None => Err(std::io::Error::other("executable already released")),
        }
    }

    /// Sends the request and waits for the reply, killing the process if it takes longer
    /// than `timeout`. With `in_place`, a large reply is not copied out of the shared region:
    /// it must be dropped before this checkout is finished.
    pub async fn exchange(
        &mut self,
        request: Outgoing,
        in_place: bool,
        timeout: Duration,
    ) -> Result<v1::ExecReply, PoolError> {
        let module = self.pool.module.clone();
        let Some(process) = self.process.as_mut() else {
            return Err(PoolError::Crashed {
                module,
                reason: "executable already released".into(),
            });
        };
        let call_id = match &request {
            // A message whose id was drawn already (`next_call_id`: files were lent for it).
            Outgoing::Message(m) if m.call_id != 0 => m.call_id,
            Outgoing::Message(_) => {
                process.next_call_id += 1;
                process.next_call_id
            }
            Outgoing::Prepared { call_id, .. } => *call_id,
        };
        let exchange = async {
            match request {
                Outgoing::Message(mut m) => {
                    m.call_id = call_id;
                    process.send(&mut m).await?
                }
                Outgoing::Prepared { len, .. } => process.send_prepared(len).await?,
            }
            process.receive(in_place).await
        };
        let body = match tokio::time::timeout(timeout, exchange).await {
            Err(_) => {
                let _ = process.child.start_kill();
                let _ = process.child.wait().await;
                return Err(PoolError::Timeout {
                    seconds: timeout.as_secs_f64(),
                });
            }
            Ok(Err(e)) => {
                let exit = process.exit_description().await;
                let _ = process.child.start_kill();
                return Err(PoolError::Crashed {
                    module,
                    reason: format!("{e}; the process {exit}"),
                });
            }
            Ok(Ok(body)) => body,
        };
        // The executable has read its inputs: stored ones may go.
        process.pinned.clear();
        let mut reply = v1::ExecReply::decode(body).map_err(|e| {
            let _ = process.child.start_kill();
            PoolError::Crashed {
                module: module.clone(),
                reason: format!("undecodable reply: {e}"),
            }
        })?;
        let replies = &mut process.regions.replies;
        if let Err(e) = restore_reply_outputs(replies, &mut reply, in_place) {
            let _ = process.child.start_kill();
            return Err(PoolError::Crashed {
                module,
                reason: format!("bad region output: {e}"),
            });
        }
        if reply.call_id != call_id {
            let _ = process.child.start_kill();
            return Err(PoolError::Crashed {
                module,
                reason: format!(
                    "reply to call {} while waiting for {call_id}",
                    reply.call_id
                ),
            });
        }
        Ok(reply)
    }

    /// Gives the healthy executable back and turns its reply into the call's result.
    pub fn finish(mut self, reply: v1::ExecReply) -> Result<v1::ExecSuccess, PoolError> {
        if let Some(process) = self.process.take() {
            self.pool.give_back(process);
        }
        match reply.result {
            Some(v1::exec_reply::Result::Success(success)) => Ok(success),
            Some(v1::exec_reply::Result::Error(error)) => Err(PoolError::Routine {
                kind: ExecErrorKind::try_from(error.kind).unwrap_or(ExecErrorKind::Unspecified),
                message: error.message,
            }),
            None => Err(PoolError::Crashed {
                module: self.pool.module.clone(),
                reason: "reply without a result".into(),
            }),
        }
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            let mut busy = ninf_proto::sync::lock(&self.pool.busy);
            busy.retain(|&p| p != pid);
        }
        self.pool.running.fetch_sub(1, Ordering::Relaxed);
        if let Some(mut process) = self.process.take() {
            // Not finished: the call failed midway, so the process cannot be trusted.
            let _ = process.child.start_kill();
            self.pool.replaced.fetch_add(1, Ordering::Relaxed);
            match self.pool.spawn() {
                Ok(fresh) => self.pool.give_back(fresh),
                Err(e) => {
                    tracing::warn!(module = %self.pool.module, error = %e, "cannot replace a failed executable")
                }
            }
        }
    }
}

pub fn pool_status(function: &str, error: PoolError) -> Status {
    use ninf_proto::v1::ExecErrorKind;
    match error {
        PoolError::Routine { kind, message } => {
            let code = match kind {
                ExecErrorKind::FunctionNotFound => Code::NotFound,
                ExecErrorKind::BadArgument | ExecErrorKind::Evaluation => Code::InvalidArgument,
                // The routine's own failure: the same call fails on any server, so the
                // proxy must not retry it elsewhere or suspect this server (`Aborted`).
                ExecErrorKind::RoutineFailed => Code::Internal,
                _ => Code::Aborted,
            };
            Status::new(code, message)
        }
        PoolError::Timeout { seconds } => Status::deadline_exceeded(format!(
            "`{function}` ran longer than its limit of {seconds:.3} s and was killed"
        )),
        PoolError::Crashed { module, reason } => ninf_proto::net::crash::crashed(
            function,
            &format!("executable of module `{module}`: {reason}"),
        ),
        e @ PoolError::Spawn { .. } => Status::unavailable(e.to_string()),
    }
}
