//! The placement record: a server given a task is predicted busier until the task ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ninf_metaserver::Registry;
use ninf_metaserver::planner::{
    ActivePlacement, ENDED_MEMORY_SECONDS, OVERDUE_SECONDS, Planner, TaskOutcome,
};
use ninf_proto::v1;
use ninf_scheduling::{Link, PredictorKind, Scheduler, Task, TaskGraph};

fn registry() -> Registry {
    registry_with_slots(0.0)
}

/// Two one-processor servers whose gang slots last `quantum` seconds (0: not registered).
fn registry_with_slots(quantum: f64) -> Registry {
    registry_of(&["a:1", "b:1"], quantum)
}

/// One-processor servers at `addresses` offering LINPACK's routines.
fn registry_of(addresses: &[&str], quantum: f64) -> Registry {
    registry_of_at(addresses, quantum, 0.0)
}

/// [`registry_of`], the servers registered at `at`.
fn registry_of_at(addresses: &[&str], quantum: f64, at: f64) -> Registry {
    let text = include_str!("../../routines/idl/linpack.idl");
    let module = ninf_idl::compile(&ninf_idl::SourceFile::new("linpack.idl", text)).unwrap();
    let routines: Vec<v1::FunctionInterface> = module
        .functions
        .iter()
        .map(v1::FunctionInterface::from)
        .collect();
    let mut registry = Registry::new(4, 5.0, 1000.0);
    for (id, &address) in (1..).zip(addresses) {
        let info = v1::ServerInfo {
            mflops: 1000.0,
            processors: 1,
            quantum_seconds: quantum,
            ..Default::default()
        };
        registry.register(id, address, info, &routines, at);
    }
    registry
}

/// A 1 GB/s, 0.1 ms path: transfers cost next to nothing here.
fn fast_link() -> Link {
    Link {
        throughput: 1e9,
        latency: 1e-4,
    }
}

fn outcome(task: usize, start: f64, finish: f64) -> TaskOutcome {
    TaskOutcome {
        task,
        start,
        finish,
        ..Default::default()
    }
}

fn one_mmul() -> TaskGraph {
    let mut graph = TaskGraph::default();
    graph.add_task(Task {
        label: "mmul#0".into(),
        function: "mmul".into(),
        flops: 2e9,
        client_in_bytes: 1000,
        client_out_bytes: 1000,
        processors: 1,
    });
    graph
}

#[test]
fn the_next_graph_avoids_the_server_busy_with_the_last_one_until_it_ends() {
    let registry = registry();
    let link = fast_link();
    let mut planner = Planner::new(PredictorKind::LatestSample, link);
    let graph = one_mmul();
    let mut simple = ninf_scheduling::by_name("simple", 0).unwrap();
    let first = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 1.0)
        .unwrap();
    assert_eq!(first.servers, vec![0]);
    planner.record(1, &graph, &first, &registry, 1.0);
    let second = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 1.5)
        .unwrap();
    assert_eq!(
        second.servers,
        vec![1],
        "server 0 is still running graph 1's task"
    );
    // Once graph 1 reports its end, server 0 is free again.
    planner.finish(1, 1.6, &[outcome(0, 0.0, 0.55)]);
    assert!(planner.active().is_empty());
    let third = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 1.7)
        .unwrap();
    assert_eq!(third.servers, vec![0]);
    // A placement whose predicted end (3.7) has passed still counts while its graph has not
    // been reported ended: under load graphs run late, and their calls are still there.
    planner.record(3, &graph, &third, &registry, 1.7);
    let late = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 4.9)
        .unwrap();
    assert_eq!(late.servers, vec![1], "graph 3 is late, not gone");
    // Until OVERDUE_SECONDS past its end: its proxy may have died without a report.
    let abandoned_at = 3.7 + OVERDUE_SECONDS + 0.1;
    let mut registry = registry;
    for server in ["a:1", "b:1"] {
        assert!(registry.heartbeat(server, None, abandoned_at));
    }
    let abandoned = planner
        .plan(&registry, &graph, &[], simple.as_mut(), abandoned_at)
        .unwrap();
    assert_eq!(abandoned.servers, vec![0]);
    planner.finish(4, abandoned_at, &[]);
    assert!(planner.active().is_empty());
}

