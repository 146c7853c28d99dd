//! Times single calls through a grid's proxy from Rust, for the Python client's benchmark
//! to compare against in the same run: `grid_calls GRID_FILE CALLS MIB` prints one JSON
//! line with the mean null call (`noop`) and the mean `echo` of MIB mebibytes in and out.

use std::time::Instant;

use ninf::grid::{GridClient, GridFile};
use ninf::{Arg, ArrayMut, ArrayRef};

fn main() -> anyhow::Result<()> {
    // As the Python module does when imported: large buffers reused, not faulted in afresh.
    ninf::memory::keep_freed_buffers();
    let args: Vec<String> = std::env::args().collect();
    let [_, grid_file, calls, mib] = &args[..] else {
        anyhow::bail!("usage: grid_calls GRID_FILE CALLS MIB");
    };
    let calls: u32 = calls.parse()?;
    let mib: usize = mib.parse()?;
    let file = GridFile::read(std::path::Path::new(grid_file))?;
    let runtime = ninf::runtime::runtime()?;
    let client = runtime.block_on(file.connect())?;
    let grid = GridClient::from_async(client);
    for _ in 0..20 {
        grid.call("noop", &mut [Arg::Integer(1)])?;
    }
    let started = Instant::now();
    for _ in 0..calls {
        grid.call("noop", &mut [Arg::Integer(1)])?;
    }
    let null_call_us = started.elapsed().as_secs_f64() / f64::from(calls) * 1e6;
    let n = mib * 1024 * 1024 / 8;
    let x: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut y = vec![0.0; n];
    let mut times = Vec::new();
    for _ in 0..6 {
        let started = Instant::now();
        grid.call(
            "echo",
            &mut [
                Arg::Integer(n as i64),
                Arg::In(ArrayRef::Double(&x)),
                Arg::Out(ArrayMut::Double(&mut y)),
            ],
        )?;
        times.push(started.elapsed().as_secs_f64());
    }
    anyhow::ensure!(y == x, "echo returned different data");
    // The first moves the pages in; the best of the rest is the steady state.
    let echo_ms = times[1..].iter().copied().fold(f64::INFINITY, f64::min) * 1e3;
    println!(
        "{{\"client\": \"rust\", \"null_call_us\": {null_call_us:.1}, \"echo_mib\": {mib}, \"echo_ms\": {echo_ms:.2}}}"
    );
    Ok(())
}
