//! Matrix products.

use faer::{Accum, MatMut, MatRef, Par};

use crate::kernels::Kernels;

/// `C = A B` for n-by-n column-major matrices, with the kernels `NINF_BLAS` chooses
/// ([`crate::kernels`]).
pub fn mmul(n: i32, a: &[f64], b: &[f64], c: &mut [f64]) -> Result<(), String> {
    mmul_with(&crate::kernels::current()?, n, a, b, c)
}

/// [`mmul`] with the given kernels. Given several threads, each computes its own block of
/// C's columns on its own: faer splitting one n = 2000 product over two threads ran it at
/// 1.5 times one thread's speed on a 2-core Xeon, the column blocks at 1.9-2.0 times
/// (`examples/product_threads.rs`). Each column of C is computed as one thread would
/// compute it, so the product is the same bit for bit.
pub fn mmul_with(
    kernels: &Kernels,
    n: i32,
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
) -> Result<(), String> {
    let n = usize::try_from(n).map_err(|_| format!("n = {n} is negative"))?;
    for (name, len) in [("A", a.len()), ("B", b.len()), ("C", c.len())] {
        crate::linpack::check_len(name, len, n * n)?;
    }
    let blocks = ninf_executable::threads::count().min(n);
    if blocks <= 1 {
        return columns(kernels, n, a, b, c);
    }
    // Whole columns per block, a multiple of 8 of them: OpenBLAS computes the columns past
    // the last full group of its kernel's width (2 to 8) in another order, so blocks that
    // start elsewhere change the product's last bits (n = 65 in halves of 33 and 32 did).
    // n > 0 here, so the chunks are never empty.
    let width = block_width(n, blocks) * n;
    let mut results = Vec::new();
    rayon::scope(|scope| {
        let slots: Vec<_> = b.chunks(width).zip(c.chunks_mut(width)).collect();
        results.resize_with(slots.len(), || Ok(()));
        for ((b, c), result) in slots.into_iter().zip(results.iter_mut()) {
            scope.spawn(move |_| *result = columns(kernels, n, a, b, c));
        }
    });
    results.into_iter().collect()
}

/// Columns in a multiple of which [`mmul_with`] and [`pmmul`] hand out blocks.
const BLOCK_ALIGN: usize = 8;

/// Columns per block when n columns are split `blocks` ways (the last block takes the rest).
fn block_width(n: usize, blocks: usize) -> usize {
    n.div_ceil(blocks.max(1)).next_multiple_of(BLOCK_ALIGN)
}

/// C's columns of `b`'s columns (both `n` rows, packed) by the n-by-n `a`, on this thread.
fn columns(kernels: &Kernels, n: usize, a: &[f64], b: &[f64], c: &mut [f64]) -> Result<(), String> {
    let width = b.len().checked_div(n).unwrap_or(0);
    match kernels {
        Kernels::Faer => {
            let a = MatRef::from_column_major_slice(a, n, n);
            let b = MatRef::from_column_major_slice(b, n, width);
            let c = MatMut::from_column_major_slice_mut(c, n, width);
            faer::linalg::matmul::matmul(c, Accum::Replace, a, b, 1.0, Par::Seq);
            Ok(())
        }
        Kernels::OpenBlas(lib) => lib.dgemm((n, width, n), a, b, c),
    }
}

/// `C = A B` over p ranks: rank r multiplies A by its block of B's columns into the same
/// block of C; the other ranks send their blocks to rank 0, which returns the whole of C.
pub fn pmmul(p: i32, n: i32, a: &[f64], b: &[f64], c: &mut [f64]) -> Result<(), String> {
    use ninf_executable::spmd;
    let (rank, size) = (spmd::rank(), spmd::size());
    if usize::try_from(p).ok() != Some(size) {
        return Err(format!("called with p = {p} but running on {size} ranks"));
    }
    let n = usize::try_from(n).map_err(|_| format!("n = {n} is negative"))?;
    for (name, len) in [("A", a.len()), ("B", b.len()), ("C", c.len())] {
        crate::linpack::check_len(name, len, n * n)?;
    }
    // The blocks `mmul` would give as many threads, with the same kernels: the same product
    // bit for bit.
    let width = block_width(n, size);
    let block = |r: usize| ((r * width).min(n), ((r + 1) * width).min(n));
    let (first, end) = block(rank);
    let kernels = crate::kernels::current()?;
    columns(
        &kernels,
        n,
        a,
        &b[first * n..end * n],
        &mut c[first * n..end * n],
    )?;
    if rank == 0 {
        for from in 1..size {
            let (first, end) = block(from);
            let part = spmd::recv_f64(from).map_err(|e| e.to_string())?;
            if part.len() != (end - first) * n {
                return Err(format!(
                    "rank {from} sent {} values for a block of {}",
                    part.len(),
                    (end - first) * n
                ));
            }
            c[first * n..end * n].copy_from_slice(&part);
        }
    } else {
        spmd::send_f64(0, &c[first * n..end * n]).map_err(|e| e.to_string())?;
    }
    Ok(())
}
