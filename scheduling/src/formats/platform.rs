//! A platform in JSON: `{"servers": [{"name": "a", "speed": 1.0e9, "processors": 1}, ...],
//! "bandwidth": [[...]], "latency": [[...]]}`, speed in flop/s (a task read from a file
//! has its seconds on a server of speed 1 as flops), bandwidth in bytes/s and latency in
//! seconds between servers by index (the diagonal is not read: data on its own server
//! moves for free). `processors` defaults to 1 and `latency` to none.

use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;

use crate::formats::{self, FUNCTION, FormatError};
use crate::grid::{GridView, Link, Location, ServerView};
use crate::random_dag::Platform;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    servers: Vec<Server>,
    #[serde(default)]
    bandwidth: Vec<Vec<f64>>,
    #[serde(default)]
    latency: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Server {
    name: String,
    speed: f64,
    #[serde(default = "one")]
    processors: u32,
}

fn one() -> u32 {
    1
}

pub fn parse(file: &str, text: &str) -> Result<Platform, FormatError> {
    let document: Document = formats::json(file, text)?;
    let invalid = |what: String, problem: String| formats::invalid(file, what, problem);
    let n = document.servers.len();
    if n == 0 {
        return Err(invalid(
            "servers".into(),
            "the platform has no server".into(),
        ));
    }
    let mut servers = Vec::with_capacity(n);
    for (i, s) in document.servers.into_iter().enumerate() {
        if !s.speed.is_finite() || s.speed <= 0.0 {
            return Err(invalid(
                format!("servers[{i}] (`{}`)", s.name),
                format!("speed {} is not a number of flop/s > 0", s.speed),
            ));
        }
        if s.processors == 0 {
            return Err(invalid(
                format!("servers[{i}] (`{}`)", s.name),
                "processors must be at least 1".into(),
            ));
        }
        servers.push(ServerView {
            name: s.name,
            flops_per_processor: s.speed,
            processors: s.processors,
            functions: BTreeSet::from([FUNCTION.to_string()]),
            up: true,
        });
    }
    let bandwidth = matrix("bandwidth", &document.bandwidth, n, n > 1, &invalid)?;
    let latency = matrix("latency", &document.latency, n, false, &invalid)?;
    let mut links = HashMap::new();
    let (mut sum, mut count) = (0.0, 0.0);
    for a in 0..n {
        for b in (0..n).filter(|&b| b != a) {
            let throughput = bandwidth.map_or(f64::INFINITY, |m| m[a][b]);
            if throughput.is_nan() || throughput <= 0.0 {
                return Err(invalid(
                    format!("bandwidth[{a}][{b}]"),
                    format!("{throughput} is not a number of bytes/s > 0"),
                ));
            }
            let seconds = latency.map_or(0.0, |m| m[a][b]);
            if !seconds.is_finite() || seconds < 0.0 {
                return Err(invalid(
                    format!("latency[{a}][{b}]"),
                    format!("{seconds} is not a number of seconds >= 0"),
                ));
            }
            sum += throughput;
            count += 1.0;
            links.insert(
                (Location::Server(a), Location::Server(b)),
                Link {
                    throughput,
                    latency: seconds,
                },
            );
        }
    }
    let mean_speed = servers.iter().map(|s| s.flops_per_processor).sum::<f64>() / n as f64;
    Ok(Platform {
        grid: GridView { servers },
        links,
        mean_speed,
        mean_throughput: if count > 0.0 {
            sum / count
        } else {
            f64::INFINITY
        },
        // Only the client's paths are not given, and graphs from files send it nothing.
        default_link: Link {
            throughput: f64::INFINITY,
            latency: 0.0,
        },
    })
}

/// The `n × n` matrix `rows`, or `None` when it is absent and not `required`.
fn matrix<'a>(
    name: &str,
    rows: &'a [Vec<f64>],
    n: usize,
    required: bool,
    invalid: &dyn Fn(String, String) -> FormatError,
) -> Result<Option<&'a [Vec<f64>]>, FormatError> {
    if rows.is_empty() && !required {
        return Ok(None);
    }
    if rows.len() != n {
        return Err(invalid(
            name.into(),
            format!("has {} rows; the platform has {n} servers", rows.len()),
        ));
    }
    if let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| r.len() != n) {
        return Err(invalid(
            format!("{name}[{i}]"),
            format!("has {} entries; the platform has {n} servers", row.len()),
        ));
    }
    Ok(Some(rows))
}
