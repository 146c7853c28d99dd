//! WfCommons' WfFormat JSON (schema 1.5 and later: `workflow.specification` lists tasks with
//! their parents and files, `workflow.execution` each task's `runtimeInSeconds`; schema 1.4:
//! `workflow.tasks` with parents, runtime and files in one list). An edge carries the files
//! the child reads that the parent writes; files no task writes (the workflow's inputs) and
//! that no task reads cost nothing, since neither model has a place they come from or go to.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Deserialize;

use crate::formats::{self, FormatError, checked, task};
use crate::graph::{Edge, TaskGraph};

#[derive(Deserialize)]
struct Document {
    workflow: Workflow,
}

#[derive(Deserialize)]
struct Workflow {
    specification: Option<Specification>,
    execution: Option<Execution>,
    /// Schema 1.4.
    tasks: Option<Vec<OldTask>>,
}

#[derive(Deserialize)]
struct Specification {
    tasks: Vec<SpecifiedTask>,
    #[serde(default)]
    files: Vec<SpecifiedFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecifiedTask {
    id: String,
    #[serde(default)]
    parents: Vec<String>,
    #[serde(default)]
    input_files: Vec<String>,
    #[serde(default)]
    output_files: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecifiedFile {
    id: String,
    size_in_bytes: u64,
}

#[derive(Deserialize)]
struct Execution {
    tasks: Vec<ExecutedTask>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecutedTask {
    id: String,
    runtime_in_seconds: f64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OldTask {
    name: String,
    id: Option<String>,
    #[serde(default)]
    parents: Vec<String>,
    runtime_in_seconds: Option<f64>,
    runtime: Option<f64>,
    #[serde(default)]
    files: Vec<OldFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OldFile {
    link: String,
    name: Option<String>,
    id: Option<String>,
    size_in_bytes: Option<u64>,
    size: Option<u64>,
}

/// One task in either schema: id, runtime, parents, files read and written.
struct Common {
    id: String,
    runtime: f64,
    parents: Vec<String>,
    reads: BTreeSet<String>,
    writes: BTreeSet<String>,
}

pub fn parse(file: &str, text: &str) -> Result<TaskGraph, FormatError> {
    let document: Document = formats::json(file, text)?;
    let invalid = |what: String, problem: String| formats::invalid(file, what, problem);
    let (tasks, sizes) = match document.workflow {
        Workflow {
            specification: Some(specification),
            execution,
            ..
        } => specified(specification, execution, &invalid)?,
        Workflow {
            tasks: Some(tasks), ..
        } => old(tasks, &invalid)?,
        _ => {
            return Err(invalid(
                "workflow".into(),
                "has neither `specification` (schema 1.5) nor `tasks` (schema 1.4)".into(),
            ));
        }
    };
    build(file, tasks, &sizes, &invalid)
}

type Invalid<'a> = &'a dyn Fn(String, String) -> FormatError;

fn specified(
    specification: Specification,
    execution: Option<Execution>,
    invalid: Invalid,
) -> Result<(Vec<Common>, HashMap<String, u64>), FormatError> {
    let runtimes: HashMap<String, f64> = execution
        .map(|e| {
            e.tasks
                .into_iter()
                .map(|t| (t.id, t.runtime_in_seconds))
                .collect()
        })
        .unwrap_or_default();
    let sizes = specification
        .files
        .into_iter()
        .map(|f| (f.id, f.size_in_bytes))
        .collect();
    let tasks = specification
        .tasks
        .into_iter()
        .map(|t| {
            let runtime = runtimes.get(&t.id).copied().ok_or_else(|| {
                invalid(
                    format!("task `{}`", t.id),
                    "no `runtimeInSeconds` in `workflow.execution.tasks`".into(),
                )
            })?;
            Ok(Common {
                id: t.id,
                runtime,
                parents: t.parents,
                reads: t.input_files.into_iter().collect(),
                writes: t.output_files.into_iter().collect(),
            })
        })
        .collect::<Result<_, FormatError>>()?;
    Ok((tasks, sizes))
}

fn old(
    tasks: Vec<OldTask>,
    invalid: Invalid,
) -> Result<(Vec<Common>, HashMap<String, u64>), FormatError> {
    let mut sizes = HashMap::new();
    let mut out = Vec::new();
    // Schema 1.4 names parents by task name; tasks are known by id where they have one.
    let ids: HashMap<String, String> = tasks
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.id.clone().unwrap_or_else(|| t.name.clone()),
            )
        })
        .collect();
    for t in tasks {
        let id = t.id.clone().unwrap_or_else(|| t.name.clone());
        let runtime = t.runtime_in_seconds.or(t.runtime).ok_or_else(|| {
            invalid(
                format!("task `{id}`"),
                "no `runtimeInSeconds` or `runtime`".into(),
            )
        })?;
        let (mut reads, mut writes) = (BTreeSet::new(), BTreeSet::new());
        for f in t.files {
            let Some(name) = f.id.or(f.name) else {
                return Err(invalid(
                    format!("task `{id}`"),
                    "a file has no `id` or `name`".into(),
                ));
            };
            sizes.insert(name.clone(), f.size_in_bytes.or(f.size).unwrap_or(0));
            match f.link.as_str() {
                "input" => reads.insert(name),
                "output" => writes.insert(name),
                other => {
                    return Err(invalid(
                        format!("task `{id}`, file `{name}`"),
                        format!("`link` is `{other}`; expected `input` or `output`"),
                    ));
                }
            };
        }
        let parents = t
            .parents
            .into_iter()
            .map(|p| ids.get(&p).cloned().unwrap_or(p))
            .collect();
        out.push(Common {
            id,
            runtime,
            parents,
            reads,
            writes,
        });
    }
    Ok((out, sizes))
}

fn build(
    file: &str,
    tasks: Vec<Common>,
    sizes: &HashMap<String, u64>,
    invalid: Invalid,
) -> Result<TaskGraph, FormatError> {
    let index: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    if index.len() != tasks.len() {
        let mut seen = BTreeSet::new();
        let twice = tasks.iter().find(|t| !seen.insert(t.id.as_str()));
        return Err(invalid(
            format!("task `{}`", twice.map_or("", |t| t.id.as_str())),
            "appears twice".into(),
        ));
    }
    let mut graph = TaskGraph::default();
    for t in &tasks {
        if !t.runtime.is_finite() || t.runtime < 0.0 {
            return Err(invalid(
                format!("task `{}`", t.id),
                format!("runtime {} is not a number of seconds >= 0", t.runtime),
            ));
        }
        for f in t.reads.iter().chain(&t.writes) {
            if !sizes.contains_key(f) {
                return Err(invalid(
                    format!("task `{}`", t.id),
                    format!("file `{f}` is not in `files`"),
                ));
            }
        }
        graph.tasks.push(task(t.id.clone(), t.runtime));
    }
    for (to, t) in tasks.iter().enumerate() {
        let parents: BTreeMap<usize, &Common> = t
            .parents
            .iter()
            .map(|p| {
                index
                    .get(p.as_str())
                    .map(|&i| (i, &tasks[i]))
                    .ok_or_else(|| {
                        invalid(
                            format!("task `{}`", t.id),
                            format!("parent `{p}` is not a task"),
                        )
                    })
            })
            .collect::<Result<_, FormatError>>()?;
        for (from, parent) in parents {
            let bytes = parent.writes.intersection(&t.reads).map(|f| sizes[f]).sum();
            graph.edges.push(Edge { from, to, bytes });
        }
    }
    checked(file, graph)
}