#[test]
fn a_late_call_counts_from_now_for_as_long_as_it_was_predicted() {
    let (registry, planner, graph, mut simple) = first_mmul_on_a();
    let placed = planner.active()[0].clone();
    let length = placed.finish - placed.start;
    assert!(length > 1.9, "2 Gflop at 1 Gflop/s: {length}");
    assert_eq!(placed.still_running(1.5), (placed.start, placed.finish));
    assert_eq!(placed.still_running(4.0), (4.0, 4.0 + length));
    // The next mmul shares server 0 with it (stretched twice) or waits for server 1 alone.
    let second = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 4.0)
        .unwrap();
    assert_eq!(second.servers, vec![1]);
}

#[test]
fn a_graph_booked_at_its_plan_counts_from_when_its_record_was_written_or_not_at_all() {
    let (registry, mut planner, graph, mut simple) = first_mmul_on_a();
    let booked = planner.active()[0].clone();
    // Its record took 0.25 s to commit: its call runs from then on.
    planner.started_at(1, 1.25);
    let started = planner.active()[0].clone();
    assert_eq!(started.placed_at, 1.25);
    assert_eq!(started.start, booked.start + 0.25);
    assert_eq!(started.finish, booked.finish + 0.25);
    // Never earlier than it was booked.
    planner.started_at(1, 0.5);
    assert_eq!(planner.active()[0].start, started.start);
    // A graph whose record could not be written is refused: a:1 is free again.
    planner.forget(1);
    assert!(planner.active().is_empty());
    assert_eq!(planner.graphs_in_flight(1.5), 0);
    let next = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 1.5)
        .unwrap();
    assert_eq!(next.servers, vec![0]);
}

/// A grid where graph 1, one mmul, was placed and recorded at t = 1 (on a:1, the lower id on
/// a tie): its registry, planner, the one-mmul graph and SIMPLE.
fn first_mmul_on_a() -> (Registry, Planner, TaskGraph, Box<dyn Scheduler>) {
    let registry = registry();
    let mut planner = Planner::new(PredictorKind::LatestSample, fast_link());
    let graph = one_mmul();
    let mut simple = ninf_scheduling::by_name("simple", 0).unwrap();
    let first = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 1.0)
        .unwrap();
    assert_eq!(first.servers, vec![0]);
    planner.record(1, &graph, &first, &registry, 1.0);
    (registry, planner, graph, simple)
}

/// A server's load sample of one running job.
fn one_job_running() -> v1::LoadSample {
    v1::LoadSample {
        running_jobs: 1,
        ..Default::default()
    }
}

#[test]
fn a_load_sample_taken_while_a_known_graph_ran_does_not_outlive_the_graph() {
    // Server a:1 reports a load of 1 at t = 2: graph 1's task, placed at t = 1, which
    // really ran from 1.2 to 2.5. At t = 2.6 graph 1 has ended: the stale sample must not
    // keep a:1 looking busy, so the next mmul goes to a:1 again (its id is lower on a tie).
    let (mut registry, mut planner, graph, mut simple) = first_mmul_on_a();
    let busy = one_job_running();
    assert!(registry.heartbeat("a:1", Some(&busy), 2.0));
    // While graph 1 runs, a:1 is busy with it: b:1 wins.
    let during = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 2.2)
        .unwrap();
    assert_eq!(during.servers, vec![1]);
    planner.finish(1, 2.6, &[outcome(0, 0.2, 1.5)]);
    let after = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 2.6)
        .unwrap();
    assert_eq!(after.servers, vec![0], "the sample's job has ended");
    // Load nobody here placed stays: another sample of 1 job at t = 3 keeps a:1 busy.
    assert!(registry.heartbeat("a:1", Some(&busy), 3.0));
    let foreign = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 3.1)
        .unwrap();
    assert_eq!(foreign.servers, vec![1]);
}

