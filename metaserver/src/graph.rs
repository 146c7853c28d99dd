//! Turning a Network Task graph from the wire into the schedulers' form, checked against the
//! routines' interface descriptors: every task's routine must be known, its costs come from the
//! IDL and the task's scalars, and every edge must join an OUT/INOUT array of its producer to an
//! IN/INOUT array of its consumer of the same type and the same size. A graph that fails any
//! check is refused before anything runs, with a message naming the task, parameter and sizes.

use std::collections::HashSet;

use ninf_idl::{FunctionInterface, Mode};
use ninf_proto::v1;
use ninf_scheduling::{ClientInput, GraphError, ResidentInput, Task, TaskGraph};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphRejection {
    #[error("the graph has no tasks")]
    Empty,
    #[error("the graph has {tasks} tasks; the limit is {limit}")]
    TooLarge { tasks: usize, limit: usize },
    #[error("task {task} (`{label}`): no server has registered `{function}`")]
    UnknownRoutine {
        task: usize,
        label: String,
        function: String,
    },
    #[error("task {task} (`{label}`): {reason}")]
    Cost {
        task: usize,
        label: String,
        reason: String,
    },
    #[error("edge {edge}: {reason}")]
    Edge { edge: usize, reason: String },
    #[error("task {task} (`{label}`): {reason}")]
    Data {
        task: usize,
        label: String,
        reason: String,
    },
    #[error("{0}")]
    Structure(#[from] GraphError),
}

/// Checks `graph` and computes its tasks' costs; `describe` finds a routine's descriptor,
/// `locate` the index in the grid of a server that is up, by its address (for data kept
/// on the grid), and `same_host` the other servers up on a server's host (by index).
pub fn check_graph<'a>(
    graph: &v1::TaskGraph,
    limit: usize,
    describe: impl Fn(&str) -> Option<&'a FunctionInterface>,
    (locate, same_host): (impl Fn(&str) -> Option<usize>, impl Fn(usize) -> Vec<usize>),
) -> Result<TaskGraph, GraphRejection> {
    if graph.tasks.is_empty() {
        return Err(GraphRejection::Empty);
    }
    if graph.tasks.len() > limit {
        return Err(GraphRejection::TooLarge {
            tasks: graph.tasks.len(),
            limit,
        });
    }
    let mut interfaces = Vec::with_capacity(graph.tasks.len());
    for (i, task) in graph.tasks.iter().enumerate() {
        let interface = describe(&task.function).ok_or_else(|| GraphRejection::UnknownRoutine {
            task: i,
            label: task.label.clone(),
            function: task.function.clone(),
        })?;
        interfaces.push(interface);
    }
    // Bytes of each task's inputs that arrive by edges rather than from the client.
    let mut fed_bytes = vec![0u64; graph.tasks.len()];
    let mut fed = HashSet::new();
    let mut edges = Vec::with_capacity(graph.edges.len());
    for (e, edge) in graph.edges.iter().enumerate() {
        let produced = check_edge(graph, &interfaces, e, &mut fed)?;
        let (from, to) = (edge.from_task as usize, edge.to_task as usize);
        fed_bytes[to] = fed_bytes[to].saturating_add(produced);
        edges.push(ninf_scheduling::Edge {
            from,
            to,
            bytes: produced,
        });
    }
    let mut tasks = Vec::with_capacity(graph.tasks.len());
    let mut client_inputs = Vec::with_capacity(graph.tasks.len());
    let mut resident_inputs = Vec::with_capacity(graph.tasks.len());
    let mut pinned = Vec::with_capacity(graph.tasks.len());
    let mut pinned_with = Vec::with_capacity(graph.tasks.len());
    for (i, (task, interface)) in graph.tasks.iter().zip(&interfaces).enumerate() {
        let resident = resident_inputs_of(i, task, interface, &mut fed, &locate)?;
        let pin = sticky_pin(i, task, &locate)?;
        pinned_with.push(match pin {
            Some(at) if reads_sticky_only(task) => same_host(at),
            _ => Vec::new(),
        });
        pinned.push(pin);
        let resident_bytes: u64 = resident.iter().map(|r| r.bytes).sum();
        client_inputs.push(inputs_from_client(i, task, interface, &fed)?);
        tasks.push(costed_task(
            i,
            task,
            interface,
            fed_bytes[i].saturating_add(resident_bytes),
        )?);
        resident_inputs.push(resident);
    }
    let graph = TaskGraph {
        tasks,
        edges,
        client_inputs,
        resident_inputs,
        pinned,
        pinned_with,
    };
    graph.validate()?;
    Ok(graph)
}

