"""Time one steady-state pass of the decision loop (``Controller.reconcile``) at scale.

Run: ``python benchmarks/bench_loop.py [--waiting N] [--running N] [--nodes N] [--passes N] [--scale]``
(``--scale``: 100,000 waiting and 10,000 running SJs on 10,000 nodes, ``SCALE_SIZE``).

A simulated API takes the operator's writes and feeds them back into the next pass's view (statuses
patched, Jobs created, their pods Running on the nodes the pure placement would pick), so the cluster
settles exactly as the operator itself leaves it: ``--running`` SJs running and ``--waiting`` SJs
queued behind a full threshold. Once a pass writes nothing, the passes timed are steady-state ones:
what the operator spends on every watch event at that size. Three kinds of pass are timed, the clock
one second further each time: nothing changed; one waiting SJ's object replaced; a pod of another
workload landed on a node (its node's sums move, so the admission is decided again). The first pass of each
kind is not timed: it does what that kind does once (the first pod landed after a settling longer than
``explain.WHY_REFRESH``, as at ``--scale``, refreshes every waiting SJ's numbers). Printed: median, p95 and
max of each, and the API calls the timed passes made (none is expected). Then one pass that is not
steady: the clock moves on by a checkpoint period, so every running SJ's protection changes at once (and
every waiting SJ's reason may be written again); printed with the longest stretch it held the event loop.

The garbage collector is set as the operator sets it (``pacing.tune_gc``, no automatic collection during a
pass: ``pacing.collector_paused``); ``--collect-during-passes`` lets it run during passes too, for
comparison. The collections made and their time are printed for the settling and for all timed passes.

``--memory`` measures instead what the loop keeps (``tracemalloc``, which slows everything, so nothing is timed):
the bytes the controller holds per SJ once the cluster has settled and three more passes have run (its caches,
parsed specs and statuses, decisions), beyond the view's own objects, and the source lines that allocated
the most of it.

``--json PATH`` and ``--save`` write the result as data (``benchmarks/harness/results.py``), with the goals
beside the medians (``GOALS_MS``: at the default size and at ``--scale``'s; none at another size): a quiet pass,
a pass after one SJ changed, and an admission pass (another workload's pod landed, so the admission is
decided again), and at most ``MEMORY_GOAL_BYTES`` kept per SJ with ``--memory``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's code, not the installed one's

from benchmarks.harness import results  # noqa: E402
from sj_operator.api import format_duration  # noqa: E402
from sj_operator.config import OperatorConfig  # noqa: E402
from sj_operator.controller import Controller  # noqa: E402
from sj_operator.decide import ClusterView  # noqa: E402
from sj_operator.kube import EventRef  # noqa: E402
from sj_operator.names import LABEL_PROTECTED  # noqa: E402
from sj_operator.observed import JobView, NodeInfo, PodView, SJObject, job_view, pod_view  # noqa: E402
from sj_operator.pacing import collector_paused, tune_gc, watch_gc, watch_lag  # noqa: E402

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
SJ_DURATION = timedelta(minutes=30)
"""Each SJ's checkpoint period."""
CORE = 1000
DEFAULT_SIZE = {"waiting": 10_000, "running": 1_000, "nodes": 1_000}
"""The flags' defaults."""
SCALE_SIZE = {"waiting": 100_000, "running": 10_000, "nodes": 10_000}
"""``--scale``: ten times the SJs and nodes."""
QUIET_PASS_GOAL_MS = 5
"""The project's goal for a steady-state pass with nothing changed (median), at the default size."""
GOALS_MS: dict[str, dict[str, float]] = {
    "default": {"quiet": QUIET_PASS_GOAL_MS, "one SJ": 10, "admission": 50},
    "scale": {"quiet": 10, "admission": 500},
}
"""The medians' goals (milliseconds) by size: a quiet pass, a pass after one waiting SJ changed, an admission
pass (another workload's pod landed); a kind missing has no goal at that size."""
MEMORY_GOAL_BYTES = 4096
"""What the controller may keep per SJ (``--memory``), at any size."""
STACK_FRAMES = 8
"""Frames kept per allocation with ``--memory``: enough to find the code of this checkout that made it."""


