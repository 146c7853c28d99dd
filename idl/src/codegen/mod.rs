//! Code generators of `ninf-gen`.

pub mod c;
pub mod rust;
