//! Routines for testing and measuring servers (module `selftest`): the null call and a copy
//! for benchmarks, and deliberate failures for fault tests.

pub fn noop(_n: i32) {}

pub fn echo(_n: i64, x: &[f64], y: &mut [f64]) {
    y.copy_from_slice(x);
}

pub fn sleep_ms(ms: i32) -> Result<(), String> {
    let ms = u64::try_from(ms).map_err(|_| format!("cannot sleep {ms} ms"))?;
    std::thread::sleep(std::time::Duration::from_millis(ms));
    Ok(())
}

pub fn fail(code: i32) -> Result<(), String> {
    Err(format!("selftest failure with code {code}"))
}

#[allow(clippy::panic)]
pub fn panic(code: i32) {
    panic!("selftest panic with code {code}");
}

pub fn segfault(_code: i32) {
    // Rust's runtime handles SIGSEGV itself (to report stack overflows) and returns from a
    // raised one, so restore the default action first: the process then dies as a C routine
    // with a bad pointer would.
    // SAFETY: setting a signal's default action and raising it have no memory-safety
    // preconditions; the process ends here.
    unsafe {
        libc::signal(libc::SIGSEGV, libc::SIG_DFL);
        libc::raise(libc::SIGSEGV);
    }
}
