//! The cost model: the seed's Table 1 at several n, the byte accounting rules, and every
//! evaluation failure as an error value.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ninf_idl::{CostError, EvalError, ModuleInterface, SourceFile};

fn linpack() -> ModuleInterface {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../routines/idl/linpack.idl");
    ninf_idl::compile_file(&path).unwrap()
}

fn module(text: &str) -> ModuleInterface {
    ninf_idl::compile(&SourceFile::new("t.idl", text)).unwrap()
}

#[test]
fn table_1_of_the_metaserver_paper() {
    let m = linpack();
    for n in [1i64, 2, 100, 300, 500, 700, 1000, 4096] {
        let nf = n as f64;
        let n_u = n as u64;
        let dgefa = m.function("dgefa").unwrap().cost(&[("n", n)]).unwrap();
        assert_eq!(dgefa.bytes_in, 8 * n_u * n_u, "dgefa in, n = {n}");
        assert_eq!(
            dgefa.bytes_out,
            8 * n_u * n_u + 4 * n_u,
            "dgefa out, n = {n}"
        );
        assert!((dgefa.flops - 2.0 / 3.0 * nf.powi(3)).abs() <= 1e-9 * nf.powi(3));

        let dgesl = m.function("dgesl").unwrap().cost(&[("n", n)]).unwrap();
        assert_eq!(
            dgesl.bytes_in,
            8 * n_u * n_u + 12 * n_u,
            "dgesl in, n = {n}"
        );
        assert_eq!(dgesl.bytes_out, 8 * n_u, "dgesl out, n = {n}");
        assert_eq!(dgesl.flops, 2.0 * nf * nf);

        let mmul = m.function("mmul").unwrap().cost(&[("n", n)]).unwrap();
        assert_eq!(mmul.bytes_in, 16 * n_u * n_u);
        assert_eq!(mmul.bytes_out, 8 * n_u * n_u);
        assert_eq!(mmul.flops, 2.0 * nf.powi(3));

        for c in [dgefa, dgesl, mmul] {
            assert_eq!(c.scalar_bytes_in, 4, "the int n travels as a scalar");
            assert_eq!(c.processors, 1);
        }
    }
}

#[test]
fn the_issue_example_dgefa_at_700() {
    let cost = linpack()
        .function("dgefa")
        .unwrap()
        .cost(&[("n", 700)])
        .unwrap();
    assert_eq!((cost.bytes_in, cost.bytes_out), (3_920_000, 3_922_800));
}

#[test]
fn modes_count_in_out_both_or_neither() {
    let m = module(
        r#"Define f(IN int n, IN long k, IN double alpha, IN short a[n], OUT dcomplex b[n][2],
                   INOUT float c[n + 1], WORK double w[n * n], IN string name)
           Calls "Rust" f(n, k, alpha, a, b, c, w, name);"#,
    );
    let cost = m.function("f").unwrap().cost(&[("n", 10)]).unwrap();
    assert_eq!(cost.bytes_in, 2 * 10 + 4 * 11);
    assert_eq!(cost.bytes_out, 16 * 20 + 4 * 11);
    assert_eq!(cost.scalar_bytes_in, 4 + 8 + 8, "strings count zero");
    assert_eq!(cost.flops, 0.0, "no CalcOrder");
}

#[test]
fn expressions_use_the_whole_operator_set() {
    let m = module(
        r#"Define f(IN int n, IN int lda, IN double a[lda * (n + 1)], IN int v[n > 4 ? n % 4 : -n + 2 * 3],
                   IN char flags[(n - 1) / 2 ^ 2], IN int z[n == 8 != (lda <= 3)])
           CalcOrder n >= lda ? 0.5 * n ^ 2 : n / 4
           Parallel n < 16 ? 2 : 4
           Calls "Rust" f(n, lda, a, v, flags, z);"#,
    );
    let f = m.function("f").unwrap();
    let cost = f.cost(&[("n", 8), ("lda", 3)]).unwrap();
    // a: 3 * 9 doubles; v: 8 % 4 = 0 ints; flags: 7 / 4 = 1 char; z: (8 == 8) != (3 <= 3) = 0.
    assert_eq!(cost.bytes_in, 8 * 27 + 1);
    assert_eq!(cost.flops, 32.0, "0.5 * 8^2");
    assert_eq!(cost.processors, 2);
    let cost = f.cost(&[("n", 2), ("lda", 3)]).unwrap();
    // v: -2 + 6 = 4 ints; flags: 1 / 4 = 0; z: (2 == 8) != (3 <= 3) = 1 int;
    // CalcOrder: 2 / 4 is real division.
    assert_eq!(cost.bytes_in, 8 * 9 + 16 + 4);
    assert_eq!(cost.flops, 0.5);
}

