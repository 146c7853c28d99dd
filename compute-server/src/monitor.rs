//! The load monitor: load average and free memory from `/proc`, running and queued jobs from
//! the pools, stored bytes from the storage role. Sampled periodically; the metaserver issue
//! ships the samples to the resource database.

use ninf_proto::v1;

/// The 1-minute load average from `/proc/loadavg`.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn free_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// One sample from the machine and the server's own counters.
pub fn sample(running_jobs: usize, queued_jobs: usize, stored_bytes: u64) -> v1::LoadSample {
    v1::LoadSample {
        load_average_1m: load_average().unwrap_or(0.0),
        running_jobs: running_jobs as u32,
        queued_jobs: queued_jobs as u32,
        free_memory_bytes: free_memory_bytes().unwrap_or(0),
        stored_bytes,
        sampled_unix_ms: ninf_proto::clock::unix_ms(),
        ..Default::default()
    }
}
