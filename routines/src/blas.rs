//! Matrix products.

use faer::{Accum, MatMut, MatRef, Par};

/// `C = A B` for n-by-n column-major matrices.
pub fn mmul(n: i32, a: &[f64], b: &[f64], c: &mut [f64]) -> Result<(), String> {
    let n = usize::try_from(n).map_err(|_| format!("n = {n} is negative"))?;
    for (name, len) in [("A", a.len()), ("B", b.len()), ("C", c.len())] {
        crate::linpack::check_len(name, len, n * n)?;
    }
    let a = MatRef::from_column_major_slice(a, n, n);
    let b = MatRef::from_column_major_slice(b, n, n);
    let c = MatMut::from_column_major_slice_mut(c, n, n);
    faer::linalg::matmul::matmul(c, Accum::Replace, a, b, 1.0, Par::Seq);
    Ok(())
}
