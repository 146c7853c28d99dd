//! Transactions over memory another language owns: the C and Python clients' arrays, named
//! by address as Ninf's C API names them. The same memory passed to two calls is one buffer,
//! so an edge joins the call that wrote it to a later call that reads it; every array a call
//! writes (OUT, INOUT) receives its final value in place when the run ends, and none is
//! written if the run fails or is dropped first.
//!
//! The binding promises what Rust's borrows promise in [`super::Transaction`]: each array
//! stays alive, the same size, and untouched by anyone else until its run has ended or
//! been dropped (the Python client keeps a reference to every array in the run's handle).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use ninf_idl::{ElementType, FunctionInterface};
use ninf_proto::v1;
use num_complex::{Complex32, Complex64};

use super::async_client::AsyncGridClient;
use super::plan::Plan;
use super::recording::{Buffer, RecordedGraph, Recording, TxArg, final_values};
use super::same_host::{Recorder, recordable_inputs};
use crate::{Arg, ArrayMut, ArrayRef, CallError, ErrorKind};

/// `$make!(Variant, element)` for the array view variant of an element type (`new` admits
/// only array types; anything else reads as double, which `new` never lets through).
macro_rules! by_element_type {
    ($t:expr, $make:ident) => {
        match $t {
            ElementType::Char => $make!(Char, u8),
            ElementType::Short => $make!(Short, i16),
            ElementType::Int => $make!(Int, i32),
            ElementType::Long => $make!(Long, i64),
            ElementType::Float => $make!(Float, f32),
            ElementType::Scomplex => $make!(Scomplex, Complex32),
            ElementType::Dcomplex => $make!(Dcomplex, Complex64),
            _ => $make!(Double, f64),
        }
    };
}

/// An array in memory the caller owns.
#[derive(Debug, Clone, Copy)]
pub struct ForeignArray {
    address: usize,
    len: usize,
    element_type: ElementType,
    writable: bool,
}

