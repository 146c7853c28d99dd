//! A whole Ninf grid to run, for `ninf up`, the demo, chaos, tests and benchmarks: the
//! embedded grid in one process ([`embedded`]), grids of real processes ([`processes`]), the
//! seed's workloads as transactions ([`workloads`]), the demo that runs them under several
//! schedulers ([`demo`]), fault injection ([`chaos`]), many clients at once ([`load`]) and
//! a private PostgreSQL ([`postgres`]).

pub mod chaos;
pub mod demo;
pub mod embedded;
pub mod load;
pub mod postgres;
pub mod processes;
pub mod slurm;
pub mod workloads;

/// Where `ninf up` keeps its database and `ninf status` looks for a running grid, unless
/// `--data-dir` says otherwise (the client library reads the grid file there too).
pub use ninf::grid::default_data_dir;
