"""The schedulers against outside ones (issue 64): SAGA's HEFT and CPOP and ours (`ninf
dag-bench --graph`) on the same task graphs and platforms, under the model both share (one
task at a time per processor, links without contention, no latency).

Graphs: WfCommons instances (Montage, Epigenomics, Cycles) written as WfFormat JSON by the
`wfcommons` generators, and random layered graphs written in STG's format with
communication costs. Each graph gets its own platform of heterogeneous servers whose links
are scaled so that the mean transfer over the mean computation is the wanted CCR.

Checks that our `heft` finds SAGA's HEFT makespan once SAGA ranks as the HEFT paper does
(SAGA averages an edge's cost over every link including each server's to itself, which costs
nothing; the paper averages over the links between distinct servers) in our arithmetic,
equal ranks in our order (WfCommons' generators copy tasks with their runtimes, so ranks equal
or equal up to rounding are common): a difference is a bug.
Prints one JSON line per (graph, scheduler) and, at the end, a Markdown table.

    python dag_compare.py NINF_BINARY --out DIR [--families ...] [--sizes ...] [--ccr ...]
"""

import argparse
import collections
import json
import math
import pathlib
import random
import re
import statistics
import subprocess
import sys
import time
import logging

import numpy as np

logging.getLogger().setLevel(logging.ERROR)

import saga.schedulers.heft as saga_heft  # noqa: E402
from saga import Network, TaskGraph  # noqa: E402
from saga.schedulers import CpopScheduler, HeftScheduler  # noqa: E402

OURS = ["heft", "peft", "heft-lookahead", "search"]
THEIRS = ["saga-heft", "saga-cpop", "saga-heft-published"]


def published_ranks(tasks, edges, plat):
    """HEFT's upward rank as the paper defines it (an edge's mean cost over the links
    between distinct servers), in the same floating-point operations in the same order as
    `ninf dag-bench` (servers by index, successors in the file's order), so that tasks equal
    up to rounding are ordered alike on both sides."""
    speeds = [s["speed"] for s in plat["servers"]]
    n = len(speeds)
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    successors = {t: [] for t in tasks}
    for a, b, size in edges:
        successors[a].append((b, size))

    def mean(values):
        total = 0.0
        for v in values:
            total += v
        return total / len(values)

    def between(size):
        if not pairs or size == 0:
            return 0.0
        return mean([0.0 + size / plat["bandwidth"][a][b] for a, b in pairs])

    rank = {}
    position = wave_positions(tasks, edges)
    for t in sorted(tasks, key=position.get, reverse=True):
        tail = 0.0
        for j, size in successors[t]:
            tail = max(tail, between(size) + rank[j])
        rank[t] = mean([tasks[t] / s for s in speeds]) + tail
    return rank, position


def published_rank_sort(tasks, edges, plat):
    """HEFT's order with the paper's rank, equal ranks in wave order, as ours."""
    rank, position = published_ranks(tasks, edges, plat)
    order = sorted(tasks, key=lambda t: (-rank[t], position[t]))

    def sort(network, task_graph):
        names = {t.name for t in task_graph.tasks}
        first = [t for t in ["__super_source__"] if t in names]
        last = [t for t in ["__super_sink__"] if t in names]
        return first + order + last

    return sort


def saga_schedule(name, network, graph, published):
    original = saga_heft.heft_rank_sort
    try:
        if name == "saga-heft-published":
            saga_heft.heft_rank_sort = published
        scheduler = CpopScheduler() if name == "saga-cpop" else HeftScheduler()
        started = time.perf_counter()
        schedule = scheduler.schedule(network, graph)
        return schedule.makespan, (time.perf_counter() - started) * 1e3
    finally:
        saga_heft.heft_rank_sort = original


def wave_positions(tasks, edges):
    """Each task's place in the order `ninf dag-bench` breaks ties in: Kahn's algorithm
    with a first-in-first-out queue, the file's tasks and edges in the file's order."""
    indegree = {t: 0 for t in tasks}
    successors = {t: [] for t in tasks}
    for a, b, _ in edges:
        indegree[b] += 1
        successors[a].append(b)
    ready = collections.deque(t for t in tasks if indegree[t] == 0)
    order = []
    while ready:
        t = ready.popleft()
        order.append(t)
        for n in successors[t]:
            indegree[n] -= 1
            if indegree[n] == 0:
                ready.append(n)
    return {t: i for i, t in enumerate(order)}


