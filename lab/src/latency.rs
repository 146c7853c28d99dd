//! Latency for the wide-area testbed, emulated in user space (the kernel here has no
//! `netem`). The router namespace sends every packet between sites to a TUN device; the
//! forwarder (`ninf testbed delay`, started by the testbed inside the router namespace)
//! reads each packet, holds it for the one-way delay of its pair of sites, and writes it
//! back, after which the kernel routes it out to its site through the `htb` shaping.
//!
//! Delaying whole IP packets, not TCP streams, keeps end-to-end TCP intact: handshakes,
//! acknowledgements and the congestion window all see the emulated round trip, as over a
//! real wide-area path.
//!
//! [`DelayLine`] decides when each packet leaves; it is pure and takes the time as an
//! argument, so it is tested with a fake clock. [`run_forwarder`] is the thin I/O shell.

use std::collections::{BTreeMap, BinaryHeap};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Packets the line holds at most (as `netem`'s default limit); more are dropped, as a full
/// router queue would, and TCP backs off.
pub const LIMIT: usize = 10_000;

/// A one-way delay between two /24 networks (the testbed gives each site one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairDelay {
    /// The networks' third octets: site k is 10.77.k.0/24.
    pub sites: (u8, u8),
    /// Applied to packets each way.
    pub one_way: Duration,
}

impl std::str::FromStr for PairDelay {
    type Err = anyhow::Error;

    /// `K:L:MICROSECONDS`, as the testbed passes it to the forwarder.
    fn from_str(text: &str) -> anyhow::Result<PairDelay> {
        let parts: Vec<&str> = text.split(':').collect();
        let [a, b, micros] = parts.as_slice() else {
            bail!("`{text}` is not SITE:SITE:MICROSECONDS");
        };
        Ok(PairDelay {
            sites: (
                a.parse()
                    .with_context(|| format!("site `{a}` in `{text}`"))?,
                b.parse()
                    .with_context(|| format!("site `{b}` in `{text}`"))?,
            ),
            one_way: Duration::from_micros(
                micros
                    .parse()
                    .with_context(|| format!("delay `{micros}` in `{text}`"))?,
            ),
        })
    }
}

impl std::fmt::Display for PairDelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.sites.0,
            self.sites.1,
            self.one_way.as_micros()
        )
    }
}

/// What happened to a packet offered to the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Held until the returned time.
    Held(Duration),
    /// Not an IPv4 packet: nothing the testbed routes here, so it is dropped.
    NotIpv4,
    /// The line is full.
    Full,
}

/// A packet waiting to leave, ordered by its time then by arrival, so packets of one pair
/// (one constant delay) leave in the order they came.
#[derive(Debug, PartialEq, Eq)]
struct Waiting {
    due: Duration,
    arrival: u64,
    packet: Vec<u8>,
}

impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // BinaryHeap is a max-heap: the earliest is the greatest.
        (other.due, other.arrival).cmp(&(self.due, self.arrival))
    }
}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Packets in flight through the emulated paths, each with the time it may leave.
#[derive(Debug, Default)]
pub struct DelayLine {
    /// One-way delay by (source site, destination site); both orders are present.
    delays: BTreeMap<(u8, u8), Duration>,
    waiting: BinaryHeap<Waiting>,
    arrivals: u64,
}

impl DelayLine {
    pub fn new(pairs: &[PairDelay]) -> DelayLine {
        let mut delays = BTreeMap::new();
        for pair in pairs {
            delays.insert(pair.sites, pair.one_way);
            delays.insert((pair.sites.1, pair.sites.0), pair.one_way);
        }
        DelayLine {
            delays,
            ..DelayLine::default()
        }
    }

    /// The delay from the packet's source site to its destination's (zero for pairs
    /// without one), or None when it is not IPv4.
    pub fn delay_of(&self, packet: &[u8]) -> Option<Duration> {
        if packet.len() < 20 || packet[0] >> 4 != 4 {
            return None;
        }
        // The site is the third octet of the address (10.77.k.x).
        let (from, to) = (packet[14], packet[18]);
        Some(
            self.delays
                .get(&(from, to))
                .copied()
                .unwrap_or(Duration::ZERO),
        )
    }

    /// Takes a packet that arrived at `now`.
    pub fn offer(&mut self, packet: Vec<u8>, now: Duration) -> Offer {
        let Some(delay) = self.delay_of(&packet) else {
            return Offer::NotIpv4;
        };
        if self.waiting.len() >= LIMIT {
            return Offer::Full;
        }
        let due = now + delay;
        self.arrivals += 1;
        self.waiting.push(Waiting {
            due,
            arrival: self.arrivals,
            packet,
        });
        Offer::Held(due)
    }

    /// When the next packet may leave.
    pub fn next_due(&self) -> Option<Duration> {
        self.waiting.peek().map(|w| w.due)
    }

    /// The next packet whose time has come by `now`.
    pub fn take_due(&mut self, now: Duration) -> Option<Vec<u8>> {
        if self.next_due()? <= now {
            self.waiting.pop().map(|w| w.packet)
        } else {
            None
        }
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Attaches to TUN device `device` (created by the testbed, or created here).
fn open_tun(device: &str) -> anyhow::Result<std::fs::File> {
    if device.is_empty() || device.len() >= libc::IFNAMSIZ {
        bail!(
            "device name `{device}` must be 1-{} bytes",
            libc::IFNAMSIZ - 1
        );
    }
    let tun = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .context("cannot open /dev/net/tun")?;
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(device.bytes()) {
        *slot = byte as libc::c_char;
    }
    request.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads an ifreq we own through a valid pointer, on a descriptor we
    // hold open.
    let rc = unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &mut request) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot attach to TUN device `{device}`"));
    }
    Ok(tun)
}

