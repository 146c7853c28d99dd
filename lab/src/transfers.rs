//! `ninf experiment transfers`: the predictor's transfer estimates against transfers timed
//! across the testbed's links (issue 63). A grid runs in the testbed ([`crate::bed_grid`]:
//! the metaserver and the proxy in the client's site, the servers in theirs), measuring its
//! paths as it does anywhere: the proxy probes a few servers of each site, and the servers
//! probe the peers their heartbeats' replies name (their own site's, and other sites'
//! representatives: docs/metaserver.md, "Sites"). A path nobody measured is predicted from
//! the samples between its ends' sites.
//!
//! The client part (`ninf transfers-client`, hidden), inside the client's site, times two
//! kinds of transfer, each for every size, against the same request for one element (which
//! pays the round trips, the RPC and the bookkeeping, so that the difference is what the
//! bytes took):
//! - client to server: a `Storage.Put` straight to each server, on the path from the
//!   client's site that the proxy measures;
//! - server to server: a `Storage.CopyFrom` asking a server to copy an array a server of
//!   another site holds. Servers of one site share its namespace, one host: a copy between
//!   them crosses no link, and is not timed.
//!
//! Before each path is timed it sends a one-task graph through the proxy, whose schedule
//! request carries the proxy's samples to the metaserver. After the run the metaserver's
//! resource DB holds every sample it had; each transfer is then predicted by the scheduler's
//! own predictor ([`LoadPredictor`]) from the samples taken before it started, as the
//! metaserver would have, with each summary of a series (`latest`, the default, `forecast`
//! and `capacity`), and once more from its sites' samples alone, as for a path never
//! measured.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use ninf_proto::v1;
use ninf_scheduling::{
    GridView, History, Link, LoadPredictor, Location, Predictor, PredictorKind, ServerView, Site,
};
use serde::{Deserialize, Serialize};

use crate::bed_grid::{BedOptions, Binaries, Settings, run_in_testbed};
use crate::testbed::{Role, Testbed};

/// What the run does.
#[derive(Debug, Clone)]
pub struct TransfersOptions {
    pub bed: BedOptions,
    /// Bytes of each timed transfer.
    pub sizes: Vec<u64>,
    /// Timings of each transfer (and of its one-element twin); their medians are compared.
    pub trials: usize,
}

/// One transfer the client part timed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timed {
    /// Where the bytes left: `client`, or a server's address.
    pub from: String,
    /// The server that received them.
    pub to: String,
    pub bytes: u64,
    /// Median seconds of the request with the array, and of the same with one element.
    pub seconds: f64,
    pub base_seconds: f64,
    /// When the first timing started (Unix seconds).
    pub started: f64,
}

/// One transfer, timed and predicted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Estimate {
    /// The sites at the path's ends.
    pub from_site: String,
    pub to_site: String,
    pub bytes: u64,
    /// What the bytes took: the request's median less its one-element twin's.
    pub actual_seconds: f64,
    /// The path had samples of its own before the transfer; without, every predictor read
    /// its sites' series, as the metaserver does for a path nobody measured.
    pub measured: bool,
    /// What each predictor gave them ([`predicted_seconds`]), and its error
    /// |predicted - actual| / actual: `latest` (the metaserver's default, the paper's),
    /// `forecast` (NWS-style) and `capacity`.
    pub latest_seconds: f64,
    pub latest_error: f64,
    pub forecast_seconds: f64,
    pub forecast_error: f64,
    pub capacity_seconds: f64,
    pub capacity_error: f64,
    /// What the latest-sample predictor gives them from the samples between the path's
    /// sites alone, as for a path never measured (none without any), and its error.
    pub sites_seconds: Option<f64>,
    pub sites_error: Option<f64>,
    /// How old the path's newest sample was when the transfer started (seconds; none for a
    /// path never measured).
    pub sample_age_seconds: Option<f64>,
}

/// A predictor's errors over every transfer.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct ErrorSummary {
    pub median: f64,
    pub max: f64,
}

