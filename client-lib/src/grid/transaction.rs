//! A transaction of the blocking API: the client's buffers, borrowed until it ends, over a
//! pure [`Recording`]. `call` looks up the routine's descriptor (once per client) and records;
//! `end` runs the graph and writes each buffer's final value back.

use ninf_proto::v1;

use super::async_client::AsyncGridClient;
use super::plan::Plan;
use super::recording::{Buffer, RecordedGraph, Recording, TxArg, final_values};
use super::same_host::{Recorder, recordable_inputs};
use crate::runtime::runtime;
use crate::{Arg, ArrayMut, ArrayRef, CallError, ErrorKind};

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
    client: AsyncGridClient,
    slots: Vec<Slot<'a>>,
    recording: Recording,
    label: String,
    /// Where large inputs are copied as calls are recorded: memory shared with the proxy
    /// once the client has some (docs/bulk-protocol.md, "Recording").
    recorder: Option<Recorder>,
}

impl<'a> Transaction<'a> {
    pub(crate) fn new(client: AsyncGridClient) -> Transaction<'a> {
        let recorder = client.recorder();
        Transaction {
            client,
            slots: Vec::new(),
            recording: Recording::default(),
            label: String::new(),
            recorder,
        }
    }

    fn register(&mut self, slot: Slot<'a>) -> Buffer {
        self.slots.push(slot);
        self.recording.add_buffer()
    }

    /// Registers data the routines only read.
    pub fn input(&mut self, data: impl Into<ArrayRef<'a>>) -> Buffer {
        self.register(Slot::Read(data.into()))
    }

    /// Registers a buffer the routines may read and write; after `end` it holds the value
    /// the last call that wrote it produced.
    pub fn buffer(&mut self, data: impl Into<ArrayMut<'a>>) -> Buffer {
        self.register(Slot::Write(data.into()))
    }

    /// Registers data the routines may overwrite although the client does not need the
    /// result (a matrix `dgefa` factors in place only for `dgesl`): its initial value is sent,
    /// its final value stays on the servers and is deleted with the other intermediates.
    pub fn scratch(&mut self, data: impl Into<ArrayRef<'a>>) -> Buffer {
        self.register(Slot::Scratch(data.into()))
    }

    /// Names the transaction in the metaserver's records.
    pub fn set_label(&mut self, label: &str) {
        self.label = label.to_string();
    }

    /// Records a call. Its arguments are checked against the interface now (count, types,
    /// sizes), so a mistake is reported at the call that made it.
    pub fn call(&mut self, function: &str, args: &[TxArg]) -> Result<(), CallError> {
        let interface = self.client.describe_blocking(function)?;
        let slot = |b: usize| {
            self.slots.get(b).ok_or_else(|| {
                CallError::bad_argument(format!(
                    "`{function}`: buffer {b} does not belong to this transaction"
                ))
            })
        };
        let mut views = Vec::with_capacity(args.len());
        let mut writable = Vec::with_capacity(args.len());
        for arg in args {
            let (view, can_write) = match arg {
                TxArg::Integer(v) => (Arg::Integer(*v), false),
                TxArg::Real(v) => (Arg::Real(*v), false),
                TxArg::Complex(v) => (Arg::Complex(*v), false),
                TxArg::Text(s) => (Arg::Text(s), false),
                TxArg::File(p) => (Arg::File(p), false),
                TxArg::Buffer(Buffer(b)) => (Arg::In(slot(*b)?.view()), slot(*b)?.writable()),
                TxArg::Work => (Arg::Work, false),
                TxArg::Data(d) => (
                    Arg::Data {
                        element_type: d.element_type(),
                        len: d.len(),
                    },
                    true,
                ),
            };
            views.push(view);
            writable.push(can_write);
        }
        // The copy recording makes anyway goes into memory shared with the proxy.
        let copied: Vec<Option<bytes::Bytes>> = match self.recorder.as_mut() {
            Some(recorder) => recordable_inputs(&interface, args, self.recording.writers())
                .map(|b| recorder.copy(&self.slots.get(b?)?.view().le_bytes()))
                .collect(),
            None => Vec::new(),
        };
        self.recording
            .record_borrowing(&interface, args, &views, &writable, &copied)
    }

    /// The graph recorded so far.
    pub fn graph(&self) -> RecordedGraph {
        self.recording.graph()
    }

    /// Sends the graph to the proxy, waits for it to finish and writes every buffer's final
    /// value back. Returns the plan: where each call ran, predicted and actual times.
    #[doc(alias = "transaction_end")]
    pub fn end(self) -> Result<Plan, CallError> {
        let Transaction {
            client,
            mut slots,
            recording,
            label,
            ..
        } = self;
        if recording.is_empty() {
            return Ok(Plan::default());
        }
        let writers = recording.writers().to_vec();
        let wanted = |Buffer(b): Buffer| matches!(slots.get(b), Some(Slot::Write(_)));
        let request = recording.into_request(wanted, client.scheduler(), &label);
        let graph = request.graph.clone().unwrap_or_default();
        let reply = runtime()?.block_on(client.run(request))?;
        write_back(&graph, &reply, &writers, &mut slots)?;
        Ok(Plan::from_reply(&graph, reply))
    }
}

/// Decodes each writable buffer's final value from the reply into the client's memory,
/// once every value has been found and checked.
fn write_back(
    graph: &v1::TaskGraph,
    reply: &v1::RunReply,
    writers: &[Option<(usize, u32)>],
    slots: &mut [Slot<'_>],
) -> Result<(), CallError> {
    let bytes = |b: usize| match slots.get(b) {
        Some(Slot::Write(target)) => {
            let target = target.as_ref();
            Some(target.len() * target.element_type().size_bytes().unwrap_or(0) as usize)
        }
        _ => None,
    };
    let values = final_values(graph, reply, writers, bytes)?;
    for (b, data) in values {
        if let Some(Slot::Write(target)) = slots.get_mut(b) {
            target.decode_from(data).map_err(|e| {
                CallError::new(ErrorKind::CommunicationFailed, format!("a result: {e}"))
            })?;
        }
    }
    Ok(())
}
