//! The predictor's speed model and placement record, and the NWS-style forecaster.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};

use ninf_scheduling::calibration::{Factor, Overhead};
use ninf_scheduling::forecast::Forecaster;
use ninf_scheduling::{
    GridView, History, Link, LoadPredictor, Location, Predictor, PredictorKind, ServerView, Site,
};

fn grid() -> GridView {
    GridView {
        servers: vec![ServerView {
            name: "s".into(),
            flops_per_processor: 1e9,
            processors: 4,
            functions: BTreeSet::new(),
            up: true,
        }],
    }
}

/// 1 MB/s with 10 ms of latency: the link the predictors fall back to here.
fn megabyte_link() -> Link {
    Link {
        throughput: 1e6,
        latency: 0.01,
    }
}

#[test]
fn speed_shares_processors_among_the_load_and_placements_add_load() {
    let default = megabyte_link();
    let mut p = LoadPredictor::new(&grid(), vec![2.0], HashMap::new(), default);
    // 4 processors, load 2: a 1-processor task gets a whole processor.
    assert_eq!(p.speed(0, 1, 0.0), 1e9);
    // A 4-processor task shares: 4 / (2 + 4) of 4 processors.
    assert!((p.speed(0, 4, 0.0) - 4e9 * 4.0 / 6.0).abs() < 1.0);
    let id = p.place(0, 4, 0.0, 10.0);
    // During the placement the load is 6: a 1-processor task gets 4/7 of a processor.
    assert!((p.speed(0, 1, 5.0) - 1e9 * 4.0 / 7.0).abs() < 1.0);
    assert_eq!(p.speed(0, 1, 10.0), 1e9, "placements end at their finish");
    p.withdraw(id);
    assert_eq!(p.speed(0, 1, 5.0), 1e9);
}

#[test]
fn a_calls_compute_and_shared_overhead_stretch_with_the_load_and_its_latency_does_not() {
    let default = megabyte_link();
    let mut p = LoadPredictor::new(&grid(), vec![0.0], HashMap::new(), default);
    let task = ninf_scheduling::Task {
        label: "mmul#0".into(),
        function: "mmul".into(),
        flops: 1e9,
        client_in_bytes: 0,
        client_out_bytes: 0,
        processors: 4,
    };
    // Alone: 1 Gflop on 4 processors of 1 Gflop/s, twice as slow as modelled, 0.1 s of
    // overhead waiting for the processors and 0.2 s of latency.
    let overhead = Overhead {
        fixed: 0.2,
        shared: 0.1,
    };
    p.calibrate(
        0,
        HashMap::from([("mmul".to_string(), Factor::flat(2.0))]),
        overhead,
    );
    let alone = 0.25 * 2.0 + 0.1 + 0.2;
    assert!((p.compute_time(0, &task, 0.0) - alone).abs() < 1e-12);
    assert_eq!(p.stretch(0, 4, 0.0), 1.0);
    // Another 4-processor job there: the call gets half the processors, so its compute and
    // shared overhead take twice as long, and its latency the same.
    p.place(0, 4, 0.0, 10.0);
    assert_eq!(p.stretch(0, 4, 5.0), 2.0);
    assert!((p.compute_time(0, &task, 5.0) - (2.0 * 0.6 + 0.2)).abs() < 1e-12);
    let (per_flop, per_call) = p.least_compute_line(0, &task);
    assert!((task.flops * per_flop + per_call - alone).abs() < 1e-12);
}

#[test]
fn a_short_call_on_a_busy_gang_server_waits_for_the_slot_in_progress() {
    let one_processor = GridView {
        servers: vec![ServerView {
            processors: 1,
            ..grid().servers[0].clone()
        }],
    };
    let mut p = LoadPredictor::new(&one_processor, vec![0.0], HashMap::new(), megabyte_link());
    // 2 Mflop on a 1 Gflop/s processor: 2 ms alone.
    let solve = ninf_scheduling::Task {
        label: "dgesl#1".into(),
        function: "dgesl".into(),
        flops: 2e6,
        client_in_bytes: 0,
        client_out_bytes: 0,
        processors: 1,
    };
    // An LU holds the processor from 0 to 45 ms.
    p.place(0, 1, 0.0, 0.045);
    // Without a quantum the server is taken to share its processor: twice as long.
    assert_eq!(p.slot_wait(0, 1, 0.010), 0.0);
    assert!((p.compute_time(0, &solve, 0.010) - 0.004).abs() < 1e-12);
    // With 100 ms slots, the LU's slot runs to its end at 45 ms: 35 ms of wait, then 2 ms.
    p.set_quantum(0, 0.1);
    assert!((p.slot_wait(0, 1, 0.010) - 0.035).abs() < 1e-12);
    assert!((p.compute_time(0, &solve, 0.010) - 0.037).abs() < 1e-12);
    // A job that runs on past the slot leaves it after half a quantum, as expected.
    p.place(0, 1, 0.050, 1.0);
    assert!((p.slot_wait(0, 1, 0.060) - 0.05).abs() < 1e-12);
    // A call of many slots shares the processor instead: 200 ms alone takes 400 ms beside
    // the other job, longer than 50 ms of wait and 200 ms alone.
    let long = ninf_scheduling::Task {
        flops: 2e8,
        ..solve.clone()
    };
    assert!((p.compute_time(0, &long, 0.060) - 0.4).abs() < 1e-12);
    // With the processor free again, nothing waits.
    assert_eq!(p.slot_wait(0, 1, 1.5), 0.0);
    assert!((p.compute_time(0, &solve, 1.5) - 0.002).abs() < 1e-12);
}