/// What happened.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TransfersReport {
    pub profile: String,
    pub estimates: Vec<Estimate>,
    /// Each predictor's error over every estimate: its median and its largest.
    pub errors: BTreeMap<String, ErrorSummary>,
    /// Transfers no sample of their path preceded (none is predicted).
    pub unpredicted: Vec<String>,
}

/// The proxy measures one server of each site every 10 s with 256 KiB (the others of the
/// site estimated from it, docs/metaserver.md, "Sites"), and the servers their peers as
/// often: on links of a few Mbit/s, measuring every server every 5 s with 1 MiB (the
/// defaults) took half of the client's link, and the transfers timed shared it with the
/// probes.
const PROXY_SETTINGS: &str =
    "probe_seconds = 10.0\nprobe_bytes = 262144\nprobe_per_site = 1\njournal = \"off\"\n";
const METASERVER_SETTINGS: &str = "heartbeat_seconds = 0.5\nnetwork_seconds = 10.0\n";
/// The owner the client part stores its arrays under (deleted at the end).
const OWNER: &str = "transfers-experiment";
/// Bytes per `Storage.Put` chunk, as the proxy sends them.
const CHUNK: usize = 64 << 10;

/// Builds the testbed, starts the grid, runs the client part, predicts every transfer from
/// the metaserver's samples and tears everything down.
pub fn run(options: &TransfersOptions) -> anyhow::Result<TransfersReport> {
    let settings = Settings::lines(METASERVER_SETTINGS, PROXY_SETTINGS);
    run_in_testbed(&options.bed, "transfers", &settings, |run| {
        let timed = run_client(run.bed, &run.grid, run.binaries, options)?;
        // The grid stops first, so that the DB holds everything it was told.
        drop(run.grid);
        let samples = read_samples(&run.work.join("metaserver").join("metaserver.db"))?;
        Ok(report(run.bed, &timed, &samples))
    })
}

fn run_client(
    bed: &Testbed,
    grid: &crate::bed_grid::BedGrid,
    binaries: &Binaries,
    options: &TransfersOptions,
) -> anyhow::Result<Vec<Timed>> {
    let client = bed.profile.client().name.clone();
    let servers: Vec<&str> = grid.servers.iter().map(|(_, a)| a.as_str()).collect();
    let sizes: Vec<String> = options.sizes.iter().map(u64::to_string).collect();
    let mut command = bed.command(&client, &binaries.ninf);
    command
        .arg("transfers-client")
        .args(["--proxy", &grid.proxy, "--metaserver", &grid.metaserver])
        .args(["--servers", &servers.join(",")])
        .args(["--sizes", &sizes.join(",")])
        .args(["--trials", &options.trials.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let output = command.output().context("cannot start the client part")?;
    if !output.status.success() {
        bail!("the client part failed ({})", output.status);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(text.trim())
        .with_context(|| format!("bad client report `{}`", text.trim()))
}

/// Every network sample the metaserver stored.
fn read_samples(db: &Path) -> anyhow::Result<Vec<ninf_metaserver::db::StoredLink>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let url = format!("sqlite://{}", db.display());
        let db = ninf_metaserver::db::ResourceDb::open(&url)
            .await
            .with_context(|| format!("cannot open the metaserver's DB {url}"))?;
        Ok(db.links_since(f64::NEG_INFINITY).await?)
    })
}