# --- graphs -----------------------------------------------------------------------------


def wfcommons_graph(family, tasks, seed, path):
    from wfcommons import CyclesRecipe, EpigenomicsRecipe, MontageRecipe
    from wfcommons.wfgen import WorkflowGenerator

    recipe = {"montage": MontageRecipe, "epigenomics": EpigenomicsRecipe, "cycles": CyclesRecipe}[family]
    random.seed(seed)
    np.random.seed(seed % 2**32)
    workflow = WorkflowGenerator(recipe.from_num_tasks(tasks)).build_workflow()
    workflow.write_json(path)


def stg_graph(tasks, seed, path):
    """A random layered graph in STG's format with communication costs: about sqrt(n) layers,
    each task after the first layer fed by 1 to 3 tasks of earlier layers, whole costs."""
    rng = random.Random(seed)
    layers = max(1, round(math.sqrt(tasks)))
    layer_of = [i * layers // tasks for i in range(tasks)]
    preds = {i + 1: {} for i in range(tasks)}
    for i in range(tasks):
        layer = layer_of[i]
        if layer == 0:
            continue
        for k in range(rng.randint(1, 3)):
            from_layer = layer - 1 if k == 0 else rng.randrange(layer)
            choices = [j for j in range(tasks) if layer_of[j] == from_layer]
            preds[i + 1][rng.choice(choices) + 1] = rng.randint(1, 100)
    lines = [str(tasks), "0 0 0"]
    for t in range(1, tasks + 1):
        p = preds[t] or {0: 0}
        pairs = " ".join(f"{a} {c}" for a, c in sorted(p.items()))
        lines.append(f"{t} {rng.randint(1, 100)} {len(p)} {pairs}")
    has_child = {a for p in preds.values() for a in p}
    sinks = [t for t in range(1, tasks + 1) if t not in has_child]
    lines.append(f"{tasks + 1} 0 {len(sinks)} " + " ".join(f"{t} 0" for t in sinks))
    lines.append(f"# random layered graph, {tasks} tasks, seed {seed}")
    path.write_text("\n".join(lines) + "\n")


def read_graph(path):
    """(tasks {name: cost}, edges [(from, to, bytes)]) as `ninf dag-bench` reads the file."""
    text = path.read_text()
    if text.lstrip().startswith("{"):
        spec = json.loads(text)["workflow"]
        runtimes = {t["id"]: t["runtimeInSeconds"] for t in spec["execution"]["tasks"]}
        sizes = {f["id"]: f["sizeInBytes"] for f in spec["specification"]["files"]}
        by_id = {t["id"]: t for t in spec["specification"]["tasks"]}
        index = {t: i for i, t in enumerate(by_id)}
        tasks = {t: runtimes[t] for t in by_id}
        edges = []
        for t in by_id.values():
            for p in sorted(set(t.get("parents", [])), key=index.get):
                shared = set(by_id[p].get("outputFiles", [])) & set(t.get("inputFiles", []))
                edges.append((p, t["id"], sum(sizes[f] for f in shared)))
        return tasks, edges
    rows = [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    tasks, edges = {}, []
    for row in rows[1:]:
        t, cost, n = int(row[0]), float(row[1]), int(row[2])
        tasks[f"t{t}"] = cost
        rest = row[3:]
        step = 2 if len(rest) == 2 * n and n > 0 else 1
        for k in range(n):
            c = float(rest[k * step + 1]) if step == 2 else 0.0
            edges.append((f"t{rest[k * step]}", f"t{t}", c))
    return tasks, edges


def platform(tasks, edges, servers, ccr, seed):
    """Servers of speeds 1 to 4 and symmetric links of 0.5 to 1.5 times a bandwidth chosen
    so that mean transfer time / mean compute time = ccr (no latency: SAGA has none)."""
    rng = random.Random(seed)
    speeds = [1.0 + 3.0 * rng.random() for _ in range(servers)]
    mean_comp = statistics.mean(tasks.values()) / statistics.mean(speeds)
    sizes = [b for _, _, b in edges if b > 0]
    base = statistics.mean(sizes) / (ccr * mean_comp) if sizes and mean_comp > 0 else 1.0
    bandwidth = [[0.0] * servers for _ in range(servers)]
    for a in range(servers):
        for b in range(a + 1, servers):
            bandwidth[a][b] = bandwidth[b][a] = base * (0.5 + rng.random())
    return {
        "servers": [{"name": f"s{i}", "speed": s} for i, s in enumerate(speeds)],
        "bandwidth": bandwidth,
    }


def lower_bound(tasks, edges, plat):
    """No schedule is shorter: the longest path at the fastest speed with free transfers,
    and all the work spread over every server's speed."""
    speeds = [s["speed"] for s in plat["servers"]]
    preds = collections.defaultdict(list)
    for a, b, _ in edges:
        preds[b].append(a)
    position = wave_positions(tasks, edges)
    longest = {}
    for t in sorted(tasks, key=position.get):
        longest[t] = max((longest[p] for p in preds[t]), default=0.0) + tasks[t] / max(speeds)
    return max(max(longest.values()), sum(tasks.values()) / sum(speeds))


def saga_instance(tasks, edges, plat):
    names = [s["name"] for s in plat["servers"]]
    nodes = [(s["name"], s["speed"]) for s in plat["servers"]]
    links = [
        (names[a], names[b], plat["bandwidth"][a][b])
        for a in range(len(names))
        for b in range(a + 1, len(names))
    ]
    network = Network.create(nodes=nodes, edges=links)
    graph = TaskGraph.create(tasks=list(tasks.items()), dependencies=edges)
    return network, graph


# --- the run ------------------------------------------------------------------------------


def instances(args, out):
    """(family, file) for every graph, generated once."""
    for family in args.families:
        for size in args.sizes:
            for i in range(args.instances):
                seed = args.seed * 1_000_003 + size * 101 + i
                if family == "stg":
                    path = out / f"stg-{size}-{i}.stg"
                    stg_graph(size, seed, path)
                else:
                    path = out / f"{family}-{size}-{i}.json"
                    try:
                        wfcommons_graph(family, size, seed, path)
                    except ValueError as e:
                        # Below a recipe's smallest graph: that graph's size instead.
                        least = re.search(r"base graph with (\d+) nodes", str(e))
                        if not least:
                            raise
                        print(f"# {family}: {size} tasks is below the recipe's {least[1]}", file=sys.stderr)
                        wfcommons_graph(family, int(least[1]), seed, path)
                yield family, path


def ours(ninf, graph, plat_path):
    out = subprocess.run(
        [ninf, "dag-bench", "--graph", str(graph), "--platform", str(plat_path),
         "--schedulers", ",".join(OURS), "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def run(args):
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for family, path in instances(args, out):
        tasks, edges = read_graph(path)
        for ccr in args.ccr:
            seed = hash((path.name, ccr)) % 2**31
            plat = platform(tasks, edges, args.servers, ccr, seed)
            plat_path = out / f"{path.stem}-ccr{ccr}.platform.json"
            plat_path.write_text(json.dumps(plat))
            network, graph = saga_instance(tasks, edges, plat)
            published = published_rank_sort(tasks, edges, plat)
            base = {"family": family, "graph": path.name, "tasks": len(tasks), "ccr": ccr}
            for name in THEIRS:
                makespan, ms = saga_schedule(name, network, graph, published)
                rows.append({**base, "scheduler": name, "makespan": makespan, "schedule_ms": ms})
            rows.append({**base, "scheduler": "bound", "makespan": lower_bound(tasks, edges, plat),
                         "schedule_ms": 0.0})
            for r in ours(args.ninf, path, plat_path):
                rows.append({**base, "scheduler": r["scheduler"], "makespan": r["makespan"],
                             "schedule_ms": r["schedule_ms"]})
    for r in rows:
        print(json.dumps(r))
    return rows


def grouped(rows):
    by = {}
    for r in rows:
        by.setdefault((r["family"], r["ccr"], r["graph"]), {})[r["scheduler"]] = r
    return by


def heft_mismatches(rows):
    bad = []
    for key, s in grouped(rows).items():
        theirs, mine = s["saga-heft-published"]["makespan"], s["heft"]["makespan"]
        if abs(theirs - mine) > 1e-6 * max(1.0, abs(theirs)):
            bad.append((key, theirs, mine))
    return bad


def targets(rows):
    """Issue 64's targets, as lines: search over PEFT per family, search over the best of
    SAGA's on graphs of 100 tasks or fewer, the slowest search by size."""
    lines = []
    families = collections.defaultdict(list)
    worst = (0.0, None)
    slowest = collections.defaultdict(float)
    for (family, ccr, graph), s in grouped(rows).items():
        families[family].append(s["search"]["makespan"] / s["peft"]["makespan"])
        families[family + " (bound)"].append(s["bound"]["makespan"] / s["peft"]["makespan"])
        best = min(s[n]["makespan"] for n in THEIRS[:2])
        if s["search"]["tasks"] <= 100:
            worst = max(worst, (s["search"]["makespan"] / best, f"{graph} at CCR {ccr:g}"))
        slowest[s["search"]["tasks"] // 100 * 100] = max(
            slowest[s["search"]["tasks"] // 100 * 100], s["search"]["schedule_ms"])
    for family in sorted(f for f in families if not f.endswith("(bound)")):
        lines.append(f"# search / peft, mean over {family}: {statistics.mean(families[family]):.3f} "
                     f"(the lower bound / peft: {statistics.mean(families[family + ' (bound)']):.3f})")
    lines.append(f"# worst search / best of SAGA's on graphs of <= 100 tasks: {worst[0]:.3f} ({worst[1]})")
    for size in sorted(slowest):
        lines.append(f"# slowest search at {size}-{size + 99} tasks: {slowest[size]:.0f} ms")
    return "\n".join(lines)


def table(rows):
    names = ["bound"] + THEIRS[1:] + OURS
    header = "| family | CCR | graphs | " + " | ".join(names) + " | search ≤ best SAGA | search ms (max) |"
    lines = [header, "|" + "---|" * (len(names) + 5)]
    cells = {}
    for (family, ccr, _), s in sorted(grouped(rows).items(), key=lambda kv: (kv[0][0], kv[0][1])):
        cells.setdefault((family, ccr), []).append(s)
    for (family, ccr), graphs in cells.items():
        ratio = lambda n: statistics.mean(g[n]["makespan"] / g["saga-heft"]["makespan"] for g in graphs)
        wins = sum(
            g["search"]["makespan"] <= min(g[n]["makespan"] for n in THEIRS[:2]) * (1 + 1e-9)
            for g in graphs
        )
        slowest = max(g["search"]["schedule_ms"] for g in graphs)
        lines.append(
            f"| {family} | {ccr:g} | {len(graphs)} | "
            + " | ".join(f"{ratio(n):.3f}" for n in names)
            + f" | {wins}/{len(graphs)} | {slowest:.0f} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ninf", help="the ninf binary")
    parser.add_argument("--out", required=True, help="directory for the graphs and platforms")
    parser.add_argument("--families", type=lambda s: s.split(","), default=["montage", "epigenomics", "cycles", "stg"])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[50, 100, 200, 500, 1000])
    parser.add_argument("--ccr", type=lambda s: [float(x) for x in s.split(",")], default=[0.1, 1.0, 10.0])
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--table", help="also write the Markdown table to this file")
    args = parser.parse_args()
    rows = run(args)
    text = table(rows) + "\n\n" + targets(rows)
    print(text)
    if args.table:
        pathlib.Path(args.table).write_text(text + "\n")
    bad = heft_mismatches(rows)
    for (family, ccr, graph), theirs, mine in bad:
        print(f"heft differs from SAGA's HEFT ranked as published: {graph} at CCR {ccr:g}: "
              f"SAGA {theirs!r}, ours {mine!r}", file=sys.stderr)
    graphs = len(grouped(rows))
    print(f"# heft = SAGA's HEFT (published ranks) on {graphs - len(bad)} of {graphs} graphs", file=sys.stderr)
    sys.exit(1 if bad or graphs == 0 else 0)


if __name__ == "__main__":
    main()
