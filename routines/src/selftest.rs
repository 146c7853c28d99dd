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

/// Ends the process at once with exit status `code`, skipping every handler: what a C
/// routine's `_exit(code)` does to its executable.
pub fn exit(code: i32) {
    // SAFETY: _exit has no memory-safety preconditions; the process ends here.
    unsafe { libc::_exit(code) }
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

/// A ring exchange that checks every message, each round after `work` iterations of
/// [`spin`]: round k's message from rank r carries k, r, a payload derived from both and an
/// FNV-1a checksum of the rest. A message lost, duplicated, reordered or corrupted between
/// two ranks fails the call with what was wrong.
pub fn pexchange(
    p: i32,
    rounds: i32,
    bytes: i32,
    work: i64,
    checked: &mut [i32],
) -> Result<(), String> {
    use ninf_executable::spmd;
    let (rank, size) = ranks(p)?;
    let rounds = u32::try_from(rounds).map_err(|_| format!("rounds = {rounds} is negative"))?;
    let bytes = usize::try_from(bytes)
        .ok()
        .filter(|&b| b >= EXCHANGE_HEADER)
        .ok_or_else(|| format!("bytes = {bytes}: a message needs at least {EXCHANGE_HEADER}"))?;
    let (next, previous) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut verified: i32 = 0;
    for round in 0..rounds {
        spin(work)?;
        spmd::send(next, &exchange_message(rank, round, bytes)).map_err(|e| e.to_string())?;
        let message = spmd::recv(previous).map_err(|e| e.to_string())?;
        if message != exchange_message(previous, round, bytes) {
            return Err(describe_bad_message(&message, previous, round, bytes));
        }
        verified += 1;
    }
    if rank == 0 {
        for from in 1..size {
            let count = spmd::recv(from).map_err(|e| e.to_string())?;
            let count: [u8; 4] = count
                .try_into()
                .map_err(|_| format!("rank {from} sent a count that is not 4 bytes"))?;
            verified += i32::from_le_bytes(count);
        }
        if let Some(out) = checked.first_mut() {
            *out = verified;
        }
    } else {
        spmd::send(0, &verified.to_le_bytes()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Sequence number, sender and checksum.
const EXCHANGE_HEADER: usize = 16;

fn exchange_message(sender: usize, round: u32, bytes: usize) -> Vec<u8> {
    let mut message = Vec::with_capacity(bytes);
    message.extend_from_slice(&round.to_le_bytes());
    message.extend_from_slice(&(sender as u32).to_le_bytes());
    let seed = (round as usize).wrapping_mul(31).wrapping_add(sender);
    message.extend((0..bytes - EXCHANGE_HEADER).map(|i| (seed.wrapping_add(i * 7) % 251) as u8));
    let checksum = fnv1a(&message);
    message.extend_from_slice(&checksum.to_le_bytes());
    message
}

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn describe_bad_message(message: &[u8], sender: usize, round: u32, bytes: usize) -> String {
    let field = |at: usize| {
        message
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    match (field(0), field(4)) {
        _ if message.len() != bytes => format!(
            "round {round}: a message of {} bytes from rank {sender}, expected {bytes}",
            message.len()
        ),
        (Some(seq), _) if seq != round => {
            format!("round {round}: got message {seq} from rank {sender} (lost or reordered)")
        }
        (_, Some(from)) if from as usize != sender => {
            format!("round {round}: a message from rank {from} arrived as rank {sender}'s")
        }
        _ => format!("round {round}: the message from rank {sender} fails its checksum"),
    }
}
