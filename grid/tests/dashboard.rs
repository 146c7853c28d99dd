//! The dashboard in a real browser: headless Chromium, driven over WebDriver (chromedriver,
//! fantoccini), opens the link `ninf up` prints for an embedded grid with a token, and the
//! test checks what each page shows against what the grid did: every server listed, a
//! transaction's graph with one bar per task and its cross-server edges marked, a data
//! handle under its server and owner, the gang table of a parallel routine while it runs, the
//! events of registration. Screenshots of
//! each page go to `target/tmp/dashboard/` (and to `docs/figures/` with
//! `NINF_UPDATE_FIGURES=1`).
//!
//! Needs `chromium` and `chromium-driver` (Debian); `.ci/run` and `scripts/test` install them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{TestGrid, local_mmul, matrix};
use fantoccini::{Client, ClientBuilder};
use ninf::grid::TxArg;
use serde_json::{Value, json};

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "cannot start chromedriver: install Debian's chromium and chromium-driver \
                 (`apt-get install chromium chromium-driver`, as scripts/test does)",
            );
        let driver = Driver { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn browser(driver: &Driver) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("browserName".into(), json!("chrome"));
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1400,900"],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("chromedriver could not start Chromium")
}

/// Runs `script` in the page until it returns something other than null or false (20 s).
async fn wait_for(client: &Client, what: &str, script: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let value = client.execute(script, vec![]).await.unwrap();
        if !value.is_null() && value != json!(false) {
            return value;
        }
        if Instant::now() > deadline {
            let text = client
                .execute("return document.body.innerText", vec![])
                .await
                .unwrap();
            panic!("timed out waiting for {what}; the page says: {text}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens a page of the dashboard and waits until it has drawn it.
async fn open(client: &Client, page: &str) {
    client
        .execute(
            "location.hash = arguments[0]",
            vec![json!(format!("#/{page}"))],
        )
        .await
        .unwrap();
    let drawn = format!("return document.body.dataset.drawn === {}", json!(page));
    wait_for(client, &format!("the {page} page"), &drawn).await;
}

async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    let mut folders = vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard")];
    if std::env::var_os("NINF_UPDATE_FIGURES").is_some() {
        folders.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/figures"));
    }
    for folder in folders {
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(format!("dashboard-{name}.png")), &png).unwrap();
    }
}

async fn count(client: &Client, selector: &str) -> u64 {
    let script = format!(
        "return document.querySelectorAll({}).length",
        json!(selector)
    );
    client
        .execute(&script, vec![])
        .await
        .unwrap()
        .as_u64()
        .unwrap()
}

#[test]
fn the_dashboard_shows_servers_graphs_gang_tables_and_events_in_a_browser() {
    let grid = TestGrid::start(vec![2, 1], |o| o.auth = true);
    let endpoints = grid.grid().endpoints.clone();
    let token = endpoints.token().unwrap().unwrap();
    let link = endpoints.dashboard_link().unwrap().unwrap();
    assert!(link.ends_with(&format!("/?token={token}")), "{link}");
    let client = grid.client("round-robin").with_token(&token);

    // A chain of three products under round robin: both edges cross servers.
    let n = 12usize;
    let a = matrix(n, 3);
    let (mut x, mut y, mut c) = (vec![0.0; n * n], vec![0.0; n * n], vec![0.0; n * n]);
    let plan = client
        .transaction(|tx| {
            let ha = tx.input(&a);
            let (hx, hy, hc) = (tx.buffer(&mut x), tx.buffer(&mut y), tx.buffer(&mut c));
            let size = TxArg::from(n as i32);
            tx.call("mmul", &[size.clone(), ha.into(), ha.into(), hx.into()])?;
            tx.call("mmul", &[size.clone(), hx.into(), ha.into(), hy.into()])?;
            tx.call("mmul", &[size, hy.into(), ha.into(), hc.into()])?;
            Ok(())
        })
        .unwrap();
    let square = local_mmul(n, &a, &a);
    assert_eq!(c, local_mmul(n, &local_mmul(n, &square, &a), &a));
    // A handle kept on the grid, for the data page.
    let kept = client
        .put(&a[..], &[(n * n) as u64], ninf::grid::DataMode::Sticky)
        .unwrap();
    let kept_on = client.data().unwrap()[0].servers.clone();
    assert_eq!(kept_on.len(), 1);

    let driver = Driver::start();
    grid.runtime.block_on(async {
        let browser = browser(&driver).await;
        // Without the token: refused, and told where the link is.
        let bare = link.split('?').next().unwrap().to_string();
        browser.goto(&bare).await.unwrap();
        let refused = browser.find(fantoccini::Locator::Css("body")).await.unwrap();
        let text = refused.text().await.unwrap();
        assert!(text.contains("?token="), "{text}");

        // The link sets the cookie; every page after it is served.
        browser.goto(&link).await.unwrap();
        let url = browser.current_url().await.unwrap();
        assert!(!url.as_str().contains("token"), "the token leaves the address: {url}");
        open(&browser, "servers").await;
        let listed = browser
            .execute(
                "return [...document.querySelectorAll('tr.server')].map(r => r.dataset.address)",
                vec![],
            )
            .await
            .unwrap();
        // Listed in registration order, which the servers' start-up races decide.
        let mut listed: Vec<String> = serde_json::from_value(listed).unwrap();
        listed.sort();
        let mut servers = endpoints.servers.clone();
        servers.sort();
        assert_eq!(listed, servers, "every server, once");
        assert!(count(&browser, "tr.server svg.sparkline").await >= 2);
        screenshot(&browser, "servers").await;

        // The graph list, then the graph's Gantt chart: one bar per task, both edges marked
        // as crossing servers.
        open(&browser, "graphs").await;
        let row = format!("tr.graph[data-id='{}']", plan.graph_id);
        assert_eq!(count(&browser, &row).await, 1);
        screenshot(&browser, "graphs").await;
        open(&browser, &format!("graphs/{}", plan.graph_id)).await;
        assert_eq!(count(&browser, "#gantt g.task").await, 3);
        assert_eq!(count(&browser, "#gantt rect.bar-actual").await, 3);
        assert_eq!(count(&browser, "#gantt rect.bar-predicted").await, 3);
        assert_eq!(count(&browser, "#gantt path.edge").await, 2);
        assert_eq!(count(&browser, "#gantt path.edge.crosses").await, 2);
        let rows = browser
            .execute(
                "return [...document.querySelectorAll('#gantt .row-label')].map(t => t.textContent)",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(rows.as_array().unwrap().len(), 2, "one row per server used");
        screenshot(&browser, "graph").await;

        // The servers measure each other soon after registering; the page redraws every two
        // seconds until both directions show.
        open(&browser, "network").await;
        let measured = "return document.querySelectorAll('#heatmap rect.cell:not(.empty)').length >= 2";
        wait_for(&browser, "both server-to-server paths", measured).await;
        screenshot(&browser, "network").await;

        // The data page: the handle under its server and its owner, and in the list.
        open(&browser, "data").await;
        let shown: String = kept.id().chars().take(12).collect();
        let row = format!("tr.handle[data-id='{shown}']");
        assert_eq!(count(&browser, &row).await, 1);
        let on = browser
            .execute(
                &format!("return document.querySelector({}).textContent", json!(format!("{row} td.servers"))),
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(on.as_str().unwrap(), kept_on[0]);
        let copies = browser
            .execute(
                &format!(
                    "return document.querySelector({}).children[1].textContent",
                    json!(format!("tr.data-server[data-server='{}']", kept_on[0]))
                ),
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(copies.as_str().unwrap(), "1");
        assert_eq!(count(&browser, "tr.data-owner").await, 1);
        screenshot(&browser, "data").await;

        open(&browser, "events").await;
        assert_eq!(
            count(&browser, "tr.event[data-kind='registered']").await,
            2,
            "each server's registration"
        );
        screenshot(&browser, "events").await;
        browser.close().await.unwrap();
    });

    // A parallel routine on both processors of the first server: the gang page shows its
    // job in the table while it runs.
    let spinning = {
        let client = grid.client("flow").with_token(&token);
        std::thread::spawn(move || {
            client.call(
                "pspin",
                &mut [ninf::Arg::Integer(2), ninf::Arg::Integer(1_500_000_000)],
            )
        })
    };
    let first = endpoints.servers[0].clone();
    grid.runtime.block_on(async {
        let browser = browser(&driver).await;
        browser.goto(&link).await.unwrap();
        open(&browser, "gang").await;
        let card = format!("div.gang[data-server='{first}']");
        let job = format!("{card} td.job");
        let script = format!(
            "return document.querySelectorAll({}).length === 2",
            json!(job)
        );
        wait_for(&browser, "the pspin job on both processors", &script).await;
        let label = format!("{card} td.job");
        let title = browser
            .execute(
                &format!("return document.querySelector({}).title", json!(label)),
                vec![],
            )
            .await
            .unwrap();
        assert!(title.as_str().unwrap().contains("pspin"), "{title}");
        screenshot(&browser, "gang").await;
        browser.close().await.unwrap();
    });
    spinning.join().unwrap().unwrap();
    client.free(&kept).unwrap();
    grid.assert_no_leftovers();
}
