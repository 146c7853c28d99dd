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