fn dimension_error(idl: &str, bindings: &[(&str, i64)]) -> CostError {
    module(idl).functions[0].cost(bindings).unwrap_err()
}

#[test]
fn division_by_zero_is_an_error() {
    let e = dimension_error(
        r#"Define f(IN int n, IN double a[10 / n]) Calls "C" f(n, a);"#,
        &[("n", 0)],
    );
    assert_eq!(
        e.to_string(),
        "cannot evaluate dimension 1 of `a`: division by zero in `10 / n`"
    );
    let e = dimension_error(
        r#"Define f(IN int n) CalcOrder n / (n - n) Calls "C" f(n);"#,
        &[("n", 3)],
    );
    assert_eq!(
        e,
        CostError::CalcOrder(EvalError::DivisionByZero("n / (n - n)".into()))
    );
}

#[test]
fn negative_dimension_is_an_error() {
    let e = dimension_error(
        r#"Define f(IN int n, IN double a[4][n - 5]) Calls "C" f(n, a);"#,
        &[("n", 2)],
    );
    assert_eq!(e.to_string(), "dimension 2 of `a` is negative (-3)");
}

#[test]
fn overflow_is_an_error_never_a_wrapped_number() {
    let idl = r#"Define f(IN long n, IN double a[n * n * n]) Calls "C" f(n, a);"#;
    let e = dimension_error(idl, &[("n", 3_000_000)]);
    assert_eq!(
        e.to_string(),
        "cannot evaluate dimension 1 of `a`: integer overflow in `n * n * n`"
    );

    // Element count fits, bytes do not.
    let idl = r#"Define f(IN long n, IN double a[n][n]) Calls "C" f(n, a);"#;
    let e = dimension_error(idl, &[("n", 1 << 31)]);
    assert_eq!(
        e,
        CostError::SizeOverflow {
            parameter: "a".into()
        }
    );

    // Each array fits, their sum does not.
    let idl =
        r#"Define f(IN long n, IN char a[n], IN char b[n], IN char c[n]) Calls "C" f(n, a, b, c);"#;
    let e = dimension_error(idl, &[("n", i64::MAX)]);
    assert_eq!(e, CostError::TotalOverflow { direction: "input" });

    let idl = r#"Define f(IN int n) CalcOrder n ^ 400 Calls "C" f(n);"#;
    let e = dimension_error(idl, &[("n", 10)]);
    assert_eq!(
        e.to_string(),
        "cannot evaluate CalcOrder: `n ^ 400` is not a finite number"
    );

    let idl = r#"Define f(IN int n, IN int a[2 ^ (n - 5)]) Calls "C" f(n, a);"#;
    let e = dimension_error(idl, &[("n", 2)]);
    assert_eq!(
        e.to_string(),
        "cannot evaluate dimension 1 of `a`: negative exponent in `2 ^ (n - 5)` (sizes are integers)"
    );

    let idl = r#"Define f(IN int n, IN int a[-n]) Calls "C" f(n, a);"#;
    let e = dimension_error(idl, &[("n", i64::MIN)]);
    assert_eq!(
        e.to_string(),
        "cannot evaluate dimension 1 of `a`: integer overflow in `-n`"
    );
}

#[test]
fn missing_scalar_and_bad_parallelism_are_errors() {
    let e = dimension_error(
        r#"Define f(IN int n, IN double a[n]) Calls "C" f(n, a);"#,
        &[],
    );
    assert_eq!(
        e.to_string(),
        "cannot evaluate dimension 1 of `a`: no value for `n`"
    );
    let e = dimension_error(
        r#"Define f(IN int p) Parallel p - 1 Calls "C" f(p);"#,
        &[("p", 1)],
    );
    assert_eq!(
        e.to_string(),
        "Parallel gives 0 processors; a routine needs at least 1"
    );
}

#[test]
fn lower_case_keywords_and_ninf1_modes_are_accepted() {
    let m = module(
        r#"module old;
           define mmul(mode_in int n, mode_in double A[n][n], mode_in double B[n][n],
                       mode_out double C[n][n])
           calcorder 2 * n ^ 3
           calls "c" mmul(n, A, B, C);"#,
    );
    assert_eq!(m.module, "old");
    let cost = m.function("mmul").unwrap().cost(&[("n", 10)]).unwrap();
    assert_eq!(
        (cost.bytes_in, cost.bytes_out, cost.flops),
        (1600, 800, 2000.0)
    );
    assert_eq!(m.functions[0].parameters[3].mode, ninf_idl::Mode::Out);
}

#[test]
fn a_file_without_module_takes_its_name_from_the_file() {
    let m = ninf_idl::compile(&SourceFile::new(
        "dir/my-blas.idl",
        r#"Define f(IN int n) Calls "C" f(n);"#,
    ))
    .unwrap();
    assert_eq!(m.module, "my_blas");
}