/// Checks edge `e`: it joins an OUT/INOUT array of its producer to an IN/INOUT array of its
/// consumer, of the same type and size, which no other edge feeds. Returns its bytes.
fn check_edge<'b>(
    graph: &v1::TaskGraph,
    interfaces: &[&'b FunctionInterface],
    e: usize,
    fed: &mut HashSet<(usize, u32)>,
) -> Result<u64, GraphRejection> {
    let edge = &graph.edges[e];
    let bad = |reason: String| GraphRejection::Edge { edge: e, reason };
    let (from, to) = (edge.from_task as usize, edge.to_task as usize);
    let n = graph.tasks.len();
    if from >= n || to >= n {
        return Err(bad(format!(
            "joins task {from} to task {to}, but the graph has {n} tasks"
        )));
    }
    let (producer, consumer) = (&graph.tasks[from], &graph.tasks[to]);
    let parameter = |f: &'b FunctionInterface, index: u32, label: &str| {
        f.parameters.get(index as usize).ok_or_else(|| {
            bad(format!(
                "`{label}` ({}) has {} parameters, not {}",
                f.name,
                f.parameters.len(),
                index + 1
            ))
        })
    };
    let out = parameter(interfaces[from], edge.from_parameter, &producer.label)?;
    let input = parameter(interfaces[to], edge.to_parameter, &consumer.label)?;
    let what = format!(
        "`{}`.{} -> `{}`.{}",
        producer.label, out.name, consumer.label, input.name
    );
    if !out.is_array() || !matches!(out.mode, Mode::Out | Mode::InOut) {
        return Err(bad(format!(
            "{what}: `{}` is not an OUT or INOUT array of {}",
            out.name, interfaces[from].name
        )));
    }
    if !input.is_array() || !matches!(input.mode, Mode::In | Mode::InOut) {
        return Err(bad(format!(
            "{what}: `{}` is not an IN or INOUT array of {}",
            input.name, interfaces[to].name
        )));
    }
    if out.element_type != input.element_type {
        return Err(bad(format!(
            "{what}: the producer writes {} but the consumer reads {}",
            out.element_type.keyword(),
            input.element_type.keyword()
        )));
    }
    if !fed.insert((to, edge.to_parameter)) {
        return Err(bad(format!(
            "{what}: `{}` of `{}` is already fed by another edge",
            input.name, consumer.label
        )));
    }
    let size = |f: &FunctionInterface, p, task: &v1::GraphTask| {
        f.byte_size(p, &task.scalars)
            .map_err(|e| bad(format!("{what}: {e}")))
    };
    let produced = size(interfaces[from], out, producer)?;
    let consumed = size(interfaces[to], input, consumer)?;
    if produced != consumed {
        return Err(bad(format!(
            "{what}: the producer's `{}` has {produced} bytes but the consumer's `{}` \
         needs {consumed} bytes",
            out.name, input.name
        )));
    }
    if edge.bytes != produced {
        return Err(bad(format!(
            "{what}: the edge says {} bytes but the interface gives {produced}",
            edge.bytes
        )));
    }
    Ok(produced)
}

/// Whether task `task` writes no sticky data that has a value: its pin then only says where
/// the sticky data it reads lies, which the servers of that host read without a copy
/// (docs/bulk-protocol.md, "Stored arrays lent between servers"), so it may run on any of
/// them.
fn reads_sticky_only(task: &v1::GraphTask) -> bool {
    !task
        .data
        .iter()
        .any(|d| d.sticky && d.writes && !d.servers.is_empty())
}

/// The server task `i` must run on, since sticky data never moves: the one holding the
/// sticky data it writes; or, if it writes none, the one holding the most bytes of the sticky
/// data it reads (reading it elsewhere would make a passing copy of it; persistent data is
/// for that). Handles it reads on other servers are read from there. A sticky handle with no
/// value yet is written wherever the task runs.
fn sticky_pin(
    i: usize,
    task: &v1::GraphTask,
    locate: &impl Fn(&str) -> Option<usize>,
) -> Result<Option<usize>, GraphRejection> {
    let bad = |reason: String| GraphRejection::Data {
        task: i,
        label: task.label.clone(),
        reason,
    };
    let mut written: Option<(usize, &v1::GraphData, &str)> = None;
    let mut read_bytes: Vec<(usize, u64)> = Vec::new();
    for d in task.data.iter().filter(|d| d.sticky) {
        let Some(server) = d.servers.first() else {
            continue;
        };
        let at = locate(server).ok_or_else(|| {
            bad(format!(
                "sticky data handle `{}` is kept on {server}, which is down; a call that \
                 uses it must run there",
                d.id
            ))
        })?;
        if !d.writes {
            match read_bytes.iter_mut().find(|(s, _)| *s == at) {
                Some((_, bytes)) => *bytes += d.bytes,
                None => read_bytes.push((at, d.bytes)),
            }
            continue;
        }
        match written {
            Some((other, first, first_server)) if other != at => {
                return Err(bad(format!(
                    "writes sticky data handles `{}` (on {first_server}) and `{}` (on \
                     {server}); sticky data never moves, and no one server holds both",
                    first.id, d.id
                )));
            }
            _ => written = Some((at, d, server)),
        }
    }
    // The first listed wins a tie: the same graph is pinned the same way every time.
    let most_read =
        read_bytes.iter().fold(
            None,
            |best: Option<(usize, u64)>, &(at, bytes)| match best {
                Some((_, most)) if most >= bytes => best,
                _ => Some((at, bytes)),
            },
        );
    Ok(written.map(|(at, _, _)| at).or(most_read.map(|(at, _)| at)))
}