/// Each timed transfer beside its prediction; the sites named by the testbed's addresses.
fn report(
    bed: &Testbed,
    timed: &[Timed],
    samples: &[ninf_metaserver::db::StoredLink],
) -> TransfersReport {
    let site = |end: &str| {
        bed.profile.sites.iter().enumerate().find(|(_, s)| {
            s.role == Role::Server && end.starts_with(&format!("{}:", bed.address(&s.name)))
        })
    };
    let name = |end: &str| site(end).map_or_else(|| "client".to_string(), |(_, s)| s.name.clone());
    let site_of = |end: &str| -> Option<Site> {
        if end.starts_with("client:") || end == "client" {
            return Some(Site::Client);
        }
        site(end).map(|(k, _)| Site::Servers(u32::try_from(k).unwrap_or(u32::MAX)))
    };
    let mut report = TransfersReport {
        profile: bed.profile.name.clone(),
        ..TransfersReport::default()
    };
    for t in timed {
        let Some(predicted) = estimate(t, samples, &site_of) else {
            report
                .unpredicted
                .push(format!("{} -> {} ({} bytes)", t.from, t.to, t.bytes));
            continue;
        };
        report.estimates.push(Estimate {
            from_site: name(&t.from),
            to_site: name(&t.to),
            ..predicted
        });
    }
    let summary = |error: fn(&Estimate) -> Option<f64>| {
        let errors: Vec<f64> = report.estimates.iter().filter_map(error).collect();
        ErrorSummary {
            median: ninf_scheduling::stats::median(errors.clone()).unwrap_or(f64::NAN),
            max: errors.into_iter().fold(f64::NAN, f64::max),
        }
    };
    report.errors = BTreeMap::from([
        ("latest".to_string(), summary(|e| Some(e.latest_error))),
        ("forecast".to_string(), summary(|e| Some(e.forecast_error))),
        ("capacity".to_string(), summary(|e| Some(e.capacity_error))),
        ("latest, by sites".to_string(), summary(|e| e.sites_error)),
    ]);
    report
}

/// Samples per series the metaserver's predictor reads (its `history_samples` default).
const HISTORY_SAMPLES: usize = 32;

/// Bytes of the one-element twin of every timed request.
const ELEMENT: u64 = 8;

type Sample = ninf_metaserver::db::StoredLink;

/// Where a sample's end lies, by the name the DB gives it (`client:<proxy>` or a server's
/// address): a site of the testbed, or none for an end it does not know.
pub type SiteOf<'a> = &'a dyn Fn(&str) -> Option<Site>;

/// The samples of `t`'s path taken before it started, as the predictor's history holds
/// them: each way its own series, oldest first, the last [`HISTORY_SAMPLES`] of each. The
/// path's client end is [`Location::Client`], its servers 0 (from) and 1 (to).
fn path_history(t: &Timed, samples: &[Sample]) -> History {
    let place = |end: &str| -> Option<Location> {
        if names(end, &t.from) {
            Some(t.source())
        } else if end == t.to {
            Some(Location::Server(1))
        } else {
            None
        }
    };
    let mut links: HashMap<(Location, Location), Vec<Link>> = HashMap::new();
    for s in before(t, samples) {
        if let (Some(a), Some(b)) = (place(&s.from), place(&s.to))
            && a != b
        {
            links.entry((a, b)).or_default().push(link(s));
        }
    }
    History {
        links: links.into_iter().map(|(k, v)| (k, last(v))).collect(),
        ..History::default()
    }
}

/// Series of samples between sites, by (from site, to site).
type SiteSeries = HashMap<(Site, Site), Vec<Link>>;

/// The samples between the sites at `t`'s ends, as the metaserver keeps them for the paths
/// it has no samples of (`History::site_links`): every sample joins the series of its ends'
/// sites, the path's own too unless `without_own`, which gives what a predictor that never
/// measured the path would read. With the server ends' sites for the history's servers 0
/// and 1; `None` when an end's site is unknown.
fn site_history(
    t: &Timed,
    samples: &[Sample],
    site_of: SiteOf<'_>,
    without_own: bool,
) -> Option<(Vec<u32>, SiteSeries)> {
    let (from, to) = (site_of(&t.from)?, site_of(&t.to)?);
    let mut site_links: HashMap<(Site, Site), Vec<Link>> = HashMap::new();
    for s in before(t, samples).filter(|s| !(without_own && on_path(t, s))) {
        if let (Some(a), Some(b)) = (site_of(&s.from), site_of(&s.to)) {
            site_links.entry((a, b)).or_default().push(link(s));
        }
    }
    let server_site = |site: Site| match site {
        Site::Servers(k) => k,
        Site::Client => u32::MAX,
    };
    let site_links = site_links.into_iter().map(|(k, v)| (k, last(v))).collect();
    Some((vec![server_site(from), server_site(to)], site_links))
}

