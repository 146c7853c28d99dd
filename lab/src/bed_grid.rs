//! A grid of real processes inside the testbed ([`crate::testbed`]): the metaserver and the
//! proxy in the client's site, the compute servers of each server site (one unless its
//! profile says more), each a shipped binary started in its site's namespace. The wide-area experiment and the partition run start
//! their grids this way.

use std::path::{Path, PathBuf};

use ninf_grid::processes::{Started, binary, start, write};

use crate::testbed::Testbed;

/// Ports inside the sites.
const METASERVER_PORT: u16 = 7000;
const PROXY_PORT: u16 = 7100;
const SERVER_PORT: u16 = 7001;

/// The shipped binaries a grid in the testbed runs.
pub struct Binaries {
    pub metaserver: PathBuf,
    pub proxy: PathBuf,
    pub server: PathBuf,
    pub ninf: PathBuf,
}

impl Binaries {
    /// The binaries in `bin_dir`, or an error naming the one missing.
    pub fn find(bin_dir: &Path) -> anyhow::Result<Binaries> {
        Ok(Binaries {
            metaserver: binary(bin_dir, "ninf-metaserver")?,
            proxy: binary(bin_dir, "ninf-proxy")?,
            server: binary(bin_dir, "ninf-server")?,
            ninf: binary(bin_dir, "ninf")?,
        })
    }
}

/// A fresh folder for a run's configuration files (`ninf-NAME-PID` in the temp folder).
pub fn work_dir(name: &str) -> anyhow::Result<PathBuf> {
    let work = std::env::temp_dir().join(format!("ninf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", work.display()))?;
    Ok(work)
}

/// What a grid in the testbed is configured with beyond its addresses: extra TOML lines for
/// the metaserver and the proxy, and a factor on every site's emulated processor slowdown.
pub struct Settings<'a> {
    pub metaserver: &'a str,
    pub proxy: &'a str,
    pub slowdown_factor: f64,
}

impl<'a> Settings<'a> {
    /// These lines, and the sites' processors as slow as their profile says.
    pub fn lines(metaserver: &'a str, proxy: &'a str) -> Settings<'a> {
        Settings {
            metaserver,
            proxy,
            slowdown_factor: 1.0,
        }
    }
}

/// A grid running in the testbed; its processes are killed when it is dropped.
pub struct BedGrid {
    pub metaserver: String,
    pub proxy: String,
    /// (site, address) of each compute server, a site's in the order of their ports.
    pub servers: Vec<(String, String)>,
    _running: Vec<Started>,
}

/// A testbed and the grid in it for one run: what [`run_in_testbed`] hands its body.
pub struct Run<'a> {
    pub bed: &'a Testbed,
    pub grid: BedGrid,
    pub binaries: &'a Binaries,
    /// The run's configuration files; the metaserver's data (its resource DB) is under
    /// `metaserver/`.
    pub work: &'a Path,
}

/// Which testbed an experiment runs in and which programs it starts there.
#[derive(Debug, Clone)]
pub struct BedOptions {
    /// The testbed's profile (`crate::testbed::Profile::load`).
    pub profile: String,
    /// Namespace prefix.
    pub prefix: String,
    /// Where `ninf-metaserver`, `ninf-proxy`, `ninf-server` and `ninf` are.
    pub bin_dir: PathBuf,
}

/// Builds the profile's testbed under the prefix, starts a grid of the binaries of
/// `options` in it with `settings` (its files in a fresh work folder named after `name`),
/// runs `body`, and tears everything down, the work folder too, whatever `body` returned.
pub fn run_in_testbed<T>(
    options: &BedOptions,
    name: &str,
    settings: &Settings<'_>,
    body: impl FnOnce(Run<'_>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let profile = crate::testbed::Profile::load(&options.profile)?;
    let binaries = Binaries::find(&options.bin_dir)?;
    let bed = Testbed::new(&options.prefix, profile)
        .with_forwarder(&binaries.ninf)
        .up()?;
    let work = work_dir(name)?;
    let outcome = start_grid(&bed, &work, &binaries, settings).and_then(|grid| {
        body(Run {
            bed: &bed,
            grid,
            binaries: &binaries,
            work: &work,
        })
    });
    let _ = std::fs::remove_dir_all(&work);
    outcome
}

/// Starts the grid in `bed`, its configuration files in `work`.
pub fn start_grid(
    bed: &Testbed,
    work: &Path,
    binaries: &Binaries,
    settings: &Settings<'_>,
) -> anyhow::Result<BedGrid> {
    let client = bed.profile.client().name.clone();
    let client_address = bed.address(&client);
    let metaserver = format!("{client_address}:{METASERVER_PORT}");
    let proxy = format!("{client_address}:{PROXY_PORT}");
    write(
        &work.join("metaserver.toml"),
        &format!(
            "listen = \"{metaserver}\"\ndata_dir = \"{}\"\n{}",
            work.join("metaserver").display(),
            settings.metaserver
        ),
    )?;
    write(
        &work.join("proxy.toml"),
        &format!(
            "listen = \"{proxy}\"\nmetaserver = \"{metaserver}\"\n{}",
            settings.proxy
        ),
    )?;
    let mut running = Vec::new();
    let mut command = bed.command(&client, &binaries.metaserver);
    command.arg("--config").arg(work.join("metaserver.toml"));
    running.push(start(command, "metaserver")?);
    let mut command = bed.command(&client, &binaries.proxy);
    command.arg("--config").arg(work.join("proxy.toml"));
    running.push(start(command, "proxy")?);
    let mut servers = Vec::new();
    // The sites' servers share this host's cores: each starts after the ones before it.
    let mut processors_before = 0;
    for site in bed.profile.servers() {
        for k in 0..site.servers.max(1) {
            let port = SERVER_PORT + u16::try_from(k).unwrap_or(0);
            let address = format!("{}:{port}", bed.address(&site.name));
            let name = if site.servers > 1 {
                format!("{}-{k}", site.name)
            } else {
                site.name.clone()
            };
            let config = work.join(format!("server-{name}.toml"));
            let slowdown = bed.profile.slowdown(site) * settings.slowdown_factor;
            write(
                &config,
                &format!(
                    "listen = \"{address}\"\nmetaserver = \"{metaserver}\"\nprocessors = {}\nprobe_bytes = 262144\ncpu_slowdown = {slowdown:?}\n{}",
                    site.processors,
                    ninf_compute_server::gang::cores::config_section(processors_before)
                ),
            )?;
            processors_before += site.processors as usize;
            let mut command = bed.command(&site.name, &binaries.server);
            command.arg("--config").arg(&config);
            running.push(start(command, &format!("server {name}"))?);
            servers.push((site.name.clone(), address));
        }
    }
    Ok(BedGrid {
        metaserver,
        proxy,
        servers,
        _running: running,
    })
}