#[test]
fn a_graph_that_started_late_is_found_in_the_sample_taken_while_it_ran() {
    // Graph 1 was placed at t = 1, but its proxy started it only at 1.5 (the placement's
    // reply, the proxy's journal): its call ran from 1.5 to 2.0, and the report came at 2.
    // a:1's sample at 1.8 is that call. Counted from the placement, the call would have
    // ended at 1.5, and a:1 would look busy with a job nobody placed.
    let (mut registry, mut planner, graph, mut simple) = first_mmul_on_a();
    assert!(registry.heartbeat("a:1", Some(&one_job_running()), 1.8));
    planner.finish(1, 2.0, &[outcome(0, 0.0, 0.5)]);
    let ended = planner.ended().next().expect("an ended placement");
    assert!(
        (ended.start - 1.5).abs() < 1e-9 && (ended.finish - 2.0).abs() < 1e-9,
        "{ended:?}"
    );
    let next = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 2.1)
        .unwrap();
    assert_eq!(next.servers, vec![0], "a:1's sampled job was graph 1's");
}

#[test]
fn the_copy_planned_with_keeps_only_the_ended_placements_a_sample_can_need() {
    let (mut registry, mut planner, graph, mut simple) = first_mmul_on_a();
    let ended = |p: &Planner| p.ended().map(|p| p.graph).collect::<Vec<_>>();
    // No server has sent a sample: no ended placement can correct one.
    planner.finish(1, 1.6, &[outcome(0, 0.0, 0.5)]);
    assert!(
        planner
            .for_planning(&registry, 1.6)
            .ended()
            .next()
            .is_none()
    );
    // Graph 2 runs on a:1 from 2.0 to 2.5 and a:1 samples it at 2.2; b:1 samples at 1.8,
    // after graph 1 ended (1.5): graph 1's placement can no longer correct any sample.
    let second = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 2.0)
        .unwrap();
    assert_eq!(second.servers, vec![0]);
    planner.record(2, &graph, &second, &registry, 2.0);
    let idle = v1::LoadSample::default();
    assert!(registry.heartbeat("b:1", Some(&idle), 1.8));
    assert!(registry.heartbeat("a:1", Some(&one_job_running()), 2.2));
    planner.finish(2, 2.6, &[outcome(0, 0.0, 0.5)]);
    assert_eq!(ended(&planner), [1, 2]);
    let copy = planner.for_planning(&registry, 2.6);
    assert_eq!(ended(&copy), [2]);
    // And it places as the planner itself does: a:1's sampled job has ended.
    for ours in plans_alike(&planner, &copy, &registry, &graph, [2.6, 2.7]) {
        assert_eq!(ours.servers, vec![0]);
    }
    // Once b:1 is down (silent for more than the 5 s heartbeat timeout), its old sample
    // no longer keeps graph 2's placement in the copy: a:1's new sample is after its end.
    assert!(registry.heartbeat("a:1", Some(&idle), 7.0));
    assert_eq!(ended(&planner), [1, 2], "kept within the 30 s memory");
    assert!(
        planner
            .for_planning(&registry, 7.0)
            .ended()
            .next()
            .is_none()
    );
}

#[test]
fn a_late_graphs_job_in_a_load_sample_is_counted_once() {
    let (mut registry, planner, graph, mut simple) = first_mmul_on_a();
    // Graph 1 was predicted to end near t = 3. At t = 5 it still runs, and a:1 reports its
    // job: the sample and the placement are the same job.
    assert!(registry.heartbeat("a:1", Some(&one_job_running()), 5.0));
    assert!(registry.heartbeat("b:1", None, 5.0));
    let avoid = ["b:1".to_string()];
    let second = planner
        .plan_avoiding(&registry, &graph, &[], &avoid, simple.as_mut(), 5.1)
        .unwrap();
    assert_eq!(second.servers, vec![0]);
    // Sharing a:1's one processor with graph 1's call alone: twice its 2 s alone, not
    // three times.
    let length = second.timings[0].finish - second.timings[0].start;
    assert!((length - 4.0).abs() < 0.01, "{length}");
}

