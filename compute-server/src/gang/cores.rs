//! Which core each processor (time-table column) of a server is pinned to. Column `c` runs
//! on `cores[c % cores.len()]`. The list is the server's `[gang] cores`, or else the cores
//! this process may run on, in order. Several servers on one host must be given different
//! lists (or each would pin its column 0 to the host's first core, and they would share
//! one core while the others idle): [`spread`] gives server k of a host the host's cores
//! starting after the processors of the servers before it.

/// The core `column` is pinned to; `None` with no cores to choose from.
pub fn core_of(column: u32, cores: &[u32]) -> Option<u32> {
    if cores.is_empty() {
        return None;
    }
    cores.get(column as usize % cores.len()).copied()
}

/// `cores` rotated to start at position `offset` (wrapping), so that a server whose
/// processors come after `offset` others' takes the next cores first.
pub fn rotated(cores: &[u32], offset: usize) -> Vec<u32> {
    if cores.is_empty() {
        return Vec::new();
    }
    let start = offset % cores.len();
    cores[start..]
        .iter()
        .chain(&cores[..start])
        .copied()
        .collect()
}

/// The cores of this host for a server whose processors follow `offset` others' on it.
pub fn spread(offset: usize) -> Vec<u32> {
    rotated(&allowed(), offset)
}

/// The `[gang]` section of a server configuration file pinning it to [`spread`]`(offset)`:
/// for grids that start several `ninf-server` processes on one host.
pub fn config_section(offset: usize) -> String {
    format!("\n[gang]\ncores = {:?}\n", spread(offset))
}

/// The cores this process may run on (its CPU affinity), in increasing order; `[0]` if the
/// kernel does not say.
pub fn allowed() -> Vec<u32> {
    affinity(0)
        .filter(|cores| !cores.is_empty())
        .unwrap_or_else(|| vec![0])
}

/// The cores process `pid` may run on, in increasing order; `None` when it cannot be read
/// (the process is gone).
pub fn of_process(pid: u32) -> Option<Vec<u32>> {
    affinity(libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?)
}

fn affinity(pid: libc::pid_t) -> Option<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size into it, and
    // CPU_ISSET only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&core| libc::CPU_ISSET(core, &set))
                .filter_map(|core| u32::try_from(core).ok())
                .collect(),
        )
    }
}

/// Pins a process to one core; failures (the process ended, or the core is not allowed in
/// this cgroup) are harmless and only logged.
pub fn pin(pid: u32, core: u32) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write only into it, and
    // sched_setaffinity reads it.
    let result = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core as usize, &mut set);
        libc::sched_setaffinity(
            pid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    };
    if result != 0 {
        tracing::debug!(pid, core, error = %std::io::Error::last_os_error(), "cannot pin a process");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_take_the_listed_cores_in_turn() {
        let cores = [3, 1];
        let pinned: Vec<_> = (0..5).map(|c| core_of(c, &cores)).collect();
        assert_eq!(pinned, [Some(3), Some(1), Some(3), Some(1), Some(3)]);
        assert_eq!(core_of(0, &[]), None);
    }

    #[test]
    fn servers_on_one_host_start_on_different_cores() {
        let host = [0, 1, 2, 3];
        // Servers of 1, 2 and 3 processors, one after another.
        assert_eq!(rotated(&host, 0), [0, 1, 2, 3]);
        assert_eq!(rotated(&host, 1), [1, 2, 3, 0]);
        assert_eq!(rotated(&host, 3), [3, 0, 1, 2]);
        // More processors than cores wrap around.
        assert_eq!(rotated(&host, 6), [2, 3, 0, 1]);
        assert!(rotated(&[], 2).is_empty());
    }

    #[test]
    fn the_config_section_is_toml_a_server_reads() {
        let text = format!("processors = 1\n{}", config_section(1));
        let config: crate::ServerConfig = toml::from_str(&text).unwrap();
        assert_eq!(config.gang.cores, spread(1));
        assert!(!config.gang.cores.is_empty());
    }

    #[test]
    fn a_process_s_cores_are_read_and_no_process_has_none() {
        let own = of_process(std::process::id()).unwrap();
        assert!(!own.is_empty());
        assert_eq!(of_process(0), None, "0 names no process");
    }

    #[test]
    fn this_process_may_run_somewhere() {
        let cores = allowed();
        assert!(!cores.is_empty());
        assert!(cores.windows(2).all(|w| w[0] < w[1]), "{cores:?}");
        let parallelism = std::thread::available_parallelism().map_or(1, |p| p.get());
        assert!(
            cores.len() >= parallelism,
            "{cores:?} against {parallelism}"
        );
    }
}
