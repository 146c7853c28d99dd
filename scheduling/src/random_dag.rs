//! Random layered task graphs on a modelled platform, for comparing schedulers without
//! running anything (the benchmark of issue 5). A graph has `tasks` tasks in about √tasks
//! layers; each task after the first layer takes input from 1 to 3 tasks of earlier layers
//! (mostly the previous one). Computation is uniform over 0.5..1.5 Gflop; edge sizes are set
//! so that the mean transfer time over the mean server link is `ccr` times the mean
//! computation time on the mean server (the communication-to-computation ratio).

use std::collections::{BTreeSet, HashMap};

use crate::classic::ClassicPredictor;
use crate::graph::{Edge, Task, TaskGraph};
use crate::grid::{GridView, Link, Location, ServerView};
use crate::predictor::{LoadPredictor, Model, Predictor};
use crate::random::SplitMix;

/// A modelled grid: servers, their links, and what a scheduler's predictor says about them.
#[derive(Debug, Clone)]
pub struct Platform {
    pub grid: GridView,
    pub links: HashMap<(Location, Location), Link>,
    /// Mean server speed (flops per second per processor) and mean server-to-server
    /// throughput, from which graphs get their edge sizes.
    pub mean_speed: f64,
    pub mean_throughput: f64,
    /// The path of any pair of places `links` does not list.
    pub default_link: Link,
}

impl Platform {
    /// `servers` servers of 1 to 4 Gflop/s with 1 or 2 processors, all serving routine `f`;
    /// links between servers of 20 to 100 MB/s with 1-10 ms latency, and from the client's
    /// site (the proxy) of 5 to 20 MB/s with 10-30 ms.
    pub fn random(servers: usize, seed: u64) -> Platform {
        let mut random = SplitMix::new(seed);
        let views: Vec<ServerView> = (0..servers)
            .map(|i| ServerView {
                name: format!("s{i}"),
                flops_per_processor: 1e9 * (1.0 + 3.0 * random.uniform()),
                processors: 1 + random.below(0, 2) as u32,
                functions: BTreeSet::from(["f".to_string()]),
                up: true,
            })
            .collect();
        let mut links = HashMap::new();
        let mut sum = 0.0;
        let mut count = 0.0;
        for a in 0..servers {
            for b in 0..servers {
                if a < b {
                    let link = Link {
                        throughput: 1e6 * (20.0 + 80.0 * random.uniform()),
                        latency: 0.001 + 0.009 * random.uniform(),
                    };
                    sum += link.throughput;
                    count += 1.0;
                    links.insert((Location::Server(a), Location::Server(b)), link);
                }
            }
            let proxy = Link {
                throughput: 1e6 * (5.0 + 15.0 * random.uniform()),
                latency: 0.01 + 0.02 * random.uniform(),
            };
            links.insert((Location::Client, Location::Server(a)), proxy);
        }
        let mean_throughput = if count > 0.0 { sum / count } else { 5e7 };
        let mean_speed =
            views.iter().map(|s| s.flops_per_processor).sum::<f64>() / views.len().max(1) as f64;
        Platform {
            grid: GridView { servers: views },
            links,
            mean_speed,
            mean_throughput,
            default_link: Link {
                throughput: mean_throughput,
                latency: 0.005,
            },
        }
    }

    /// A fresh predictor (no load, no placements) for this platform, under the metaserver's
    /// model ([`Model::Shared`]).
    pub fn predictor(&self) -> LoadPredictor {
        LoadPredictor::new(
            &self.grid,
            vec![0.0; self.grid.servers.len()],
            self.links.clone(),
            self.default_link,
        )
    }

    /// A fresh predictor for this platform under the scheduling literature's model
    /// ([`Model::Exclusive`]).
    pub fn classic_predictor(&self) -> ClassicPredictor {
        ClassicPredictor::new(&self.grid, self.links.clone(), self.default_link)
    }

    /// A fresh predictor under `model`.
    pub fn predictor_for(&self, model: Model) -> Box<dyn Predictor> {
        match model {
            Model::Shared => Box::new(self.predictor()),
            Model::Exclusive => Box::new(self.classic_predictor()),
        }
    }
}

/// A layered graph of `tasks` tasks at communication-to-computation ratio `ccr`.
pub fn layered(tasks: usize, ccr: f64, platform: &Platform, seed: u64) -> TaskGraph {
    let mut random = SplitMix::new(seed);
    let layers = ((tasks as f64).sqrt().round() as usize).max(1);
    // Layer of each task: spread evenly, each layer at least one task.
    let layer_of: Vec<usize> = (0..tasks).map(|i| i * layers / tasks.max(1)).collect();
    let mean_flops = 1e9;
    let mean_bytes = (ccr * mean_flops / platform.mean_speed * platform.mean_throughput).max(1.0);
    let graph_tasks: Vec<Task> = (0..tasks)
        .map(|i| Task {
            label: format!("t{i}"),
            function: "f".into(),
            flops: mean_flops * (0.5 + random.uniform()),
            processors: 1,
            // The first layer's inputs and every result travel through the proxy; small, so
            // the graph's own edges carry the ratio.
            client_in_bytes: if layer_of[i] == 0 { 1_000 } else { 0 },
            client_out_bytes: if layer_of[i] + 1 == layers { 1_000 } else { 0 },
        })
        .collect();
    let mut edges = Vec::new();
    for i in 0..tasks {
        let layer = layer_of[i];
        if layer == 0 {
            continue;
        }
        let inputs = 1 + random.below(0, 3);
        let mut chosen = BTreeSet::new();
        for k in 0..inputs {
            // The first input from the previous layer, the others from any earlier one.
            let from_layer = if k == 0 {
                layer - 1
            } else {
                random.below(0, layer)
            };
            let first = layer_of.partition_point(|&l| l < from_layer);
            let end = layer_of.partition_point(|&l| l <= from_layer);
            chosen.insert(random.below(first, end));
        }
        for from in chosen {
            edges.push(Edge {
                from,
                to: i,
                bytes: (mean_bytes * (0.5 + random.uniform())) as u64,
            });
        }
    }
    TaskGraph {
        tasks: graph_tasks,
        edges,
        client_inputs: Vec::new(),
        resident_inputs: Vec::new(),
        pinned: Vec::new(),
        pinned_with: Vec::new(),
    }
}

/// The schedule length ratio's denominator: the longest path by each task's smallest
/// computation time on any server (no communication), a lower bound of any makespan.
pub fn critical_path_lower_bound(graph: &TaskGraph, grid: &GridView) -> f64 {
    let Ok(order) = graph.topological_order() else {
        return 0.0;
    };
    let fastest = grid
        .servers
        .iter()
        .filter(|s| s.up)
        .map(|s| s.flops_per_processor)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let predecessors = graph.predecessors();
    let mut longest = vec![0.0f64; graph.tasks.len()];
    for &t in &order {
        let before = predecessors[t]
            .iter()
            .map(|&(p, _)| longest[p])
            .fold(0.0, f64::max);
        longest[t] = before + graph.tasks[t].flops / fastest;
    }
    longest.into_iter().fold(0.0, f64::max)
}
