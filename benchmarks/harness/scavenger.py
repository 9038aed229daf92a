"""The operator as a process of its own beside a benchmark, as its image runs it: leading, or on standby.

Its metrics port is how the benchmark knows it leads (``scavenger_leader``) and how many SJs run (`wait_running`),
and reads what it did (`benchmarks.harness.metrics`); its CPU and memory are the process's
(`benchmarks.harness.processes`).
"""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from benchmarks.harness.metrics import scrape
from benchmarks.harness.processes import free_port, started
from benchmarks.harness.progress import wait_until
from tests.e2e.kube import unique

ENV = {"MALLOC_ARENA_MAX": "2"}
"""As the operator's image runs it (the Dockerfile's ENV)."""


def leading(namespace: str, port: int, log: Path, *, nice: int = 0) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """The operator for ``namespace`` at its defaults (but a 2 s tick), its metrics on ``port``, a Lease of its
    own; handed over once it leads. ``nice``: its CPU niceness (``nice -n``, which runs it in its own
    process: the pid is the operator's); at 19 it takes only the CPU the cluster's processes leave, as on a
    cluster whose control plane has cores of its own."""
    args = [sys.executable, "-m", "sj_operator", "--namespaces", namespace, "--metrics-port", str(port),
            "--peering", unique("bench-scale"), "--tick", "2s"]
    if nice:
        args = ["nice", "-n", str(nice), *args]
    return started(args, log, lambda: scrape(port).get("scavenger_leader", 0) == 1, "the operator", 60, env=ENV)


@contextmanager
def standby(api: client.ApiClient, namespace: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A replica of the operator for ``namespace`` (it watches what the operator watches: the SJs, and the
    Jobs, pods and nodes of every namespace), its caches complete, deciding nothing: the Lease it campaigns
    for is held by another identity for an hour, so it stays on standby, as a second replica of a
    deployment does."""
    peering = unique("bench-standby")
    coordination = client.CoordinationV1Api(api)
    renewed = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    coordination.create_namespaced_lease("default", {
        "metadata": {"name": peering},
        "spec": {"holderIdentity": "bench-scale", "leaseDurationSeconds": 3600, "renewTime": renewed}})
    args = [sys.executable, "-m", "sj_operator", "--namespaces", namespace, "--metrics-port", str(free_port()),
            "--peering", peering, "--lease-namespace", "default"]
    try:
        with started(args, log, lambda: "watch caches are complete" in log.read_text(),
                     "the standby replica", 60, env=ENV) as proc:
            yield proc
    finally:
        with suppress(ApiException):
            coordination.delete_namespaced_lease(peering, "default")


def wait_running(port: int, units: int, share: float, *, timeout: float = 3600, every: float = 15) -> float:
    """Waits until ``share`` of the ``units`` SJs run, as the operator serving its metrics on ``port`` counts
    them (``scavenger_sjs{phase="Running"}``); the seconds it took (`wait_until`)."""
    def running() -> tuple[bool, str]:
        try:
            n = scrape(port).get('scavenger_sjs{phase="Running"}', 0)
        except OSError as exc:  # a pass over thousands of changed SJs can hold the operator's loop
            return False, f"the operator's metrics did not answer ({exc!r}); asking again"
        return n >= share * units, f"{n:.0f}/{units} SJs Running"

    return wait_until("SJs running", running, timeout=timeout, every=every)
