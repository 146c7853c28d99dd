//! A discrete-event scheduling simulator (issue 7) that runs the live system's policy code:
//! the gang core's FCFS, FPFS and FPMPFS admission (with WaitLimit) on its own time table,
//! next to EASY backfilling as the standard baseline, and gang time-sharing with the core's
//! scheduler itself on a fake clock ([`timeshare`]). Workloads come from Standard Workload
//! Format files ([`swf`]) or from generators of the papers' workloads ([`workload`]); the
//! engine ([`engine`]) is event-driven on a virtual clock and deterministic for a seed.

pub mod dqt;
pub mod engine;
pub mod hetero;
pub mod lublin;
pub mod metrics;
pub mod plot;
pub mod policy;
pub mod random;
pub mod swf;
pub mod timeshare;
pub mod workload;

pub use dqt::{DqtRun, SlotEnd, simulate_dqt, simulate_dqt_with};
pub use engine::{Outcome, SimError, simulate};
pub use hetero::{HeteroJob, HeteroMachine, HeteroPolicy, HeteroRun, simulate_hetero};
pub use metrics::Metrics;
pub use policy::{Policy as SpacePolicy, policy_by_name};
pub use timeshare::simulate_gang;
pub use workload::Job;