/// The arrays task `i` reads from data kept on the grid: each data argument is checked
/// against the IDL (mode and size), and one it reads must be an IN/INOUT array no edge
/// feeds, with a copy on a server that is up. Marks those in `fed`, since the client does
/// not send them either.
fn resident_inputs_of(
    i: usize,
    task: &v1::GraphTask,
    interface: &FunctionInterface,
    fed: &mut HashSet<(usize, u32)>,
    locate: &impl Fn(&str) -> Option<usize>,
) -> Result<Vec<ResidentInput>, GraphRejection> {
    let bad = |reason: String| GraphRejection::Data {
        task: i,
        label: task.label.clone(),
        reason,
    };
    let mut inputs = Vec::with_capacity(task.data.len());
    for d in &task.data {
        let parameter = interface
            .parameters
            .get(d.parameter as usize)
            .filter(|p| p.is_array())
            .ok_or_else(|| {
                bad(format!(
                    "data handle `{}` is given for parameter {}, which is not an array of {}",
                    d.id, d.parameter, interface.name
                ))
            })?;
        let (reads, writes) = (
            matches!(parameter.mode, Mode::In | Mode::InOut),
            matches!(parameter.mode, Mode::Out | Mode::InOut),
        );
        if (d.reads && !reads) || (d.writes && !writes) {
            return Err(bad(format!(
                "data handle `{}` cannot be {} through `{}`, an {} parameter",
                d.id,
                if d.reads && !reads { "read" } else { "written" },
                parameter.name,
                parameter.mode.keyword()
            )));
        }
        let bytes = interface
            .byte_size(parameter, &task.scalars)
            .map_err(|e| cost_error(i, task, e.to_string()))?;
        if d.bytes != bytes {
            return Err(bad(format!(
                "argument `{}`: data handle `{}` holds {} bytes, but the call needs {bytes}",
                parameter.name, d.id, d.bytes
            )));
        }
        if !d.reads {
            continue;
        }
        if !fed.insert((i, d.parameter)) {
            return Err(bad(format!(
                "`{}` is both fed by an edge and read from data handle `{}`",
                parameter.name, d.id
            )));
        }
        let copies: Vec<usize> = d.servers.iter().filter_map(|s| locate(s)).collect();
        if copies.is_empty() {
            return Err(bad(format!(
                "data handle `{}` (for `{}`) has no copy on a server that is up: {}",
                d.id,
                parameter.name,
                if d.servers.is_empty() {
                    "it holds no value yet".to_string()
                } else {
                    format!("its copies were on {}", d.servers.join(", "))
                }
            )));
        }
        inputs.push(ResidentInput { bytes, copies });
    }
    Ok(inputs)
}

/// The IN arrays of task `i` that no edge feeds: they come from the client, and each can be
/// staged apart from the call.
fn inputs_from_client(
    i: usize,
    task: &v1::GraphTask,
    interface: &FunctionInterface,
    fed: &HashSet<(usize, u32)>,
) -> Result<Vec<ClientInput>, GraphRejection> {
    let mut inputs = Vec::new();
    for (index, parameter) in interface.parameters.iter().enumerate() {
        let from_client = parameter.is_array()
            && matches!(parameter.mode, Mode::In | Mode::InOut)
            && !fed.contains(&(i, index as u32));
        if !from_client {
            continue;
        }
        let bytes = interface
            .byte_size(parameter, &task.scalars)
            .map_err(|e| cost_error(i, task, e.to_string()))?;
        inputs.push(ClientInput {
            parameter: index as u32,
            bytes,
        });
    }
    Ok(inputs)
}

