"""Small helpers the e2e tests share: API clients, dedicated test nodes, waiting.

Every test that needs a particular node shape creates its own kwok node with a
unique label and taint (`dedicated_node`), so tests never depend on what other
tests left on the shared default nodes.
"""
from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from sj_operator.observed import pod_requests
from sj_operator.resources import to_milli

# The image of the test workloads' pods (they run `sh -c "sleep N; exit X"`): busybox where images can be
# pulled; make e2e-kind on a machine without a registry sets one it loaded into the nodes.
E2E_IMAGE = os.environ.get("SJ_E2E_IMAGE", "busybox:1.36")

T = TypeVar("T")

TEST_TAINT_KEY = "scavenger.dev/e2e"
HOSTNAME_LABEL = "kubernetes.io/hostname"

CLUSTER_DIR = Path(__file__).resolve().parents[2] / ".cluster" / "kwok" / "clusters" / "scavenger"
"""The local cluster's kwokctl state: its components' pid files (``pids/NAME.pid``) and logs."""


def component_pid(name: str) -> int:
    """The pid of one of the local cluster's components (``etcd``, ``kube-scheduler``, ...)."""
    return int((CLUSTER_DIR / "pids" / f"{name}.pid").read_text().strip())


@contextmanager
def scheduler_paused() -> Iterator[None]:
    """The local cluster's kube-scheduler stopped (SIGSTOP) for the block, as a scheduler far behind: new
    pods get no ``PodScheduled`` condition until it goes on (SIGCONT, whatever the block raised). It runs
    without leader election, so nothing takes its place or makes it exit for the pause."""
    pid = component_pid("kube-scheduler")
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


CHECKS: list[Callable[[], None]] = []
"""Called on every poll of `wait_for`; one raises to fail the wait at once (an operator that crashed)."""


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60, interval: float = 0.25) -> T:
    """Polls `probe` until it returns something truthy; fails the test naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        for check in list(CHECKS):
            check()
        try:
            last = probe()
        except ApiException as exc:  # a transient API error is just another "not yet"
            last = exc
        if last and not isinstance(last, ApiException):
            return cast(T, last)
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for an operator's metrics or webhook server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@contextmanager
def dedicated_node(cpu: str = "4", memory: str = "16Gi",
                   extra: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """A kwok node only pods with the returned selector and toleration land on."""
    core = client.CoreV1Api()
    name = unique("e2e-node")
    labels = {"type": "kwok", HOSTNAME_LABEL: name, TEST_TAINT_KEY: name, **(extra or {})}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": [{"key": TEST_TAINT_KEY, "value": name, "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }
    core.create_node(body)
    try:
        wait_for(f"node {name} Ready", lambda: _node_ready(core, name), timeout=60)
        yield {
            "name": name,
            "nodeSelector": {TEST_TAINT_KEY: name},
            "tolerations": [{"key": TEST_TAINT_KEY, "operator": "Equal", "value": name, "effect": "NoSchedule"}],
        }
    finally:
        release_node(core, name)
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def node_placement(node: dict[str, Any]) -> dict[str, Any]:
    """The ``nodeSelector`` and ``tolerations`` that put a pod (or an SJ's pods) on a `dedicated_node`."""
    return {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}


def release_node(core: client.CoreV1Api, node: str) -> None:
    """Cordons a node, then deletes the pods bound to it at once (once the node is gone nothing
    would end them); cordoned, it gets no new ones, from the scheduler or the operator."""
    core.patch_node(node, {"spec": {"unschedulable": True}})
    selector = f"spec.nodeName={node}"
    for pod in core.list_pod_for_all_namespaces(field_selector=selector).items:
        try:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
    wait_for(f"pods on {node} gone",
             lambda: not [p for p in core.list_pod_for_all_namespaces(field_selector=selector).items
                          if p.status.phase not in ("Succeeded", "Failed")], timeout=60)


def _node_ready(core: client.CoreV1Api, name: str) -> bool:
    node = core.read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def sim_container(name: str = "main", *, run_for: str | None = None, exit_code: int | None = None,
                  cpu: str = "100m", memory: str = "64Mi") -> dict[str, Any]:
    """A container that does what its pod's sim annotations say, on kwok and on a real node alike."""
    script = "sleep 3600"
    if run_for is not None:
        seconds = run_for.rstrip("s")
        script = f"sleep {seconds}; exit {exit_code or 0}"
    return {
        "name": name,
        "image": E2E_IMAGE,
        "command": ["sh", "-c", script],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
    }


def sim_annotations(run_for: str | None = None, exit_code: int | None = None) -> dict[str, str]:
    ann: dict[str, str] = {}
    if run_for is not None:
        ann["sim.scavenger.dev/run-for"] = run_for
    if exit_code is not None:
        ann["sim.scavenger.dev/exit-code"] = str(exit_code)
    return ann


def pod_condition(pod: Any, ctype: str) -> Any | None:
    return next((c for c in (pod.status.conditions or []) if c.type == ctype), None)


def workload_pod(name: str, placement: dict[str, Any], *, cpu: str, run_for: str | None = None,
                 priority_class: str | None = None) -> dict[str, Any]:
    """A pod of another workload, placed by ``placement`` (its ``nodeSelector`` and ``tolerations``), that runs for
    ``run_for`` (forever without), on kwok and on a real node alike; at the default priority (0, above every SJ),
    or ``priority_class``'s."""
    spec: dict[str, Any] = {"restartPolicy": "Never", **placement,
                            "containers": [sim_container(cpu=cpu, run_for=run_for)]}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {"metadata": {"name": name, "annotations": sim_annotations(run_for=run_for)}, "spec": spec}


def free_cpu(api: client.ApiClient) -> dict[str, int]:
    """The mCPU free on each node a pod without tolerations may use (schedulable, untainted): its allocatable
    less the requests of the pods bound to it that have not ended, as the scheduler counts them."""
    core = client.CoreV1Api(api)
    free = {node.metadata.name: to_milli(node.status.allocatable["cpu"]) for node in core.list_node().items
            if not node.spec.unschedulable
            and not any(t.effect in ("NoSchedule", "NoExecute") for t in node.spec.taints or [])}
    for pod in core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name in free and pod.status.phase not in ("Succeeded", "Failed"):
            free[pod.spec.node_name] -= pod_requests(api.sanitize_for_serialization(pod.spec)).get("cpu", 0)
    return free


def watch_pod(core: client.CoreV1Api, namespace: str, name: str, until: Callable[[Any], bool],
              timeout: int = 60) -> Any:
    """The pod as it was when ``until`` first held for it, from a watch: every change is seen, also one the
    pod shows only for the moments before it is gone (a victim's ``DisruptionTarget``). The pod must exist
    when this is called."""
    stream = watch.Watch()
    last: Any = None
    try:
        for event in stream.stream(core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}",
                                   timeout_seconds=timeout):
            last = event["object"]
            if until(last):
                return last
    finally:
        stream.stop()
    raise AssertionError(f"watched pod {namespace}/{name} for {timeout}s without seeing what was awaited; "
                         f"last seen: {last!r}")