/// Runs the forwarder on `device` until killed. Calls `ready` once the device is attached
/// (packets routed to it from then on are carried).
pub fn run_forwarder(
    device: &str,
    pairs: &[PairDelay],
    ready: impl FnOnce(),
) -> anyhow::Result<()> {
    let tun = open_tun(device)?;
    // A duplicate descriptor, so the writer never waits for the reader's lock.
    // SAFETY: dup(2) of a descriptor we hold open; the new one is owned by the File.
    let duplicate = unsafe { libc::dup(tun.as_raw_fd()) };
    if duplicate < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot duplicate the TUN descriptor");
    }
    // SAFETY: a fresh descriptor from dup(2), owned by nothing else.
    let mut writer = unsafe { std::fs::File::from_raw_fd(duplicate) };
    let shared = Arc::new((Mutex::new(DelayLine::new(pairs)), Condvar::new()));
    let start = Instant::now();
    let reader_shared = Arc::clone(&shared);
    let mut reader = tun;
    let reading = std::thread::spawn(move || -> anyhow::Result<()> {
        let mut buffer = vec![0u8; 65_536];
        let mut dropped = 0u64;
        loop {
            let read = reader.read(&mut buffer).context("reading the TUN device")?;
            let (line, wake) = &*reader_shared;
            let offer =
                ninf_proto::sync::lock(line).offer(buffer[..read].to_vec(), start.elapsed());
            match offer {
                Offer::Held(_) => wake.notify_one(),
                Offer::NotIpv4 => {}
                Offer::Full => {
                    dropped += 1;
                    if dropped.is_power_of_two() {
                        tracing::warn!(dropped, "delay line full; dropping packets");
                    }
                }
            }
        }
    });
    ready();
    let (line, wake) = &*shared;
    loop {
        if reading.is_finished() {
            return match reading.join() {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e),
                Err(_) => bail!("the TUN reader panicked"),
            };
        }
        let mut guard = ninf_proto::sync::lock(line);
        let now = start.elapsed();
        if let Some(packet) = guard.take_due(now) {
            drop(guard);
            // A packet the kernel refuses (say, no route any more) is lost, as on a wire.
            if let Err(e) = writer.write(&packet) {
                tracing::debug!(error = %e, "TUN write failed");
            }
            continue;
        }
        let wait = guard
            .next_due()
            .map_or(Duration::from_millis(100), |due| due.saturating_sub(now));
        let _unused = wake
            .wait_timeout(guard, wait)
            .map_err(|_| anyhow::anyhow!("the delay line's lock was poisoned"))?;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A minimal IPv4 header from 10.77.`from`.2 to 10.77.`to`.2, tagged in its id field.
    fn packet(from: u8, to: u8, tag: u8) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[5] = tag;
        p[12..16].copy_from_slice(&[10, 77, from, 2]);
        p[16..20].copy_from_slice(&[10, 77, to, 2]);
        p
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn each_pair_gets_its_delay_both_ways_and_leaves_in_order() {
        let pairs: Vec<PairDelay> = ["1:2:3000", "1:3:4000"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(pairs[1].to_string(), "1:3:4000");
        let mut line = DelayLine::new(&pairs);
        assert_eq!(line.offer(packet(1, 2, 1), ms(0)), Offer::Held(ms(3)));
        assert_eq!(line.offer(packet(3, 1, 2), ms(0)), Offer::Held(ms(4)));
        assert_eq!(line.offer(packet(2, 1, 3), ms(1)), Offer::Held(ms(4)));
        // A pair with no delay set passes at once.
        assert_eq!(line.offer(packet(2, 3, 4), ms(2)), Offer::Held(ms(2)));
        assert_eq!(line.next_due(), Some(ms(2)));
        assert_eq!(line.take_due(ms(1)), None);
        assert_eq!(line.take_due(ms(2)).unwrap()[5], 4);
        assert_eq!(line.take_due(ms(3)).unwrap()[5], 1);
        // Two packets due at the same time leave in the order they came.
        assert_eq!(line.take_due(ms(10)).unwrap()[5], 2);
        assert_eq!(line.take_due(ms(10)).unwrap()[5], 3);
        assert!(line.is_empty());
        assert_eq!(line.take_due(ms(10)), None);
    }

    #[test]
    fn packets_of_one_pair_keep_their_order_however_fast_they_come() {
        let mut line = DelayLine::new(&["1:2:5000".parse().unwrap()]);
        for tag in 0..50u8 {
            line.offer(
                packet(1, 2, tag),
                Duration::from_micros(u64::from(tag) * 10),
            );
        }
        let order: Vec<u8> = std::iter::from_fn(|| line.take_due(ms(100)))
            .map(|p| p[5])
            .collect();
        assert_eq!(order, (0..50).collect::<Vec<u8>>());
    }

    #[test]
    fn what_is_not_ipv4_is_dropped_and_a_full_line_refuses() {
        let mut line = DelayLine::new(&[]);
        let mut v6 = packet(1, 2, 0);
        v6[0] = 0x60;
        assert_eq!(line.offer(v6, ms(0)), Offer::NotIpv4);
        assert_eq!(line.offer(vec![0x45; 10], ms(0)), Offer::NotIpv4);
        for _ in 0..LIMIT {
            assert_eq!(line.offer(packet(1, 2, 0), ms(0)), Offer::Held(ms(0)));
        }
        assert_eq!(line.offer(packet(1, 2, 0), ms(0)), Offer::Full);
        assert_eq!(line.len(), LIMIT);
        assert!("1:2".parse::<PairDelay>().is_err());
        assert!(format!("{:#}", "1:x:5".parse::<PairDelay>().unwrap_err()).contains("site `x`"));
    }
}
