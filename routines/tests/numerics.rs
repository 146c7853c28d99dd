//! The standard routines against independent naive references, with tolerances scaled to n
//! and the condition number, on random and ill-conditioned matrices; singular matrices come
//! back as a status, and `ipvt` means what LINPACK says it means.

#![allow(clippy::unwrap_used, clippy::needless_range_loop)]

use std::sync::Arc;

use ninf_routines::blas::{mmul, mmul_with};
use ninf_routines::kernels::{self, Kernels};
use ninf_routines::linpack::{dgefa, dgefa_with, dgesl, dgesl_with, dgesv};
use ninf_routines::openblas::OpenBlas;

const EPS: f64 = f64::EPSILON;

fn random_matrix(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n * n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect()
}

fn hilbert(n: usize) -> Vec<f64> {
    let mut a = vec![0.0; n * n];
    for j in 0..n {
        for i in 0..n {
            a[i + j * n] = 1.0 / (i + j + 1) as f64;
        }
    }
    a
}

fn mat_vec(n: usize, a: &[f64], x: &[f64]) -> Vec<f64> {
    (0..n)
        .map(|i| (0..n).map(|j| a[i + j * n] * x[j]).sum())
        .collect()
}

fn norm_inf(n: usize, a: &[f64]) -> f64 {
    (0..n)
        .map(|i| (0..n).map(|j| a[i + j * n].abs()).sum::<f64>())
        .fold(0.0, f64::max)
}

/// Gauss-Jordan inverse with partial pivoting, for the condition number (test reference).
fn naive_inverse(n: usize, a: &[f64]) -> Vec<f64> {
    let mut m = a.to_vec();
    let mut inv: Vec<f64> = (0..n * n)
        .map(|k| if k % (n + 1) == 0 { 1.0 } else { 0.0 })
        .collect();
    for k in 0..n {
        let p = (k..n)
            .max_by(|&x, &y| m[x + k * n].abs().total_cmp(&m[y + k * n].abs()))
            .unwrap();
        for j in 0..n {
            m.swap(k + j * n, p + j * n);
            inv.swap(k + j * n, p + j * n);
        }
        let d = m[k + k * n];
        for j in 0..n {
            m[k + j * n] /= d;
            inv[k + j * n] /= d;
        }
        for i in 0..n {
            if i != k {
                let f = m[i + k * n];
                for j in 0..n {
                    m[i + j * n] -= f * m[k + j * n];
                    inv[i + j * n] -= f * inv[k + j * n];
                }
            }
        }
    }
    inv
}

fn condition(n: usize, a: &[f64]) -> f64 {
    norm_inf(n, a) * norm_inf(n, &naive_inverse(n, a))
}

/// Factors and solves, and checks the forward error against n * cond * eps.
fn check_solve(n: usize, a0: &[f64], label: &str) {
    let x_true: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64 / 7.0).collect();
    let mut b = mat_vec(n, a0, &x_true);
    let mut a = a0.to_vec();
    let mut ipvt = vec![0; n];
    assert_eq!(dgefa(&mut a, n as i32, &mut ipvt).unwrap(), 0, "{label}");
    dgesl(&a, n as i32, &ipvt, &mut b).unwrap();
    let cond = condition(n, a0);
    let error = b
        .iter()
        .zip(&x_true)
        .map(|(x, t)| (x - t).abs())
        .fold(0.0, f64::max)
        / x_true.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let bound = 10.0 * n as f64 * cond * EPS;
    assert!(
        error <= bound,
        "{label}: relative error {error:.3e} > {bound:.3e} (cond {cond:.3e})"
    );
}

#[test]
fn random_systems_solve_within_the_conditioning_bound() {
    for (n, seed) in [(1, 1), (2, 2), (10, 3), (64, 4), (200, 5)] {
        check_solve(n, &random_matrix(n, seed), &format!("random n={n}"));
    }
}

#[test]
fn ill_conditioned_hilbert_systems_solve_within_the_conditioning_bound() {
    for n in [4, 6, 8, 10] {
        let a = hilbert(n);
        let cond = condition(n, &a);
        assert!(cond > 1e4, "Hilbert {n} is ill-conditioned ({cond:.1e})");
        check_solve(n, &a, &format!("Hilbert n={n}"));
    }
}

