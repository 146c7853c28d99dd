//! Which format a graph file is in.

use crate::formats::{FormatError, stg, wfformat};
use crate::graph::TaskGraph;

/// Reads a task graph in whichever format `text` is: WfFormat when it starts with `{`,
/// STG otherwise.
pub fn read_graph(file: &str, text: &str) -> Result<TaskGraph, FormatError> {
    if text.trim_start().starts_with('{') {
        wfformat::parse(file, text)
    } else {
        stg::parse(file, text)
    }
}
