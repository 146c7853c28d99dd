//! Which library computes the routines' products and factorisations: faer (always built
//! in) or the host's OpenBLAS, loaded at run time when it is installed.
//!
//! On an AMD EPYC (Zen 3) OpenBLAS's one-thread `dgemm` took about four fifths of faer's time
//! at n = 2000, and the grid's pairs of `dgefa` and `dgesl` at n = 1000 three quarters of
//! their time with faer (docs/performance.md, "The routines' kernels"), so a host that has
//! it computes with it. It is loaded, not linked, so that the executables start on
//! a host without it and compute with faer there. `NINF_BLAS` in the executable's
//! environment chooses: `auto` (the default), `faer` or `openblas`.

use std::sync::{Arc, OnceLock};

use crate::openblas::OpenBlas;

/// The library a routine computes with.
#[derive(Clone)]
pub enum Kernels {
    Faer,
    OpenBlas(Arc<OpenBlas>),
}

impl Kernels {
    /// What the log and the benchmarks call it.
    pub fn name(&self) -> String {
        match self {
            Kernels::Faer => "faer".to_string(),
            Kernels::OpenBlas(lib) => format!("OpenBLAS ({})", lib.core()),
        }
    }
}

/// The OpenBLAS library the executables look for (the soname Debian's `libopenblas0`
/// packages install; LP64, the integers 32-bit).
pub const OPENBLAS_SONAME: &str = "libopenblas.so.0";

/// The kernels `NINF_BLAS` chooses, decided on first use and kept for the process's life.
pub fn current() -> Result<Kernels, String> {
    static CHOSEN: OnceLock<Result<Kernels, String>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let setting = std::env::var("NINF_BLAS").unwrap_or_default();
            choose(&setting, OPENBLAS_SONAME)
        })
        .clone()
}

/// The kernels a `NINF_BLAS` value asks for, OpenBLAS looked for under `soname`. `auto` (or
/// nothing) takes OpenBLAS when it loads, is safe to call from several threads and has
/// kernels for this processor's vector units, and faer otherwise; `openblas` is an error
/// when OpenBLAS is not usable, saying why.
pub fn choose(setting: &str, soname: &str) -> Result<Kernels, String> {
    match setting.trim() {
        "faer" => Ok(Kernels::Faer),
        "" | "auto" => Ok(usable(soname).map_or(Kernels::Faer, Kernels::OpenBlas)),
        "openblas" => usable(soname)
            .map(Kernels::OpenBlas)
            .map_err(|why| format!("NINF_BLAS=openblas: {why}")),
        other => Err(format!(
            "NINF_BLAS={other:?}: expected `auto`, `faer` or `openblas`"
        )),
    }
}

/// OpenBLAS under `soname`, if the routines may compute with it.
fn usable(soname: &str) -> Result<Arc<OpenBlas>, String> {
    let lib = OpenBlas::load(soname)?;
    lib.check()?;
    Ok(Arc::new(lib))
}
