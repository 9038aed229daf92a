"""Kueue's manager beside the operator, as a benchmark drives it: installed, run, given queues, read, removed.

Kueue is built from its Go module (``hack/build-binaries kueue`` makes ``.bin/kueue``; its CRDs come from the
module cache); nothing of it is committed. Its manager runs as a process against the cluster with leader
election off (the local control plane runs one instance of everything) and its webhooks not registered with
the API server (they would need a route from the API server to this process and a CA in their
configurations), so Jobs are created as its webhook would leave them (`queued`). Its job controller then
makes a Workload for each, its scheduler admits them against the ClusterQueue and the controller starts the
Job (unsuspends it): `watch_started_jobs` sees when.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from benchmarks.harness.kube import delete_namespace, retrying, watch_namespace
from benchmarks.harness.metrics import http_get
from benchmarks.harness.processes import free_port, started
from benchmarks.harness.progress import log
from benchmarks.harness.results import REPO

VERSION = "v0.17.0"  # hack/tools/kueue pins it; hack/build-binaries kueue builds .bin/kueue
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAMESPACE = "kueue-system"
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
"""Where Kueue reads its metrics server's pair when it does not manage certificates itself (fixed in its code)."""
API_GROUP, API_VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_KINDS = ("localqueues", "clusterqueues", "resourceflavors")
LOCAL_QUEUE = "bench"
CLUSTER_QUEUE = FLAVOR = "bench-scale"
KUBECTL = REPO / ".bin" / "kubectl"


def module() -> Path:
    """Kueue's module in the Go module cache (its CRDs come from there); `hack/build-binaries kueue` put
    it there when it built ``.bin/kueue``."""
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    return Path(cache) / "sigs.k8s.io" / f"kueue@{VERSION}"


def kubectl(*args: str) -> None:
    subprocess.run([str(KUBECTL), *args], check=True, stdout=subprocess.DEVNULL)


def self_signed(directory: Path, name: str) -> None:
    """A throwaway serving pair ``tls.crt``/``tls.key`` for ``name`` (openssl)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
                    "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
                   check=True, capture_output=True)


def write_config(workdir: Path, health: int) -> Path:
    """The manager's configuration, its health probes on ``health``; its path."""
    config_file = workdir / "kueue-config.yaml"
    config_file.write_text(json.dumps({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}, "metrics": {"bindAddress": "0"},
        "webhook": {"port": free_port(), "certDir": str(workdir / "webhook-certs")},
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 300, "burst": 500},  # as Kueue's own manifests set them
        "integrations": {"frameworks": ["batch/job"]},
        # Its visibility API is an aggregated API server with certificates and an APIService of its own;
        # it shows the queues and has no part in admitting.
        "featureGates": {"VisibilityOnDemand": False},
    }))
    return config_file