/// The predictor's history for `t`: its path's own samples, and its sites' series for a
/// path without any (with `without_own`, the sites' series alone, less the path's own).
fn history(t: &Timed, samples: &[Sample], site_of: SiteOf<'_>, without_own: bool) -> History {
    let mut history = if without_own {
        History::default()
    } else {
        path_history(t, samples)
    };
    if let Some((sites, site_links)) = site_history(t, samples, site_of, without_own) {
        history.sites = sites;
        history.site_links = site_links;
    }
    history
}

/// The samples taken before `t` started, oldest first.
fn before<'s>(t: &Timed, samples: &'s [Sample]) -> impl Iterator<Item = &'s Sample> {
    let mut kept: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.time <= t.started && s.throughput > 0.0 && s.throughput.is_finite())
        .collect();
    kept.sort_by(|a, b| a.time.total_cmp(&b.time));
    kept.into_iter()
}

fn link(s: &Sample) -> Link {
    Link {
        throughput: s.throughput,
        latency: s.latency,
    }
}

/// The last [`HISTORY_SAMPLES`] of a series.
fn last(mut series: Vec<Link>) -> Vec<Link> {
    let extra = series.len().saturating_sub(HISTORY_SAMPLES);
    series.drain(..extra);
    series
}

/// What the predictor of `kind` over `history` gives the bytes of transfer `t` beyond one
/// element's: [`LoadPredictor::transfer_time`](ninf_scheduling::Predictor::transfer_time)
/// with nothing else moving, less the same for one element. The difference leaves out the
/// path's latency, as the timed difference does. `None` when the history says nothing of
/// the path (the predictor would take its default link).
pub fn predicted_seconds(t: &Timed, history: &History, kind: PredictorKind) -> Option<f64> {
    let server = |name: &str| ServerView {
        name: name.to_string(),
        flops_per_processor: 1e9,
        processors: 1,
        functions: Default::default(),
        up: true,
    };
    let grid = GridView {
        servers: vec![server(&t.from), server(&t.to)],
    };
    // The default link: a path the history says nothing of comes out as no number.
    let unknown = Link {
        throughput: f64::NAN,
        latency: f64::NAN,
    };
    let predictor = LoadPredictor::from_history(&grid, history, kind, unknown);
    let (from, to) = (t.source(), Location::Server(1));
    let seconds = predictor.transfer_time(from, to, t.bytes, 0.0)
        - predictor.transfer_time(from, to, ELEMENT, 0.0);
    seconds.is_finite().then_some(seconds)
}

/// Transfer `t` beside what each predictor gave it, from its path's own samples or, for a
/// path never measured, its sites' (as the metaserver predicts), and what the
/// latest-sample predictor gave it from its sites' samples alone; `None` when the
/// predictor knew nothing of the path.
pub fn estimate(t: &Timed, samples: &[Sample], site_of: SiteOf<'_>) -> Option<Estimate> {
    let actual = t.seconds - t.base_seconds;
    let error = |predicted: f64| (predicted - actual).abs() / actual.max(f64::MIN_POSITIVE);
    let known = history(t, samples, site_of, false);
    let latest = predicted_seconds(t, &known, PredictorKind::LatestSample)?;
    let forecast = predicted_seconds(t, &known, PredictorKind::Forecast)?;
    let capacity = predicted_seconds(t, &known, PredictorKind::Capacity)?;
    let by_sites = predicted_seconds(
        t,
        &history(t, samples, site_of, true),
        PredictorKind::LatestSample,
    );
    let newest = before(t, samples)
        .filter(|s| on_path(t, s))
        .map(|s| s.time)
        .fold(f64::NEG_INFINITY, f64::max);
    Some(Estimate {
        bytes: t.bytes,
        actual_seconds: actual,
        measured: newest.is_finite(),
        latest_seconds: latest,
        latest_error: error(latest),
        forecast_seconds: forecast,
        forecast_error: error(forecast),
        capacity_seconds: capacity,
        capacity_error: error(capacity),
        sites_seconds: by_sites,
        sites_error: by_sites.map(error),
        sample_age_seconds: newest.is_finite().then_some(t.started - newest),
        ..Estimate::default()
    })
}

/// Whether sample `s` measured the path of `t`, either way.
fn on_path(t: &Timed, s: &Sample) -> bool {
    (names(&s.from, &t.from) && names(&s.to, &t.to))
        || (names(&s.from, &t.to) && names(&s.to, &t.from))
}

