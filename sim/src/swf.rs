//! The Standard Workload Format (SWF, version 2.2, Feitelson et al.): header comments starting
//! with `;`, then one job per line with 18 whitespace-separated numeric fields, -1 for unknown.
//! Reading keeps the header so a workload can be written back unchanged.

use std::fmt::Write as _;

use crate::workload::Job;

/// The 18 fields of an SWF line, by their standard names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwfRecord {
    pub job_number: i64,
    pub submit_time: f64,
    pub wait_time: f64,
    pub run_time: f64,
    pub allocated_processors: i64,
    pub average_cpu_time: f64,
    pub used_memory: f64,
    pub requested_processors: i64,
    pub requested_time: f64,
    pub requested_memory: f64,
    pub status: i64,
    pub user_id: i64,
    pub group_id: i64,
    pub executable_number: i64,
    pub queue_number: i64,
    pub partition_number: i64,
    pub preceding_job_number: i64,
    pub think_time: f64,
}

/// A workload file: its header lines (without the `;`) and its records.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SwfWorkload {
    pub header: Vec<String>,
    pub records: Vec<SwfRecord>,
}

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum SwfError {
    #[error("{line}:{column}: field {field} (`{name}`): `{text}` is not a number")]
    NotANumber {
        line: usize,
        column: usize,
        field: usize,
        name: &'static str,
        text: String,
    },
    #[error("{line}: a job line has {found} fields; SWF has 18")]
    FieldCount { line: usize, found: usize },
}

pub const FIELD_NAMES: [&str; 18] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable number",
    "queue number",
    "partition number",
    "preceding job number",
    "think time",
];

/// Parses SWF text. Errors name the line, column and field.
pub fn parse(text: &str) -> Result<SwfWorkload, SwfError> {
    let mut workload = SwfWorkload::default();
    for (n, line) in text.lines().enumerate() {
        let line_number = n + 1;
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix(';') {
            workload.header.push(comment.to_string());
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        let mut values = [0f64; 18];
        let mut found = 0;
        let mut column = 1;
        let mut rest = line;
        while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
            column += start;
            rest = &rest[start..];
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let text = &rest[..end];
            if found < 18 {
                values[found] = text.parse::<f64>().map_err(|_| SwfError::NotANumber {
                    line: line_number,
                    column,
                    field: found + 1,
                    name: FIELD_NAMES[found],
                    text: text.to_string(),
                })?;
            }
            found += 1;
            column += end;
            rest = &rest[end..];
        }
        if found != 18 {
            return Err(SwfError::FieldCount {
                line: line_number,
                found,
            });
        }
        let i = |k: usize| values[k] as i64;
        workload.records.push(SwfRecord {
            job_number: i(0),
            submit_time: values[1],
            wait_time: values[2],
            run_time: values[3],
            allocated_processors: i(4),
            average_cpu_time: values[5],
            used_memory: values[6],
            requested_processors: i(7),
            requested_time: values[8],
            requested_memory: values[9],
            status: i(10),
            user_id: i(11),
            group_id: i(12),
            executable_number: i(13),
            queue_number: i(14),
            partition_number: i(15),
            preceding_job_number: i(16),
            think_time: values[17],
        });
    }
    Ok(workload)
}

fn number(out: &mut String, value: f64) {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        let _ = write!(out, " {}", value as i64);
    } else {
        let _ = write!(out, " {value}");
    }
}

/// Writes SWF text: the header, then one line per record.
pub fn write(workload: &SwfWorkload) -> String {
    let mut out = String::new();
    for line in &workload.header {
        out.push(';');
        out.push_str(line);
        out.push('\n');
    }
    for r in &workload.records {
        let fields = [
            r.job_number as f64,
            r.submit_time,
            r.wait_time,
            r.run_time,
            r.allocated_processors as f64,
            r.average_cpu_time,
            r.used_memory,
            r.requested_processors as f64,
            r.requested_time,
            r.requested_memory,
            r.status as f64,
            r.user_id as f64,
            r.group_id as f64,
            r.executable_number as f64,
            r.queue_number as f64,
            r.partition_number as f64,
            r.preceding_job_number as f64,
            r.think_time,
        ];
        let mut line = String::new();
        for value in fields {
            number(&mut line, value);
        }
        out.push_str(line.trim_start());
        out.push('\n');
    }
    out
}

impl SwfWorkload {
    /// The jobs a simulation can run: processors from the allocated (else requested) field,
    /// the run time, and the requested time as the estimate (the run time when unknown or
    /// smaller). Records without a run time or processors are skipped; their count is
    /// returned too.
    pub fn jobs(&self) -> (Vec<Job>, usize) {
        let mut skipped = 0;
        let jobs = self
            .records
            .iter()
            .filter_map(|r| {
                let processors = if r.allocated_processors > 0 {
                    r.allocated_processors
                } else {
                    r.requested_processors
                };
                if r.run_time < 0.0 || processors <= 0 || r.submit_time < 0.0 {
                    skipped += 1;
                    return None;
                }
                Some(Job {
                    id: r.job_number.max(0) as u64,
                    submit: r.submit_time,
                    run: r.run_time,
                    processors: u32::try_from(processors).unwrap_or(u32::MAX),
                    requested: r.requested_time.max(r.run_time),
                })
            })
            .collect();
        (jobs, skipped)
    }
}