/// Runs `graphs` one-mmul graphs in turn on `planner`, each reported to have computed
/// `compute` seconds in a call of `call` seconds; returns the predicted finish of the last.
fn run_mmuls(planner: &mut Planner, graphs: u64, compute: f64, call: f64) -> f64 {
    let mut registry = registry();
    let graph = one_mmul();
    let mut simple = ninf_scheduling::by_name("simple", 0).unwrap();
    let mut predicted = 0.0;
    for id in 1..=graphs {
        let now = id as f64 * 10.0;
        for server in ["a:1", "b:1"] {
            assert!(registry.heartbeat(server, None, now));
        }
        let schedule = planner
            .plan(&registry, &graph, &[], simple.as_mut(), now)
            .unwrap();
        predicted = schedule.timings[0].finish;
        planner.record(id, &graph, &schedule, &registry, now);
        let done = TaskOutcome {
            compute_seconds: compute,
            ..outcome(0, 0.0, call)
        };
        planner.finish(id, now + call, &[done]);
    }
    predicted
}

#[test]
fn predictions_learn_a_routines_real_speed_and_the_cost_of_a_call() {
    let link = fast_link();
    // The model: 2e9 flops at 1000 Mflop/s, 2 s. The routine really computes for 4 s, and
    // the call takes 50 ms more than that.
    let mut planner = Planner::new(PredictorKind::LatestSample, link);
    let first = run_mmuls(&mut planner, 1, 4.0, 4.05);
    assert!((first - 2.0).abs() < 0.01, "before learning: {first}");
    let learned = run_mmuls(&mut planner, 15, 4.0, 4.05);
    assert!((learned - 4.05).abs() < 0.01, "after learning: {learned}");
    assert!((planner.calibration().factor("a:1", "mmul").least() - 2.0).abs() < 0.01);
    assert!((planner.calibration().overhead("a:1").at(1.0) - 0.05).abs() < 0.001);
    // Without calibration the model alone predicts, as the seed's did.
    let mut seed = Planner::new(PredictorKind::LatestSample, link);
    seed.calibrate = false;
    let unlearned = run_mmuls(&mut seed, 15, 4.0, 4.05);
    assert!((unlearned - 2.0).abs() < 0.01, "{unlearned}");
}

#[test]
fn ended_graphs_are_forgotten_once_no_load_sample_can_need_them() {
    let registry = registry();
    let link = fast_link();
    let graph = one_mmul();
    let mut simple = ninf_scheduling::by_name("simple", 0).unwrap();
    // One placement, recorded at each time (the servers' heartbeats are not simulated).
    let schedule = Planner::new(PredictorKind::LatestSample, link)
        .plan(&registry, &graph, &[], simple.as_mut(), 1.0)
        .unwrap();
    let run = |planner: &mut Planner, id: u64, at: f64| {
        planner.record(id, &graph, &schedule, &registry, at);
        planner.finish(id, at + 0.6, &[outcome(0, 0.0, 0.5)]);
    };
    let mut planner = Planner::new(PredictorKind::LatestSample, link);
    run(&mut planner, 1, 1.0);
    run(&mut planner, 2, 1.0 + ENDED_MEMORY_SECONDS / 2.0);
    let graphs = |planner: &Planner| planner.ended().map(|p| p.graph).collect::<Vec<_>>();
    assert_eq!(graphs(&planner), [1, 2], "both ended within the memory");
    run(&mut planner, 3, 2.0 + ENDED_MEMORY_SECONDS);
    assert_eq!(graphs(&planner), [2, 3], "graph 1 ended longer ago");

    // A metaserver whose samples may be older keeps them longer.
    let mut planner = Planner::new(PredictorKind::LatestSample, link);
    planner.ended_memory_seconds = 4.0 * ENDED_MEMORY_SECONDS;
    run(&mut planner, 1, 1.0);
    run(&mut planner, 2, 2.0 + ENDED_MEMORY_SECONDS);
    assert_eq!(graphs(&planner), [1, 2]);
}