#[test]
fn ipvt_holds_linpack_row_interchanges() {
    let n = 30;
    let a0 = random_matrix(n, 9);
    let mut a = a0.clone();
    let mut ipvt = vec![0; n];
    dgefa(&mut a, n as i32, &mut ipvt).unwrap();
    // Applying the interchanges in order to A gives P A, which must equal L U.
    let mut pa = a0.clone();
    for k in 0..n {
        let l = (ipvt[k] - 1) as usize;
        assert!(
            l >= k && l < n,
            "ipvt[{k}] = {} is 1-based and never looks back",
            ipvt[k]
        );
        for j in 0..n {
            pa.swap(k + j * n, l + j * n);
        }
    }
    for i in 0..n {
        for j in 0..n {
            let lu: f64 = (0..=i.min(j))
                .map(|k| {
                    let l = if k == i { 1.0 } else { a[i + k * n] };
                    l * a[k + j * n]
                })
                .sum();
            assert!(
                (lu - pa[i + j * n]).abs() < 1e-13 * n as f64,
                "(L U)[{i},{j}] = {lu} vs {}",
                pa[i + j * n]
            );
        }
    }
}

#[test]
fn singular_matrices_are_reported_by_status_not_a_crash() {
    // A zero row stays zero through elimination: the last pivot is exactly zero.
    let n = 5;
    let mut a = random_matrix(n, 11);
    for j in 0..n {
        a[2 + j * n] = 0.0;
    }
    let mut ipvt = vec![0; n];
    assert_eq!(dgefa(&mut a, n as i32, &mut ipvt).unwrap(), n as i32);

    let mut zero = vec![0.0; 9];
    let mut b = vec![1.0; 3];
    let mut ipvt = vec![0; 3];
    assert_eq!(dgesv(&mut zero, 3, &mut ipvt, &mut b).unwrap(), 1);
    assert_eq!(
        b,
        vec![1.0; 3],
        "dgesv leaves b alone when the matrix is singular"
    );

    assert_eq!(
        dgefa(&mut [], 0, &mut []).unwrap(),
        0,
        "the empty matrix is fine"
    );
    assert!(dgefa(&mut [], -1, &mut []).is_err());
    assert_eq!(
        dgesl(&[1.0], 1, &[5], &mut [1.0]).unwrap_err(),
        "ipvt[0] = 5 is not a row of a 1x1 matrix"
    );
    assert_eq!(
        dgefa(&mut [1.0; 3], 2, &mut [0; 2]).unwrap_err(),
        "`a` has 3 elements, expected 4"
    );
    assert_eq!(
        mmul(2, &[0.0; 4], &[0.0; 4], &mut [0.0; 3]).unwrap_err(),
        "`C` has 3 elements, expected 4"
    );
}

#[test]
fn mmul_matches_the_naive_product() {
    for n in [1, 7, 65] {
        let a = random_matrix(n, 21);
        let b = random_matrix(n, 22);
        let mut c = vec![f64::NAN; n * n];
        mmul(n as i32, &a, &b, &mut c).unwrap();
        for j in 0..n {
            for i in 0..n {
                let (exact, magnitude) = (0..n).fold((0.0, 0.0), |(s, m), k| {
                    (
                        s + a[i + k * n] * b[k + j * n],
                        m + (a[i + k * n] * b[k + j * n]).abs(),
                    )
                });
                assert!(
                    (c[i + j * n] - exact).abs() <= 2.0 * n as f64 * EPS * magnitude,
                    "n={n} ({i},{j})"
                );
            }
        }
    }
}

