//! The host's OpenBLAS, opened with `dlopen`: the few entry points the routines call, and
//! what it says of itself (the processor its kernels were chosen for, how it was built).
//!
//! The routines call it from their own threads, one column block each (see
//! `ninf_executable::threads`), so OpenBLAS must not start threads of its own: compute
//! servers start executables with `OPENBLAS_NUM_THREADS=1` (`ninf_executable::process`), and
//! [`OpenBlas::load`] sets one thread again for a process started otherwise.

use std::ffi::{CStr, c_char, c_int};

use libloading::Library;

type Dgemm = unsafe extern "C" fn(
    order: c_int,
    trans_a: c_int,
    trans_b: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: f64,
    a: *const f64,
    lda: c_int,
    b: *const f64,
    ldb: c_int,
    beta: f64,
    c: *mut f64,
    ldc: c_int,
);
type Dgetrf = unsafe extern "C" fn(
    m: *const c_int,
    n: *const c_int,
    a: *mut f64,
    lda: *const c_int,
    ipiv: *mut c_int,
    info: *mut c_int,
);
type Dtrsv = unsafe extern "C" fn(
    order: c_int,
    uplo: c_int,
    trans: c_int,
    diag: c_int,
    n: c_int,
    a: *const f64,
    lda: c_int,
    x: *mut f64,
    incx: c_int,
);
type SetThreads = unsafe extern "C" fn(c_int);
type GetInt = unsafe extern "C" fn() -> c_int;
type GetText = unsafe extern "C" fn() -> *const c_char;

/// CBLAS's constants for column-major storage and an untransposed operand.
const COLUMN_MAJOR: c_int = 102;
const NO_TRANS: c_int = 111;
/// CBLAS's constants for a triangle's side and its diagonal.
const UPPER: c_int = 121;
const LOWER: c_int = 122;
const NON_UNIT: c_int = 131;
const UNIT: c_int = 132;

/// Processors OpenBLAS has AVX2 or AVX-512 kernels for. Under any other name it computes
/// with older kernels, slower than faer's: Debian's 0.3.21 multiplied at a third to a
/// quarter of faer's speed on a Xeon with AVX-512 (a serial build, its core name not
/// recorded: docs/notes/2026-12-06-the-trial-after-numpys.md).
const VECTOR_CORES: [&str; 6] = [
    "haswell",
    "zen",
    "skylakex",
    "cooperlake",
    "sapphirerapids",
    "zen4",
];

/// An opened OpenBLAS. The library stays open for the process's life (the routines keep
/// the functions it lent).
pub struct OpenBlas {
    _library: Library,
    dgemm: Dgemm,
    dgetrf: Dgetrf,
    dtrsv: Dtrsv,
    core: String,
    parallel: c_int,
}

impl OpenBlas {
    /// Opens OpenBLAS by `soname` and finds its entry points; the error names the library
    /// and what was missing.
    pub fn load(soname: &str) -> Result<OpenBlas, String> {
        // SAFETY: opening a shared library runs its initialisers; OpenBLAS's only set up its
        // tables (and its threads, one here: see the module comment). dlopen's message names
        // the library already.
        let library = unsafe { Library::new(soname) }.map_err(|e| e.to_string())?;
        // SAFETY: each symbol is read with the type OpenBLAS's cblas.h and its LAPACK
        // interface declare for it (LP64: `int` is 32-bit, which the soname promises).
        unsafe {
            let dgemm = function::<Dgemm>(&library, soname, "cblas_dgemm")?;
            let dgetrf = function::<Dgetrf>(&library, soname, "dgetrf_")?;
            let dtrsv = function::<Dtrsv>(&library, soname, "cblas_dtrsv")?;
            let set_threads = function::<SetThreads>(&library, soname, "openblas_set_num_threads")?;
            let corename = function::<GetText>(&library, soname, "openblas_get_corename")?;
            let parallel = function::<GetInt>(&library, soname, "openblas_get_parallel")?;
            set_threads(1);
            let name = corename();
            let core = if name.is_null() {
                String::new()
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            };
            Ok(OpenBlas {
                _library: library,
                dgemm,
                dgetrf,
                dtrsv,
                core,
                parallel: parallel(),
            })
        }
    }

    /// The processor OpenBLAS chose its kernels for (`Zen`, `Haswell`, `SkylakeX`, ...).
    pub fn core(&self) -> &str {
        &self.core
    }

    /// Whether the routines may compute with this build: one built for threads (a serial
    /// build without locking must not be called from two threads at once, as `mmul`'s column
    /// blocks are), with kernels for this processor's vector units.
    pub fn check(&self) -> Result<(), String> {
        fit(self.parallel, &self.core)
    }

