"""Helpers for ScavengerJobs in e2e tests: create, read, wait, run the operator."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from sj_operator.config import OperatorConfig
from sj_operator.names import GROUP, PLURAL, VERSION
from tests.e2e.kube import CHECKS, E2E_IMAGE, unique, wait_for

REPO = Path(__file__).resolve().parents[2]


def test_config(**overrides: Any) -> OperatorConfig:
    """Operator settings that make e2e tests take seconds, not minutes."""
    values: dict[str, Any] = dict(tick=timedelta(seconds=1), start_timeout=timedelta(seconds=20),
                                  retry_backoff=timedelta(seconds=2), max_retry_backoff=timedelta(seconds=10),
                                  # Tests interrupt runs seconds after they start: a short anti-thrash wait.
                                  thrash_backoff=timedelta(seconds=1), max_thrash_backoff=timedelta(seconds=5),
                                  peering=unique("e2e-lease"), metrics_port=0)
    values.update(overrides)
    return OperatorConfig(**values)


class InProcessOperator:
    """Runs `kopf.operator` in a thread with its own event loop; stop() ends it cleanly."""

    def __init__(self, config: OperatorConfig) -> None:
        self.config = config
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _run(self) -> None:
        from sj_operator.__main__ import operator_coroutine
        try:
            asyncio.run(operator_coroutine(self.config, stop_flag=self._stop, ready_flag=self._ready))
        except BaseException as exc:  # surfaced by start()/stop()
            self.error = exc

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="operator", daemon=True)
        self._thread.start()
        if not self._ready.wait(60) or self.error:
            raise RuntimeError(f"operator did not start: {self.error!r}")
        CHECKS.append(self.raise_if_crashed)

    def raise_if_crashed(self) -> None:
        """Fails the waiting test at once when the operator died, instead of at its timeout."""
        if self._stop.is_set() or self._thread is None:
            return
        if self.error is not None:
            raise RuntimeError(f"the in-process operator crashed: {self.error!r}") from self.error
        if not self._thread.is_alive():
            raise RuntimeError("the in-process operator stopped by itself")

    def stop(self) -> None:
        if self.raise_if_crashed in CHECKS:
            CHECKS.remove(self.raise_if_crashed)
        self.raise_if_crashed()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        if self.error is not None:
            raise RuntimeError(f"the in-process operator failed while stopping: {self.error!r}") from self.error


class OperatorProcess:
    """The operator as a separate process (`python -m sj_operator`), for kill/restart tests."""

    def __init__(self, *args: str, log: Path, env: dict[str, str] | None = None) -> None:
        # Several run side by side on this host: metrics only where a test asks for a port.
        self.args = args if "--metrics-port" in args else (*args, "--metrics-port", "0")
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        out = self.log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "sj_operator", *self.args], stdout=out,
                                     stderr=subprocess.STDOUT, cwd=REPO, env=self.env)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an operator's /metrics on ``port``, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def create_sj(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScavengerJob", "metadata": {"name": name}, "spec": spec}
    return cast(dict[str, Any], custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body))


def get_sj(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return cast(dict[str, Any], custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))


def patch_sj(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return get_sj(api, namespace, name).get("status") or {}


def wait_phase(api: client.ApiClient, namespace: str, name: str, *phases: str, timeout: float = 90) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        st = status(api, namespace, name)
        return st if st.get("phase") in phases else None

    try:
        return wait_for(f"{namespace}/{name} in phase {' or '.join(phases)}", probe, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nlast status: {status(api, namespace, name)}") from None


def sj_spec(*, run_for: str | None = "3s", exit_code: int | None = None, cpu: str = "500m", memory: str = "256Mi",
            **extra: Any) -> dict[str, Any]:
    annotations = dict(extra.pop("podAnnotations", {}))
    if run_for is not None:
        annotations["sim.scavenger.dev/run-for"] = run_for
    if exit_code is not None:
        annotations["sim.scavenger.dev/exit-code"] = str(exit_code)
    script = f"sleep {run_for.rstrip('s')}; exit {exit_code or 0}" if run_for else "sleep infinity"
    spec: dict[str, Any] = {
        "image": E2E_IMAGE,
        "command": ["sh", "-c", script],
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
        "terminationGracePeriodSeconds": 2,
        "podAnnotations": annotations,
    }
    spec.update(extra)
    return spec


def event_list(api: client.ApiClient, namespace: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the SJ's Events, oldest first."""
    items = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=ScavengerJob").items
    # Timestamps have one-second resolution; etcd's revision orders events within a second.
    return [(e.reason, e.message) for e in sorted(items, key=lambda e: int(e.metadata.resource_version))]


def events_for(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    return [reason for reason, _ in event_list(api, namespace, name)]


def event_messages(api: client.ApiClient, namespace: str, name: str, reason: str, timeout: float = 30) -> list[str]:
    """The messages of the SJ's `reason` Events, waiting for the first: the operator records Events after the
    status write they describe, so a test that has just seen the status may be a moment ahead of them."""
    return wait_for(f"a {reason} Event of {name}", lambda: [m for r, m in event_list(api, namespace, name)
                                                            if r == reason], timeout=timeout)


def run_pods(api: client.ApiClient, namespace: str, run: str) -> list[Any]:
    return cast(list[Any], client.CoreV1Api(api).list_namespaced_pod(namespace,
                                                                     label_selector=f"scavenger.dev/run={run}").items)


def protected(api: client.ApiClient, namespace: str, name: str) -> bool | None:
    """Whether the SJ's current run is protected: the label its budget selects, on every pod not being deleted
    (None while they disagree). The status's ``protected`` is only written with the running level."""
    st = status(api, namespace, name)
    pods = run_pods(api, namespace, st.get("jobName", ""))
    labels = {p.metadata.labels.get("scavenger.dev/protected") for p in pods if p.metadata.deletion_timestamp is None}
    return {"true": True, "false": False}.get(labels.pop()) if len(labels) == 1 else None


def published(api: client.ApiClient, namespace: str, run: str) -> dict[str, str] | None:
    """The members (hostname: address) of a gang run's EndpointSlice, as cluster DNS reads it (None: none)."""
    try:
        found = client.DiscoveryV1Api(api).read_namespaced_endpoint_slice(run, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    assert found.metadata.labels["kubernetes.io/service-name"] == run
    return {e.hostname: e.addresses[0] for e in found.endpoints or () if e.conditions.ready}


def wait_published(api: client.ApiClient, namespace: str, run: str, pods: int, timeout: float = 30) -> dict[str, str]:
    """Waits until every pod of the run is published under its hostname with its address; the members."""
    def members() -> dict[str, str] | None:
        found = published(api, namespace, run)
        expected = {p.spec.hostname: p.status.pod_ip for p in run_pods(api, namespace, run) if p.status.pod_ip}
        return found if found is not None and len(expected) == pods and found == expected else None

    return wait_for(f"the {pods} members of {run} in its EndpointSlice", members, timeout=timeout)


def jobs_of(api: client.ApiClient, namespace: str, sj: str) -> list[Any]:
    return cast(list[Any], client.BatchV1Api(api).list_namespaced_job(
        namespace, label_selector=f"scavenger.dev/job-name={sj}").items)
