"""What one watch event costs the operator's process, and what collecting the garbage it leaves costs.

Run: ``python benchmarks/bench_events.py [--pods N] [--json PATH] [--save]`` (about half a minute).

A pod's, a run's Job's or an SJ's watch event goes to the operator's own watch caches
(``sj_operator.caches``: its line decoded, a slim view made and indexed); the other kinds' (the nodes, the
quotas) go through kopf's processing (``process_resource_event``) with the operator's handlers registered
(``sj_operator.handlers``: the indexes, the diff base that builds nothing). kopf wraps each event's object
in a ``Body`` whose ``meta``/``spec``/``status`` views point back at it, and makes a ``Patch`` whose views
do the same: reference cycles, so that object and everything it holds (the parsed JSON of the node) is
freed only by the garbage collector, not by reference counting. Printed:

* the watch caches' CPU per pod, Job and SJ event, from the stream's line to the indexed view, and kopf's
  per node event (modified events of objects seen before, the common case), and the cyclic garbage one kopf
  event leaves (objects, by type);
* the CPU that young collections spend on that garbage per event, by how many events a collection
  gathers: a young collection walks every object allocated since the last one, and walking cold memory
  costs more per object, so the operator's collector thresholds (``pacing.GC_THRESHOLDS``) and its pause
  during a pass (``pacing.collector_paused``: every event handled in the pass's turns waits for the
  collection after it) decide what these events cost.

The events are run with the collector paused and collected explicitly, so each figure is the collections
it names. CPU time (``time.process_time``), this process only. ``--json``/``--save`` write the figures as data
(``benchmarks/harness/results.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import gc
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's code, not the installed one's

import kopf  # noqa: E402
from kopf._cogs.structs import references  # noqa: E402
from kopf._core.engines import indexing  # noqa: E402
from kopf._core.reactor import inventory, processing  # noqa: E402

from benchmarks.harness import results  # noqa: E402
from sj_operator import handlers  # noqa: E402
from sj_operator.caches import JOBS_PATH, SJS_PATH, ObjectCache, PodCache, WatchCache  # noqa: E402
from sj_operator.observed import job_view, sj_object  # noqa: E402

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "sj-a-r1-x", "namespace": "team", "uid": "pod-1", "resourceVersion": "7",
                 "labels": {"scavenger.dev/job-name": "sj-a", "scavenger.dev/run": "sj-a-r1",
                            "batch.kubernetes.io/job-name": "sj-a-r1"},
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "sj-a-r1", "uid": "job-1",
                                      "controller": True, "blockOwnerDeletion": True}],
                 "finalizers": ["batch.kubernetes.io/job-tracking"]},
    "spec": {"nodeName": "node-1", "priorityClassName": "scavenger-band-0", "restartPolicy": "Never",
             "terminationGracePeriodSeconds": 30,
             "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "sleep 3600"],
                             "env": [{"name": f"SJ_{i}", "value": str(i)} for i in range(6)],
                             "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}}],
             "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                              "effect": "NoExecute", "tolerationSeconds": 300}]},
    "status": {"phase": "Running", "podIP": "10.0.0.7", "startTime": "2026-11-26T10:00:00Z",
               "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-11-26T10:00:01Z"}
                              for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
               "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": "busybox",
                                      "state": {"running": {"startedAt": "2026-11-26T10:00:01Z"}}}]},
}


JOB: dict[str, Any] = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "sj-a-r1", "namespace": "team", "uid": "job-1", "resourceVersion": "7",
                 "labels": {"scavenger.dev/job-name": "sj-a", "scavenger.dev/run": "sj-a-r1"},
                 "annotations": {"scavenger.dev/config-index": "0"},
                 "ownerReferences": [{"apiVersion": "scavenger.dev/v1alpha1", "kind": "ScavengerJob", "name": "sj-a",
                                      "uid": "sj-1", "controller": True, "blockOwnerDeletion": True}]},
    "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
             "template": {"metadata": {"labels": {"scavenger.dev/job-name": "sj-a", "scavenger.dev/run": "sj-a-r1"}},
                          "spec": POD["spec"]}},
    "status": {"active": 1, "ready": 1, "startTime": "2026-11-26T10:00:00Z", "terminating": 0,
               "uncountedTerminatedPods": {}},
}


class Events:
    """kopf's processing of watch events of one kind, with the operator's handlers and settings (also what
    `tests/unit/test_handlers.py` drives kopf with)."""

    def __init__(self, resource: references.Resource) -> None:
        self.registry = kopf.get_default_registry()
        self.settings = kopf.OperatorSettings()
        self.settings.persistence.diffbase_storage = handlers.NoDiffBase()
        self.indexers = indexing.OperatorIndexers()
        self.indexers.ensure(self.registry._indexing.get_all_handlers())
        self.memories = inventory.ResourceMemories()
        self.memo = kopf.Memo(wake=asyncio.Event(), shared={"disrupted": {}})
        self.resource = resource

    async def handle(self, body: dict[str, Any], raw_type: str | None = "MODIFIED") -> None:
        """One event of ``body`` (``raw_type`` None: seen in the initial listing)."""
        await processing.process_resource_event(
            lifecycle=kopf.lifecycles.all_at_once, indexers=self.indexers, registry=self.registry,
            settings=self.settings, memories=self.memories, memobase=cast(Any, self.memo), resource=self.resource,
            raw_event=cast(Any, {"type": raw_type, "object": body}), event_queue=asyncio.Queue(), no_throttling=True)


NODES = references.Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
NODE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "node-1", "uid": "node-1", "resourceVersion": "7",
                 "labels": {"kubernetes.io/hostname": "node-1", "type": "kwok", "topology.kubernetes.io/zone": "a"},
                 "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}},
    "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
               "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
               "conditions": [{"type": t, "status": "True" if t == "Ready" else "False",
                               "lastHeartbeatTime": "2026-11-26T10:00:01Z",
                               "lastTransitionTime": "2026-11-26T10:00:01Z"}
                              for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")],
               "nodeInfo": {"kubeletVersion": "kwok-v0.8.0", "architecture": "amd64", "operatingSystem": "linux"}},
}
SJ: dict[str, Any] = {
    "apiVersion": "scavenger.dev/v1alpha1", "kind": "ScavengerJob",
    "metadata": {"name": "sj-a", "namespace": "team", "uid": "sj-1", "resourceVersion": "7", "generation": 1,
                 "creationTimestamp": "2026-11-26T10:00:00Z", "labels": {}},
    "spec": {"template": {"spec": POD["spec"]}, "parallelism": 1, "checkpoint": {"period": "10m"}},
    "status": {"phase": "Running", "attempts": 1, "runJob": "sj-a-r1", "level": 2,
               "conditions": [{"type": "Admitted", "status": "True", "reason": "Launched",
                               "lastTransitionTime": "2026-11-26T10:00:00Z"}]},
}


def numbered(template: dict[str, Any], n: int, suffix: str = "") -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        obj = copy.deepcopy(template)
        obj["metadata"].update(name=f"sj-{i}-r1{suffix}", uid=f"{template['kind']}-{i}")
        if template["kind"] in ("Pod", "Job"):
            obj["metadata"]["labels"].update({"scavenger.dev/job-name": f"sj-{i}", "scavenger.dev/run": f"sj-{i}-r1"})
        out.append(obj)
    return out


def pods(n: int) -> list[dict[str, Any]]:
    return numbered(POD, n, "-x")


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """Nothing collected automatically while the block runs, and nothing left over from before it: each figure
    is then the collections it makes itself."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def cache_per_event(cache: WatchCache, bodies: list[dict[str, Any]]) -> float:
    """A watch cache's CPU per modified event of objects it holds (seconds): the stream's line decoded, the
    view made and indexed; each event changes the object (no status, then its status), so none is skipped
    as unchanged."""
    cache.replace([{**b, "status": {}} for b in bodies])
    lines = [json.dumps({"type": "MODIFIED", "object": b}).encode() for b in bodies]
    with collector_off():
        started = time.process_time()
        for line in lines:
            event = json.loads(line)
            cache.apply(event["type"], event["object"])
        return (time.process_time() - started) / len(lines)


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measures and prints; the figures."""
    pod = cache_per_event(PodCache(), pods(args.pods))
    job = cache_per_event(ObjectCache(path=JOBS_PATH, make=job_view), numbered(JOB, args.pods))
    sj = cache_per_event(ObjectCache(path=SJS_PATH, make=sj_object), numbered(SJ, args.pods))
    print(f"the watch caches: {pod * 1e6:.0f} us of CPU per pod event, {job * 1e6:.0f} per Job event, "
          f"{sj * 1e6:.0f} per SJ event ({args.pods} of each; its line decoded, the view made and indexed)", flush=True)
    figures = [results.figure("the watch caches: CPU per pod event", pod * 1e6, "µs"),
               results.figure("the watch caches: CPU per Job event", job * 1e6, "µs"),
               results.figure("the watch caches: CPU per SJ event", sj * 1e6, "µs")]
    bodies = numbered(NODE, args.pods)
    events = Events(NODES)
    for body in bodies:
        await events.handle(copy.deepcopy(body))
    copies = [copy.deepcopy(b) for b in bodies]
    with collector_off():
        started = time.process_time()
        for body in copies:
            await events.handle(body)
        per_event = (time.process_time() - started) / len(copies)
        del copies
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage = collections.Counter(type(o).__qualname__ for o in gc.garbage)
        gc.set_debug(0)
        gc.garbage.clear()
        print(f"kopf's processing: {per_event * 1e6:.0f} us of CPU per node event ({len(bodies)} nodes); each event "
              f"leaves {sum(garbage.values()) / len(bodies):.0f} objects of cyclic garbage: "
              + ", ".join(f"{name} {n / len(bodies):.1f}" for name, n in garbage.most_common(8)), flush=True)
        figures += [results.figure("kopf: CPU per node event", per_event * 1e6, "µs"),
                    results.figure("kopf: cyclic garbage per node event", sum(garbage.values()) / len(bodies),
                                   "objects")]
        for every in args.every:
            copies = [copy.deepcopy(b) for b in bodies]
            gc.collect()
            spent = 0.0
            for i, body in enumerate(copies, 1):
                await events.handle(body)
                copies[i - 1] = {}
                if i % every == 0 or i == len(copies):
                    t0 = time.process_time()
                    gc.collect(0)
                    spent += time.process_time() - t0
            objects = every * sum(garbage.values()) // len(bodies)
            print(f"a young collection every {every:>5} events (about {objects:>7,} objects): "
                  f"{spent / len(bodies) * 1e6:5.1f} us of CPU per event", flush=True)
            figures.append(results.figure(f"young collections every {every} events: CPU per event",
                                          spent / len(bodies) * 1e6, "µs"))
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=4000, help="pods (one event each per round; default 4000)")
    parser.add_argument("--every", type=int, nargs="+", default=[10, 50, 250, 1000, 4000],
                        help="events per young collection to compare (default 10 50 250 1000 4000)")
    results.add_arguments(parser)
    arguments = parser.parse_args()
    figures = asyncio.run(main(arguments))
    results.save(arguments, results.result("bench_events", results.parameters(arguments), figures))
