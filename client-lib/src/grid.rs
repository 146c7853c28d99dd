//! Calls through a client proxy, and Ninf transactions (seed 004): calls between
//! `transaction_begin` and `end` are recorded, not run; the library links a call's IN argument
//! to the earlier call that wrote the same client buffer, computes each call's costs from the
//! interface descriptor and its actual scalars, and at the end sends the whole Network Task
//! graph with its input data to the proxy, which has it scheduled and run. When `end` returns,
//! every buffer the transaction wrote holds its final value.
//!
//! Buffers are registered with the transaction, which keeps them borrowed until it ends:
//! [`Transaction::input`] for data the routines only read, [`Transaction::buffer`] for data
//! they may write. The returned [`Buffer`] handles are what calls take, so "the same client
//! buffer" is the same handle, and Rust's borrow rules keep anyone else from touching the data
//! while the graph runs.
//!
//! ```no_run
//! # fn main() -> Result<(), ninf::CallError> {
//! use ninf::grid::{GridClient, TxArg};
//! let n = 100usize;
//! let (a, b, c, d) = (vec![1.0; n * n], vec![2.0; n * n], vec![3.0; n * n], vec![4.0; n * n]);
//! let (mut e, mut f, mut g) = (vec![0.0; n * n], vec![0.0; n * n], vec![0.0; n * n]);
//! let grid = GridClient::connect("127.0.0.1:7100")?;
//! let plan = grid.transaction(|tx| {
//!     let [a, b, c, d] = [&a, &b, &c, &d].map(|m| tx.input(m));
//!     let [e, f, g] = [&mut e, &mut f, &mut g].map(|m| tx.buffer(m));
//!     let n = TxArg::from(n as i64);
//!     tx.call("mmul", &[n.clone(), a.into(), b.into(), e.into()])?;
//!     tx.call("mmul", &[n.clone(), c.into(), d.into(), f.into()])?;
//!     tx.call("mmul", &[n, e.into(), f.into(), g.into()])?;
//!     Ok(())
//! })?;
//! println!("{plan}");
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use ninf_idl::{FunctionInterface, Mode};
use ninf_proto::net::auth::AttachToken;
use ninf_proto::net::tls::GridTls;
use ninf_proto::v1;
use num_complex::Complex64;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::args::{Encoded, check_and_encode_with};
use crate::blocking::runtime;
use crate::remote::server_address;
use crate::{Arg, ArrayMut, ArrayRef, CallError, CallOutcome, ErrorKind};

/// A connection to a client proxy.
#[derive(Clone)]
pub struct GridClient {
    address: String,
    channel: Channel,
    descriptors: Arc<Mutex<HashMap<String, Arc<FunctionInterface>>>>,
    scheduler: Option<String>,
    /// The grid's token, presented with every request.
    token: AttachToken,
}

/// Environment variable naming the grid's token file; read by [`GridClient::connect`] and
/// [`crate::NinfClient::connect`].
pub const TOKEN_FILE_ENV: &str = "NINF_TOKEN_FILE";

/// Environment variable naming the grid's certificate authority (PEM): clients connect over
/// TLS and check servers against it. [`TLS_CERTIFICATE_ENV`] and [`TLS_KEY_ENV`] add a
/// client certificate, which compute servers require when called directly.
pub const TLS_CA_ENV: &str = "NINF_TLS_CA";
pub const TLS_CERTIFICATE_ENV: &str = "NINF_TLS_CERTIFICATE";
pub const TLS_KEY_ENV: &str = "NINF_TLS_KEY";

/// The TLS material the environment names, if it names an authority.
pub(crate) fn tls_from_env() -> Result<Option<GridTls>, CallError> {
    let Some(ca) = std::env::var_os(TLS_CA_ENV) else {
        return Ok(None);
    };
    let ca = std::path::PathBuf::from(ca);
    let loaded = match (
        std::env::var_os(TLS_CERTIFICATE_ENV),
        std::env::var_os(TLS_KEY_ENV),
    ) {
        (Some(certificate), Some(key)) => GridTls::load(&ninf_proto::net::tls::TlsFiles {
            ca,
            certificate: certificate.into(),
            key: key.into(),
            require_client_certificates: true,
        }),
        (None, None) => GridTls::trusting(&ca),
        _ => {
            return Err(CallError::bad_argument(format!(
                "set both {TLS_CERTIFICATE_ENV} and {TLS_KEY_ENV}, or neither"
            )));
        }
    };
    loaded
        .map(Some)
        .map_err(|e| CallError::bad_argument(e.to_string()))
}