fn max_difference(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn routines_given_two_threads_compute_what_they_compute_on_one() {
    use ninf_executable::threads;
    let n = 300;
    let a = random_matrix(n, 11);
    let b = random_matrix(n, 12);

    let (mut one, mut two) = (a.clone(), a.clone());
    let (mut ipvt_one, mut ipvt_two) = (vec![0; n], vec![0; n]);
    assert_eq!(dgefa(&mut one, n as i32, &mut ipvt_one).unwrap(), 0);
    let used = threads::run(2, &[], || {
        let status = dgefa(&mut two, n as i32, &mut ipvt_two).unwrap();
        (status, threads::count())
    });
    assert_eq!(used, (0, 2));
    assert_eq!(ipvt_one, ipvt_two, "the same pivots");
    let scale = norm_inf(n, &a);
    let worst = max_difference(&one, &two);
    assert!(
        worst <= 1e3 * n as f64 * EPS * scale,
        "factors differ by {worst}"
    );

    // Two threads compute the product's column blocks, each as one thread would: the same
    // product, bit for bit, for an odd n (blocks of 1 column more and less) too.
    for n in [n, 101, 1] {
        let (a, b) = (&a[..n * n], &b[..n * n]);
        let (mut c_one, mut c_two) = (vec![0.0; n * n], vec![0.0; n * n]);
        mmul(n as i32, a, b, &mut c_one).unwrap();
        threads::run(2, &[], || mmul(n as i32, a, b, &mut c_two).unwrap());
        assert!(c_one == c_two, "n = {n}: the products differ");
    }
}

/// The host's OpenBLAS, required: `scripts/test` installs `libopenblas0-pthread`. Loaded
/// whichever kernels it chose for this processor, so that its results are checked here even
/// where `auto` would pass it over.
fn openblas() -> OpenBlas {
    OpenBlas::load(kernels::OPENBLAS_SONAME)
        .unwrap_or_else(|e| panic!("the tests need OpenBLAS (libopenblas0-pthread): {e}"))
}

fn both_kernels() -> [Kernels; 2] {
    [Kernels::Faer, Kernels::OpenBlas(Arc::new(openblas()))]
}

#[test]
fn faer_and_openblas_compute_the_same_products_and_factors() {
    use ninf_executable::threads;
    for kernels in both_kernels() {
        let name = kernels.name();
        for n in [1, 7, 65, 300] {
            let a = random_matrix(n, 31);
            let b = random_matrix(n, 32);
            let mut c = vec![f64::NAN; n * n];
            mmul_with(&kernels, n as i32, &a, &b, &mut c).unwrap();
            let mut reference = vec![0.0; n * n];
            mmul_with(&Kernels::Faer, n as i32, &a, &b, &mut reference).unwrap();
            let worst = max_difference(&c, &reference);
            assert!(
                worst <= 4.0 * n as f64 * EPS * n as f64,
                "{name} n={n}: {worst}"
            );
            // Two threads' column blocks: each column as one thread computes it.
            let mut c_two = vec![f64::NAN; n * n];
            threads::run(2, &[], || mmul_with(&kernels, n as i32, &a, &b, &mut c_two)).unwrap();
            assert!(c == c_two, "{name} n={n}: two threads' product differs");

            let mut lu = a.clone();
            let mut ipvt = vec![0; n];
            assert_eq!(
                dgefa_with(&kernels, &mut lu, n as i32, &mut ipvt).unwrap(),
                0
            );
            let b: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 / n as f64).collect();
            let mut x = b.clone();
            dgesl_with(&kernels, &lu, n as i32, &ipvt, &mut x).unwrap();
            let mut fa = a.clone();
            let mut fipvt = vec![0; n];
            dgefa_with(&Kernels::Faer, &mut fa, n as i32, &mut fipvt).unwrap();
            assert_eq!(ipvt, fipvt, "{name} n={n}: LINPACK's interchanges");
            let residual = max_difference(&mat_vec(n, &a, &x), &b);
            assert!(residual <= 1e-8, "{name} n={n}: residual {residual}");
            // The other library's solve of the same factors: the same x, to rounding.
            let mut y = b.clone();
            dgesl_with(&Kernels::Faer, &lu, n as i32, &ipvt, &mut y).unwrap();
            let apart = max_difference(&x, &y);
            assert!(apart <= 1e-10, "{name} n={n}: solves differ by {apart}");
        }
        // A zero row: the status names the zero pivot whichever library factored.
        let n = 5;
        let mut a = random_matrix(n, 11);
        for j in 0..n {
            a[2 + j * n] = 0.0;
        }
        assert_eq!(
            dgefa_with(&kernels, &mut a, n as i32, &mut [0; 5]),
            Ok(5),
            "{name}"
        );
        assert_eq!(
            mmul_with(&kernels, 2, &[0.0; 4], &[0.0; 3], &mut [0.0; 4]).unwrap_err(),
            "`B` has 3 elements, expected 4"
        );
    }
}

#[test]
fn ninf_blas_settings_are_checked_and_a_missing_openblas_named() {
    let missing = "libninf-no-such-blas.so.0";
    assert_eq!(
        kernels::choose("blis", missing).err().unwrap(),
        "NINF_BLAS=\"blis\": expected `auto`, `faer` or `openblas`"
    );
    let refused = kernels::choose("openblas", missing).err().unwrap();
    assert_eq!(
        refused,
        "NINF_BLAS=openblas: libninf-no-such-blas.so.0: cannot open shared object file: No such file or directory"
    );
    for setting in ["", "auto", " faer "] {
        assert_eq!(kernels::choose(setting, missing).unwrap().name(), "faer");
    }
    // `auto` takes the host's OpenBLAS where it has kernels for this processor.
    let lib = openblas();
    let auto = kernels::choose("auto", kernels::OPENBLAS_SONAME).unwrap();
    match lib.check() {
        Ok(()) => assert_eq!(auto.name(), format!("OpenBLAS ({})", lib.core())),
        Err(why) => assert_eq!(auto.name(), "faer", "{why}"),
    }
}
