//! Recording a transaction's Network Task graph, with no I/O: each call is checked against
//! its routine's descriptor (given by the caller), linked by an edge to the earlier call that
//! wrote the same buffer, and its input data encoded. The metaserver computes every task's
//! costs from the IDL itself; the graph carries only what the client alone knows: the
//! scalars, the edges, and which outputs it wants back.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ninf_idl::{FunctionInterface, Mode};
use ninf_proto::v1;
use num_complex::Complex64;

use crate::args::{Encoded, check_and_encode_with};
use crate::{Arg, CallError};

/// A client buffer registered with a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buffer(pub(crate) usize);

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
    /// Data kept on the grid: read where it is, written there (docs/data.md).
    Data(super::data_ref::DataRef),
}

impl From<&super::data_ref::DataRef> for TxArg {
    fn from(d: &super::data_ref::DataRef) -> TxArg {
        TxArg::Data(d.clone())
    }
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

/// The recorded graph, for inspection before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedGraph {
    /// Each call's label (`function#index`).
    pub tasks: Vec<String>,
    /// (producer, its parameter name, consumer, its parameter name, bytes).
    pub edges: Vec<(usize, String, usize, String, u64)>,
}

/// A graph being recorded.
#[derive(Debug, Default)]
pub struct Recording {
    tasks: Vec<v1::GraphTask>,
    arguments: Vec<v1::TaskArguments>,
    edges: Vec<v1::GraphEdge>,
    /// Each task's routine.
    interfaces: Vec<Arc<FunctionInterface>>,
    /// The call and parameter that last wrote each buffer.
    writer: Vec<Option<(usize, u32)>>,
    /// Bytes of each array parameter of each call, for the outputs the client gets back.
    sizes: Vec<BTreeMap<u32, u64>>,
    /// The call and parameter that last wrote each data handle, by id.
    data_writer: HashMap<String, (usize, u32)>,
}

