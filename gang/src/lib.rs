//! The gang-scheduling core of a compute server (the gang thesis and the FPMPFS paper): the time table
//! ([`matrix::GangMatrix`], an Ousterhout matrix with alternative scheduling), admission by
//! FCFS, FPFS or FPMPFS with WaitLimit ([`admission`]), jobs' global states, and the
//! scheduler that ties them to a clock ([`scheduler::GangScheduler`]); for distribution to
//! node agents (the time-sync paper), the time table as a cycle from an epoch ([`table`]), the agents'
//! local scheduler ([`agent::NodeAgent`]) and their adaptive clock checks ([`sync`]); for jobs
//! whose ranks span nodes, network preemption and their global state ([`network`]). Pure and
//! deterministic: no I/O, time only from a [`clock::Clock`]. The compute server drives real
//! processes with it; the simulator runs the same code.

pub mod admission;
pub mod agent;
pub mod clock;
pub mod dqt;
pub mod matrix;
pub mod network;
pub mod scheduler;
pub mod sync;
pub mod table;

pub use admission::{AdmissionQueue, Policy, QueuedJob};
pub use agent::{AgentCounters, NodeAgent, ProcessId, ProcessSwitch};
pub use clock::{Clock, FakeClock, MonotonicClock};
pub use dqt::{Allocation, DqtConfig, DqtError, QueueTree, SlotRun, TreeSlot};
pub use matrix::{GangMatrix, JobId, JobState, MatrixError, Slot};
pub use scheduler::{GangConfig, GangCounters, GangScheduler, Layout, Switch};
pub use sync::{ClockSample, ClockSync, SyncConfig, SyncOutcome};
pub use table::{TableJob, TableSlot, TimeTable};
