//! End to end through the generated code: typed stubs -> argument checks -> executable
//! protocol -> the generated `ninf-exec-linpack` process -> faer, and back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ninf::local::LocalExecutable;
use ninf::{Arg, ErrorKind};
use ninf_routines::linpack_client as linpack;

fn spawn() -> LocalExecutable {
    let idl = Path::new(env!("CARGO_MANIFEST_DIR")).join("idl/linpack.idl");
    let module = ninf_idl::compile_file(&idl).expect("linpack.idl compiles");
    LocalExecutable::spawn(Path::new(env!("CARGO_BIN_EXE_ninf-exec-linpack")), module)
        .expect("executable starts")
}

/// A deterministic pseudo-random matrix with a heavy diagonal (well conditioned).
fn test_matrix(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 / (1u64 << 53) as f64) - 0.5
    };
    let mut a: Vec<f64> = (0..n * n).map(|_| next()).collect();
    for i in 0..n {
        a[i + i * n] += n as f64 / 4.0;
    }
    a
}

/// Naive column-major product, as an independent reference.
fn naive_product(n: usize, a: &[f64], x: &[f64], columns: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * columns];
    for j in 0..columns {
        for k in 0..n {
            for i in 0..n {
                out[i + j * n] += a[i + k * n] * x[k + j * n];
            }
        }
    }
    out
}

#[test]
fn dgefa_then_dgesl_solves_the_system_through_the_generated_executable() {
    let mut exec = spawn();
    let n = 50;
    let a0 = test_matrix(n, 7);
    let x_true: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 / 10.0).collect();
    let b0 = naive_product(n, &a0, &x_true, 1);

    let mut a = a0.clone();
    let mut ipvt = vec![0i32; n];
    let outcome = linpack::dgefa(&mut exec, &mut a, n as i32, &mut ipvt).unwrap();
    assert_eq!(outcome.status, 0);
    assert!(
        ipvt.iter().all(|&p| p >= 1 && p as usize <= n),
        "1-based pivots: {ipvt:?}"
    );
    assert_ne!(a, a0, "the factors came back");

    let mut b = b0.clone();
    linpack::dgesl(&mut exec, &a, n as i32, &ipvt, &mut b).unwrap();
    let error = b
        .iter()
        .zip(&x_true)
        .map(|(x, t)| (x - t).abs())
        .fold(0.0, f64::max);
    assert!(error < 1e-10, "max error {error}");
}

#[test]
fn dgesv_and_mmul_agree_with_naive_references() {
    let mut exec = spawn();
    let n = 20;
    let a0 = test_matrix(n, 11);
    let b0 = test_matrix(n, 13);
    let mut c = vec![0.0; n * n];
    linpack::mmul(&mut exec, n as i32, &a0, &b0, &mut c).unwrap();
    let reference = naive_product(n, &a0, &b0, n);
    for (got, want) in c.iter().zip(&reference) {
        assert!((got - want).abs() < 1e-12 * n as f64, "{got} vs {want}");
    }

    let x_true: Vec<f64> = (0..n).map(|i| (i as f64).sin()).collect();
    let mut b = naive_product(n, &a0, &x_true, 1);
    let mut a = a0.clone();
    let mut ipvt = vec![0; n];
    let outcome = linpack::dgesv(&mut exec, &mut a, n as i32, &mut ipvt, &mut b).unwrap();
    assert_eq!(outcome.status, 0);
    for (got, want) in b.iter().zip(&x_true) {
        assert!((got - want).abs() < 1e-11, "{got} vs {want}");
    }
}

#[test]
fn a_singular_matrix_is_reported_through_the_status() {
    let mut exec = spawn();
    let n = 4;
    // Column-major; the third column is zero, so elimination finds no pivot at step 3.
    let mut a = vec![
        4.0, 1.0, 2.0, 1.0, //
        1.0, 5.0, 1.0, 2.0, //
        0.0, 0.0, 0.0, 0.0, //
        2.0, 1.0, 1.0, 6.0,
    ];
    let mut ipvt = vec![0; n];
    let outcome = linpack::dgefa(&mut exec, &mut a, n as i32, &mut ipvt).unwrap();
    assert_eq!(
        outcome.status, 3,
        "LINPACK info: 1-based index of the zero pivot"
    );
}