#[test]
fn a_short_call_behind_a_long_one_is_predicted_to_wait_for_the_slot_the_server_registered() {
    let short = |flops: f64| {
        let mut graph = one_mmul();
        graph.tasks[0].flops = flops;
        graph
    };
    // A 2 s product runs on server a from 1.0; a 2 ms one comes at 1.5, kept off b.
    let predicted = |quantum: f64| {
        let registry = registry_with_slots(quantum);
        let mut planner = Planner::new(PredictorKind::LatestSample, fast_link());
        let mut simple = ninf_scheduling::by_name("simple", 0).unwrap();
        let long = one_mmul();
        let first = planner
            .plan(&registry, &long, &[], simple.as_mut(), 1.0)
            .unwrap();
        planner.record(1, &long, &first, &registry, 1.0);
        let avoid = ["b:1".to_string()];
        let second = planner
            .plan_avoiding(&registry, &short(2e6), &[], &avoid, simple.as_mut(), 1.5)
            .unwrap();
        assert_eq!(second.servers, vec![0]);
        second.timings[0].finish - second.timings[0].start
    };
    // Shared with the product: twice its 2 ms.
    assert!((predicted(0.0) - 0.004).abs() < 1e-9, "{}", predicted(0.0));
    // Behind the product's 100 ms slot: half of it expected, then 2 ms.
    assert!((predicted(0.1) - 0.052).abs() < 1e-9, "{}", predicted(0.1));
}

/// A graph of calls the model gives no flops, half on each server. `b:1`'s calls after
/// `a:1` had answered all of its own ran faster, with the machine to themselves: they
/// teach nothing, or `b:1` would look the faster and be given more of the next graph.
#[test]
fn calls_without_flops_that_end_after_the_other_servers_teach_no_running_time() {
    let registry = registry();
    let graph = flopless_calls(80);
    let mut planner = Planner::new(PredictorKind::LatestSample, fast_link());
    let mut simple = ninf_scheduling::by_name("simple", 0).unwrap();
    let mut schedule = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 1.0)
        .unwrap();
    let a = registry
        .servers()
        .iter()
        .position(|s| s.address == "a:1")
        .unwrap();
    let b = 1 - a;
    for (task, server) in schedule.servers.iter_mut().enumerate() {
        *server = if task % 2 == 0 { a } else { b };
    }
    planner.record(1, &graph, &schedule, &registry, 1.0);
    // a:1's 40 calls end by 0.040 s at 40 us each; b:1's first 10 alongside them, its
    // other 30 later at 20 us each.
    let outcomes: Vec<TaskOutcome> = (0..80)
        .map(|task| {
            let k = task / 2;
            let (finish, compute) = if task % 2 == 0 || k < 10 {
                (0.001 * (k + 1) as f64, 40e-6)
            } else {
                (0.040 + 0.0005 * (k + 1) as f64, 20e-6)
            };
            TaskOutcome {
                compute_seconds: compute,
                ..outcome(task, 0.0, finish)
            }
        })
        .collect();
    planner.finish(1, 2.0, &outcomes);
    let calibration = planner.calibration();
    for server in ["a:1", "b:1"] {
        let running = calibration.factor(server, "dgesl").unmodelled.unwrap();
        assert!(
            (running - 40e-6).abs() < 1e-12,
            "{server} learned {running}"
        );
    }
}

/// `n` calls the model gives no flops, none feeding another.
fn flopless_calls(n: usize) -> TaskGraph {
    let mut graph = TaskGraph::default();
    for i in 0..n {
        graph.add_task(Task {
            label: format!("dgesl#{i}"),
            function: "dgesl".into(),
            flops: 0.0,
            client_in_bytes: 100,
            client_out_bytes: 100,
            processors: 1,
        });
    }
    graph
}

/// 3,000 tiny calls queued on one server: the k-th runs 15 us and answers after 40 us x k.
/// What the queue adds beyond the running times grows with the calls ahead, and is learned
/// so (from calls spread over the whole queue), not as a cost every call of the server pays.
#[test]
fn a_long_queue_of_tiny_calls_teaches_an_overhead_that_grows_along_it() {
    let mut registry = registry_of(&["a:1"], 0.0);
    let graph = flopless_calls(3000);
    let mut planner = Planner::new(PredictorKind::LatestSample, fast_link());
    let mut simple = ninf_scheduling::by_name("simple", 0).unwrap();
    let outcomes: Vec<TaskOutcome> = (0..3000)
        .map(|task| TaskOutcome {
            compute_seconds: 15e-6,
            ..outcome(task, 0.0, 40e-6 * (task + 1) as f64)
        })
        .collect();
    let mut last_finish = 0.0;
    for id in 1..=3 {
        let now = id as f64 * 10.0;
        assert!(registry.heartbeat("a:1", None, now));
        let schedule = planner
            .plan(&registry, &graph, &[], simple.as_mut(), now)
            .unwrap();
        last_finish = schedule
            .timings
            .iter()
            .map(|t| t.finish)
            .fold(0.0, f64::max);
        planner.record(id, &graph, &schedule, &registry, now);
        planner.finish(id, now + 1.0, &outcomes);
    }
    assert!(
        (last_finish - 0.120).abs() < 0.024,
        "the queue of 0.12 s predicted at {last_finish} s"
    );
    let overhead = planner.calibration().overhead("a:1");
    assert!(
        overhead.at(1.0) < 0.001,
        "a call alone on the server predicted {overhead:?} beyond its running time"
    );
}