#[test]
fn links_fall_back_to_the_reverse_direction_then_the_default() {
    let default = megabyte_link();
    let measured = Link {
        throughput: 5e7,
        latency: 0.002,
    };
    let links = HashMap::from([((Location::Client, Location::Server(0)), measured)]);
    let p = LoadPredictor::new(&grid(), vec![0.0], links, default);
    assert_eq!(p.link(Location::Client, Location::Server(0)), measured);
    assert_eq!(p.link(Location::Server(0), Location::Client), measured);
    assert_eq!(p.link(Location::Server(0), Location::Server(1)), default);
    assert_eq!(
        p.link(Location::Server(0), Location::Server(0))
            .transfer_time(1 << 30),
        0.0
    );
    assert!((measured.transfer_time(5_000_000) - 0.102).abs() < 1e-12);
}

#[test]
fn transfers_share_their_path_while_they_overlap() {
    // 1 MB/s, no latency. A 1 MB move alone takes 1 s; while one is recorded on the same
    // path it takes 2 s, while two are, 3 s. The other direction and other paths are free.
    let link = Link {
        throughput: 1e6,
        latency: 0.0,
    };
    let (client, server) = (Location::Client, Location::Server(0));
    let mut p = LoadPredictor::new(&grid(), vec![0.0], HashMap::new(), link);
    assert_eq!(p.transfer_time(client, server, 1_000_000, 0.0), 1.0);
    let first = p.place_transfer(client, server, 0.0, 5.0).unwrap();
    assert_eq!(p.transfer_time(client, server, 1_000_000, 0.0), 2.0);
    assert_eq!(p.transfer_time(client, server, 1_000_000, 4.9), 2.0);
    assert_eq!(
        p.transfer_time(client, server, 1_000_000, 5.0),
        1.0,
        "a recorded move ends at its finish"
    );
    assert_eq!(p.transfer_time(server, client, 1_000_000, 1.0), 1.0);
    let second = p.place_transfer(client, server, 1.0, 3.0).unwrap();
    assert_eq!(p.transfers_at(client, server, 2.0), 2);
    assert_eq!(p.transfer_time(client, server, 1_000_000, 2.0), 3.0);
    assert_eq!(p.transfer_time(client, server, 0, 2.0), 0.0);
    p.withdraw(first);
    p.withdraw(second);
    assert_eq!(p.transfer_time(client, server, 1_000_000, 2.0), 1.0);
    // Nothing is recorded for a move within one place or of no length.
    assert!(p.place_transfer(server, server, 0.0, 1.0).is_none());
    assert!(p.place_transfer(client, server, 1.0, 1.0).is_none());
}

#[test]
fn latest_sample_and_forecast_predictors_read_history_differently() {
    let history = History {
        load: vec![vec![
            1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0,
        ]],
        ..History::default()
    };
    let default = Link {
        throughput: 1e6,
        latency: 0.0,
    };
    let latest =
        LoadPredictor::from_history(&grid(), &history, PredictorKind::LatestSample, default);
    let forecast = LoadPredictor::from_history(&grid(), &history, PredictorKind::Forecast, default);
    assert_eq!(
        latest.load_at(0, 0.0),
        9.0,
        "the seed's predictor trusts the last sample"
    );
    assert!(
        forecast.load_at(0, 0.0) < 2.0,
        "one spike does not move the forecast: {}",
        forecast.load_at(0, 0.0)
    );
    assert_eq!("nws".parse::<PredictorKind>(), Ok(PredictorKind::Forecast));
    assert!("oracle".parse::<PredictorKind>().is_err());
}

