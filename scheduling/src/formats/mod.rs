//! Task graphs and platforms from files, for comparing the schedulers with outside ones on
//! shared inputs (`ninf dag-bench --graph FILE --platform FILE`): the Standard Task Graph
//! set's format ([`stg`]), WfCommons' WfFormat JSON ([`wfformat`]) and a platform in JSON
//! ([`platform`]). Parsers take the file's text and a name to put in errors; the caller
//! reads the file.
//!
//! Costs become the model's as follows (also in `docs/scheduling.md`): a task's cost, STG's
//! processing time or WfFormat's `runtimeInSeconds`, is its seconds on a server of speed 1,
//! so its flops; an edge's bytes are STG's communication cost (seconds over a link of 1
//! byte/s) or the total size of the files the child reads that the parent writes. Every
//! task is sequential and calls [`FUNCTION`], which every platform server serves.

mod detect;
pub mod platform;
pub mod stg;
pub mod wfformat;

pub use detect::read_graph;

use crate::graph::{Task, TaskGraph};

/// The routine every task read from a file calls.
pub const FUNCTION: &str = "task";

/// Why a file was refused, naming where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FormatError {
    /// A text file's line (1-based) and field.
    #[error("{file}:{line}: {field}: {problem}")]
    Line {
        file: String,
        line: usize,
        field: String,
        problem: String,
    },
    /// JSON that does not parse or does not have the expected shape (serde's message names
    /// the line and column).
    #[error("{file}: {problem}")]
    Json { file: String, problem: String },
    /// Content that parses but does not make a graph or platform.
    #[error("{file}: {what}: {problem}")]
    Invalid {
        file: String,
        what: String,
        problem: String,
    },
}

/// A sequential task of `seconds` on a unit-speed server.
fn task(label: String, seconds: f64) -> Task {
    Task {
        label,
        function: FUNCTION.to_string(),
        flops: seconds,
        client_in_bytes: 0,
        client_out_bytes: 0,
        processors: 1,
    }
}

/// The graph's own check, its error put in the file's terms.
fn checked(file: &str, graph: TaskGraph) -> Result<TaskGraph, FormatError> {
    graph
        .validate()
        .map_err(|e| invalid(file, "graph".into(), e.to_string()))?;
    Ok(graph)
}

/// `text` read as JSON of shape `T`; serde's error names the line and column.
fn json<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, FormatError> {
    serde_json::from_str(text).map_err(|e| FormatError::Json {
        file: file.to_string(),
        problem: e.to_string(),
    })
}

/// `file`'s content that parses but does not make a graph or platform.
fn invalid(file: &str, what: String, problem: String) -> FormatError {
    FormatError::Invalid {
        file: file.to_string(),
        what,
        problem,
    }
}
