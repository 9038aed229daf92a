"""High-priority pods sent on a schedule to preempt a benchmark's work, and the work their victims lost: a plain
pod's as the scheduler preempted it (how long it had run), an SJ's as the operator itself estimates it.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kubernetes import client

from benchmarks.harness.kube import retrying, watch_namespace
from benchmarks.harness.progress import log
from sj_operator.api import parse_duration
from sj_operator.names import GROUP, PLURAL, VERSION
from sj_operator.observed import parse_time
from sj_operator.policy.lifecycle import lost_work


@dataclass
class Stream:
    """High-priority pods arriving on schedule; the victims' lost work as the caller measures it."""
    core: client.CoreV1Api
    namespace: str
    arrivals: tuple[tuple[float, int], ...]
    """(seconds after the stream starts, node CPU the pod needs)."""
    pod: Callable[[str, int], dict[str, Any]]
    """The pod of a name and that CPU."""
    made: list[str] = field(default_factory=list)

    def run(self) -> None:
        start = time.monotonic()
        for i, (at, cpu) in enumerate(self.arrivals):
            time.sleep(max(0.0, start + at - time.monotonic()))
            name = f"high-{i:04d}"
            retrying(partial(self.core.create_namespaced_pod, self.namespace, self.pod(name, cpu)))
            self.made.append(name)
        log(f"  {len(self.made)} high-priority pods arrived over {time.monotonic() - start:.0f}s")


def watch_preempted_pods(namespace: str, stop: threading.Event, lost: dict[str, float], *, label_selector: str,
                         members_annotation: str) -> threading.Thread:
    """Records, for each pod of ``label_selector`` the scheduler preempts, how long it had run (its lost work),
    times the members of its gang (``members_annotation`` on the pod; 1 without it)."""
    def seen(pod: dict[str, Any]) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        cond = next((c for c in status.get("conditions") or []
                     if c["type"] == "DisruptionTarget" and c["status"] == "True"), None)
        started, stopped = parse_time(status.get("startTime")), parse_time((cond or {}).get("lastTransitionTime"))
        if started is not None and stopped is not None and meta["uid"] not in lost:
            # A gang's app stops when one member goes: every member lost what it had run.
            members = int((meta.get("annotations") or {}).get(members_annotation, "1"))
            lost[meta["uid"]] = members * max((stopped - started).total_seconds(), 0.0)

    return watch_namespace(client.CoreV1Api(client.ApiClient()).list_namespaced_pod, namespace, stop, seen,
                           "preempted pods", label_selector=label_selector)


def preempted(stream: Stream, *, label_selector: str, members_annotation: str, after: float = 15) -> list[float]:
    """Sends ``stream`` while watching the pods of ``label_selector`` in its namespace, and ``after`` seconds more
    (the last victims stop): the work each pod the scheduler preempted lost (`watch_preempted_pods`), least
    first."""
    stop = threading.Event()
    lost: dict[str, float] = {}
    watcher = watch_preempted_pods(stream.namespace, stop, lost, label_selector=label_selector,
                                   members_annotation=members_annotation)
    stream.run()
    time.sleep(after)
    stop.set()
    watcher.join(30)
    return sorted(lost.values())


def lost_by_sjs(custom: client.CustomObjectsApi, namespace: str, period: str) -> list[float]:
    """The pod-seconds each interruption cost, from the SJs' own statuses: the time since its checkpoint period
    began (``policy.lifecycle.lost_work``, the operator's own estimate), for every pod of its gang. ``period``:
    the checkpoint period of an SJ that states none."""
    lost: list[float] = []
    for sj in retrying(lambda: custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))["items"]:
        st = sj.get("status") or {}
        stamps = [parse_time(t) for t in st.get("interruptedTimestamps") or []]
        runs = [parse_time(t) for t in st.get("runningTimestamps") or []]
        duration = parse_duration(sj["spec"].get("duration", period))
        for one in lost_work([r for r in runs if r], [t for t in stamps if t], duration):
            lost.append(one.total_seconds() * int(sj["spec"].get("parallelism", 1)))
    return lost
