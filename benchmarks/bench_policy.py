"""Time one admission pass (``decide``) over a large synthetic cluster.

Run: ``python benchmarks/bench_policy.py [--passes N] [--seed S] [--json PATH] [--save]``.

Each scenario has 5,000 waiting SJs (mostly single pods, some gangs up to 16 pods, some interrupted,
some backing off, some pinned to a zone) and 500 nodes of 8 CPU / 32Gi. The table reports the
wall-clock time of a pass (min, median, p95 over the passes), the peak memory a pass allocates
(tracemalloc) and how many SJs it admits; ``--json``/``--save`` write them as data
(``benchmarks/harness/results.py``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's code, not the installed one's

from benchmarks.harness import results  # noqa: E402
from benchmarks.harness.stats import percentile  # noqa: E402
from sj_operator.api import Toleration  # noqa: E402
from sj_operator.policy.admission import PolicyConfig, decide  # noqa: E402
from sj_operator.policy.snapshot import ClusterSnapshot, InFlightRun, NodeView, QueuedSJ, Taint  # noqa: E402

DEDICATED = Toleration(key="dedicated", operator="Equal", value="batch", effect="NoSchedule")

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
GI = 2**30 * 1000
MI = 2**20 * 1000
CORE = 1000
NODES = 500
QUEUE = 5_000
ZONES = ("a", "b", "c")


@dataclass(frozen=True)
class Scenario:
    name: str
    used_fraction: float
    """Upper bound of the random share of each node already requested."""
    config: PolicyConfig
    starving_head: bool = False


def build_nodes(rng: random.Random, used_fraction: float) -> tuple[NodeView, ...]:
    nodes = []
    for i in range(NODES):
        share = rng.uniform(0, used_fraction)
        nodes.append(
            NodeView(
                name=f"node-{i:04d}",
                allocatable={"cpu": 8 * CORE, "memory": 32 * GI, "pods": 110 * 1000},
                requested={
                    "cpu": int(8 * CORE * share) // 250 * 250,
                    "memory": int(32 * GI * rng.uniform(0, used_fraction)) // (256 * MI) * (256 * MI),
                    "pods": rng.randint(0, 40) * 1000,
                },
                labels={"topology.kubernetes.io/zone": ZONES[i % len(ZONES)]},
                taints=(Taint("dedicated", "batch", "NoSchedule"),) if i % 50 == 0 else (),
                unschedulable=i % 97 == 0,
            )
        )
    return tuple(nodes)


def build_queue(rng: random.Random, starving_head: bool) -> tuple[QueuedSJ, ...]:
    queue = []
    for i in range(QUEUE):
        roll = rng.random()
        pods = 1 if roll < 0.8 else rng.choice((2, 3, 4)) if roll < 0.95 else rng.choice((8, 12, 16))
        interrupted = rng.randint(1, 12) if rng.random() < 0.1 else 0
        queue.append(
            QueuedSJ(
                key=f"team-{i % 20}/sj-{i:05d}",
                created=NOW - timedelta(seconds=rng.randint(0, 2 * 3600)),
                interrupted_count=interrupted,
                pods=pods,
                request={
                    "cpu": rng.choice((250, 500, 1000, 2000, 4000)),
                    "memory": rng.choice((512 * MI, 1 * GI, 2 * GI, 4 * GI, 8 * GI)),
                    "pods": 1000,
                },
                node_selector={"topology.kubernetes.io/zone": rng.choice(ZONES)} if rng.random() < 0.1 else {},
                tolerations=(DEDICATED,) if rng.random() < 0.05 else (),
                not_before=NOW + timedelta(minutes=5) if rng.random() < 0.05 else None,
            )
        )
    if starving_head:
        queue.append(
            QueuedSJ(
                key="team-0/huge-gang",
                created=NOW - timedelta(hours=3),
                interrupted_count=20,
                pods=64,
                request={"cpu": 6 * CORE, "memory": 16 * GI},
            )
        )
    return tuple(queue)


def build_snapshot(scenario: Scenario, seed: int) -> ClusterSnapshot:
    rng = random.Random(seed)
    nodes = build_nodes(rng, scenario.used_fraction)
    requested: dict[str, int] = {}
    for node in nodes:
        for name, amount in node.requested.items():
            requested[name] = requested.get(name, 0) + amount
    in_flight = tuple(
        InFlightRun(f"team-{i}/running-{i}", pods=4, request={"cpu": 1000, "memory": 2 * GI}, scheduled_pods=i % 4)
        for i in range(20)
    )
    return ClusterSnapshot(
        nodes=nodes,
        cluster_requested=requested,
        in_flight=in_flight,
        queue=build_queue(rng, scenario.starving_head),
    )


def measure(run: Callable[[], object], passes: int) -> tuple[list[float], int]:
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    tracemalloc.start()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return sorted(times), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    results.add_arguments(parser)
    args = parser.parse_args()
    scenarios = (
        Scenario("partly used, threshold 70%", 0.6, PolicyConfig()),
        Scenario("idle cluster, threshold 100%", 0.0, PolicyConfig(threshold=1.0)),
        Scenario("busy cluster, threshold 90%", 0.8, PolicyConfig(threshold=0.9)),
        Scenario("starving 64-pod head", 0.6, PolicyConfig(), starving_head=True),
    )
    print(f"decide(): {QUEUE} queued SJs, {NODES} nodes (8 CPU / 32Gi), {args.passes} passes each")
    header = f"{'scenario':<30} {'admitted':>8} {'min ms':>8} {'median':>8} {'p95':>8} {'peak MiB':>9}"
    print(header)
    print("-" * len(header))
    figures: list[dict[str, Any]] = []
    for scenario in scenarios:
        snapshot = build_snapshot(scenario, args.seed)
        admitted = len(decide(snapshot, NOW, scenario.config))
        times, peak = measure(partial(decide, snapshot, NOW, scenario.config), args.passes)
        p95 = percentile(times, 0.95)
        print(
            f"{scenario.name:<30} {admitted:>8} {times[0]:>8.1f} {statistics.median(times):>8.1f} "
            f"{p95:>8.1f} {peak / 2**20:>9.2f}"
        )
        figures += [results.figure(f"{scenario.name}: admitted", admitted),
                    results.figure(f"{scenario.name}: min", times[0], "ms"),
                    results.figure(f"{scenario.name}: median", statistics.median(times), "ms"),
                    results.figure(f"{scenario.name}: p95", p95, "ms"),
                    results.figure(f"{scenario.name}: peak", peak / 2**20, "MiB")]
    results.save(args, results.result("bench_policy", results.parameters(args, queued=QUEUE, nodes=NODES), figures))


if __name__ == "__main__":
    main()
