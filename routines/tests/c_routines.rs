//! The `Calls "C"` path end to end: stubs -> protocol -> generated executable -> C code
//! linked with libm.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ninf::local::LocalExecutable;
use ninf::{Arg, ErrorKind};
use ninf_routines::vector_client as vector;
use num_complex::Complex64;

fn spawn() -> LocalExecutable {
    let idl = Path::new(env!("CARGO_MANIFEST_DIR")).join("idl/vector.idl");
    let module = ninf_idl::compile_file(&idl).unwrap();
    LocalExecutable::spawn(Path::new(env!("CARGO_BIN_EXE_ninf-exec-vector")), module).unwrap()
}

#[test]
fn scalars_arrays_and_libm_through_c() {
    let mut exec = spawn();
    let x = [3.0, 4.0, 12.0];
    let y = [1.0, 2.0, 0.5];
    let mut result = [0.0];
    vector::ddot(&mut exec, 3, &x, &y, &mut result).unwrap();
    assert_eq!(result[0], 3.0 + 8.0 + 6.0);
    vector::dnrm2(&mut exec, 3, &x, &mut result).unwrap();
    assert!((result[0] - 13.0).abs() < 1e-12, "{}", result[0]);
}

/// `ddot` sums in eight interleaved partial sums and then the tail: every element counts
/// once, whatever `n` is modulo 8 (integers, so that the sum is exact in any order).
#[test]
fn ddot_counts_every_element_once_at_every_length() {
    let mut exec = spawn();
    for n in [0usize, 1, 7, 8, 9, 16, 19, 1000, 1001] {
        let x: Vec<f64> = (0..n).map(|i| (i % 13) as f64 + 1.0).collect();
        let y: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 3.0).collect();
        let mut result = [f64::NAN];
        vector::ddot(&mut exec, n as i32, &x, &y, &mut result).unwrap();
        let expected: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
        assert_eq!(result[0], expected, "n = {n}");
    }
}

#[test]
fn strings_chars_work_arrays_and_complex_through_c() {
    let mut exec = spawn();
    let mut buffer = vec![0u8; 8];
    vector::label(&mut exec, "ninf", 8, &mut buffer).unwrap();
    assert_eq!(&buffer, b"ninf....");

    let mut z = vec![Complex64::new(1.0, 2.0), Complex64::new(-3.0, 0.5)];
    vector::pscale(&mut exec, 2, 2, Complex64::new(0.0, 1.0), &mut z).unwrap();
    assert_eq!(
        z,
        vec![Complex64::new(-2.0, 1.0), Complex64::new(-0.5, -3.0)]
    );
}

#[test]
fn interior_nul_in_a_string_is_a_bad_argument() {
    let mut exec = spawn();
    let mut buffer = vec![0u8; 4];
    let error = ninf::Caller::call(
        &mut exec,
        "label",
        &mut [
            Arg::Text("a\0b"),
            Arg::Integer(4),
            Arg::from(&mut buffer),
            Arg::Work,
        ],
    )
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::BadArgument);
    assert_eq!(error.message, "argument `text` contains a NUL byte");
    // And the executable still serves.
    vector::label(&mut exec, "ok", 4, &mut buffer).unwrap();
    assert_eq!(&buffer, b"ok..");
}
