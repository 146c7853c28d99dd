//! Gang scheduling of a live compute server (the gang thesis, the FPMPFS paper and the time-sync paper) around the pure core of
//! `ninf-gang`: the [`master::GangMaster`] turns calls into jobs and issues time tables, node
//! agents ([`agent`]) follow them by their own clocks and signal the processes, the
//! [`service`] connects the two over gRPC, and the [`broker::SpmdBroker`] carries messages
//! between the ranks of parallel jobs and detects their deadlocks. Across hosts, each agent
//! runs its node's broker ([`node_broker`]) and may start its node's ranks ([`node_ranks`]).

pub mod agent;
pub mod broker;
pub mod claims;
pub mod clock;
pub mod cores;
mod mailboxes;
pub mod master;
pub mod node_broker;
pub mod node_ranks;
pub mod service;
mod signal;
mod spawn;
pub mod wire;

pub use broker::SpmdBroker;
pub use master::{GangError, GangMaster, JobTicket, spawn_table_sender};
pub use signal::signal;
pub use spawn::{AgentCredentials, Agents, spawn_agents, spawn_watchdog};