impl ForeignArray {
    /// An array of `len` elements of `element_type` at `address`.
    ///
    /// # Safety
    /// `address` must point to `len` initialised elements of `element_type`, valid for
    /// reads (and for writes when `writable`) for as long as any transaction or run holding
    /// this array exists, and nobody else may write it meanwhile.
    pub unsafe fn new(
        address: *mut u8,
        len: usize,
        element_type: ElementType,
        writable: bool,
    ) -> Result<ForeignArray, CallError> {
        let size = element_type.size_bytes().ok_or_else(|| {
            CallError::bad_argument(format!("{} cannot be an array", element_type.keyword()))
        })? as usize;
        // Complex numbers align as their parts do.
        let complex = matches!(element_type, ElementType::Scomplex | ElementType::Dcomplex);
        let align = if complex { size / 2 } else { size };
        if len > 0 && (address.is_null() || !(address as usize).is_multiple_of(align)) {
            return Err(CallError::bad_argument(format!(
                "an array of {} at {address:p} is not aligned to {align} bytes",
                element_type.keyword()
            )));
        }
        Ok(ForeignArray {
            address: address as usize,
            len,
            element_type,
            writable,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the run may write it (the routine's OUT and INOUT arrays).
    pub fn writable(&self) -> bool {
        self.writable
    }

    fn bytes(&self) -> usize {
        self.len * self.element_type.size_bytes().unwrap_or(1) as usize
    }

    pub(crate) fn overlaps(&self, other: &ForeignArray) -> bool {
        self.address < other.address + other.bytes() && other.address < self.address + self.bytes()
    }

    /// What makes two arrays the same buffer: the same memory, read as the same type.
    fn identity(&self) -> (usize, usize, ElementType) {
        (self.address, self.bytes(), self.element_type)
    }

    /// The elements, read-only.
    pub(crate) fn view(&self) -> ArrayRef<'_> {
        // An empty array may have a dangling address; a slice needs an aligned non-null one.
        macro_rules! slice {
            ($variant:ident, $t:ty) => {
                ArrayRef::$variant(if self.len == 0 {
                    &[]
                } else {
                    // SAFETY: `new`'s contract: `len` initialised, aligned elements, alive.
                    unsafe { std::slice::from_raw_parts(self.address as *const $t, self.len) }
                })
            };
        }
        by_element_type!(self.element_type, slice)
    }

    /// The array's memory as bytes that `keep_alive` keeps valid.
    /// The array's bytes as they lie in memory.
    fn memory(&self) -> &[u8] {
        if self.bytes() == 0 {
            return &[];
        }
        // SAFETY: `new`'s contract: `len` initialised elements, alive and unwritten by
        // anyone else while the transaction holds the array.
        unsafe { std::slice::from_raw_parts(self.address as *const u8, self.bytes()) }
    }

    fn lent(&self, keep_alive: Arc<dyn Send + Sync>) -> LentMemory {
        LentMemory {
            address: self.address,
            bytes: self.bytes(),
            _keep_alive: keep_alive,
        }
    }

    /// The elements, to write the run's results into.
    ///
    /// # Safety
    /// The array must be writable and no other view of it may be alive.
    pub(crate) unsafe fn view_mut(&mut self) -> ArrayMut<'_> {
        macro_rules! slice {
            ($variant:ident, $t:ty) => {
                ArrayMut::$variant(if self.len == 0 {
                    &mut []
                } else {
                    // SAFETY: the caller's and `new`'s contracts.
                    unsafe { std::slice::from_raw_parts_mut(self.address as *mut $t, self.len) }
                })
            };
        }
        by_element_type!(self.element_type, slice)
    }
}

/// An array's memory lent to a request ([`ForeignTransaction::call_reading_when_sent`]).
struct LentMemory {
    address: usize,
    bytes: usize,
    _keep_alive: Arc<dyn Send + Sync>,
}

impl AsRef<[u8]> for LentMemory {
    fn as_ref(&self) -> &[u8] {
        if self.bytes == 0 {
            return &[];
        }
        // SAFETY: `ForeignArray::new`'s and `call_reading_when_sent`'s contracts: the memory
        // is alive while `_keep_alive` is, and nobody writes it while the run reads it.
        unsafe { std::slice::from_raw_parts(self.address as *const u8, self.bytes) }
    }
}

/// One argument of a foreign call, in IDL order.
#[derive(Debug, Clone)]
pub enum ForeignArg {
    Integer(i64),
    Real(f64),
    Complex(Complex64),
    Text(String),
    File(PathBuf),
    Array(ForeignArray),
    /// A WORK array: the server allocates it.
    Work,
    /// Data kept on the grid (docs/data.md).
    Data(super::DataRef),
}

/// A transaction being recorded over foreign memory. A single call is a transaction of one.
#[derive(Debug, Default)]
pub struct ForeignTransaction {
    recording: Recording,
    arrays: Vec<ForeignArray>,
    by_address: HashMap<(usize, usize, ElementType), Buffer>,
    /// Each array's (address, buffer), in address order, and the largest array's bytes:
    /// only arrays starting less than that before an array can overlap it.
    starts: BTreeSet<(usize, usize)>,
    largest: usize,
    label: String,
    /// The memory (address, bytes) whose final value stays on the grid.
    scratch: HashSet<(usize, usize)>,
    /// Where large inputs are copied as calls are recorded: memory shared with the proxy.
    recorder: Option<Recorder>,
}

impl ForeignTransaction {
    pub fn new() -> ForeignTransaction {
        ForeignTransaction::default()
    }

    /// A transaction for `client`: once the client shares memory with a proxy on its host
    /// (after its first run with large arrays), the copy [`ForeignTransaction::call`]
    /// makes of each large input goes straight into that memory, and the run names it
    /// there rather than copying it again.
    pub fn for_client(client: &AsyncGridClient) -> ForeignTransaction {
        ForeignTransaction {
            recorder: client.recorder(),
            ..ForeignTransaction::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.recording.is_empty()
    }

    /// Calls recorded.
    pub fn len(&self) -> usize {
        self.recording.len()
    }

    /// Names the transaction in the metaserver's records.
    pub fn set_label(&mut self, label: &str) {
        self.label = label.to_string();
    }

    /// The graph recorded so far.
    pub fn graph(&self) -> RecordedGraph {
        self.recording.graph()
    }

    /// Keeps the final value of `array`'s memory on the grid: calls may write it and later
    /// calls read it there, but nothing is written back into it, so it never travels to
    /// the client (the run deletes it with the other intermediates). Before or after the
    /// calls that name it, until the run starts.
    pub fn scratch(&mut self, array: ForeignArray) {
        self.scratch.insert((array.address, array.bytes()));
    }

    /// Records a call of `interface`. Checked now (count, types, sizes, writability, arrays
    /// that partly overlap another of the transaction's); a refused call records nothing.
    /// Its input arrays are copied now: the caller may change them once this returns.
    pub fn call(
        &mut self,
        interface: &Arc<FunctionInterface>,
        args: &[ForeignArg],
    ) -> Result<(), CallError> {
        self.record_call(interface, args, None)
    }

    /// [`ForeignTransaction::call`] without copying its input arrays: the request reads them
    /// where they are when the run is sent, one copy fewer for a call that is sent at once.
    /// The request's bytes hold a clone of `keep_alive`, which must keep the arrays' memory
    /// alive (they may outlive the run inside the transport).
    ///
    /// # Safety
    /// Nobody may write the arrays until the run has ended or been dropped.
    pub unsafe fn call_reading_when_sent(
        &mut self,
        interface: &Arc<FunctionInterface>,
        args: &[ForeignArg],
        keep_alive: Arc<dyn Send + Sync>,
    ) -> Result<(), CallError> {
        self.record_call(interface, args, Some(keep_alive))
    }

    fn record_call(
        &mut self,
        interface: &Arc<FunctionInterface>,
        args: &[ForeignArg],
        keep_alive: Option<Arc<dyn Send + Sync>>,
    ) -> Result<(), CallError> {
        self.check_overlaps(interface, args)?;
        let first_new = self.arrays.len();
        let mut tx_args = Vec::with_capacity(args.len());
        for arg in args {
            tx_args.push(match arg {
                ForeignArg::Integer(v) => TxArg::Integer(*v),
                ForeignArg::Real(v) => TxArg::Real(*v),
                ForeignArg::Complex(v) => TxArg::Complex(*v),
                ForeignArg::Text(s) => TxArg::Text(s.clone()),
                ForeignArg::File(p) => TxArg::File(p.clone()),
                ForeignArg::Array(array) => TxArg::Buffer(self.buffer(*array)),
                ForeignArg::Work => TxArg::Work,
                ForeignArg::Data(d) => TxArg::Data(d.clone()),
            });
        }
        let borrowed: Vec<Option<bytes::Bytes>> = match &keep_alive {
            // Elements go on the wire little-endian: memory is the wire form only there.
            Some(keep) if cfg!(target_endian = "little") => tx_args
                .iter()
                .map(|arg| match arg {
                    TxArg::Buffer(Buffer(b)) => {
                        Some(bytes::Bytes::from_owner(self.arrays[*b].lent(keep.clone())))
                    }
                    _ => None,
                })
                .collect(),
            None if cfg!(target_endian = "little") => self.copy_into_recorder(interface, &tx_args),
            _ => Vec::new(),
        };
        let views: Vec<Arg<'_>> = args
            .iter()
            .zip(&tx_args)
            .map(|(arg, tx_arg)| match (arg, tx_arg) {
                (ForeignArg::Integer(v), _) => Arg::Integer(*v),
                (ForeignArg::Real(v), _) => Arg::Real(*v),
                (ForeignArg::Complex(v), _) => Arg::Complex(*v),
                (ForeignArg::Text(s), _) => Arg::Text(s),
                (ForeignArg::File(p), _) => Arg::File(p),
                (ForeignArg::Array(_), TxArg::Buffer(Buffer(b))) => Arg::In(self.arrays[*b].view()),
                (ForeignArg::Data(d), _) => Arg::Data {
                    element_type: d.element_type(),
                    len: d.len(),
                },
                _ => Arg::Work,
            })
            .collect();
        let writable: Vec<bool> = args
            .iter()
            .map(|a| {
                matches!(a, ForeignArg::Array(array) if array.writable)
                    || matches!(a, ForeignArg::Data(_))
            })
            .collect();
        let recorded = self
            .recording
            .record_borrowing(interface, &tx_args, &views, &writable, &borrowed);
        if recorded.is_err() {
            self.forget_from(first_new);
        }
        recorded
    }

    /// Copies of the call's large inputs in the recorder's shared memory, by argument: the
    /// copy recording makes anyway. None without a recorder.
    fn copy_into_recorder(
        &mut self,
        interface: &FunctionInterface,
        tx_args: &[TxArg],
    ) -> Vec<Option<bytes::Bytes>> {
        let Some(recorder) = self.recorder.as_mut() else {
            return Vec::new();
        };
        recordable_inputs(interface, tx_args, self.recording.writers())
            .map(|b| recorder.copy(self.arrays.get(b?)?.memory()))
            .collect()
    }

    /// The buffer standing for this memory: the same one each time the same memory comes.
    fn buffer(&mut self, array: ForeignArray) -> Buffer {
        let key = array.identity();
        if let Some(&buffer) = self.by_address.get(&key) {
            if array.writable {
                self.arrays[buffer.0].writable = true;
            }
            return buffer;
        }
        let buffer = self.recording.add_buffer();
        self.arrays.push(array);
        self.by_address.insert(key, buffer);
        self.starts.insert((array.address, buffer.0));
        self.largest = self.largest.max(array.bytes());
        buffer
    }

    /// Drops the buffers a refused call added, so the transaction is as it was.
    fn forget_from(&mut self, first_new: usize) {
        self.arrays.truncate(first_new);
        self.by_address.retain(|_, b| b.0 < first_new);
        self.starts.retain(|&(_, b)| b < first_new);
        self.recording.truncate_buffers(first_new);
    }

    /// Memory that partly overlaps another array would make the dataflow wrong (a call
    /// would read a value another call has changed underneath): refused when either side
    /// is written.
    fn check_overlaps(
        &self,
        interface: &FunctionInterface,
        args: &[ForeignArg],
    ) -> Result<(), CallError> {
        let arrays: Vec<(&str, bool, &ForeignArray)> = interface
            .parameters
            .iter()
            .zip(args)
            .filter_map(|(p, a)| match a {
                ForeignArg::Array(array) => Some((p.name.as_str(), p.mode.is_output(), array)),
                _ => None,
            })
            .collect();
        let written = |b: usize| self.recording.writers().get(b).is_some_and(Option::is_some);
        for (i, (name, writes, array)) in arrays.iter().enumerate() {
            let from = array.address.saturating_sub(self.largest);
            let earlier = self
                .starts
                .range((from, 0)..(array.address + array.bytes(), 0))
                .filter(|&&(_, b)| *writes || written(b))
                .map(|&(_, b)| &self.arrays[b]);
            let in_call = arrays[..i]
                .iter()
                .filter(|(_, other_writes, _)| *writes || *other_writes)
                .map(|(_, _, other)| *other);
            if let Some(other) = earlier
                .chain(in_call)
                .find(|other| array.overlaps(other) && array.identity() != other.identity())
            {
                return Err(CallError::bad_argument(format!(
                    "argument `{name}` of `{}` overlaps another array of this transaction \
                     ({} bytes at {:#x} against {} bytes at {:#x}) without being the same \
                     array; pass whole arrays, or copies",
                    interface.name,
                    array.bytes(),
                    array.address,
                    other.bytes(),
                    other.address
                )));
            }
        }
        Ok(())
    }

    /// The request to run, and what to write back when it returns.
    pub fn into_run(self, scheduler: Option<&str>) -> ForeignRun {
        let ForeignTransaction {
            recording,
            mut arrays,
            label,
            scratch,
            ..
        } = self;
        // The run writes nothing into scratch memory.
        for array in &mut arrays {
            if scratch.contains(&(array.address, array.bytes())) {
                array.writable = false;
            }
        }
        let writers = recording.writers().to_vec();
        let wanted = |Buffer(b): Buffer| arrays.get(b).is_some_and(|a| a.writable);
        let request = recording.into_request(wanted, scheduler, &label);
        ForeignRun {
            graph: request.graph.clone().unwrap_or_default(),
            request,
            writers,
            arrays,
        }
    }
}

/// A recorded transaction ready to run.
#[derive(Debug)]
pub struct ForeignRun {
    request: v1::RunRequest,
    graph: v1::TaskGraph,
    writers: Vec<Option<(usize, u32)>>,
    arrays: Vec<ForeignArray>,
}

impl ForeignRun {
    /// Runs the graph on the grid (once), without writing anything back yet.
    pub async fn send(&mut self, client: &AsyncGridClient) -> Result<v1::RunReply, CallError> {
        if self.graph.tasks.is_empty() {
            return Ok(v1::RunReply::default());
        }
        client.run(std::mem::take(&mut self.request)).await
    }

    /// Writes every written array's final value from `reply` into the caller's memory, and
    /// says where each call ran. Nothing is written if a value is missing or the wrong size.
    pub fn finish(mut self, reply: v1::RunReply) -> Result<Plan, CallError> {
        let arrays = &self.arrays;
        let bytes = |b: usize| {
            arrays
                .get(b)
                .filter(|a| a.writable)
                .map(ForeignArray::bytes)
        };
        let values = final_values(&self.graph, &reply, &self.writers, bytes)?;
        for (b, data) in values {
            // SAFETY: written buffers are writable (the descriptor check refuses others),
            // and this is the only view of the array alive.
            let mut view = unsafe { self.arrays[b].view_mut() };
            view.decode_from(data).map_err(|e| {
                CallError::new(ErrorKind::CommunicationFailed, format!("a result: {e}"))
            })?;
        }
        Ok(Plan::from_reply(&self.graph, reply))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn linpack(name: &str) -> Arc<FunctionInterface> {
        let text = include_str!("../../../routines/idl/linpack.idl");
        let module = ninf_idl::compile(&ninf_idl::SourceFile::new("linpack.idl", text)).unwrap();
        Arc::new(module.function(name).unwrap().clone())
    }

    fn array(data: &mut [f64]) -> ForeignArg {
        // SAFETY: the tests' vectors outlive their transactions.
        ForeignArg::Array(unsafe {
            ForeignArray::new(
                data.as_mut_ptr().cast(),
                data.len(),
                ElementType::Double,
                true,
            )
            .unwrap()
        })
    }

    /// Records the seed's three products E = A B, F = C D, G = E F over the arrays of `m`;
    /// with `scratch`, E is marked before the call that writes it and F after it.
    fn record_cascade(tx: &mut ForeignTransaction, m: &mut [Vec<f64>; 7], scratch: bool) {
        let mmul = linpack("mmul");
        let [a, b, c, d, e, f, g] = m.each_mut().map(|v| array(v));
        let mark = |tx: &mut ForeignTransaction, arg: &ForeignArg| {
            if let (true, ForeignArg::Array(memory)) = (scratch, arg) {
                tx.scratch(*memory);
            }
        };
        let n = ForeignArg::Integer(2);
        mark(tx, &e);
        tx.call(&mmul, &[n.clone(), a, b, e.clone()]).unwrap();
        tx.call(&mmul, &[n.clone(), c, d, f.clone()]).unwrap();
        mark(tx, &f);
        tx.call(&mmul, &[n, e, f, g]).unwrap();
    }

    /// The outputs each task of the request returns to the client.
    fn returns(run: &ForeignRun) -> Vec<Vec<u32>> {
        let arguments = run.request.arguments.iter();
        arguments.map(|a| a.returns.clone()).collect()
    }

    /// The bytes the request carries for argument `parameter` of task `task`.
    fn sent_bytes(run: &ForeignRun, task: usize, parameter: usize) -> Option<bytes::Bytes> {
        match &run.request.arguments[task].arguments[parameter].source {
            Some(v1::call_argument::Source::Value(v1::ArgumentValue {
                value: Some(v1::argument_value::Value::Array(array)),
            })) => Some(array.data.clone()),
            _ => None,
        }
    }

    #[test]
    fn a_call_sent_at_once_lends_its_inputs_memory_and_a_recorded_one_copies_it() {
        let mmul = linpack("mmul");
        let mut m: [Vec<f64>; 7] = std::array::from_fn(|i| vec![i as f64; 4]);
        let [a, b, c, d, e, f, g] = m.each_mut().map(|v| array(v));
        let keep_alive: Arc<dyn Send + Sync> = Arc::new(());
        let mut tx = ForeignTransaction::new();
        let n = ForeignArg::Integer(2);
        tx.call(&mmul, &[n.clone(), a.clone(), b, e.clone()])
            .unwrap();
        // SAFETY: the test's vectors outlive the run and nobody writes them.
        unsafe {
            tx.call_reading_when_sent(&mmul, &[n.clone(), c, d, f], keep_alive.clone())
                .unwrap();
            // A product of the first one's output: an edge, nothing lent for it.
            tx.call_reading_when_sent(&mmul, &[n, e, a, g], keep_alive.clone())
                .unwrap();
        }
        let run = tx.into_run(None);
        let address = |v: &Vec<f64>| v.as_ptr() as usize;
        let recorded = sent_bytes(&run, 0, 1).unwrap();
        assert_ne!(
            recorded.as_ptr() as usize,
            address(&m[0]),
            "copied when recorded"
        );
        assert_eq!(recorded, bytemuck::cast_slice::<f64, u8>(&m[0]));
        let lent = [
            sent_bytes(&run, 1, 1).unwrap(),
            sent_bytes(&run, 1, 2).unwrap(),
        ];
        assert_eq!(lent[0].as_ptr() as usize, address(&m[2]));
        assert_eq!(lent[1].as_ptr() as usize, address(&m[3]));
        assert_eq!(lent[1], bytemuck::cast_slice::<f64, u8>(&m[3]));
        assert!(
            sent_bytes(&run, 2, 1).is_none(),
            "E flows from the first call"
        );
        assert_eq!(
            sent_bytes(&run, 2, 2).unwrap().as_ptr() as usize,
            address(&m[0])
        );
        // Each lent array holds the keep-alive until the request's bytes are gone.
        assert_eq!(Arc::strong_count(&keep_alive), 4);
        drop(lent);
        drop(run);
        assert_eq!(Arc::strong_count(&keep_alive), 1);
    }

    #[test]
    fn the_same_memory_is_one_buffer_and_links_the_calls_that_share_it() {
        let mut m: [Vec<f64>; 7] = std::array::from_fn(|_| vec![1.0; 4]);
        let mut tx = ForeignTransaction::new();
        record_cascade(&mut tx, &mut m, false);
        let graph = tx.graph();
        assert_eq!(
            graph.edges,
            [
                (0, "C".to_string(), 2, "A".to_string(), 32),
                (1, "C".to_string(), 2, "B".to_string(), 32)
            ]
        );
        // Every written array comes back (as Ninf's C API writes each in place).
        let run = tx.into_run(None);
        assert_eq!(returns(&run), [vec![3], vec![3], vec![3]]);
    }

    #[test]
    fn scratch_memory_stays_on_the_grid_and_what_an_earlier_call_wrote_is_not_sent() {
        let mut m: [Vec<f64>; 7] = std::array::from_fn(|_| vec![1.0; 4]);
        let mut tx = ForeignTransaction::new();
        record_cascade(&mut tx, &mut m, true);
        let run = tx.into_run(None);
        assert_eq!(returns(&run), [vec![], vec![], vec![3]]);
        let sent = |task: usize, parameter: usize| {
            run.request.arguments[task].arguments[parameter]
                .source
                .is_some()
        };
        assert!(sent(0, 1) && sent(0, 2) && sent(1, 1) && sent(1, 2));
        assert!(
            !sent(2, 1) && !sent(2, 2),
            "the edges' arrays travel server to server"
        );
        // Nothing is expected back for the scratch arrays, so a reply without them is whole.
        assert!(!run.arrays[run.writers.iter().position(|w| *w == Some((0, 3))).unwrap()].writable);
    }

    #[test]
    fn a_partly_overlapping_written_array_or_a_wrong_size_is_refused_and_nothing_is_kept() {
        let mmul = linpack("mmul");
        let mut whole = [0.0; 8];
        let mut input = vec![1.0; 4];
        let mut tx = ForeignTransaction::new();
        let n = ForeignArg::Integer(2);
        let (first, _) = whole.split_at_mut(4);
        let shifted = ForeignArg::Array(unsafe {
            ForeignArray::new(
                first.as_mut_ptr().add(2).cast(),
                4,
                ElementType::Double,
                true,
            )
            .unwrap()
        });
        tx.call(
            &mmul,
            &[
                n.clone(),
                array(&mut input),
                array(&mut input),
                array(first),
            ],
        )
        .unwrap();
        let e = tx
            .call(
                &mmul,
                &[n.clone(), array(&mut input), array(&mut input), shifted],
            )
            .unwrap_err();
        assert!(e.message.contains("argument `C` of `mmul` overlaps"), "{e}");
        let mut short = vec![0.0; 3];
        let e = tx
            .call(
                &mmul,
                &[n, array(&mut input), array(&mut short), array(&mut input)],
            )
            .unwrap_err();
        assert!(e.message.contains("`B`") && e.message.contains('3'), "{e}");
        assert_eq!(tx.graph().tasks.len(), 1);
        assert_eq!(tx.arrays.len(), 2);
    }

    #[test]
    fn a_read_only_array_cannot_receive_a_result() {
        let mmul = linpack("mmul");
        let mut data = vec![1.0; 4];
        let read_only = ForeignArg::Array(unsafe {
            ForeignArray::new(data.as_mut_ptr().cast(), 4, ElementType::Double, false).unwrap()
        });
        let mut input = vec![1.0; 4];
        let mut tx = ForeignTransaction::new();
        let e = tx
            .call(
                &mmul,
                &[
                    ForeignArg::Integer(2),
                    array(&mut input),
                    array(&mut input),
                    read_only,
                ],
            )
            .unwrap_err();
        assert!(e.message.contains("mutable array"), "{e}");
    }
}