#[test]
fn the_copy_for_a_shortlist_keeps_only_the_placements_on_its_servers_and_plans_alike() {
    let (mut registry, mut planner, graph, mut simple) = first_mmul_on_a();
    // Graph 2 goes to b:1 while graph 1 runs on a:1.
    let second = planner
        .plan(&registry, &graph, &[], simple.as_mut(), 1.1)
        .unwrap();
    assert_eq!(second.servers, vec![1]);
    planner.record(2, &graph, &second, &registry, 1.1);
    let graphs = |ps: &[ActivePlacement]| ps.iter().map(|p| p.graph).collect::<Vec<_>>();
    let only_b = registry.subset(&[1]);
    assert_eq!(graphs(planner.active()), [1, 2]);
    assert_eq!(graphs(planner.for_planning(&only_b, 1.2).active()), [2]);
    // Both servers sample their job, then both graphs end after the samples: of the ended
    // placements, the copy keeps b:1's alone.
    assert!(registry.heartbeat("a:1", Some(&one_job_running()), 1.3));
    assert!(registry.heartbeat("b:1", Some(&one_job_running()), 1.3));
    planner.finish(1, 1.5, &[outcome(0, 0.0, 0.4)]);
    planner.finish(2, 1.5, &[outcome(0, 0.0, 0.35)]);
    let ended = |p: &Planner| p.ended().map(|p| p.graph).collect::<Vec<_>>();
    assert_eq!(ended(&planner), [1, 2]);
    let only_b = registry.subset(&[1]);
    let copy = planner.for_planning(&only_b, 1.6);
    assert_eq!(ended(&copy), [2]);
    plans_alike(&planner, &copy, &only_b, &graph, [1.6, 1.7]);
}

/// Plans `graph` on `registry` with the flow scheduler at each of `times`, with `planner`
/// and with `copy`: asserts they place alike, and returns the copy's schedules.
fn plans_alike(
    planner: &Planner,
    copy: &Planner,
    registry: &Registry,
    graph: &TaskGraph,
    times: [f64; 2],
) -> Vec<ninf_scheduling::Schedule> {
    let mut flow = ninf_scheduling::by_name("flow", 0).unwrap();
    times
        .into_iter()
        .map(|at| {
            let theirs = planner
                .plan(registry, graph, &[], flow.as_mut(), at)
                .unwrap();
            let ours = copy.plan(registry, graph, &[], flow.as_mut(), at).unwrap();
            assert_eq!(ours, theirs, "at t = {at}");
            ours
        })
        .collect()
}

/// Plans `graph` at `now`, records it as `id` under the template it was planned in, and
/// returns what the planner expects of it (the model's makespan where nothing is expected).
fn place_one(planner: &mut Planner, graph: &TaskGraph, id: u64, now: f64) -> (f64, Option<f64>) {
    let registry = registry_of_at(&["a:1", "b:1"], 0.0, now);
    let mut simple = ninf_scheduling::by_name("simple", 0).unwrap();
    let schedule = planner
        .plan(&registry, graph, &[], simple.as_mut(), now)
        .unwrap();
    let key = planner.template_of(graph, now);
    let expected = planner.expect(key, &schedule).map(|e| e.makespan);
    planner.record(id, graph, &schedule, &registry, now);
    planner.file_under(id, key, now);
    (schedule.makespan, expected)
}