#[test]
fn the_capacity_predictor_reads_each_path_from_its_least_queued_recent_sample() {
    let client = Location::Client;
    let server = Location::Server(0);
    let sample = |throughput, latency| Link {
        throughput,
        latency,
    };
    // The path carries 1 MB/s alone. Probes that ran behind other transfers read a longer
    // latency, and either less throughput or (their inflated round trip subtracted) more.
    // The oldest sample, outside the window, was quieter still.
    let samples = vec![
        sample(9e6, 0.0005),
        sample(0.3e6, 0.05),
        sample(1e6, 0.002),
        sample(4e6, 0.08),
        sample(0.5e6, 0.03),
        sample(0.9e6, 0.002),
        sample(0.6e6, 0.02),
        sample(5e6, 0.1),
        sample(0.4e6, 0.04),
    ];
    let history = History {
        load: vec![vec![1.0; 12]],
        links: HashMap::from([((client, server), samples)]),
        ..History::default()
    };
    let default = Link {
        throughput: 1.0,
        latency: 0.0,
    };
    let capacity = LoadPredictor::from_history(&grid(), &history, PredictorKind::Capacity, default);
    let latest =
        LoadPredictor::from_history(&grid(), &history, PredictorKind::LatestSample, default);
    assert_eq!(capacity.link(client, server), sample(1e6, 0.002));
    assert_eq!(latest.link(client, server), sample(0.4e6, 0.04));
    // Load is forecast, as with the forecast predictor.
    assert_eq!(capacity.load_at(0, 0.0), 1.0);
    assert_eq!(
        "capacity".parse::<PredictorKind>(),
        Ok(PredictorKind::Capacity)
    );
}

#[test]
fn the_forecaster_follows_the_method_with_the_lowest_recent_error() {
    assert_eq!(Forecaster::default().forecast(), None);
    let constant = Forecaster::from_series(&[4.0; 20]);
    assert_eq!(constant.forecast(), Some(4.0));

    // A level shift: methods that adapt quickly win, and the forecast is near the new level.
    let mut series = vec![1.0; 30];
    series.extend([5.0; 12]);
    let shifted = Forecaster::from_series(&series);
    let f = shifted.forecast().unwrap();
    assert!((f - 5.0).abs() < 0.5, "{f} by {:?}", shifted.best_method());

    // Alternating noise around 3: the last value is always 2 off; averaging methods win.
    let noisy: Vec<f64> = (0..40)
        .map(|i| if i % 2 == 0 { 2.0 } else { 4.0 })
        .collect();
    let smooth = Forecaster::from_series(&noisy);
    assert_ne!(smooth.best_method().as_deref(), Some("last value"));
    assert!((smooth.forecast().unwrap() - 3.0).abs() < 0.6);
}

#[test]
fn a_path_without_samples_is_estimated_by_its_sites_and_its_own_samples_come_first() {
    let servers = (0..4)
        .map(|i| ServerView {
            name: format!("s{i}"),
            ..grid().servers[0].clone()
        })
        .collect();
    let grid = GridView { servers };
    let link = |throughput| Link {
        throughput,
        latency: 0.01,
    };
    // Servers 0 and 1 are site 0, 2 and 3 site 1. Measured: 0 -> 1 (their own path), the
    // sites' representatives 1 -> 3, and the client to server 2.
    let (s, c) = (Location::Server, Location::Client);
    let history = History {
        load: vec![vec![0.0]; 4],
        links: HashMap::from([
            ((s(0), s(1)), vec![link(1e8)]),
            ((c, s(2)), vec![link(3e6)]),
        ]),
        sites: vec![0, 0, 1, 1],
        site_links: HashMap::from([
            ((Site::Servers(0), Site::Servers(0)), vec![link(2e8)]),
            (
                (Site::Servers(0), Site::Servers(1)),
                vec![link(5e6), link(4e6)],
            ),
            ((Site::Client, Site::Servers(1)), vec![link(3e6)]),
        ]),
    };
    let default = megabyte_link();
    let p = LoadPredictor::from_history(&grid, &history, PredictorKind::LatestSample, default);
    assert_eq!(p.link(s(0), s(1)), link(1e8), "measured: its own samples");
    assert_eq!(p.link(s(1), s(0)), link(1e8), "the same path the other way");
    assert_eq!(
        p.link(s(0), s(2)),
        link(4e6),
        "across the sites: their latest sample"
    );
    assert_eq!(p.link(s(3), s(1)), link(4e6), "either way");
    assert_eq!(
        p.link(c, s(3)),
        link(3e6),
        "the client to a site it measured"
    );
    assert_eq!(
        p.link(c, s(0)),
        default,
        "nothing measured to site 0 from the client"
    );
    let unsited = History {
        sites: Vec::new(),
        ..history
    };
    let p = LoadPredictor::from_history(&grid, &unsited, PredictorKind::LatestSample, default);
    assert_eq!(p.link(s(0), s(2)), default, "no sites: the default");
}
