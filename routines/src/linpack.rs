//! LU factorisation and solve with partial pivoting, LINPACK's `dgefa`/`dgesl` interface on
//! faer's blocked LU or LAPACK's `dgetrf` in the host's OpenBLAS.
//!
//! faer returns the final row permutation; LINPACK's `ipvt` is the sequence of row
//! interchanges (at step k, rows k and `ipvt[k]` were swapped). [`dgefa`] converts one into
//! the other, so `ipvt` means what LINPACK users expect. The factors follow LAPACK's storage
//! (unit lower L below the diagonal, U on and above it), which `dgesl` here consumes.

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::lu::partial_pivoting::factor::{lu_in_place, lu_in_place_scratch};
use faer::linalg::triangular_solve::{
    solve_unit_lower_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::{MatMut, MatRef, Par};

use crate::kernels::Kernels;

fn order(n: i32) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("n = {n} is negative"))
}

/// The executables check sizes against the IDL already; direct callers get the same promise.
pub(crate) fn check_len(name: &str, len: usize, expected: usize) -> Result<(), String> {
    if len == expected {
        Ok(())
    } else {
        Err(format!("`{name}` has {len} elements, expected {expected}"))
    }
}

/// Factors the column-major n-by-n `a` in place; `ipvt` receives the 1-based interchanges.
/// Returns 0, or k when U(k, k) is zero (the matrix is singular; `dgesl` would divide by zero).
/// Computes with the kernels `NINF_BLAS` chooses ([`crate::kernels`]).
pub fn dgefa(a: &mut [f64], n: i32, ipvt: &mut [i32]) -> Result<i32, String> {
    dgefa_with(&crate::kernels::current()?, a, n, ipvt)
}

/// [`dgefa`] with the given kernels. A call given several threads factors with faer's
/// blocked LU over them whichever kernels it is given: OpenBLAS would compute on threads of
/// its own, not on the cores the host lent the call.
pub fn dgefa_with(
    kernels: &Kernels,
    a: &mut [f64],
    n: i32,
    ipvt: &mut [i32],
) -> Result<i32, String> {
    let n = order(n)?;
    check_len("a", a.len(), n * n)?;
    check_len("ipvt", ipvt.len(), n)?;
    match kernels {
        Kernels::OpenBlas(lib) if ninf_executable::threads::count() <= 1 => {
            lib.dgetrf(n, a, ipvt)?
        }
        _ => faer_lu(a, n, ipvt)?,
    }
    let info = (0..n).find(|&k| a[k + k * n] == 0.0 || !a[k + k * n].is_finite());
    Ok(info.map_or(0, |k| k as i32 + 1))
}

/// faer's LU of `a`, its permutation replayed into LINPACK's interchanges.
fn faer_lu(a: &mut [f64], n: usize, ipvt: &mut [i32]) -> Result<(), String> {
    let par = crate::par();
    let mut perm = vec![0usize; n];
    let mut perm_inv = vec![0usize; n];
    let mut buffer = MemBuffer::new(lu_in_place_scratch::<usize, f64>(
        n,
        n,
        par,
        Default::default(),
    ));
    let matrix = MatMut::from_column_major_slice_mut(a, n, n);
    lu_in_place(
        matrix,
        &mut perm,
        &mut perm_inv,
        par,
        MemStack::new(&mut buffer),
        Default::default(),
    );
    // Replay the permutation as successive interchanges: at step k, bring the row that ends
    // at position k (perm[k]) from wherever it currently is.
    let mut position: Vec<usize> = (0..n).collect();
    let mut row_at: Vec<usize> = (0..n).collect();
    for k in 0..n {
        let l = position[perm[k]];
        ipvt[k] = i32::try_from(l + 1).map_err(|_| "n exceeds the int range".to_string())?;
        let (rk, rl) = (row_at[k], row_at[l]);
        row_at.swap(k, l);
        position[rk] = l;
        position[rl] = k;
    }
    Ok(())
}

/// Solves A x = b with the factors from [`dgefa`]; `b` is overwritten with x. Computes with
/// the kernels `NINF_BLAS` chooses ([`crate::kernels`]).
pub fn dgesl(a: &[f64], n: i32, ipvt: &[i32], b: &mut [f64]) -> Result<(), String> {
    dgesl_with(&crate::kernels::current()?, a, n, ipvt, b)
}

/// [`dgesl`] with the given kernels. A solve reads the whole matrix once for n² flops, so
/// it is bound by memory: OpenBLAS's triangular solves took 2.2 ms at n = 2000 on an AMD
/// EPYC where faer's sequential ones took 5.5 (`cargo run --release -p ninf-routines
/// --example solves`).
pub fn dgesl_with(
    kernels: &Kernels,
    a: &[f64],
    n: i32,
    ipvt: &[i32],
    b: &mut [f64],
) -> Result<(), String> {
    let n = order(n)?;
    check_len("a", a.len(), n * n)?;
    check_len("ipvt", ipvt.len(), n)?;
    check_len("b", b.len(), n)?;
    for (k, &pivot) in ipvt.iter().enumerate().take(n) {
        let l = usize::try_from(pivot - 1)
            .ok()
            .filter(|&l| l < n)
            .ok_or_else(|| format!("ipvt[{k}] = {pivot} is not a row of a {n}x{n} matrix"))?;
        b.swap(k, l);
    }
    match kernels {
        Kernels::OpenBlas(lib) => lib.lu_solve(n, a, b)?,
        Kernels::Faer => {
            let factors = MatRef::from_column_major_slice(a, n, n);
            let rhs = MatMut::from_column_major_slice_mut(b, n, 1);
            solve_unit_lower_triangular_in_place(factors, rhs, Par::Seq);
            let rhs = MatMut::from_column_major_slice_mut(b, n, 1);
            solve_upper_triangular_in_place(factors, rhs, Par::Seq);
        }
    }
    Ok(())
}

/// Factors `a` and solves A x = b in one call. Returns `dgefa`'s status; `b` is left as
/// given when the matrix is singular.
pub fn dgesv(a: &mut [f64], n: i32, ipvt: &mut [i32], b: &mut [f64]) -> Result<i32, String> {
    let info = dgefa(a, n, ipvt)?;
    if info == 0 {
        dgesl(a, n, ipvt, b)?;
    }
    Ok(info)
}