/// Whether a sample's end (`client:<proxy>` or a server's address) is `place` (`client`, or
/// a server's address).
fn names(end: &str, place: &str) -> bool {
    end == place || (place == "client" && end.starts_with("client:"))
}

impl Timed {
    /// Where the bytes left, as the predictor's history of the path names it: the client,
    /// or server 0 (the receiver being server 1).
    fn source(&self) -> Location {
        if self.from == "client" {
            Location::Client
        } else {
            Location::Server(0)
        }
    }
}

/// The client part, inside the client's site: waits for the servers and their first
/// measurements, then times every path at every size, and prints the timings as JSON.
pub fn client(
    proxy: &str,
    metaserver: &str,
    servers: &[String],
    sizes: &[u64],
    trials: usize,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(ninf_grid::chaos::wait_until_up(metaserver, servers.len()))?;
    // Two rounds of the proxy's and the servers' probes (10 s each, above).
    std::thread::sleep(Duration::from_secs(21));
    let grid = ninf::grid::GridClient::connect(proxy)?;
    let mut timed = Vec::new();
    for (i, to) in servers.iter().enumerate() {
        for &bytes in sizes {
            send_samples(&grid)?;
            timed.push(runtime.block_on(time_put(to, bytes, trials))?);
        }
        for from in servers.iter().filter(|s| host(s) != host(to)) {
            for &bytes in sizes {
                send_samples(&grid)?;
                timed.push(runtime.block_on(time_copy(from, to, bytes, trials))?);
            }
        }
        tracing::info!(server = %to, done = i + 1, of = servers.len(), "paths timed");
    }
    for server in servers {
        runtime.block_on(delete_all(server))?;
    }
    println!("{}", serde_json::to_string(&timed)?);
    Ok(())
}

/// The host part of `address`: the testbed runs a site's servers in one namespace, on one
/// address.
fn host(address: &str) -> &str {
    address.rsplit_once(':').map_or(address, |(host, _)| host)
}

