//! The server's side of gang scheduling: every call becomes a job that waits in the gang
//! core's admission queue, takes its place in the time table, and leaves it when the call
//! ends. Each change issues a new table to the node agents (only then: switches need no
//! message). The master also gathers the agents' reports (applied tables, switch skew,
//! clock checks), opens parallel jobs on the brokers of the nodes they span, and kills jobs
//! that stayed deadlocked past their grace.
//!
//! It runs by any clock of the gang core ([`MasterClock`]), reaches agents through
//! [`AgentLink`] and processes through [`Signals`], and spawns nothing itself: a live server
//! starts its table sender with [`spawn_table_sender`]. So a test drives it by a fake clock
//! and fakes that record what it sent.
//!
//! - `records`: the state (jobs and their phases, nodes, spread jobs, skews);
//! - `table`: the host's table, issued and sent to the agents;
//! - `jobs`: a call's job from admission to its end ([`JobTicket`]);
//! - `spread`: jobs spread over nodes;
//! - `reports`: the agents attaching, detaching and reporting;
//! - `status`: what `GangControl.Status` shows.

mod jobs;
mod links;
mod records;
mod reports;
mod spread;
mod status;
mod table;
#[cfg(test)]
mod tests;

pub use jobs::JobTicket;
pub use links::{AgentLink, MasterClock, OsSignals, Signals};
pub use records::RankOutcome;
pub use spread::NodeRankReplies;
pub use table::{GangError, GangMaster, spawn_table_sender};
