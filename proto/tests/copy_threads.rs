//! `NINF_COPY_THREADS` as docs/bulk-protocol.md and python/README.md write it: read once,
//! before the first large copy, and large copies still exact under it. A test binary of its
//! own, since the setting is the process's.

#![allow(clippy::unwrap_used)]

#[test]
fn the_copy_threads_setting_is_taken_as_written_and_copies_stay_exact() {
    // SAFETY: the only test in this binary, and no other thread runs yet.
    unsafe { std::env::set_var(ninf_proto::copy::COPY_THREADS_VARIABLE, "3") };
    assert_eq!(ninf_proto::copy::COPY_THREADS_VARIABLE, "NINF_COPY_THREADS");
    assert_eq!(ninf_proto::copy::copy_threads(), 3);
    let len = 12 << 20;
    let source: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
    let mut target = vec![0u8; len];
    ninf_proto::copy::copy(&mut target, &source);
    assert!(target == source);
    ninf_proto::copy::zero(&mut target);
    assert!(target.iter().all(|&b| b == 0));
}