/// Task `i` as the schedulers see it: its costs from the IDL and its scalars; `fed_bytes` of
/// its inputs arrive by edges rather than from the client.
fn costed_task(
    i: usize,
    task: &v1::GraphTask,
    interface: &FunctionInterface,
    fed_bytes: u64,
) -> Result<Task, GraphRejection> {
    let cost = interface
        .cost(&task.scalars)
        .map_err(|e| cost_error(i, task, e.to_string()))?;
    let processors = u32::try_from(cost.processors).map_err(|_| {
        cost_error(
            i,
            task,
            format!("{} processors is beyond any server", cost.processors),
        )
    })?;
    Ok(Task {
        label: task.label.clone(),
        function: task.function.clone(),
        flops: cost.flops,
        client_in_bytes: (cost.bytes_in + cost.scalar_bytes_in).saturating_sub(fed_bytes),
        // The client may want fewer outputs than the routine writes, never more.
        client_out_bytes: task.client_out_bytes.min(cost.bytes_out),
        processors,
    })
}

fn cost_error(task: usize, graph_task: &v1::GraphTask, reason: String) -> GraphRejection {
    GraphRejection::Cost {
        task,
        label: graph_task.label.clone(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writing(handles: &[(&str, &str, bool)]) -> v1::GraphTask {
        v1::GraphTask {
            label: "dgefa#0".into(),
            function: "dgefa".into(),
            data: handles
                .iter()
                .map(|(id, server, sticky)| v1::GraphData {
                    parameter: 0,
                    id: id.to_string(),
                    bytes: 8,
                    servers: vec![server.to_string()],
                    reads: true,
                    writes: true,
                    sticky: *sticky,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn locate(server: &str) -> Option<usize> {
        ["a:1", "b:1"].iter().position(|s| *s == server)
    }

    #[test]
    fn a_task_using_sticky_data_is_pinned_where_it_is_and_persistent_data_pins_nothing() {
        assert_eq!(
            sticky_pin(0, &writing(&[("d1", "b:1", true)]), &locate),
            Ok(Some(1))
        );
        assert_eq!(
            sticky_pin(0, &writing(&[("d1", "b:1", false)]), &locate),
            Ok(None)
        );
        let task = writing(&[("d1", "a:1", true), ("d2", "a:1", true)]);
        assert_eq!(sticky_pin(0, &task, &locate), Ok(Some(0)));
        // A call that only reads sticky data runs where it is too: reading it elsewhere
        // would move a copy.
        let mut reading = writing(&[("d1", "b:1", true)]);
        reading.data[0].writes = false;
        assert_eq!(sticky_pin(0, &reading, &locate), Ok(Some(1)));
        reading.data[0].sticky = false;
        assert_eq!(sticky_pin(0, &reading, &locate), Ok(None));
        // Reading sticky handles on two servers: where most of their bytes are; a write
        // decides over any read.
        let mut two = writing(&[("d1", "a:1", true), ("d2", "b:1", true)]);
        two.data.iter_mut().for_each(|d| d.writes = false);
        two.data[1].bytes = 16;
        assert_eq!(sticky_pin(0, &two, &locate), Ok(Some(1)));
        two.data[1].bytes = 8;
        assert_eq!(
            sticky_pin(0, &two, &locate),
            Ok(Some(0)),
            "a tie: the first"
        );
        two.data[0].writes = true;
        two.data[1].bytes = 1 << 30;
        assert_eq!(sticky_pin(0, &two, &locate), Ok(Some(0)));
    }

    #[test]
    fn only_a_task_that_writes_no_sticky_value_may_run_beside_its_pin_on_the_holders_host() {
        let mut task = writing(&[("d1", "a:1", true)]);
        assert!(
            !reads_sticky_only(&task),
            "it writes the value it is pinned to"
        );
        task.data[0].writes = false;
        assert!(reads_sticky_only(&task), "it reads it only");
        // Writing a sticky handle with no value yet: written wherever the task runs.
        task.data
            .push(writing(&[("d2", "a:1", true)]).data.remove(0));
        task.data[1].servers.clear();
        assert!(reads_sticky_only(&task));
        // Writing persistent data pins nothing.
        task.data[1] = writing(&[("d3", "b:1", false)]).data.remove(0);
        assert!(reads_sticky_only(&task));
    }

    #[test]
    fn sticky_data_on_two_servers_or_on_a_down_one_is_refused_naming_handles_and_servers() {
        let task = writing(&[("d1", "a:1", true), ("d2", "b:1", true)]);
        assert_eq!(
            sticky_pin(0, &task, &locate).unwrap_err().to_string(),
            "task 0 (`dgefa#0`): writes sticky data handles `d1` (on a:1) and `d2` (on b:1); \
             sticky data never moves, and no one server holds both"
        );
        let task = writing(&[("d1", "c:1", true)]);
        assert_eq!(
            sticky_pin(0, &task, &locate).unwrap_err().to_string(),
            "task 0 (`dgefa#0`): sticky data handle `d1` is kept on c:1, which is down; a call \
             that uses it must run there"
        );
    }
}
