//! The Ninf compute server (seed 004, step 0 onwards). Today it holds the start-up benchmark
//! a server runs before registering; serving, executables pools, storage and monitors arrive
//! with the compute-server issue.

pub mod benchmark;