class SimulatedAPI:
    """The calls the controller makes, applied to an in-memory cluster."""

    def __init__(self) -> None:
        self.sjs: dict[tuple[str, str], SJObject] = {}
        self.jobs: dict[tuple[str, str], JobView] = {}
        self.pods: dict[tuple[str, str], tuple[PodView, ...]] = {}
        self.rv = 1000
        self.calls = 0
        self.free_node = 0
        self.nodes: list[NodeInfo] = []
        self.running = self.waiting = 0
        self.others: list[PodView] = []

    async def _call(self) -> None:
        """Counts a call; like a real one (which waits for the API server) it gives the loop a turn."""
        self.calls += 1
        await asyncio.sleep(0)

    async def patch_sj_status(self, namespace: str, name: str, status: dict[str, Any], rv: str | None) -> Any:
        await self._call()
        sj = self.sjs[(namespace, name)]
        # What the API server stores and the watch brings back is parsed anew from JSON: none of the patch's
        # objects (made by the controller) is kept by the view.
        merged = {k: v for k, v in {**sj.status, **json.loads(json.dumps(status))}.items() if v is not None}
        self.rv += 1
        self.sjs[(namespace, name)] = SJObject(namespace=namespace, name=name, uid=sj.uid, generation=sj.generation,
                                               resource_version=str(self.rv), created=sj.created, deleting=False,
                                               spec=sj.spec, status=merged)
        return {"metadata": {"resourceVersion": str(self.rv)}, "status": merged}

    async def create_child(self, body: dict[str, Any], owner_uid: str) -> dict[str, Any] | None:
        """Makes an SJ's object; a run's Job shows at once in the view, with a running pod."""
        if body["kind"] == "Job":
            await self._create_job(body)
        else:
            await self._call()
        return None

    async def _create_job(self, job: dict[str, Any]) -> None:
        await self._call()
        meta = job["metadata"]
        key = (meta["namespace"], meta["name"])
        self.jobs[key] = job_view({"metadata": {**meta, "uid": f"job-{meta['name']}",
                                                "creationTimestamp": "2026-11-23T12:00:00Z"}, "status": {"active": 1}})
        node = self.nodes[self.free_node % len(self.nodes)].name  # spread as evenly as the placement
        self.free_node += 1
        template = job["spec"]["template"]
        self.pods[key] = (pod_view({
            "metadata": {"namespace": meta["namespace"], "name": f"{meta['name']}-0", "uid": f"pod-{meta['name']}",
                         "labels": template["metadata"]["labels"]},
            "spec": {"nodeName": node, "containers": template["spec"]["containers"],
                     "priorityClassName": template["spec"]["priorityClassName"]},
            "status": {"phase": "Running", "startTime": "2026-11-23T12:00:01Z",
                       "containerStatuses": [{"name": "main", "state": {"running": {}}}]}}),)

    async def dry_run_pod(self, pod: dict[str, Any]) -> None:
        await self._call()

    async def resource_quotas(self, namespace: str) -> list[Any]:
        await self._call()
        return []

    async def event(self, **kw: Any) -> EventRef:
        await self._call()
        return EventRef(f"{kw.get('name')}.{self.calls:x}", f"event-{self.calls:x}")

    async def update_event(self, *_: Any, **__: Any) -> bool:
        await self._call()
        return True

    async def label_pod(self, namespace: str, name: str, labels: dict[str, str]) -> None:
        """The protection label on a run's pod (named ``<run>-<index>``), as the pod watch then shows it."""
        await self._call()
        key = (namespace, name.rsplit("-", 1)[0])
        if (protected := labels.get(LABEL_PROTECTED)) is not None and key in self.pods:
            self.pods[key] = tuple(replace(p, protected=protected == "true") if p.name == name else p
                                   for p in self.pods[key])

    async def delete_child(self, *_: Any) -> bool:
        await self._call()
        return True

    async def delete_owned(self, *_: Any) -> bool:
        await self._call()
        return True

    async def exists(self, *_: Any) -> bool:
        await self._call()
        return True

    def view(self) -> ClusterView:
        active = (*(p for pods in self.pods.values() for p in pods), *self.others)
        return ClusterView(sjs=tuple(self.sjs.values()), jobs=dict(self.jobs), run_pods=dict(self.pods),
                           active_pods=active, nodes=tuple(self.nodes))