/// The token in the file [`TOKEN_FILE_ENV`] names, if it names one.
pub(crate) fn token_from_env() -> Result<AttachToken, CallError> {
    let token = match std::env::var_os(TOKEN_FILE_ENV) {
        Some(path) => Some(
            ninf_proto::net::auth::load_token(std::path::Path::new(&path))
                .map_err(|e| CallError::bad_argument(e.to_string()))?,
        ),
        None => None,
    };
    Ok(AttachToken::new(token.as_deref()))
}

impl GridClient {
    /// Connects to the proxy at `host:port` (or `ninf://host:port`), over TLS when
    /// [`TLS_CA_ENV`] names the grid's certificate authority.
    pub fn connect(url: &str) -> Result<GridClient, CallError> {
        GridClient::connect_with_tls(url, tls_from_env()?.as_ref())
    }

    /// Connects to the proxy, over TLS checked against the grid's authority when `tls` is
    /// given (and presenting its certificate, if it holds one).
    pub fn connect_with_tls(url: &str, tls: Option<&GridTls>) -> Result<GridClient, CallError> {
        let address = server_address(url)?;
        let connecting = ninf_proto::net::connect(
            &address,
            tls,
            ninf_proto::net::ConnectionSettings::default(),
        );
        let channel = runtime()?
            .block_on(connecting)
            .map_err(crate::error::connect_error)?;
        Ok(GridClient {
            address,
            channel,
            descriptors: Arc::default(),
            scheduler: None,
            token: token_from_env()?,
        })
    }

    /// Presents this token to the proxy (the grid's `token` file holds it).
    pub fn with_token(mut self, token: &str) -> GridClient {
        self.token = AttachToken::new(Some(token));
        self
    }