    /// `C = A B` for column-major A (m by k), B (k by n) and C (m by n), each packed (its
    /// leading dimension its row count).
    pub fn dgemm(
        &self,
        (m, n, k): (usize, usize, usize),
        a: &[f64],
        b: &[f64],
        c: &mut [f64],
    ) -> Result<(), String> {
        if a.len() != m * k || b.len() != k * n || c.len() != m * n {
            return Err(format!(
                "dgemm of {m}x{k} by {k}x{n} given {}, {} and {} elements",
                a.len(),
                b.len(),
                c.len()
            ));
        }
        let [m, n, k, lda, ldb] = ints([m, n, k, m.max(1), k.max(1)])?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        // SAFETY: the slices hold exactly the elements the sizes name (checked above).
        unsafe {
            (self.dgemm)(
                COLUMN_MAJOR,
                NO_TRANS,
                NO_TRANS,
                m,
                n,
                k,
                1.0,
                a.as_ptr(),
                lda,
                b.as_ptr(),
                ldb,
                0.0,
                c.as_mut_ptr(),
                lda,
            );
        }
        Ok(())
    }

    /// LU with partial pivoting of the column-major n-by-n `a` in place (LAPACK's `dgetrf`):
    /// `ipvt` receives the 1-based row interchanges, as LINPACK's `dgefa` gives them.
    pub fn dgetrf(&self, n: usize, a: &mut [f64], ipvt: &mut [i32]) -> Result<(), String> {
        if a.len() != n * n || ipvt.len() != n {
            return Err(format!(
                "dgetrf of {n}x{n} given {} elements and {} pivots",
                a.len(),
                ipvt.len()
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let [order] = ints([n])?;
        let mut info: c_int = 0;
        // SAFETY: `a` holds n * n elements and `ipvt` n (checked above); dgetrf writes no
        // further. Its status (the first zero pivot) the caller reads from the factors.
        unsafe {
            (self.dgetrf)(
                &order,
                &order,
                a.as_mut_ptr(),
                &order,
                ipvt.as_mut_ptr(),
                &mut info,
            );
        }
        Ok(())
    }
    /// Solves L U x = b in place for the column-major n-by-n factors `lu` (L unit lower
    /// triangular below the diagonal, U upper triangular on and above it), the row
    /// interchanges already applied to `b`: LAPACK's `dgetrs` for one right-hand side, as
    /// two triangular solves (`dtrsv`).
    pub fn lu_solve(&self, n: usize, lu: &[f64], b: &mut [f64]) -> Result<(), String> {
        if lu.len() != n * n || b.len() != n {
            return Err(format!(
                "a solve with {n}x{n} factors given {} elements and a right-hand side of {}",
                lu.len(),
                b.len()
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let [order] = ints([n])?;
        // SAFETY: `lu` holds n * n elements and `b` n (checked above); dtrsv reads the one
        // triangle and writes `b` alone.
        unsafe {
            for (uplo, diag) in [(LOWER, UNIT), (UPPER, NON_UNIT)] {
                (self.dtrsv)(
                    COLUMN_MAJOR,
                    uplo,
                    NO_TRANS,
                    diag,
                    order,
                    lu.as_ptr(),
                    order,
                    b.as_mut_ptr(),
                    1,
                );
            }
        }
        Ok(())
    }
}

/// The function `library` (opened as `soname`) exports as `name`, read as a `T`.
///
/// # Safety
/// `T` must be the function type the library declares for `name`.
unsafe fn function<T: Copy>(library: &Library, soname: &str, name: &str) -> Result<T, String> {
    // SAFETY: the caller promises the type; libloading adds the name's closing NUL.
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|symbol| *symbol)
        .map_err(|_| format!("{soname} has no `{name}`"))
}

/// Sizes as OpenBLAS's 32-bit integers.
fn ints<const N: usize>(sizes: [usize; N]) -> Result<[c_int; N], String> {
    let mut out = [0; N];
    for (slot, size) in out.iter_mut().zip(sizes) {
        *slot = c_int::try_from(size)
            .map_err(|_| format!("{size} exceeds OpenBLAS's 32-bit integers"))?;
    }
    Ok(out)
}

/// [`OpenBlas::check`] on what the library said of itself: `parallel` as
/// `openblas_get_parallel` gives it (0 for a serial build) and the core name.
fn fit(parallel: c_int, core: &str) -> Result<(), String> {
    if parallel == 0 {
        return Err(
            "OpenBLAS is a serial build, whose calls from two threads at once are \
             not safe (the pthread build is `libopenblas0-pthread`)"
                .to_string(),
        );
    }
    if !VECTOR_CORES.contains(&core.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "OpenBLAS chose kernels for `{core}`, not for AVX2 or AVX-512 units"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn only_threaded_builds_with_vector_kernels_fit() {
        assert_eq!(fit(1, "Zen"), Ok(()));
        assert_eq!(fit(2, "SkylakeX"), Ok(()));
        assert!(fit(0, "Haswell").unwrap_err().contains("serial build"));
        assert_eq!(
            fit(1, "Prescott").unwrap_err(),
            "OpenBLAS chose kernels for `Prescott`, not for AVX2 or AVX-512 units"
        );
    }
}
