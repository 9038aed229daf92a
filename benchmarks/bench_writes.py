"""What one write costs the operator's process: a run's Job made through `Kube.create_child` (on the event loop,
`Kube._send`) against the same Job made through the kubernetes client in a worker thread (`Kube._call`, as
every write went before), against the cluster in ``KUBECONFIG``.

Run: ``KUBECONFIG=... python benchmarks/bench_writes.py [--jobs N] [--at-once N] [--rounds N] [--json PATH]
[--save]`` (about a minute at the defaults on the local cluster).

Each round makes ``--jobs`` suspended Jobs (nothing runs: no pod is made) in a namespace of its own, at most
``--at-once`` at a time, first one way and then the other, and prints the CPU time of this process per
Job (``time.process_time``: the event loop's thread and the client's worker threads together) and the
Jobs made per second. A few Jobs are made each way before the clock starts (connections opened, the
client's models loaded). The namespaces are deleted at the end. ``--json``/``--save`` write the medians as data
(``benchmarks/harness/results.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402

from benchmarks.harness import results  # noqa: E402
from benchmarks.harness.kube import claimed  # noqa: E402
from sj_operator.kube import Kube, _unread  # noqa: E402

WARM = 20


def suspended_job(namespace: str, name: str) -> dict[str, Any]:
    """A Job of the size of a one-pod run, suspended: the Job controller makes no pod for it."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {"bench.scavenger.dev/writes": "1"}},
            "spec": {"suspend": True, "backoffLimit": 0, "template": {
                "metadata": {"labels": {"bench.scavenger.dev/writes": "1"}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                         "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "60"],
                                         "env": [{"name": f"SJ_{i}", "value": str(i)} for i in range(6)],
                                         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}


async def timed(make: Callable[[dict[str, Any]], Awaitable[None]], namespace: str, prefix: str, jobs: int,
                at_once: int) -> tuple[float, float]:
    """CPU seconds per Job and Jobs per second for ``jobs`` Jobs made by ``make``, ``at_once`` at a time."""
    gate = asyncio.Semaphore(at_once)

    async def one(i: int) -> None:
        async with gate:
            await make(suspended_job(namespace, f"{prefix}-{i:05d}"))

    await asyncio.gather(*(one(i) for i in range(WARM)))
    cpu, start = time.process_time(), time.monotonic()
    await asyncio.gather(*(one(i) for i in range(WARM, WARM + jobs)))
    return (time.process_time() - cpu) / jobs, jobs / (time.monotonic() - start)


async def _made(creating: Awaitable[Any]) -> None:
    await creating


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=600, help="Jobs made each way per round")
    parser.add_argument("--at-once", type=int, default=24, help="Jobs in flight at a time (the launch workers)")
    parser.add_argument("--rounds", type=int, default=3)
    results.add_arguments(parser)
    args = parser.parse_args()
    config.load_kube_config()
    kube = Kube()
    namespaces: list[str] = []
    figures: dict[str, list[tuple[float, float]]] = {"on the loop (Kube._send)": [], "the client in a thread": []}
    ways: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
        "on the loop (Kube._send)": lambda job: _made(kube.create_child({**job, "kind": "Job"}, "bench")),
        "the client in a thread": lambda job: kube._call(_unread(kube.batch.create_namespaced_job),
                                                         job["metadata"]["namespace"], job),
    }
    with claimed(client.ApiClient(), "bench_writes"):
        try:
            for r in range(args.rounds):
                namespace = f"bench-writes-{uuid.uuid4().hex[:6]}"
                await kube._call(kube.core.create_namespace, {"metadata": {"name": namespace}})
                namespaces.append(namespace)
                for n, (way, make) in enumerate(ways.items()):
                    cpu, rate = await timed(make, namespace, f"w{n}", args.jobs, args.at_once)
                    figures[way].append((cpu, rate))
                    print(f"round {r + 1}/{args.rounds}: {args.jobs} Jobs {way}: {cpu * 1000:.2f} ms of CPU each, "
                          f"{rate:.0f}/s", flush=True)
            print(f"\nmedian of {args.rounds} rounds, {args.jobs} Jobs each, {args.at_once} at a time:")
            medians: list[dict[str, Any]] = []
            for way, runs in figures.items():
                print(f"  {way:<26} {statistics.median(c for c, _ in runs) * 1000:.2f} ms of CPU per Job, "
                      f"{statistics.median(r for _, r in runs):.0f} Jobs/s")
                medians += [results.figure(f"{way}: CPU per Job", statistics.median(c for c, _ in runs) * 1000, "ms"),
                            results.figure(f"{way}: Jobs per second", statistics.median(r for _, r in runs), "/s")]
            results.save(args, results.result("bench_writes", results.parameters(args), medians))
        finally:
            for namespace in namespaces:
                await kube._call(kube.core.delete_namespace, namespace)
            await kube.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