def cluster(waiting: int, running: int, nodes: int, distinct: bool = False) -> SimulatedAPI:
    """``distinct``: no two SJs alike (each its own argument, and queued at its own second), so none shares a
    parsed spec or status with another; else the SJs are made from one template and queued together."""
    api = SimulatedAPI()
    api.running, api.waiting = running, waiting
    # Nodes sized so that `running` one-CPU SJs take the 70 % threshold, and the rest wait behind it.
    cpu = -(-running * CORE * 10 // (7 * nodes))
    api.nodes = [NodeInfo(name=f"node-{i:04d}", allocatable={"cpu": cpu, "memory": 256 * 2**30 * 1000,
                                                              "pods": 110_000},
                          labels={}, taints=(), unschedulable=False, ready=True) for i in range(nodes)]
    for i in range(running + waiting):
        name = f"sj-{i:05d}"
        spec: dict[str, Any] = {"image": "busybox", "duration": format_duration(SJ_DURATION),
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
        status: dict[str, Any] = {}
        if distinct:
            spec["args"] = [f"--part={i}"]
            status = {"phase": "Pending", "conditions": [{
                "type": "Queued", "status": "True", "reason": "Queued", "message": "waiting for idle capacity",
                "lastTransitionTime": (NOW - timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")}]}
        api.sjs[("bench", name)] = SJObject(
            namespace="bench", name=name, uid=f"uid-{i}", generation=1, resource_version="1",
            created=NOW.replace(second=i % 60), deleting=False, status=status, spec=spec)
    return api


class Collections:
    """The garbage collector's collections from now on: how many, and their seconds in all."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.stop = watch_gc(self._seen)

    def _seen(self, generation: int, seconds: float, collected: int) -> None:
        self.count += 1
        self.seconds += seconds

    def take(self) -> str:
        """What was counted since the last take, and starts counting again."""
        taken = f"{self.count} collections, {self.seconds * 1000:.0f} ms in all"
        self.count, self.seconds = 0, 0.0
        return taken


async def reconcile(controller: Controller, view: ClusterView, paused: bool) -> None:
    """One pass as the operator's loop makes it: with the collector ``paused`` (not with
    ``--collect-during-passes``)."""
    with collector_paused() if paused else contextlib.nullcontext():
        await controller.reconcile(view)


async def settle(controller: Controller, api: SimulatedAPI, paused: bool, limit: int = 50) -> int:
    for passes in range(1, limit + 1):
        before = api.calls
        await reconcile(controller, api.view(), paused)
        await controller.settle()  # steering's writes and Events, in the background
        if api.calls == before:
            return passes
    raise RuntimeError(f"the cluster did not settle in {limit} passes")


def spread(times: list[float]) -> tuple[float, float, float]:
    """Median, p95 and max."""
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.95))], times[-1]


def summary(times: list[float]) -> str:
    median, p95, most = spread(times)
    return f"median {median:.0f} ms, p95 {p95:.0f} ms, max {most:.0f} ms"


def touch_sj(api: SimulatedAPI, i: int) -> None:
    """A waiting SJ's object is replaced (a label edit, say): a new version with the same spec and status."""
    waiting = [sj for sj in api.sjs.values() if sj.status.get("phase") != "Running"]
    sj = waiting[i % len(waiting)]
    api.rv += 1
    api.sjs[(sj.namespace, sj.name)] = replace(sj, resource_version=str(api.rv))


def other_pod(api: SimulatedAPI, i: int) -> None:
    """A pod of another workload lands on a node: the node's requests move, so the admission is decided
    again."""
    api.others.append(pod_view({
        "metadata": {"namespace": "other", "name": f"other-{i}", "uid": f"other-{i}"},
        "spec": {"nodeName": api.nodes[i % len(api.nodes)].name,
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "10m"}}}]},
        "status": {"phase": "Running"}}))


def goals_for(args: argparse.Namespace) -> dict[str, float]:
    """The goals of the medians at the size ``args`` asks for (none at a size without goals)."""
    for size, goals in (("default", DEFAULT_SIZE), ("scale", SCALE_SIZE)):
        if all(getattr(args, k) == v for k, v in goals.items()):
            return GOALS_MS[size]
    return {}


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Times the passes and prints them; the figures."""
    figures: list[dict[str, Any]] = []
    paused = not args.collect_during_passes
    goals = goals_for(args)
    tune_gc()
    api = cluster(args.waiting, args.running, args.nodes, args.distinct)
    clock = [NOW]
    controller = Controller(api, OperatorConfig(), clock=lambda: clock[0])  # type: ignore[arg-type]
    collections = Collections()
    started = time.perf_counter()
    passes = await settle(controller, api, paused)
    running = sum(1 for sj in api.sjs.values() if sj.status.get("phase") == "Running")
    print(f"settled in {passes} passes ({time.perf_counter() - started:.1f}s): {running} running, "
          f"{len(api.sjs) - running} waiting, {len(api.nodes)} nodes; the garbage collector: {collections.take()} "
          f"({'collector paused during passes' if paused else 'collecting during passes'})", flush=True)
    scenarios: list[tuple[str, Callable[[int], None], float | None]] = [
        ("steady-state pass (nothing changed)", lambda i: None, goals.get("quiet")),
        ("pass after one waiting SJ changed", lambda i: touch_sj(api, i), goals.get("one SJ")),
        ("pass after another workload's pod landed (admission decided again)", lambda i: other_pod(api, i),
         goals.get("admission")),
    ]
    timed_calls = 0
    for what, change, most_ms in scenarios:
        times = []
        for i in range(-1, args.passes):  # the first of each kind is not timed
            change(i if i >= 0 else args.passes)
            view = api.view()
            clock[0] += timedelta(seconds=1)  # passes come one after another, as watch events arrive
            before, t0 = api.calls, time.perf_counter()
            await reconcile(controller, view, paused)
            if i >= 0:
                times.append((time.perf_counter() - t0) * 1000)
                timed_calls += api.calls - before
            await controller.settle()
        print(f"{what} over {len(api.sjs)} SJs and {len(api.nodes)} nodes, {args.passes} passes: {summary(times)}",
              flush=True)
        median, p95, most = spread(times)
        figures += [results.figure(f"{what}: median", median, "ms", None if most_ms is None else {"max": most_ms}),
                    results.figure(f"{what}: p95", p95, "ms"), results.figure(f"{what}: max", most, "ms")]
    figures.append(results.figure("API calls during the timed passes", timed_calls, "", {"max": 0}))
    print(f"API calls during the timed passes: {timed_calls} (none is expected); the garbage collector: "
          f"{collections.take()}")
    # Not steady: every running SJ's checkpoint period ends at once (they all started together), so one
    # pass decides a new period for each of them; most writes go to the background lane, whose simulated
    # calls run whenever the pass awaits, so they count in its time.
    clock[0] += SJ_DURATION
    view = api.view()
    calls = api.calls
    holds: list[float] = []  # how late a task sleeping 1 ms woke: how long the pass held the loop at a stretch
    watcher = asyncio.create_task(watch_lag(holds.append, period=0.001))
    await asyncio.sleep(0.01)
    holds.clear()
    t0 = time.perf_counter()
    await reconcile(controller, view, paused)
    took = (time.perf_counter() - t0) * 1000
    watcher.cancel()
    await controller.settle()
    print(f"pass after every running SJ's checkpoint period ended at once ({api.running} SJs): {took:.0f} ms until "
          f"it returned (the background lane's simulated calls included); {api.calls - calls} API calls; "
          f"the loop held at most {max(holds, default=0) * 1000:.0f} ms at a stretch meanwhile; the garbage collector: "
          f"{collections.take()}")
    collections.stop()
    figures += [results.figure("pass after every running SJ's checkpoint period ended at once", took, "ms"),
                results.figure("its API calls", api.calls - calls),
                results.figure("the loop held at most, meanwhile", max(holds, default=0) * 1000, "ms")]
    return figures


async def memory(args: argparse.Namespace, top: int = 30) -> list[dict[str, Any]]:
    """What the controller keeps per SJ after settling (``--memory``)."""
    api = cluster(args.waiting, args.running, args.nodes, args.distinct)
    clock = [NOW]
    gc.collect()
    tracemalloc.start(STACK_FRAMES)
    before = tracemalloc.take_snapshot()
    controller = Controller(api, OperatorConfig(), clock=lambda: clock[0])  # type: ignore[arg-type]
    await settle(controller, api, paused=True)
    for _ in range(3):
        clock[0] += timedelta(seconds=1)
        await reconcile(controller, api.view(), paused=True)
        await controller.settle()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    sjs = len(api.sjs)
    # The simulated API's own objects (the SJs' new versions and the statuses it stores, parsed anew as a watch
    # brings them) are not the controller's: an allocation is the code's of this checkout nearest to it.
    by_line: dict[tuple[str, int], int] = {}
    for d in after.compare_to(before, "traceback"):
        nearest = next((f for f in reversed(d.traceback) if f.filename.startswith(str(REPO))), d.traceback[-1])
        if nearest.filename.endswith("bench_loop.py"):
            continue
        line = (d.traceback[-1].filename, d.traceback[-1].lineno)
        by_line[line] = by_line.get(line, 0) + d.size_diff
    mine = sorted(by_line.items(), key=lambda item: -item[1])
    kept = sum(size for _, size in mine)
    print(f"the controller keeps {kept / sjs:.0f} bytes per SJ ({kept / 2**20:.1f} MiB for {sjs} SJs: "
          f"{args.running} running, {args.waiting} waiting, {len(api.nodes)} nodes); the most by source line:")
    for (filename, lineno), size in mine[:top]:
        print(f"  {size / sjs:6.0f} B/SJ  {filename.rsplit('site-packages/', 1)[-1]}:{lineno}")
    return [results.figure("bytes the controller keeps per SJ", kept / sjs, "B", {"max": MEMORY_GOAL_BYTES}),
            results.figure("bytes the controller keeps in all", kept, "B")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int)
    parser.add_argument("--running", type=int)
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--scale", action="store_true",
                        help="SCALE_SIZE's SJs and nodes (100,000 waiting, 10,000 running, 10,000 nodes) unless "
                             "--waiting, --running or --nodes say otherwise")
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--collect-during-passes", action="store_true",
                        help="let the garbage collector run during passes (the operator pauses it)")
    parser.add_argument("--memory", action="store_true",
                        help="measure what the controller keeps per SJ instead of timing passes")
    parser.add_argument("--distinct", action="store_true",
                        help="no two SJs alike (else one template, queued in the same second): none shares a "
                             "parsed spec or status")
    results.add_arguments(parser)
    arguments = parser.parse_args()
    for name, value in (SCALE_SIZE if arguments.scale else DEFAULT_SIZE).items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, value)
    figures = asyncio.run(memory(arguments) if arguments.memory else main(arguments))
    results.save(arguments, results.result("bench_loop", results.parameters(arguments), figures))