#[test]
fn wrong_sizes_are_refused_before_sending_and_name_the_argument() {
    let mut exec = spawn();
    let mut a = vec![0.0; 99];
    let mut ipvt = vec![0; 10];
    let error = linpack::dgefa(&mut exec, &mut a, 10, &mut ipvt).unwrap_err();
    assert_eq!(error.kind, ErrorKind::BadArgument);
    assert_eq!(
        error.message,
        "argument `a` of `dgefa` has 99 elements, expected 100 (n x n = 10 x 10)"
    );
    // A positional call with the wrong count, then with a wrong type.
    let error = ninf::Caller::call(&mut exec, "dgefa", &mut [Arg::Integer(3)]).unwrap_err();
    assert_eq!(
        error.message,
        "`dgefa` takes 3 arguments (a, n, ipvt), got 1"
    );
    let mut a = vec![0.0f64; 4];
    let mut ipvt = vec![0i32; 2];
    let error = ninf::Caller::call(
        &mut exec,
        "dgefa",
        &mut [Arg::from(&mut a), Arg::Real(2.0), Arg::from(&mut ipvt)],
    )
    .unwrap_err();
    assert_eq!(
        error.message,
        "argument `n` of `dgefa` must be an int, got a real number"
    );
}

#[test]
fn the_executable_refuses_bad_requests_and_keeps_serving() {
    use ninf_executable::CallFailure;
    use ninf_proto::v1::{self, ExecErrorKind, argument_value::Value};
    let mut exec = spawn();
    let process = exec.process();

    // Garbage bytes: an error reply, not a crash.
    process.send_raw(&[0xff, 0xff, 0xff, 0x01]).unwrap();
    let reply = process.receive().unwrap();
    match reply.result {
        Some(v1::exec_reply::Result::Error(e)) => {
            assert_eq!(e.kind, ExecErrorKind::MalformedRequest as i32);
            assert!(e.message.starts_with("malformed request"), "{}", e.message);
        }
        other => panic!("expected an error, got {other:?}"),
    }

    // An unknown routine.
    match process.call("dgetrf", vec![]) {
        Err(CallFailure::Routine { kind, message }) => {
            assert_eq!(kind, ExecErrorKind::FunctionNotFound);
            assert_eq!(message, "no routine `dgetrf` in this executable");
        }
        other => panic!("expected FUNCTION_NOT_FOUND, got {other:?}"),
    }

    // A request whose array is one element short, bypassing the client's own check.
    let int = |v| v1::ArgumentValue {
        value: Some(Value::IntValue(v)),
    };
    let array = |t: v1::ElementType, data: Vec<u8>| v1::ArgumentValue {
        value: Some(Value::Array(v1::Array {
            element_type: t as i32,
            data: data.into(),
        })),
    };
    let short = array(v1::ElementType::Double, vec![0; 8 * 3]);
    match process.call(
        "dgefa",
        vec![short, int(2), v1::ArgumentValue { value: None }],
    ) {
        Err(CallFailure::Routine { kind, message }) => {
            assert_eq!(kind, ExecErrorKind::BadArgument);
            assert_eq!(
                message,
                "argument `a` of `dgefa` has 3 elements, expected 4 (n x n = 2 x 2)"
            );
        }
        other => panic!("expected BAD_ARGUMENT, got {other:?}"),
    }

    // An OUT argument that carries a value, and an n that overflows the array size.
    let a = array(v1::ElementType::Double, vec![0; 8 * 4]);
    let ipvt = array(v1::ElementType::Int, vec![0; 8]);
    match process.call("dgefa", vec![a, int(2), ipvt]) {
        Err(CallFailure::Routine { message, .. }) => {
            assert_eq!(
                message,
                "argument `ipvt` of `dgefa` is OUT: the caller must not send a value"
            )
        }
        other => panic!("expected BAD_ARGUMENT, got {other:?}"),
    }
    let a = array(v1::ElementType::Double, vec![]);
    match process.call("dgefa", vec![a, int(-3), v1::ArgumentValue { value: None }]) {
        Err(CallFailure::Routine { kind, message }) => {
            assert_eq!(kind, ExecErrorKind::Evaluation);
            assert_eq!(
                message,
                "argument `a` of `dgefa`: dimension 1 of `a` is negative (-3)"
            );
        }
        other => panic!("expected EVALUATION, got {other:?}"),
    }

    // Still serving: a correct call works.
    let mut a = vec![2.0, 0.0, 0.0, 4.0];
    let mut ipvt = vec![0; 2];
    let mut b = vec![2.0, 8.0];
    let outcome = linpack::dgesv(&mut exec, &mut a, 2, &mut ipvt, &mut b).unwrap();
    assert_eq!((outcome.status, b), (0, vec![1.0, 2.0]));
}