/// One graph through the proxy (a product of 1 x 1 matrices): its schedule request carries
/// the proxy's samples.
fn send_samples(grid: &ninf::grid::GridClient) -> anyhow::Result<()> {
    let (a, b) = ([2.0f64], [3.0f64]);
    let mut c = [0.0f64];
    grid.transaction(|tx| {
        let (a, b) = (tx.input(&a[..]), tx.input(&b[..]));
        let c = tx.buffer(&mut c[..]);
        tx.call("mmul", &[1i32.into(), a.into(), b.into(), c.into()])?;
        Ok(())
    })?;
    if c[0] != 6.0 {
        bail!("the product of 2 and 3 came back as {}", c[0]);
    }
    Ok(())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

async fn storage(
    address: &str,
) -> anyhow::Result<v1::storage_client::StorageClient<tonic::transport::Channel>> {
    let client = ninf::NinfClient::connect(address)
        .await
        .with_context(|| format!("cannot reach {address}"))?;
    Ok(v1::storage_client::StorageClient::new(client.channel())
        .max_decoding_message_size(usize::MAX))
}

/// `bytes` of doubles in `Storage.Put` chunks, the length announced as the proxy does.
fn chunks(bytes: u64) -> Vec<v1::PutChunk> {
    // One buffer, each chunk a view of it.
    let data = bytes::Bytes::from(vec![0x5au8; usize::try_from(bytes).unwrap_or(usize::MAX)]);
    (0..data.len())
        .step_by(CHUNK)
        .map(|at| v1::PutChunk {
            owner: OWNER.into(),
            element_type: v1::ElementType::Double as i32,
            data: data.slice(at..(at + CHUNK).min(data.len())),
            total_bytes: bytes,
        })
        .collect()
}

/// Puts `bytes` on `server`, returning the seconds it took and the object's reference.
async fn put(server: &str, bytes: u64) -> anyhow::Result<(f64, v1::ObjectRef)> {
    let mut storage = storage(server).await?;
    let chunks = chunks(bytes);
    let start = Instant::now();
    let info = storage
        .put(tokio_stream::iter(chunks))
        .await
        .with_context(|| format!("put of {bytes} bytes on {server}"))?
        .into_inner();
    let seconds = start.elapsed().as_secs_f64();
    Ok((
        seconds,
        v1::ObjectRef {
            server: server.to_string(),
            object_id: info.object_id,
        },
    ))
}

/// Median seconds of `trials` puts of `bytes` on `to`, and of one element.
async fn time_put(to: &str, bytes: u64, trials: usize) -> anyhow::Result<Timed> {
    let started = unix_now();
    let (mut full, mut base) = (Vec::new(), Vec::new());
    for _ in 0..trials.max(1) {
        base.push(put(to, 8).await?.0);
        full.push(put(to, bytes).await?.0);
        delete_all(to).await?;
    }
    Ok(timed("client", to, bytes, (&full, &base), started))
}

/// Median seconds of `trials` copies to `to` of `bytes` held by `from`, and of one element.
async fn time_copy(from: &str, to: &str, bytes: u64, trials: usize) -> anyhow::Result<Timed> {
    let (_, small) = put(from, 8).await?;
    let (_, large) = put(from, bytes).await?;
    let mut storage = storage(to).await?;
    let started = unix_now();
    let (mut full, mut base) = (Vec::new(), Vec::new());
    for _ in 0..trials.max(1) {
        for (source, seconds) in [(&small, &mut base), (&large, &mut full)] {
            let start = Instant::now();
            storage
                .copy_from(v1::CopyFromRequest {
                    source: Some(source.clone()),
                    owner: OWNER.into(),
                })
                .await
                .with_context(|| format!("copy of {} from {from} to {to}", source.object_id))?;
            seconds.push(start.elapsed().as_secs_f64());
        }
        delete_all(to).await?;
    }
    delete_all(from).await?;
    Ok(timed(from, to, bytes, (&full, &base), started))
}

fn timed(from: &str, to: &str, bytes: u64, (full, base): (&[f64], &[f64]), started: f64) -> Timed {
    let median = |v: &[f64]| ninf_scheduling::stats::median(v.to_vec()).unwrap_or(f64::NAN);
    Timed {
        from: from.to_string(),
        to: to.to_string(),
        bytes,
        seconds: median(full),
        base_seconds: median(base),
        started,
    }
}

/// Deletes what the experiment stored on `server`.
async fn delete_all(server: &str) -> anyhow::Result<()> {
    storage(server)
        .await?
        .delete_owner(v1::DeleteOwnerRequest {
            owner: OWNER.into(),
        })
        .await
        .with_context(|| format!("cannot delete the experiment's arrays on {server}"))?;
    Ok(())
}

/// The report as text: one line per transfer, then each predictor's errors.
pub fn render(report: &TransfersReport) -> String {
    let mut text = format!(
        "profile {}\nfrom     to       measured  bytes      actual (s)  latest (s)  error  forecast (s)  error  capacity (s)  error  by sites (s)  error  sample age (s)\n",
        report.profile
    );
    for e in &report.estimates {
        text.push_str(&format!(
            "{:<8} {:<8} {:<8}  {:>9}  {:>10.4}  {:>10.4}  {:>4.0}%  {:>12.4}  {:>4.0}%  {:>12.4}  {:>4.0}%  {:>12}  {:>5}  {:>14}\n",
            e.from_site,
            e.to_site,
            if e.measured { "yes" } else { "no" },
            e.bytes,
            e.actual_seconds,
            e.latest_seconds,
            e.latest_error * 100.0,
            e.forecast_seconds,
            e.forecast_error * 100.0,
            e.capacity_seconds,
            e.capacity_error * 100.0,
            e.sites_seconds
                .map_or_else(|| "-".to_string(), |s| format!("{s:.4}")),
            e.sites_error
                .map_or_else(|| "-".to_string(), |e| format!("{:.0}%", e * 100.0)),
            e.sample_age_seconds
                .map_or_else(|| "-".to_string(), |age| format!("{age:.1}"))
        ));
    }
    for (predictor, e) in &report.errors {
        text.push_str(&format!(
            "{predictor:<16} error: median {:.0}%, largest {:.0}%\n",
            e.median * 100.0,
            e.max * 100.0
        ));
    }
    for missing in &report.unpredicted {
        text.push_str(&format!("no sample before: {missing}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninf_metaserver::db::StoredLink;

    fn sample(from: &str, to: &str, throughput: f64, time: f64) -> StoredLink {
        StoredLink {
            from: from.into(),
            to: to.into(),
            throughput,
            latency: 0.01,
            time,
        }
    }

    fn transfer(from: &str, to: &str, bytes: u64, started: f64) -> Timed {
        Timed {
            from: from.into(),
            to: to.into(),
            bytes,
            seconds: 1.2,
            base_seconds: 0.2,
            started,
        }
    }

    fn site_of(end: &str) -> Option<Site> {
        let address = end.strip_prefix("client:").map_or(end, |_| "client");
        match address.split('.').nth(2) {
            _ if address == "client" => Some(Site::Client),
            Some("2") => Some(Site::Servers(1)),
            Some("3") => Some(Site::Servers(2)),
            _ => None,
        }
    }

    #[test]
    fn a_transfer_is_predicted_from_the_samples_of_its_path_before_it() {
        let samples = [
            sample("client:10.77.1.2:7100", "10.77.2.2:7001", 1e6, 10.0),
            sample("client:10.77.1.2:7100", "10.77.2.2:7001", 2e6, 20.0),
            // After the transfer started: not known to a prediction made then.
            sample("client:10.77.1.2:7100", "10.77.2.2:7001", 9e6, 40.0),
            sample("10.77.3.2:7001", "10.77.2.2:7001", 4e6, 25.0),
            // Another path.
            sample("client:10.77.1.2:7100", "10.77.3.2:7001", 8e6, 29.0),
        ];
        let t = transfer("client", "10.77.2.2:7001", 1_000_008, 30.0);
        let e = estimate(&t, &samples, &site_of).expect("samples before");
        // The latest: 1,000,000 bytes beyond the element's at 2 MB/s.
        assert!((e.latest_seconds - 0.5).abs() < 1e-12, "{e:?}");
        assert!((e.actual_seconds - 1.0).abs() < 1e-12);
        assert!((e.latest_error - 0.5).abs() < 1e-12);
        assert_eq!(e.sample_age_seconds, Some(10.0));
        // Capacity reads the least-queued sample: of equal latencies, the faster.
        assert!((e.capacity_seconds - 0.5).abs() < 1e-12, "{e:?}");
        // No other path between the client's site and site 1: no estimate by sites.
        assert_eq!(e.sites_seconds, None);
        // Server to server, measured the other way.
        let t = transfer("10.77.2.2:7001", "10.77.3.2:7001", 4_000_008, 30.0);
        let e = estimate(&t, &samples, &site_of).expect("the reverse sample");
        assert!((e.latest_seconds - 1.0).abs() < 1e-12, "{e:?}");
        assert!(e.latest_error < 1e-12);
        let early = transfer("client", "10.77.2.2:7001", 1_000_008, 5.0);
        assert!(estimate(&early, &samples, &site_of).is_none());
    }

    #[test]
    fn a_path_never_measured_is_predicted_from_other_paths_between_its_sites() {
        let samples = [
            sample("client:10.77.1.2:7100", "10.77.2.2:7001", 2e6, 20.0),
            // The client's site to another server of site 1, the latest between the sites.
            sample("client:10.77.1.2:7100", "10.77.2.2:7002", 4e6, 25.0),
            // Between other sites: not read.
            sample("client:10.77.1.2:7100", "10.77.3.2:7001", 8e6, 29.0),
        ];
        let t = transfer("client", "10.77.2.2:7001", 1_000_008, 30.0);
        let e = estimate(&t, &samples, &site_of).expect("samples before");
        assert!((e.latest_seconds - 0.5).abs() < 1e-12, "{e:?}");
        // Its own sample left out: 1,000,000 bytes at the other server's 4 MB/s.
        assert!(
            (e.sites_seconds.unwrap_or(0.0) - 0.25).abs() < 1e-12,
            "{e:?}"
        );
        assert!((e.sites_error.unwrap_or(0.0) - 0.75).abs() < 1e-12);
    }
}
