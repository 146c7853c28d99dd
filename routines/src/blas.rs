//! Matrix products.

use faer::{Accum, MatMut, MatRef, Par};

/// `C = A B` for n-by-n column-major matrices. Given several threads, each computes its own
/// block of C's columns on its own: faer splitting one n = 2000 product over two threads ran
/// it at 1.5 times one thread's speed on a 2-core Xeon, the column blocks at 1.9-2.0 times
/// (`examples/product_threads.rs`; docs/performance.md, "The products' kernel"). Each column
/// of C is computed as one thread would compute it, so the product is the same bit for bit.
pub fn mmul(n: i32, a: &[f64], b: &[f64], c: &mut [f64]) -> Result<(), String> {
    let n = usize::try_from(n).map_err(|_| format!("n = {n} is negative"))?;
    for (name, len) in [("A", a.len()), ("B", b.len()), ("C", c.len())] {
        crate::linpack::check_len(name, len, n * n)?;
    }
    let a = MatRef::from_column_major_slice(a, n, n);
    let blocks = ninf_executable::threads::count().min(n);
    if blocks <= 1 {
        let b = MatRef::from_column_major_slice(b, n, n);
        let c = MatMut::from_column_major_slice_mut(c, n, n);
        faer::linalg::matmul::matmul(c, Accum::Replace, a, b, 1.0, Par::Seq);
        return Ok(());
    }
    // Whole columns per block: n > 0 here, so the chunks are never empty.
    let columns = n.div_ceil(blocks) * n;
    rayon::scope(|scope| {
        for (b, c) in b.chunks(columns).zip(c.chunks_mut(columns)) {
            scope.spawn(move |_| {
                let width = b.len() / n;
                let b = MatRef::from_column_major_slice(b, n, width);
                let c = MatMut::from_column_major_slice_mut(c, n, width);
                faer::linalg::matmul::matmul(c, Accum::Replace, a, b, 1.0, Par::Seq);
            });
        }
    });
    Ok(())
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
    let block = |r: usize| (r * n / size, (r + 1) * n / size);
    let (first, end) = block(rank);
    let width = end - first;
    let a = MatRef::from_column_major_slice(a, n, n);
    let b_block = MatRef::from_column_major_slice(&b[first * n..end * n], n, width);
    let c_block = MatMut::from_column_major_slice_mut(&mut c[first * n..end * n], n, width);
    faer::linalg::matmul::matmul(c_block, Accum::Replace, a, b_block, 1.0, Par::Seq);
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