impl Recording {
    /// A new buffer; calls name it by the handle.
    pub fn add_buffer(&mut self) -> Buffer {
        self.writer.push(None);
        Buffer(self.writer.len() - 1)
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Calls recorded.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Forgets the buffers from `first` on, which no recorded call names (the binding
    /// registered them for a call that was refused).
    pub(crate) fn truncate_buffers(&mut self, first: usize) {
        self.writer.truncate(first);
    }

    /// The call and parameter whose output is each buffer's final value, by buffer.
    pub fn writers(&self) -> &[Option<(usize, u32)>] {
        &self.writer
    }

    /// Records a call of `interface` with `args`; `views` are the same arguments with each
    /// buffer's current contents, `writable` says which buffers the client lets routines
    /// write. Checked against the descriptor now, so a mistake is reported at its call.
    pub fn record(
        &mut self,
        interface: &Arc<FunctionInterface>,
        args: &[TxArg],
        views: &[Arg<'_>],
        writable: &[bool],
    ) -> Result<(), CallError> {
        self.record_borrowing(interface, args, views, writable, &[])
    }

    /// [`Recording::record`], where `borrowed[i]`, when given, is argument `i`'s memory as
    /// bytes that stay valid while the request lives: an input array sent from there instead
    /// of from a copy made now (checked all the same).
    pub fn record_borrowing(
        &mut self,
        interface: &Arc<FunctionInterface>,
        args: &[TxArg],
        views: &[Arg<'_>],
        writable: &[bool],
        borrowed: &[Option<bytes::Bytes>],
    ) -> Result<(), CallError> {
        let function = &interface.name;
        if let Some(b) = args.iter().find_map(|a| match a {
            TxArg::Buffer(Buffer(b)) if *b >= self.writer.len() => Some(*b),
            _ => None,
        }) {
            return Err(CallError::bad_argument(format!(
                "`{function}`: buffer {b} does not belong to this transaction"
            )));
        }
        // An array an earlier call writes flows server to server: checked, never copied.
        let produced: Vec<bool> = interface
            .parameters
            .iter()
            .zip(args)
            .map(|(p, arg)| {
                matches!(arg, TxArg::Buffer(Buffer(b)) if self.writer[*b].is_some())
                    && p.mode.is_input()
            })
            .collect();
        let lent = |i: usize| borrowed.get(i).cloned().flatten();
        let described: Vec<bool> = produced
            .iter()
            .enumerate()
            .map(|(i, &p)| p || lent(i).is_some())
            .collect();
        let encoded = check_and_encode_with(interface, views, &described, writable)?;
        let scalars = integer_scalars(interface, args);
        let index = self.tasks.len();
        let mut call_arguments = Vec::with_capacity(args.len());
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
            let value = match (value, lent(i)) {
                (Encoded::Bulk(b), Some(data)) if !produced[i] && data.len() as u64 == b.bytes => {
                    v1::ArgumentValue {
                        value: Some(v1::argument_value::Value::Array(v1::Array {
                            element_type: b.element_type,
                            data,
                        })),
                    }
                }
                (Encoded::Value(v), _) => v,
                (Encoded::Bulk(_), _) => v1::ArgumentValue { value: None },
            };
            let mut source = value
                .value
                .is_some()
                .then_some(v1::call_argument::Source::Value(value));
            if let TxArg::Data(data) = arg {
                source = self.data_source(data, p.mode, (index, parameter));
            }
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
            function: function.clone(),
            scalars,
            client_out_bytes: 0,
            data: Vec::new(),
        });
        self.arguments.push(v1::TaskArguments {
            arguments: call_arguments,
            returns: Vec::new(),
        });
        self.interfaces.push(interface.clone());
        self.sizes.push(sizes);
        Ok(())
    }

    /// Where call `index`'s argument `parameter`, data handle `data` of `mode`, comes from:
    /// an edge from the call of this transaction that last wrote the handle, or the handle
    /// itself. A call that writes the handle becomes its last writer; the one before no
    /// longer gives the handle its value.
    fn data_source(
        &mut self,
        data: &super::data_ref::DataRef,
        mode: Mode,
        (index, parameter): (usize, u32),
    ) -> Option<v1::call_argument::Source> {
        let earlier = self.data_writer.get(data.id()).copied();
        let mut reads = mode.is_input();
        if reads && let Some((from, from_parameter)) = earlier {
            self.edges.push(v1::GraphEdge {
                from_task: from as u32,
                from_parameter,
                to_task: index as u32,
                to_parameter: parameter,
                bytes: data.nbytes(),
            });
            reads = false;
        }
        let writes = mode.is_output();
        if writes {
            if let Some((from, from_parameter)) = earlier
                && let Some(v1::CallArgument {
                    source: Some(v1::call_argument::Source::Data(d)),
                }) = self.arguments[from]
                    .arguments
                    .get_mut(from_parameter as usize)
            {
                d.writes = false;
            }
            self.data_writer
                .insert(data.id().to_string(), (index, parameter));
        }
        (reads || writes).then(|| {
            v1::call_argument::Source::Data(v1::DataArgument {
                id: data.id().to_string(),
                reads,
                writes,
            })
        })
    }

    /// The graph recorded so far.
    pub fn graph(&self) -> RecordedGraph {
        let parameter_name = |task: usize, parameter: u32| -> String {
            self.interfaces[task]
                .parameters
                .get(parameter as usize)
                .map_or_else(|| parameter.to_string(), |p| p.name.clone())
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

    /// The request that runs the graph: the client gets back the last value written to
    /// each buffer `wanted` accepts.
    pub fn into_request(
        mut self,
        wanted: impl Fn(Buffer) -> bool,
        scheduler: Option<&str>,
        label: &str,
    ) -> v1::RunRequest {
        for (b, writer) in self.writer.iter().enumerate() {
            let Some((task, parameter)) = *writer else {
                continue;
            };
            let arguments = &mut self.arguments[task];
            if wanted(Buffer(b)) && !arguments.returns.contains(&parameter) {
                arguments.returns.push(parameter);
                self.tasks[task].client_out_bytes +=
                    self.sizes[task].get(&parameter).copied().unwrap_or(0);
            }
        }
        v1::RunRequest {
            graph: Some(v1::TaskGraph {
                tasks: self.tasks,
                edges: self.edges,
            }),
            arguments: self.arguments,
            scheduler: scheduler.unwrap_or_default().to_string(),
            label: label.to_string(),
            // Given when the client sends it.
            transaction_id: String::new(),
            output_region: String::new(),
        }
    }
}

/// Each wanted buffer's final value in a run's reply, checked whole before the caller
/// writes any: `bytes(b)` is buffer `b`'s size if the client wants its value back.
/// `writers` and `graph` are the recording's ([`Recording::writers`], the request's graph).
pub(crate) fn final_values<'r>(
    graph: &v1::TaskGraph,
    reply: &'r v1::RunReply,
    writers: &[Option<(usize, u32)>],
    bytes: impl Fn(usize) -> Option<usize>,
) -> Result<Vec<(usize, &'r [u8])>, CallError> {
    let mut outputs: HashMap<(usize, u32), &[u8]> = HashMap::new();
    for task in &reply.tasks {
        for output in &task.outputs {
            if let Some(v1::call_output::Result::Array(array)) = &output.result {
                outputs.insert((task.task as usize, output.parameter), &array.data[..]);
            }
        }
    }
    let failed = |m: String| CallError::new(crate::ErrorKind::CommunicationFailed, m);
    let mut values = Vec::new();
    for (b, writer) in writers.iter().enumerate() {
        let (Some((task, parameter)), Some(expected)) = (*writer, bytes(b)) else {
            continue;
        };
        let label = graph.tasks.get(task).map_or("?", |t| t.label.as_str());
        let data = outputs.remove(&(task, parameter)).ok_or_else(|| {
            failed(format!(
                "the proxy returned no value for parameter {parameter} of `{label}`"
            ))
        })?;
        if data.len() != expected {
            return Err(failed(format!(
                "`{label}` returned {} bytes for parameter {parameter}, expected {expected}",
                data.len()
            )));
        }
        values.push((b, data));
    }
    Ok(values)
}

/// The call's integer IN scalars by name: the IDL's sizes and costs use them.
fn integer_scalars(interface: &FunctionInterface, args: &[TxArg]) -> HashMap<String, i64> {
    interface
        .parameters
        .iter()
        .zip(args)
        .filter_map(|(p, arg)| match (p.mode, p.is_array(), arg) {
            (Mode::In, false, TxArg::Integer(v)) => Some((p.name.clone(), *v)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ArrayRef;

    fn mmul() -> Arc<FunctionInterface> {
        let text = include_str!("../../../routines/idl/linpack.idl");
        let module = ninf_idl::compile(&ninf_idl::SourceFile::new("linpack.idl", text)).unwrap();
        Arc::new(module.function("mmul").unwrap().clone())
    }

    /// Records `mmul(n, a, b, c)` with the buffers' contents as views.
    fn record_mmul(
        recording: &mut Recording,
        data: &[Vec<f64>],
        [a, b, c]: [Buffer; 3],
        n: i64,
    ) -> Result<(), CallError> {
        let args = [TxArg::Integer(n), a.into(), b.into(), c.into()];
        let views: Vec<Arg<'_>> = args
            .iter()
            .map(|arg| match arg {
                TxArg::Buffer(Buffer(i)) => data
                    .get(*i)
                    .map_or(Arg::Work, |d| Arg::In(ArrayRef::from(&d[..]))),
                TxArg::Integer(v) => Arg::Integer(*v),
                _ => Arg::Work,
            })
            .collect();
        recording.record(&mmul(), &args, &views, &[false, false, false, true])
    }

    #[test]
    fn the_cascade_records_two_edges_and_returns_only_the_last_product() {
        let n = 2;
        let data = vec![vec![1.0; 4]; 7];
        let mut recording = Recording::default();
        let b: Vec<Buffer> = (0..7).map(|_| recording.add_buffer()).collect();
        record_mmul(&mut recording, &data, [b[0], b[1], b[4]], n).unwrap();
        record_mmul(&mut recording, &data, [b[2], b[3], b[5]], n).unwrap();
        record_mmul(&mut recording, &data, [b[4], b[5], b[6]], n).unwrap();
        let graph = recording.graph();
        assert_eq!(graph.tasks, ["mmul#0", "mmul#1", "mmul#2"]);
        assert_eq!(
            graph.edges,
            [
                (0, "C".to_string(), 2, "A".to_string(), 32),
                (1, "C".to_string(), 2, "B".to_string(), 32)
            ]
        );
        let request = recording.into_request(|buffer| buffer == b[6], None, "cascade");
        let tasks = request.graph.unwrap().tasks;
        let returns: Vec<Vec<u32>> = request
            .arguments
            .iter()
            .map(|a| a.returns.clone())
            .collect();
        assert_eq!(returns, [vec![], vec![], vec![3]]);
        assert_eq!(
            tasks.iter().map(|t| t.client_out_bytes).collect::<Vec<_>>(),
            [0, 0, 32]
        );
        assert_eq!(tasks[2].scalars.get("n"), Some(&2));
        // Inputs fed by edges carry no data; the client's go with the call.
        let sources: Vec<bool> = request.arguments[2]
            .arguments
            .iter()
            .map(|a| a.source.is_some())
            .collect();
        assert_eq!(sources, [true, false, false, false]);
    }

    #[test]
    fn a_wrong_size_or_a_foreign_buffer_is_refused_and_nothing_is_recorded() {
        let data = vec![vec![1.0; 4], vec![1.0; 3], vec![0.0; 4]];
        let mut recording = Recording::default();
        let b: Vec<Buffer> = (0..3).map(|_| recording.add_buffer()).collect();
        let e = record_mmul(&mut recording, &data, [b[0], b[1], b[2]], 2).unwrap_err();
        assert!(e.message.contains("B"), "{e}");
        assert!(e.message.contains("4") && e.message.contains("3"), "{e}");
        let e = record_mmul(&mut recording, &data, [b[0], Buffer(9), b[2]], 2).unwrap_err();
        assert!(
            e.message
                .contains("buffer 9 does not belong to this transaction"),
            "{e}"
        );
        assert!(recording.is_empty());
    }
}
