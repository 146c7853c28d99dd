//! The metaserver (seed 004): the resource database of servers, their routines' interface
//! descriptors, load and network samples and past placements; the predictor; and the
//! scheduler SPI whose algorithms (SIMPLE, FLOW and stronger ones) are chosen by
//! configuration.
//!
//! The crate is the workspace's home for that component; the services and the database
//! arrive with the metaserver issue. Costs of a task come from `ninf_idl`'s cost model.