#[test]
fn once_like_graphs_have_run_under_the_same_load_the_planner_expects_what_they_took() {
    let mut planner = Planner::new(PredictorKind::LatestSample, fast_link());
    planner.calibrate = false;
    let graph = one_mmul();
    // Alone on the grid, each run of the product took 3 s, whatever the model said.
    let mut now = 10.0;
    for id in 1..=ninf_scheduling::templates::MIN_SAMPLES as u64 {
        let (_, expected) = place_one(&mut planner, &graph, id, now);
        assert_eq!(expected, None, "graph {id}: too few like graphs yet");
        let ran = [outcome(0, 0.1, 2.9)];
        planner.teach_template(id, 3.0, &ran);
        planner.finish(id, now + 3.0, &ran);
        now += 10.0;
    }
    let (modelled, expected) = place_one(&mut planner, &graph, 100, now);
    assert!(
        (modelled - 2.0).abs() < 0.1,
        "the model: 2 Gflop at 1 Gflop/s, {modelled}"
    );
    assert_eq!(expected, Some(3.0));
    assert_eq!(planner.graphs_in_flight(now), 1);
    // With graph 100 still running, the next one meets another load: nothing known there.
    let (_, beside) = place_one(&mut planner, &graph, 101, now + 0.1);
    assert_eq!(beside, None);
    // Another shape is another template.
    let mut bigger = one_mmul();
    bigger.tasks[0].flops = 4e9;
    planner.finish(100, now + 3.0, &[]);
    planner.finish(101, now + 3.1, &[]);
    assert_eq!(planner.graphs_in_flight(now + 0.2), 0);
    assert_eq!(place_one(&mut planner, &bigger, 102, now + 10.0).1, None);
    // Switched off (`templates = false`), the model's prediction stands.
    planner.finish(102, now + 15.0, &[]);
    planner.templates_on = false;
    assert_eq!(place_one(&mut planner, &graph, 103, now + 20.0).1, None);
}

#[test]
fn a_graph_counts_as_load_until_its_report_or_the_end_its_model_gave_it() {
    let mut planner = Planner::new(PredictorKind::LatestSample, fast_link());
    planner.calibrate = false;
    let graph = one_mmul();
    // 2 Gflop at 1 Gflop/s: the model has each graph end 2 s after it was planned.
    let (modelled, _) = place_one(&mut planner, &graph, 1, 1.0);
    assert!((modelled - 2.0).abs() < 0.1, "{modelled}");
    assert_eq!(planner.graphs_in_flight(1.0), 1);
    place_one(&mut planner, &graph, 2, 1.5);
    assert_eq!(planner.graphs_in_flight(1.6), 2);
    assert_eq!(planner.template_of(&graph, 1.6).band, 2);
    // Graph 1, not reported, is past the end its model gave it: it no longer counts.
    let past_first = 1.0 + modelled + 0.01;
    assert_eq!(planner.graphs_in_flight(past_first), 1);
    assert_eq!(planner.template_of(&graph, past_first).band, 1);
    // Graph 2 is reported before its model's end.
    planner.finish(2, past_first + 0.1, &[]);
    assert_eq!(planner.graphs_in_flight(past_first + 0.1), 0);
    assert_eq!(planner.template_of(&graph, past_first + 0.1).band, 0);
}

#[test]
fn a_graph_never_reported_is_forgotten_once_long_overdue() {
    let mut planner = Planner::new(PredictorKind::LatestSample, fast_link());
    planner.calibrate = false;
    let graph = one_mmul();
    // Graph 1 is placed alone and never reported while others run after it.
    place_one(&mut planner, &graph, 1, 1.0);
    let mut now = 3.0 + OVERDUE_SECONDS + 1.0;
    let ran = [outcome(0, 0.1, 2.9)];
    for id in 2..ninf_scheduling::templates::MIN_SAMPLES as u64 + 1 {
        place_one(&mut planner, &graph, id, now);
        planner.teach_template(id, 3.0, &ran);
        planner.finish(id, now + 3.0, &ran);
        now += 10.0;
    }
    // Its late report teaches nothing: it was forgotten, so one graph too few was taught.
    planner.teach_template(1, 3.0, &ran);
    planner.finish(1, now, &ran);
    assert_eq!(place_one(&mut planner, &graph, 100, now).1, None);
    planner.teach_template(100, 3.0, &ran);
    planner.finish(100, now + 3.0, &ran);
    assert_eq!(
        place_one(&mut planner, &graph, 101, now + 10.0).1,
        Some(3.0)
    );
}