    /// Asks for this scheduler instead of the metaserver's configured one (experiments).
    pub fn with_scheduler(mut self, scheduler: &str) -> GridClient {
        self.scheduler = Some(scheduler.to_string());
        self
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    fn proxy(&self) -> v1::proxy_client::ProxyClient<InterceptedService<Channel, AttachToken>> {
        v1::proxy_client::ProxyClient::with_interceptor(self.channel.clone(), self.token.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// A routine's interface descriptor, fetched once per client.
    pub fn describe(&self, function: &str) -> Result<Arc<FunctionInterface>, CallError> {
        if let Some(found) = self
            .descriptors
            .lock()
            .ok()
            .and_then(|d| d.get(function).cloned())
        {
            return Ok(found);
        }
        let reply = runtime()?
            .block_on(self.proxy().describe(v1::DescribeRequest {
                function: function.to_string(),
            }))?
            .into_inner();
        let interface = Arc::new(
            FunctionInterface::try_from(&reply)
                .map_err(|e| CallError::new(ErrorKind::CommunicationFailed, e.to_string()))?,
        );
        if let Ok(mut cache) = self.descriptors.lock() {
            cache.insert(function.to_string(), interface.clone());
        }
        Ok(interface)
    }

    /// One call outside any transaction: a graph of one task.
    pub fn call(&self, function: &str, args: &mut [Arg<'_>]) -> Result<CallOutcome, CallError> {
        let mut tx = self.transaction_begin();
        let mut tx_args = Vec::with_capacity(args.len());
        for arg in args.iter_mut() {
            tx_args.push(match arg {
                Arg::Integer(v) => TxArg::Integer(*v),
                Arg::Real(v) => TxArg::Real(*v),
                Arg::Complex(v) => TxArg::Complex(*v),
                Arg::Text(s) => TxArg::Text((*s).to_string()),
                Arg::File(path) => TxArg::File(path.to_path_buf()),
                Arg::In(a) => TxArg::Buffer(tx.input(a.reborrow())),
                Arg::Out(a) => TxArg::Buffer(tx.buffer(a.reborrow_mut())),
                Arg::Work => TxArg::Work,
            });
        }
        tx.call(function, &tx_args)?;
        let plan = tx.end()?;
        Ok(CallOutcome {
            status: plan.tasks.first().map_or(0, |t| t.status),
        })
    }

    /// Starts recording a transaction; nothing runs until [`Transaction::end`].
    pub fn transaction_begin<'a>(&self) -> Transaction<'a> {
        Transaction {
            client: self.clone(),
            slots: Vec::new(),
            writer: Vec::new(),
            tasks: Vec::new(),
            arguments: Vec::new(),
            edges: Vec::new(),
            out_bytes: Vec::new(),
            label: String::new(),
        }
    }

    /// A transaction that cannot forget its end: `body` records calls, then the graph runs.
    /// If `body` fails, nothing runs.
    pub fn transaction<'a>(
        &self,
        body: impl FnOnce(&mut Transaction<'a>) -> Result<(), CallError>,
    ) -> Result<Plan, CallError> {
        let mut tx = self.transaction_begin();
        body(&mut tx)?;
        tx.end()
    }
}

/// A client buffer registered with a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buffer(usize);

/// One argument of a recorded call.
#[derive(Debug, Clone)]
pub enum TxArg {
    Integer(i64),
    Real(f64),
    Complex(Complex64),
    Text(String),
    File(std::path::PathBuf),
    Buffer(Buffer),
    Work,
}

impl From<Buffer> for TxArg {
    fn from(b: Buffer) -> TxArg {
        TxArg::Buffer(b)
    }
}

impl From<i64> for TxArg {
    fn from(v: i64) -> TxArg {
        TxArg::Integer(v)
    }
}

impl From<i32> for TxArg {
    fn from(v: i32) -> TxArg {
        TxArg::Integer(i64::from(v))
    }
}

impl From<f64> for TxArg {
    fn from(v: f64) -> TxArg {
        TxArg::Real(v)
    }
}

impl From<&str> for TxArg {
    fn from(v: &str) -> TxArg {
        TxArg::Text(v.to_string())
    }
}

enum Slot<'a> {
    /// Routines only read it.
    Read(ArrayRef<'a>),
    /// Routines may write it; the client gets the final value.
    Write(ArrayMut<'a>),
    /// Routines may write it; the final value is not wanted.
    Scratch(ArrayRef<'a>),
}

impl Slot<'_> {
    fn view(&self) -> ArrayRef<'_> {
        match self {
            Slot::Read(a) | Slot::Scratch(a) => a.reborrow(),
            Slot::Write(a) => a.as_ref(),
        }
    }

    fn writable(&self) -> bool {
        !matches!(self, Slot::Read(_))
    }
}

/// A transaction being recorded.
pub struct Transaction<'a> {
    client: GridClient,
    slots: Vec<Slot<'a>>,
    /// The call and parameter that last wrote each buffer.
    writer: Vec<Option<(usize, u32)>>,
    tasks: Vec<v1::GraphTask>,
    arguments: Vec<v1::TaskArguments>,
    edges: Vec<v1::GraphEdge>,
    /// Bytes of each parameter of each call, for the outputs the client gets back.
    out_bytes: Vec<BTreeMap<u32, u64>>,
    label: String,
}

/// The recorded graph, for inspection before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedGraph {
    /// Each call's label (`function#index`).
    pub tasks: Vec<String>,
    /// (producer, its parameter name, consumer, its parameter name, bytes).
    pub edges: Vec<(usize, String, usize, String, u64)>,
}

impl<'a> Transaction<'a> {
    /// Registers data the routines only read.
    pub fn input(&mut self, data: impl Into<ArrayRef<'a>>) -> Buffer {
        self.slots.push(Slot::Read(data.into()));
        self.writer.push(None);
        Buffer(self.slots.len() - 1)
    }

    /// Registers a buffer the routines may read and write; after `end` it holds the value
    /// the last call that wrote it produced.
    pub fn buffer(&mut self, data: impl Into<ArrayMut<'a>>) -> Buffer {
        self.slots.push(Slot::Write(data.into()));
        self.writer.push(None);
        Buffer(self.slots.len() - 1)
    }

    /// Registers data the routines may overwrite although the client does not need the
    /// result (a matrix `dgefa` factors in place only for `dgesl`): its initial value is sent,
    /// its final value stays on the servers and is deleted with the other intermediates.
    pub fn scratch(&mut self, data: impl Into<ArrayRef<'a>>) -> Buffer {
        self.slots.push(Slot::Scratch(data.into()));
        self.writer.push(None);
        Buffer(self.slots.len() - 1)
    }

    /// Names the transaction in the metaserver's records.
    pub fn set_label(&mut self, label: &str) {
        self.label = label.to_string();
    }

    /// Records a call. Its arguments are checked against the interface now (count, types,
    /// sizes), so a mistake is reported at the call that made it.
    pub fn call(&mut self, function: &str, args: &[TxArg]) -> Result<(), CallError> {
        let interface = self.client.describe(function)?;
        let index = self.tasks.len();
        for arg in args {
            if let TxArg::Buffer(Buffer(b)) = arg
                && *b >= self.slots.len()
            {
                return Err(CallError::bad_argument(format!(
                    "`{function}`: buffer {b} does not belong to this transaction"
                )));
            }
        }
        let writable: Vec<bool> = args
            .iter()
            .map(|a| matches!(a, TxArg::Buffer(Buffer(b)) if self.slots[*b].writable()))
            .collect();
        let views: Vec<Arg<'_>> = args
            .iter()
            .map(|a| match a {
                TxArg::Integer(v) => Arg::Integer(*v),
                TxArg::Real(v) => Arg::Real(*v),
                TxArg::Complex(v) => Arg::Complex(*v),
                TxArg::Text(s) => Arg::Text(s),
                TxArg::File(p) => Arg::File(p),
                TxArg::Buffer(Buffer(b)) => Arg::In(self.slots[*b].view()),
                TxArg::Work => Arg::Work,
            })
            .collect();
        let encoded = check_and_encode_with(&interface, &views, false, &writable)?;
        drop(views);
        let mut scalars = HashMap::new();
        for (p, arg) in interface.parameters.iter().zip(args) {
            if let (Mode::In, false, TxArg::Integer(v)) = (p.mode, p.is_array(), arg) {
                scalars.insert(p.name.clone(), *v);
            }
        }
        let cost = interface
            .cost(&scalars)
            .map_err(|e| CallError::bad_argument(format!("`{function}`: {e}")))?;
        let mut call_arguments = Vec::with_capacity(args.len());
        let mut fed_bytes = 0u64;
        let mut sizes = BTreeMap::new();
        let mut writes = Vec::new();
        for (i, ((p, arg), value)) in interface
            .parameters
            .iter()
            .zip(args)
            .zip(encoded)
            .enumerate()
        {
            let parameter = i as u32;
            let value = match value {
                Encoded::Value(v) => v,
                Encoded::Bulk(_) => v1::ArgumentValue { value: None },
            };
            let mut source = value
                .value
                .is_some()
                .then_some(v1::call_argument::Source::Value(value));
            if let TxArg::Buffer(Buffer(b)) = arg {
                let bytes = interface
                    .byte_size(p, &scalars)
                    .map_err(|e| CallError::bad_argument(format!("`{function}`: {e}")))?;
                sizes.insert(parameter, bytes);
                if matches!(p.mode, Mode::In | Mode::InOut)
                    && let Some((from, from_parameter)) = self.writer[*b]
                {
                    // Produced by an earlier call: it flows server to server.
                    source = None;
                    fed_bytes += bytes;
                    self.edges.push(v1::GraphEdge {
                        from_task: from as u32,
                        from_parameter,
                        to_task: index as u32,
                        to_parameter: parameter,
                        bytes,
                    });
                }
                if matches!(p.mode, Mode::Out | Mode::InOut) {
                    writes.push((*b, parameter));
                }
            }
            call_arguments.push(v1::CallArgument { source });
        }
        for (b, parameter) in writes {
            self.writer[b] = Some((index, parameter));
        }
        self.tasks.push(v1::GraphTask {
            label: format!("{function}#{index}"),
            function: function.to_string(),
            scalars,
            flops: cost.flops,
            client_in_bytes: (cost.bytes_in + cost.scalar_bytes_in).saturating_sub(fed_bytes),
            client_out_bytes: 0,
            processors: u32::try_from(cost.processors).unwrap_or(u32::MAX),
        });
        self.arguments.push(v1::TaskArguments {
            arguments: call_arguments,
            returns: Vec::new(),
        });
        self.out_bytes.push(sizes);
        Ok(())
    }

    /// The graph recorded so far.
    pub fn graph(&self) -> RecordedGraph {
        let parameter_name = |task: usize, parameter: u32| -> String {
            self.client
                .describe(&self.tasks[task].function)
                .ok()
                .and_then(|f| f.parameters.get(parameter as usize).map(|p| p.name.clone()))
                .unwrap_or_else(|| parameter.to_string())
        };
        RecordedGraph {
            tasks: self.tasks.iter().map(|t| t.label.clone()).collect(),
            edges: self
                .edges
                .iter()
                .map(|e| {
                    (
                        e.from_task as usize,
                        parameter_name(e.from_task as usize, e.from_parameter),
                        e.to_task as usize,
                        parameter_name(e.to_task as usize, e.to_parameter),
                        e.bytes,
                    )
                })
                .collect(),
        }
    }

    /// Sends the graph to the proxy, waits for it to finish and writes every buffer's final
    /// value back. Returns the plan: where each call ran, predicted and actual times.
    #[doc(alias = "transaction_end")]
    pub fn end(mut self) -> Result<Plan, CallError> {
        if self.tasks.is_empty() {
            return Ok(Plan::default());
        }
        // The client gets back the last value written to each of its writable buffers.
        for (b, writer) in self.writer.iter().enumerate() {
            if let (Some((task, parameter)), Slot::Write(_)) = (writer, &self.slots[b]) {
                let arguments = &mut self.arguments[*task];
                if !arguments.returns.contains(parameter) {
                    arguments.returns.push(*parameter);
                    self.tasks[*task].client_out_bytes +=
                        self.out_bytes[*task].get(parameter).copied().unwrap_or(0);
                }
            }
        }
        let request = v1::RunRequest {
            graph: Some(v1::TaskGraph {
                tasks: std::mem::take(&mut self.tasks),
                edges: std::mem::take(&mut self.edges),
            }),
            arguments: std::mem::take(&mut self.arguments),
            scheduler: self.client.scheduler.clone().unwrap_or_default(),
            label: std::mem::take(&mut self.label),
        };
        let graph = request.graph.clone().unwrap_or_default();
        let reply = runtime()?
            .block_on(self.client.proxy().run(request))?
            .into_inner();
        let mut outputs: HashMap<(usize, u32), v1::Array> = HashMap::new();
        for task in &reply.tasks {
            for output in &task.outputs {
                if let Some(v1::call_output::Result::Array(array)) = &output.result {
                    outputs.insert((task.task as usize, output.parameter), array.clone());
                }
            }
        }
        for (b, writer) in self.writer.iter().enumerate() {
            let (Some((task, parameter)), Slot::Write(target)) = (writer, &mut self.slots[b])
            else {
                continue;
            };
            let label = &graph.tasks[*task].label;
            let array = outputs.remove(&(*task, *parameter)).ok_or_else(|| {
                CallError::new(
                    ErrorKind::CommunicationFailed,
                    format!("the proxy returned no value for parameter {parameter} of `{label}`"),
                )
            })?;
            let expected = target.as_ref().len() as u64
                * target.as_ref().element_type().size_bytes().unwrap_or(0);
            if array.data.len() as u64 != expected {
                return Err(CallError::new(
                    ErrorKind::CommunicationFailed,
                    format!(
                        "`{label}` returned {} bytes for parameter {parameter}, expected {expected}",
                        array.data.len()
                    ),
                ));
            }
            target.decode_from(&array.data).map_err(|e| {
                CallError::new(ErrorKind::CommunicationFailed, format!("`{label}`: {e}"))
            })?;
        }
        Ok(Plan::from_reply(&graph, reply))
    }
}

/// What happened to one call of a transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskPlan {
    pub label: String,
    pub function: String,
    pub server: String,
    /// Seconds from the graph's start.
    pub predicted_start: f64,
    pub predicted_finish: f64,
    pub actual_start: f64,
    pub actual_finish: f64,
    /// The server's own account: fetching inputs from storage, waiting, computing.
    pub fetch_seconds: f64,
    pub queue_seconds: f64,
    pub compute_seconds: f64,
    /// The routine's status (LINPACK's `info`).
    pub status: i64,
}

/// A transaction's placement and timing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub graph_id: u64,
    pub scheduler: String,
    pub tasks: Vec<TaskPlan>,
    /// (producer, consumer) of every edge.
    pub edges: Vec<(usize, usize)>,
    pub predicted_makespan: f64,
    pub actual_makespan: f64,
    /// Share of edges whose two calls ran on different servers.
    pub inter_server_ratio: f64,
    /// Seconds the proxy waited for the metaserver's placement.
    pub schedule_seconds: f64,
    /// Calls the proxy issued again after a server failed or lost an input.
    pub tasks_retried: u32,
    /// Finished calls run again because their kept outputs were lost with a server.
    pub regenerated: u32,
    /// Client arrays the proxy uploaded ahead of their calls, as the schedule staged them.
    pub staged_uploads: u32,
    /// Seconds those uploads took, summed (in no task's timing).
    pub staged_upload_seconds: f64,
}

