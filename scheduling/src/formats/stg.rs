//! The Standard Task Graph set's format (Tobita and Kasahara): a line with the number of
//! tasks n, then n + 2 lines `task cost predecessors p1 p2 ...` for the entry dummy task 0,
//! tasks 1..n and the exit dummy task n + 1, then an information part whose lines start with
//! `#`. The set's graphs with communication costs write each predecessor with its cost,
//! `task cost predecessors p1 c1 p2 c2 ...`; a file is read in the form whose field count
//! every line matches.

use crate::formats::{FormatError, checked, task};
use crate::graph::{Edge, TaskGraph};

/// How predecessors are written, once a line has told.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    Plain,
    WithCosts,
}

pub fn parse(file: &str, text: &str) -> Result<TaskGraph, FormatError> {
    let error = |line: usize, field: &str, problem: String| FormatError::Line {
        file: file.to_string(),
        line,
        field: field.to_string(),
        problem,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .take_while(|(_, l)| !l.starts_with('#'))
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((first, header)) = lines.next() else {
        return Err(error(1, "task count", "the file has no task graph".into()));
    };
    let n: usize = whole(header.trim()).map_err(|p| error(first, "task count", p))?;
    let mut graph = TaskGraph::default();
    let mut form: Option<(Form, usize)> = None;
    for expected in 0..n + 2 {
        let Some((line, content)) = lines.next() else {
            return Err(error(
                first,
                "task count",
                format!("{n} tasks need {} task lines, found {expected}", n + 2),
            ));
        };
        let fields: Vec<&str> = content.split_whitespace().collect();
        let field = |i: usize, name: &str| {
            fields
                .get(i)
                .copied()
                .ok_or_else(|| error(line, name, "missing".into()))
        };
        let id = whole(field(0, "task number")?).map_err(|p| error(line, "task number", p))?;
        if id != expected {
            return Err(error(
                line,
                "task number",
                format!("expected {expected}, found {id}"),
            ));
        }
        let cost: f64 = field(1, "processing time")?
            .parse()
            .ok()
            .filter(|c: &f64| c.is_finite() && *c >= 0.0)
            .ok_or_else(|| {
                error(
                    line,
                    "processing time",
                    format!("expected a number >= 0, found `{}`", fields[1]),
                )
            })?;
        let count = whole(field(2, "predecessor count")?)
            .map_err(|p| error(line, "predecessor count", p))?;
        let rest = &fields[3..];
        let this = if rest.len() == count {
            Form::Plain
        } else if rest.len() == 2 * count {
            Form::WithCosts
        } else {
            return Err(error(
                line,
                "predecessors",
                format!(
                    "{count} predecessors need {count} fields (or {} with communication costs), found {}",
                    2 * count,
                    rest.len()
                ),
            ));
        };
        if count > 0 {
            match form {
                Some((f, at)) if f != this => {
                    return Err(error(
                        line,
                        "predecessors",
                        format!(
                            "written {}, but line {at} wrote them {}",
                            describe(this),
                            describe(f)
                        ),
                    ));
                }
                None => form = Some((this, line)),
                _ => {}
            }
        }
        graph.tasks.push(task(format!("t{id}"), cost));
        let step = if this == Form::WithCosts { 2 } else { 1 };
        for pair in rest.chunks(step) {
            let from = whole(pair[0]).map_err(|p| error(line, "predecessor", p))?;
            if from >= n + 2 {
                return Err(error(
                    line,
                    "predecessor",
                    format!("task {from} does not exist (tasks 0 to {})", n + 1),
                ));
            }
            let bytes = match pair.get(1) {
                Some(c) => whole(c).map_err(|p| error(line, "communication cost", p))? as u64,
                None => 0,
            };
            graph.edges.push(Edge {
                from,
                to: id,
                bytes,
            });
        }
    }
    if let Some((line, _)) = lines.next() {
        return Err(error(
            line,
            "task line",
            format!("more than the {} task lines the count {n} allows", n + 2),
        ));
    }
    checked(file, graph)
}

fn describe(form: Form) -> &'static str {
    match form {
        Form::Plain => "without communication costs",
        Form::WithCosts => "with communication costs",
    }
}

fn whole(field: &str) -> Result<usize, String> {
    field
        .parse()
        .map_err(|_| format!("expected a whole number, found `{field}`"))
}