@contextmanager
def running(workdir: Path, logfile: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Kueue's manager as its own process against the cluster, with its CRDs, managing batch/v1 Jobs; all of
    it removed again at the end."""
    binary = REPO / ".bin" / "kueue"
    crds = module() / "config" / "components" / "crd" / "bases"
    if not binary.exists() or not crds.is_dir():
        raise SystemExit("--kueue: build Kueue first with hack/build-binaries kueue (a Go module, minutes cold)")
    health = free_port()
    config_file = write_config(workdir, health)
    self_signed(workdir / "webhook-certs", "kueue-webhook")
    # The folders of that path this run makes, deepest first: removed again at the end.
    made = [d for d in (METRICS_CERTS, *METRICS_CERTS.parents) if not d.exists()]
    if made:
        self_signed(METRICS_CERTS, "kueue-metrics")
    forget(crds)  # what an interrupted run left
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
    with suppress(ApiException):
        client.CoreV1Api().create_namespace({"metadata": {"name": NAMESPACE}})
    try:
        with started([str(binary), f"--config={config_file}"], logfile,
                     lambda: http_get(health, "/readyz", timeout=5)[0] == 200, "Kueue", 120) as proc:
            yield proc
    finally:
        forget(crds)
        with suppress(ApiException):
            client.CoreV1Api().delete_namespace(NAMESPACE)
        if made:
            for f in ("tls.crt", "tls.key"):
                (METRICS_CERTS / f).unlink(missing_ok=True)
            for d in made:
                with suppress(OSError):
                    d.rmdir()


@contextmanager
def queueing(api: client.ApiClient, namespace: str, workdir: Path, logfile: Path, *, cpu: str,
             memory: str) -> Iterator[subprocess.Popen[bytes]]:
    """Kueue's manager (`running`) admitting the Jobs of ``namespace`` against a ClusterQueue of ``cpu`` and
    ``memory`` (`create_queues`). After the block, ``namespace`` is deleted and waited for, then the queues, while
    Kueue still runs to take its finalizers off them."""
    custom = client.CustomObjectsApi(api)
    with running(workdir, logfile) as proc:
        create_queues(custom, namespace, cpu=cpu, memory=memory)
        yield proc
        log("  deleting Kueue's namespace and queues (Kueue removes its finalizers)")
        delete_namespace(api, namespace, timeout=1800)
        delete_queues(custom, namespace)


def forget(crds: Path) -> None:
    """Kueue's queue objects and CRDs gone. Kueue puts finalizers on its objects and only a running Kueue
    takes them off, so what is left once it stopped has them stripped first: otherwise its CRDs would
    stay terminating, and the next run could not create anything of theirs."""
    custom = client.CustomObjectsApi()
    for plural in QUEUE_KINDS:
        with suppress(ApiException):  # 404: the CRD is not there
            for obj in custom.list_cluster_custom_object(API_GROUP, API_VERSION, plural)["items"]:
                meta = obj["metadata"]
                with suppress(ApiException):
                    if "namespace" in meta:
                        custom.patch_namespaced_custom_object(API_GROUP, API_VERSION, meta["namespace"], plural,
                                                              meta["name"], {"metadata": {"finalizers": None}})
                    else:
                        custom.patch_cluster_custom_object(API_GROUP, API_VERSION, plural, meta["name"],
                                                           {"metadata": {"finalizers": None}})
    subprocess.run([str(KUBECTL), "delete", "--ignore-not-found", "--timeout=120s", "-f", str(crds)],
                   check=False, capture_output=True)


def create_queues(custom: client.CustomObjectsApi, namespace: str, cpu: str, memory: str) -> None:
    """One flavor, one ClusterQueue whose quota is ``cpu`` and ``memory`` (quantities), and the LocalQueue
    `LOCAL_QUEUE` in ``namespace``."""
    kind = {"apiVersion": f"{API_GROUP}/{API_VERSION}"}
    retrying(lambda: custom.create_cluster_custom_object(API_GROUP, API_VERSION, "resourceflavors", {
        **kind, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}, "spec": {}}))
    retrying(lambda: custom.create_cluster_custom_object(API_GROUP, API_VERSION, "clusterqueues", {
        **kind, "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu},
                                                       {"name": "memory", "nominalQuota": memory}]}]}]}}))
    retrying(lambda: custom.create_namespaced_custom_object(API_GROUP, API_VERSION, namespace, "localqueues", {
        **kind, "kind": "LocalQueue", "metadata": {"name": LOCAL_QUEUE}, "spec": {"clusterQueue": CLUSTER_QUEUE}}))


def delete_queues(custom: client.CustomObjectsApi, namespace: str) -> None:
    """The benchmark's queues, deleted while Kueue runs (it takes its finalizers off them)."""
    with suppress(ApiException):
        custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, namespace, "localqueues", LOCAL_QUEUE)
    with suppress(ApiException):
        custom.delete_cluster_custom_object(API_GROUP, API_VERSION, "clusterqueues", CLUSTER_QUEUE)
    with suppress(ApiException):
        custom.delete_cluster_custom_object(API_GROUP, API_VERSION, "resourceflavors", FLAVOR)


def queued(job: dict[str, Any], queue: str = LOCAL_QUEUE) -> dict[str, Any]:
    """``job`` as a Kueue user submits it and its webhook would leave it: suspended, labelled with its
    LocalQueue."""
    meta = job["metadata"]
    return {**job, "metadata": {**meta, "labels": {**meta.get("labels", {}), QUEUE_LABEL: queue}},
            "spec": {**job["spec"], "suspend": True}}


def watch_started_jobs(namespace: str, stop: threading.Event, started_at: dict[str, float]) -> threading.Thread:
    """Records in ``started_at`` when each Job of ``namespace`` is first seen not suspended (Kueue admitted and
    started it)."""
    def seen(job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        if job["spec"].get("suspend") is False and name not in started_at:
            started_at[name] = time.monotonic()

    return watch_namespace(client.BatchV1Api(client.ApiClient()).list_namespaced_job, namespace, stop, seen,
                           "started jobs")