impl Plan {
    fn from_reply(graph: &v1::TaskGraph, reply: v1::RunReply) -> Plan {
        let mut tasks = vec![TaskPlan::default(); graph.tasks.len()];
        for t in reply.tasks {
            let timing = t.timing.unwrap_or_default();
            if let Some(slot) = tasks.get_mut(t.task as usize) {
                *slot = TaskPlan {
                    label: t.label,
                    function: t.function,
                    server: t.server,
                    predicted_start: t.predicted_start,
                    predicted_finish: t.predicted_finish,
                    actual_start: t.actual_start,
                    actual_finish: t.actual_finish,
                    fetch_seconds: timing.fetch_seconds,
                    queue_seconds: timing.queue_seconds,
                    compute_seconds: timing.compute_seconds,
                    status: t.status,
                };
            }
        }
        Plan {
            graph_id: reply.graph_id,
            scheduler: reply.scheduler,
            tasks,
            edges: graph
                .edges
                .iter()
                .map(|e| (e.from_task as usize, e.to_task as usize))
                .collect(),
            predicted_makespan: reply.predicted_makespan,
            actual_makespan: reply.actual_makespan,
            inter_server_ratio: reply.inter_server_ratio,
            schedule_seconds: reply.schedule_seconds,
            tasks_retried: reply.tasks_retried,
            regenerated: reply.regenerated,
            staged_uploads: reply.staged_uploads,
            staged_upload_seconds: reply.staged_upload_seconds,
        }
    }

    /// Calls per server.
    pub fn servers(&self) -> BTreeMap<String, usize> {
        let mut count = BTreeMap::new();
        for t in &self.tasks {
            *count.entry(t.server.clone()).or_insert(0) += 1;
        }
        count
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "graph {} ({}): predicted {:.3} s, actual {:.3} s, inter-server {:.0}%",
            self.graph_id,
            self.scheduler,
            self.predicted_makespan,
            self.actual_makespan,
            self.inter_server_ratio * 100.0
        )?;
        writeln!(
            f,
            "{:<12} {:<22} {:>17} {:>17} {:>9}",
            "task", "server", "predicted (s)", "actual (s)", "compute"
        )?;
        for t in &self.tasks {
            writeln!(
                f,
                "{:<12} {:<22} {:>8.3}-{:<8.3} {:>8.3}-{:<8.3} {:>9.3}",
                t.label,
                t.server,
                t.predicted_start,
                t.predicted_finish,
                t.actual_start,
                t.actual_finish,
                t.compute_seconds
            )?;
        }
        Ok(())
    }
}
