//! Large frames cross through shared memory: data must arrive intact at every size around
//! the threshold, when the regions grow, and when small and large calls alternate.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use ninf::local::LocalExecutable;
use ninf_executable::shared::SHARED_THRESHOLD;
use ninf_routines::selftest_client as selftest;

#[test]
fn echo_is_exact_across_the_threshold_and_as_regions_grow() {
    let idl = Path::new(env!("CARGO_MANIFEST_DIR")).join("idl/selftest.idl");
    let module = ninf_idl::compile_file(&idl).unwrap();
    let mut exec =
        LocalExecutable::spawn(Path::new(env!("CARGO_BIN_EXE_ninf-exec-selftest")), module)
            .unwrap();
    let threshold_elements = SHARED_THRESHOLD / 8;
    let sizes = [
        1,
        threshold_elements - 64,
        threshold_elements,
        threshold_elements + 1,
        3 << 20, // grows both regions past their first size
        10,
        5 << 20, // grows again
        threshold_elements + 7,
    ];
    for (round, &n) in sizes.iter().enumerate() {
        let x: Vec<f64> = (0..n).map(|i| (i * 31 + round) as f64 * 0.5).collect();
        let mut y = vec![0.0; n];
        selftest::echo(&mut exec, n as i64, &x, &mut y).unwrap();
        assert!(y == x, "echo of {n} doubles came back different");
    }
}

fn spawn_linpack() -> LocalExecutable {
    let idl = Path::new(env!("CARGO_MANIFEST_DIR")).join("idl/linpack.idl");
    let module = ninf_idl::compile_file(&idl).unwrap();
    LocalExecutable::spawn(Path::new(env!("CARGO_BIN_EXE_ninf-exec-linpack")), module).unwrap()
}

/// A well-conditioned matrix whose entries depend on `seed`.
fn matrix(n: usize, seed: usize) -> Vec<f64> {
    let mut a: Vec<f64> = (0..n * n)
        .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f64 / 1000.0 - 0.5)
        .collect();
    for i in 0..n {
        a[i + i * n] += n as f64;
    }
    a
}

/// Large INOUT arrays are written where the reply carries them (the reply region) and large
/// IN arrays are read where the request left them: the results are the routine's own, bit
/// for bit, as sizes grow, shrink and cross the thresholds.
#[test]
fn inout_arrays_in_the_reply_region_come_back_exactly_as_the_routine_left_them() {
    use ninf_routines::linpack_client as linpack;
    let mut exec = spawn_linpack();
    // 90 x 90 doubles is just under the 64 KiB of a region array; 200 x 200 and 400 x 400
    // are over it, and 400 x 400 grows both regions.
    for (round, n) in [200usize, 90, 400, 8, 200].into_iter().enumerate() {
        let a0 = matrix(n, round);
        let x: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
        let b0: Vec<f64> = (0..n)
            .map(|i| (0..n).map(|j| a0[i + j * n] * x[j]).sum())
            .collect();

        let (mut a, mut ipvt, mut b) = (a0.clone(), vec![0i32; n], b0.clone());
        let outcome = linpack::dgesv(&mut exec, &mut a, n as i32, &mut ipvt, &mut b).unwrap();

        let (mut a_here, mut ipvt_here, mut b_here) = (a0.clone(), vec![0i32; n], b0.clone());
        let status =
            ninf_routines::linpack::dgesv(&mut a_here, n as i32, &mut ipvt_here, &mut b_here)
                .unwrap();
        assert_eq!(outcome.status, i64::from(status), "n = {n}");
        assert!(
            a == a_here,
            "n = {n}: the LU factors differ from the routine's own"
        );
        assert_eq!(ipvt, ipvt_here, "n = {n}");
        assert!(
            b == b_here,
            "n = {n}: the solution differs from the routine's own"
        );
    }
}

/// A request naming bytes outside the request region, a region array for an argument that
/// is not there, or one in a store region the executable was not given, is refused by name;
/// the executable goes on serving.
#[test]
fn region_arrays_outside_the_region_or_the_arguments_are_refused_by_name() {
    use ninf_proto::v1::{self, ExecErrorKind, argument_value::Value};
    let mut exec = spawn_linpack();
    let int = |v| v1::ArgumentValue {
        value: Some(Value::IntValue(v)),
    };
    let region_array = |parameter, offset, bytes| v1::RegionArray {
        parameter,
        element_type: v1::ElementType::Double as i32,
        offset,
        bytes,
        region: v1::ArrayRegion::Own.into(),
        ..Default::default()
    };
    let stored = v1::RegionArray {
        region: v1::ArrayRegion::Store.into(),
        ..region_array(0, 0, 32)
    };
    let cases = [
        (
            region_array(0, 1 << 40, 32),
            v1::ArgumentValue::default(),
            format!(
                "malformed request: array of parameter 0: bytes {}..{} lie outside the shared region",
                1u64 << 40,
                (1u64 << 40) + 32
            ),
        ),
        (
            region_array(0, u64::MAX, 32),
            v1::ArgumentValue::default(),
            format!(
                "malformed request: array of parameter 0: bytes {}..{} lie outside the shared region",
                u64::MAX,
                u64::MAX
            ),
        ),
        (
            region_array(7, 0, 32),
            v1::ArgumentValue::default(),
            "malformed request: a region array names argument 7 of 3".to_string(),
        ),
        (
            region_array(0, 0, 32),
            int(1),
            "malformed request: argument 0 has a value and a region array".to_string(),
        ),
        (
            stored,
            v1::ArgumentValue::default(),
            "malformed request: array of parameter 0 lies in the host's store region, which this executable was not given".to_string(),
        ),
    ];
    let process = exec.process();
    for (array, first, expected) in cases {
        let request = v1::ExecRequest {
            call_id: 1,
            function: "dgefa".into(),
            arguments: vec![first, int(2), v1::ArgumentValue::default()],
            region_arrays: vec![array],
            ..Default::default()
        };
        process
            .send_raw(&prost::Message::encode_to_vec(&request))
            .unwrap();
        match process.receive().unwrap().result {
            Some(v1::exec_reply::Result::Error(e)) => {
                assert_eq!(e.kind, ExecErrorKind::MalformedRequest as i32);
                assert_eq!(e.message, expected);
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
    let mut a = vec![2.0, 0.0, 0.0, 4.0];
    let (mut ipvt, mut b) = (vec![0; 2], vec![2.0, 8.0]);
    let outcome =
        ninf_routines::linpack_client::dgesv(&mut exec, &mut a, 2, &mut ipvt, &mut b).unwrap();
    assert_eq!((outcome.status, b), (0, vec![1.0, 2.0]));
}
