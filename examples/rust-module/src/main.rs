//! The `hello` module's routines, and the executable `ninf-gen` generates for them from
//! `idl/hello.idl` (a `main` that serves the grid's calls).

/// y = alpha x + y
pub fn axpy(_n: i64, alpha: f64, x: &[f64], y: &mut [f64]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// The Euclidean norm of x, in result[0].
pub fn norm(_n: i64, x: &[f64], result: &mut [f64]) {
    result[0] = x.iter().map(|v| v * v).sum::<f64>().sqrt();
}

include!(concat!(env!("OUT_DIR"), "/hello_executable.rs"));
