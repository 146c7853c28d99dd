//! Measuring the grid: the wide-area testbed of network namespaces with shaped links
//! ([`testbed`]) and its user-space latency ([`latency`]), the metaserver paper's experiment on it
//! ([`experiment`]), data kept on the grid against sent across its links ([`kept_data`]), the gang scheduler's benchmarks ([`gang_bench`]), on one host or on nodes in
//! namespaces ([`gang_nodes`]), the metaserver's
//! schedulers on random task graphs ([`dag_bench`]), the simulator's front end
//! ([`simulate`]), a metaserver against thousands of emulated servers ([`scale`]) and the
//! predictor's transfer estimates against transfers timed on the testbed ([`transfers`]).

pub mod bed_grid;
pub mod dag_bench;
pub mod experiment;
pub mod gang_bench;
pub mod gang_nodes;
pub mod kept_data;
pub mod latency;
pub mod partition;
pub mod scale;
pub mod simulate;
pub mod testbed;
pub mod transfers;
