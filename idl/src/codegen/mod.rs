//! Code generators of `ninf-gen`.

pub mod rust;
