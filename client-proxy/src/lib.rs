//! The client proxy: one per site, on behalf of every client there (seed 004, steps 2-6). It
//! probes proxy-to-server throughput, passes a transaction's Network Task graph and those
//! measurements to the metaserver, dispatches the tasks to the chosen servers in dependency
//! order with data flowing server to server, and deletes the intermediates at the end.
//!
//! The crate is the workspace's home for that component; its services arrive with the
//! metaserver issue, on the protocol in `ninf-proto`.
