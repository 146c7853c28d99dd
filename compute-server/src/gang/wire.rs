//! The time table on the wire: conversions between the gang core's [`TimeTable`] and the
//! `ninf.v1.TimeTableMessage` node agents receive.

use ninf_gang::{TableJob, TableSlot, TimeTable};
use ninf_proto::v1;

pub fn table_to_proto(table: &TimeTable) -> v1::TimeTableMessage {
    v1::TimeTableMessage {
        version: table.version,
        epoch: table.epoch,
        quantum: table.quantum,
        cycle: table.cycle.iter().map(slot_to_proto).collect(),
        prefix: table.prefix.iter().map(slot_to_proto).collect(),
        jobs: table
            .jobs
            .iter()
            .map(|(&job, j)| v1::TableJobEntry {
                job,
                columns: j.columns.clone(),
                processes: j.processes.clone(),
            })
            .collect(),
    }
}

/// Why a table from the server cannot be followed.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum TableError {
    #[error("table {version}: quantum {quantum} is not a positive number of seconds")]
    Quantum { version: u64, quantum: f64 },
    #[error("table {version}: epoch {epoch} is not a finite time")]
    Epoch { version: u64, epoch: f64 },
    #[error("table {version}: job {job} has {columns} columns but {processes} processes")]
    Processes {
        version: u64,
        job: u64,
        columns: usize,
        processes: usize,
    },
}

/// Checks and converts a table; a job whose processes are not known yet has none.
pub fn table_from_proto(message: v1::TimeTableMessage) -> Result<TimeTable, TableError> {
    let version = message.version;
    if !(message.quantum.is_finite() && message.quantum > 0.0) {
        return Err(TableError::Quantum {
            version,
            quantum: message.quantum,
        });
    }
    if !message.epoch.is_finite() {
        return Err(TableError::Epoch {
            version,
            epoch: message.epoch,
        });
    }
    let mut jobs = std::collections::BTreeMap::new();
    for j in message.jobs {
        if !j.processes.is_empty() && j.processes.len() != j.columns.len() {
            return Err(TableError::Processes {
                version,
                job: j.job,
                columns: j.columns.len(),
                processes: j.processes.len(),
            });
        }
        jobs.insert(
            j.job,
            TableJob {
                columns: j.columns,
                processes: j.processes,
            },
        );
    }
    Ok(TimeTable {
        version,
        epoch: message.epoch,
        quantum: message.quantum,
        cycle: message.cycle.into_iter().map(slot_from_proto).collect(),
        prefix: message.prefix.into_iter().map(slot_from_proto).collect(),
        jobs,
    })
}

fn slot_to_proto(slot: &TableSlot) -> v1::TableSlotEntry {
    v1::TableSlotEntry {
        row: slot.row as u32,
        running: slot.running.clone(),
    }
}

fn slot_from_proto(slot: v1::TableSlotEntry) -> TableSlot {
    TableSlot {
        row: slot.row as usize,
        running: slot.running,
    }
}
