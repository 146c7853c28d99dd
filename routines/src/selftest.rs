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

pub fn slow_echo(ms: i32, n: i64, x: &[f64], y: &mut [f64]) -> Result<(), String> {
    sleep_ms(ms)?;
    echo(n, x, y);
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

/// Burns CPU: `work` rounds of a multiply-add chain the compiler cannot remove.
pub fn spin(work: i64) -> Result<(), String> {
    if work < 0 {
        return Err(format!("work = {work} is negative"));
    }
    let mut x = std::hint::black_box(1.000_000_1_f64);
    for _ in 0..work {
        x = std::hint::black_box(x * 0.999_999_9 + 1e-9);
    }
    std::hint::black_box(x);
    Ok(())
}

fn ranks(p: i32) -> Result<(usize, usize), String> {
    let (rank, size) = (ninf_executable::spmd::rank(), ninf_executable::spmd::size());
    if usize::try_from(p).ok() != Some(size) {
        return Err(format!("called with p = {p} but running on {size} ranks"));
    }
    Ok((rank, size))
}

/// Every rank spins, then the ranks meet at a barrier.
pub fn pspin(p: i32, work: i64) -> Result<(), String> {
    ranks(p)?;
    spin(work)?;
    ninf_executable::spmd::barrier().map_err(|e| e.to_string())
}

/// Rank r waits for rank r+1 (mod p), which is itself waiting: nobody ever sends.
pub fn pdeadlock(p: i32) -> Result<(), String> {
    let (rank, size) = ranks(p)?;
    ninf_executable::spmd::recv((rank + 1) % size).map_err(|e| e.to_string())?;
    Ok(())
}
