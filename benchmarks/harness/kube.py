"""The cluster, as the benchmarks drive it through the kubernetes client: namespaces and CRDs, kwok nodes and
PriorityClasses made for a run, calls retried while the API server is loaded, watches, and what the Jobs say.

A watch here keeps the API server's JSON as it came (`RawWatch`): building the client's typed models costs about
a millisecond per object, taken from the threads that create the objects being timed.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple

import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from benchmarks.harness.metrics import apiserver_writes, watches_closed
from benchmarks.harness.progress import in_parallel, log
from benchmarks.harness.results import REPO
from benchmarks.harness.stats import percentile
from sj_operator.names import GROUP, PLURAL, VERSION
from sj_operator.observed import parse_time
from tests.e2e.kube import unique


def retrying(call: Callable[[], Any]) -> Any:
    """A client call retried on 429/5xx and connection trouble (the API server is loaded here)."""
    for attempt in range(30):
        try:
            return call()
        except ApiException as exc:
            if exc.status not in (429, 500, 502, 503, 504) or attempt == 29:
                raise
        except OSError:
            if attempt == 29:
                raise
        time.sleep(min(0.2 * 2 ** attempt, 5))
    return None


# The Lease that holds the cluster for one benchmark at a time (`claimed`).
CLAIM_NAMESPACE, CLAIM_NAME = "default", "scavenger-benchmark"
_HOLDER = re.compile(r"\S+ pid ([0-9]{1,9}) on (\S+) #[0-9a-f]+", re.ASCII)


def claim_holder(benchmark: str, pid: int, host: str, token: str) -> str:
    """Who holds the claim, as its Lease says: the benchmark, its process and machine, and a token of its own
    (two machines of one name, or two processes of one pid in two containers, are still told apart)."""
    return f"{benchmark} pid {pid} on {host} #{token}"


def claim_gone(holder: str, host: str, alive: Callable[[int], bool]) -> bool:
    """Whether the claim's holder is known to be gone: a process of this machine (``host``) that is not
    ``alive``. A holder of another machine, or one this does not name, is taken to be there."""
    named = _HOLDER.fullmatch(holder)
    return named is not None and named[2] == host and not alive(int(named[1]))


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextmanager
def claimed(api: client.ApiClient, benchmark: str, token: str | None = None) -> Iterator[None]:
    """The cluster held for this benchmark alone for the block, by a Lease (`CLAIM_NAME` in `CLAIM_NAMESPACE`).
    Two benchmarks on one cluster break each other: they share the nodes' selector and the PriorityClasses, and
    one's clean-up deletes the nodes and classes the other's pods run on. A claim held by a process of this machine
    that is gone (killed before its clean-up) is taken over; any other ends this benchmark before it makes
    anything on the cluster, naming the holder. ``token``: the holder's own (default: a new random one)."""
    leases = client.CoordinationV1Api(api)
    me = claim_holder(benchmark, os.getpid(), socket.gethostname(), token or secrets.token_hex(4))
    if not any(_claim_round(leases, me) for _ in range(5)):
        raise SystemExit(f"the cluster's claim ({CLAIM_NAMESPACE}/{CLAIM_NAME}) kept changing hands: not taken")
    try:
        yield
    finally:
        try:
            held = retrying(lambda: leases.read_namespaced_lease(CLAIM_NAME, CLAIM_NAMESPACE))
            if held.spec.holder_identity == me:
                _delete_lease_as_read(leases, held)
        except (ApiException, HTTPError, OSError) as exc:
            if not (isinstance(exc, ApiException) and exc.status == 404):
                print(f"could not give the cluster's claim back ({exc!r}): the next benchmark of this machine takes "
                      f"it over; another deletes it (kubectl -n {CLAIM_NAMESPACE} delete lease {CLAIM_NAME})",
                      file=sys.stderr)


def _claim_round(leases: client.CoordinationV1Api, me: str) -> bool:
    """One try at the claim for ``me``: True once held; False when another changed it meanwhile (given back,
    taken over), to try again. Ends the benchmark (SystemExit) when another holds it."""
    try:
        retrying(lambda: leases.create_namespaced_lease(
            CLAIM_NAMESPACE, {"metadata": {"name": CLAIM_NAME}, "spec": {"holderIdentity": me}}))
        return True
    except ApiException as exc:
        if exc.status != 409:
            raise
    try:
        held = retrying(lambda: leases.read_namespaced_lease(CLAIM_NAME, CLAIM_NAMESPACE))
    except ApiException as exc:
        if exc.status == 404:  # given back meanwhile
            return False
        raise
    holder = held.spec.holder_identity or ""
    if holder == me:  # made by a create whose answer was lost, then retried
        return True
    if not claim_gone(holder, socket.gethostname(), process_alive):
        raise SystemExit(
            f"the cluster is held by another benchmark ({holder}, since {held.metadata.creation_timestamp}): two on "
            "one cluster delete each other's nodes and PriorityClasses. Wait for it to end; if it is gone, "
            f"kubectl -n {CLAIM_NAMESPACE} delete lease {CLAIM_NAME}")
    log(f"the cluster's claim was held by {holder}, which is gone: taken over")
    try:
        _delete_lease_as_read(leases, held)
    except ApiException as exc:
        if exc.status not in (404, 409):  # another took it over meanwhile: the next round sees who
            raise
    return False


def _delete_lease_as_read(leases: client.CoordinationV1Api, held: Any) -> None:
    """Deletes the claim only as it was read (a 409 when it changed since)."""
    retrying(lambda: leases.delete_namespaced_lease(CLAIM_NAME, CLAIM_NAMESPACE, body=client.V1DeleteOptions(
        preconditions=client.V1Preconditions(resource_version=held.metadata.resource_version))))


def ensure_crd(api: client.ApiClient) -> None:
    """Every CRD of crds/ (the operator watches ScavengerQuotas too), created when the cluster lacks it."""
    ext = client.ApiextensionsV1Api(api)
    for path in sorted((REPO / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        try:
            ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            print(f"applying {path.relative_to(REPO)}")
            ext.create_custom_resource_definition(body)
        deadline = time.monotonic() + 60
        while True:
            crd = ext.read_custom_resource_definition(name)
            conditions = (crd.status.conditions if crd.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established")
            time.sleep(0.2)


def create_namespace(core: client.CoreV1Api, prefix: str) -> str:
    """A namespace of a name of its own (``prefix``-random), once pods can be made in it."""
    name = unique(prefix)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 60
    while True:  # pods need the namespace's default ServiceAccount, created asynchronously
        try:
            core.read_namespaced_service_account("default", name)
            return name
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def delete_namespace(api: client.ApiClient, name: str, timeout: float = 120, collections: bool = True) -> None:
    """Deletes the namespace, its SJs, Jobs and pods first (``collections``), each object by a call of its own, 16
    at a time: a call deleting a collection of 10,000 objects outlasts the API server's request timeout, fails
    part way, and left the namespace controller retrying for minutes; without them the namespace controller
    deletes them in the background."""
    core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
    first = (
        lambda: each(lambda: [o["metadata"]["name"] for o in custom.list_namespaced_custom_object(
            GROUP, VERSION, name, PLURAL)["items"]],
            lambda sj: custom.delete_namespaced_custom_object(GROUP, VERSION, name, PLURAL, sj), "SJs deleted"),
        lambda: each(lambda: [j.metadata.name for j in batch.list_namespaced_job(name).items],
                     lambda job: batch.delete_namespaced_job(job, name, propagation_policy="Background"),
                     "Jobs deleted"),
        lambda: release_pods(core, name),
        lambda: each(lambda: [p.metadata.name for p in core.list_namespaced_pod(name).items],
                     lambda pod: core.delete_namespaced_pod(pod, name, grace_period_seconds=0), "pods deleted"),
    ) if collections else ()
    for cleanup in (*first, lambda: core.delete_namespace(name, propagation_policy="Background")):
        try:
            cleanup()
        except ApiException as exc:
            if exc.status != 404:
                print(f"cleanup of namespace {name}: {exc.status} {exc.reason}", file=sys.stderr)
        except HTTPError as exc:  # an API server busy deleting thousands of objects may drop the call
            print(f"cleanup of namespace {name}: {exc!r}", file=sys.stderr)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core.read_namespace(name)
        except ApiException as exc:
            if exc.status == 404:
                return
        time.sleep(0.5)
    print(f"namespace {name} still terminating after {timeout:.0f}s", file=sys.stderr)


def pods_quiet(api: client.ApiClient, quiet: float = 10, timeout: float = 900) -> None:
    """Waits until the API server has served no write to a pod for ``quiet`` seconds: once a namespace is gone,
    kwok still plays the stages it queued for its pods (each a ``pods/status`` patch answered 404) for a minute
    or more, and a run begun meanwhile was charged with them (12,000 at 10,000 units, and kwok's CPU)."""
    def pod_writes() -> float:
        return sum(n for key, n in apiserver_writes(apiserver_metrics(api)).items() if key.startswith("pods"))

    tail = until_still(pod_writes, quiet, timeout)
    if tail is None:
        print(f"pods still written {timeout:.0f}s after their namespace went", file=sys.stderr)
    elif tail[0]:
        log(f"  {tail[0]:.0f} writes to pods after their namespace went, the last {tail[1]:.0f}s after it")


def until_still(count: Callable[[], float], quiet: float, timeout: float, poll: float = 2, *,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], object] = time.sleep) -> tuple[float, float] | None:
    """Polls ``count`` until it has not moved for ``quiet`` seconds: how much it grew meanwhile and how long
    after the start it last moved; None when it still moved after ``timeout``."""
    start = clock()
    first = last = count()
    since = start
    while clock() - since < quiet:
        if clock() - start > timeout:
            return None
        sleep(poll)
        now = count()
        if now != last:
            last, since = now, clock()
    return last - first, since - start


def each(names: Callable[[], list[str]], delete: Callable[[str], object], what: str, threads: int = 16) -> None:
    """``delete(name)`` for each of ``names()``, ``threads`` at a time, its progress printed as ``what``; an object
    gone already, or a call the API server dropped, is passed over (the namespace controller deletes what is
    left)."""
    listed = names()

    def one(i: int) -> None:
        with suppress(ApiException, HTTPError):
            delete(listed[i])

    if listed:
        in_parallel(one, len(listed), threads, what)


def release_pods(core: client.CoreV1Api, namespace: str, threads: int = 16) -> None:
    """Takes the finalizers off the namespace's pods, as the Job controller takes its tracking finalizer off once
    it reaches their Jobs: with thousands of pods it does so behind its queue, a pod per call, and the
    namespace took 5 to 15 minutes to go at 2,000 units (the next run waits for it)."""
    each(lambda: [p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.metadata.finalizers],
         lambda pod: core.patch_namespaced_pod(pod, namespace, {"metadata": {"finalizers": None}}),
         "pods' finalizers taken off", threads)


def apiserver_get(api: client.ApiClient, path: str, *, query: Sequence[tuple[str, Any]] = (),
                  timeout: float | None = None) -> bytes:
    """The body the API server sends for a GET of ``path`` (not an API object: its metrics, a profile), as it sent
    it; ``timeout`` seconds at most (the client's default without)."""
    method, url, headers, body, _ = api.param_serialize("GET", path, query_params=list(query),
                                                        auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout)
    response.read()
    data = response.data
    if not isinstance(data, bytes):
        raise ValueError(f"the API server sent no body for {path}")
    return data


def apiserver_metrics(api: client.ApiClient) -> str:
    """The API server's metrics, as text."""
    data: bytes = retrying(lambda: apiserver_get(api, "/metrics"))
    return data.decode()


class Served(NamedTuple):
    """What the API server served between two reads of its metrics (`WritesSince`)."""
    written: dict[str, float]
    """The writes, by resource and verb, the most first (refused ones too)."""
    refused: dict[str, float]
    """Those of them it refused, by resource, verb and code."""
    watches_closed: dict[str, float]
    """The watches it closed because their client fell behind, by resource (`metrics.watches_closed`)."""


class WritesSince:
    """The writes the API server serves from the moment this is made (`metrics.apiserver_writes`: by resource and
    verb, whoever made them), which of them it refused, and the watches it closed on clients that fell behind."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        text = apiserver_metrics(api)
        self.start = apiserver_writes(text)
        self.start_refused = apiserver_writes(text, refused=True)
        self.start_closed = watches_closed(text)

    def writes(self) -> Served:
        """What was served since, from one read of the server's metrics."""
        text = apiserver_metrics(self.api)
        return Served(_grown(self.start, apiserver_writes(text)),
                      _grown(self.start_refused, apiserver_writes(text, refused=True)),
                      _grown(self.start_closed, watches_closed(text)))


def _grown(start: Mapping[str, float], now: Mapping[str, float]) -> dict[str, float]:
    """What grew from ``start`` to ``now``, key by key, the most first."""
    grown = {key: n - start.get(key, 0.0) for key, n in now.items()}
    return dict(sorted(((k, n) for k, n in grown.items() if n > 0), key=lambda kv: (-kv[1], kv[0])))


def earlier_runs_gone(api: client.ApiClient, prefix: str, timeout: float = 1800) -> None:
    """Deletes what earlier runs left of their namespaces (``prefix``-...: still terminating after a run that
    did not wait for its last, or left by a run stopped part way) and waits until they are gone: a run measured
    beside another's deletion is slower for it (a floor at 2,000 units took 73 s beside one, against 40 s).
    Only under the cluster's claim (`claimed`), so no other benchmark's namespaces are taken."""
    core = client.CoreV1Api(api)
    left = [ns.metadata.name for ns in retrying(core.list_namespace).items if ns.metadata.name.startswith(f"{prefix}-")]
    for name in left:
        log(f"namespace {name} of an earlier run: deleting it before this run")
        delete_namespace(api, name, timeout=timeout)
    if left:
        pods_quiet(api)


@contextmanager
def run_namespace(api: client.ApiClient, prefix: str, whose: str, *, followed: bool) -> Iterator[str]:
    """A namespace for one run (``prefix``-random; ``whose``: the run's, in the log), deleted at its end: waited for
    when another run follows on this cluster (it must not share it with the deletion), only begun when nothing runs
    after it."""
    namespace = create_namespace(client.CoreV1Api(api), prefix)
    try:
        yield namespace
    finally:
        if followed:
            log(f"  deleting {whose} namespace")
            delete_namespace(api, namespace, timeout=1800)
            pods_quiet(api)
        else:
            log(f"  deleting {whose} namespace (not waited for: nothing runs after it)")
            delete_namespace(api, namespace, timeout=5, collections=False)


def make_kwok_nodes(core: client.CoreV1Api, names: Sequence[str], allocatable: Mapping[str, str],
                    selector: Mapping[str, str], taints: Sequence[Mapping[str, str]], threads: int) -> None:
    """Fake nodes kwok runs, ``threads`` created at a time, once all are Ready. ``selector``: the labels that
    pick them out (pods select them by these; `delete_nodes` deletes them by these)."""
    def create(i: int) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": names[i], "annotations": {"kwok.x-k8s.io/node": "fake"},
                             "labels": {**selector, "type": "kwok", "kubernetes.io/hostname": names[i]}},
                "spec": {"taints": list(taints)},
                "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)}}
        try:
            retrying(lambda: core.create_node(body))
        except ApiException as exc:
            if exc.status != 409:
                raise

    in_parallel(create, len(names), threads, "nodes created")
    label_selector = ",".join(f"{k}={v}" for k, v in selector.items())
    deadline = time.monotonic() + 600
    while True:
        nodes = core.list_node(label_selector=label_selector).items
        ready = sum(1 for n in nodes if any(c.type == "Ready" and c.status == "True"
                                            for c in n.status.conditions or []))
        if ready >= len(names):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ready} of {len(names)} nodes Ready after 600s")
        log(f"  {ready}/{len(names)} nodes Ready")
        time.sleep(5)


def delete_nodes(core: client.CoreV1Api, selector: Mapping[str, str]) -> None:
    try:
        core.delete_collection_node(label_selector=",".join(f"{k}={v}" for k, v in selector.items()))
    except (ApiException, HTTPError, OSError) as exc:
        # (the nodes are left: said, not raised over what the run measured)
        print(f"could not delete the benchmark's nodes ({selector}): {exc!r}", file=sys.stderr)


@contextmanager
def priority_classes(scheduling: client.SchedulingV1Api, values: Mapping[str, int]) -> Iterator[None]:
    """PriorityClasses by name and value for the block: below zero they never preempt, from zero they
    preempt lower ones."""
    for name, value in values.items():
        body = {"metadata": {"name": name}, "value": value, "globalDefault": False,
                "preemptionPolicy": "Never" if value < 0 else "PreemptLowerPriority"}
        try:
            scheduling.create_priority_class(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
    try:
        yield
    finally:
        for name in values:
            with suppress(ApiException):
                scheduling.delete_priority_class(name)


def resource_version(obj: Any) -> str:
    """Of a typed object or list (V1Job, V1JobList) or a raw dict (custom objects)."""
    if isinstance(obj, dict):
        return str(obj["metadata"]["resourceVersion"])
    return str(obj.metadata.resource_version)


class RawWatch(watch.Watch):  # type: ignore[misc]  # the client is not type-checked here (benchmarks/mypy.ini)
    """A watch whose objects stay the API server's JSON (dicts). The client's typed models cost about a
    millisecond per object to build; a watch in this process would take that from the threads creating
    the measured objects (they share its interpreter lock and the machine's cores) while they are timed."""

    def get_return_type(self, func: Callable[..., Any]) -> None:
        return None


def watch_namespace(list_fn: Callable[..., Any], namespace: str, stop: threading.Event,
                    on_object: Callable[[Any], None], name: str, **kwargs: Any) -> threading.Thread:
    """Hands every object ``list_fn`` lists in ``namespace`` (``kwargs``: its selector) to ``on_object`` as
    it changes, from now until ``stop``; resumes after timeouts, dropped connections and expired versions.
    ``list_fn`` should belong to an ApiClient of its own: the watch holds one of its connections."""
    def latest() -> str:
        return str(list_fn(namespace, limit=1, **kwargs).metadata.resource_version)

    rv = latest()

    def run() -> None:
        nonlocal rv
        while not stop.is_set():
            try:
                for event in RawWatch().stream(list_fn, namespace, resource_version=rv, timeout_seconds=20,
                                               **kwargs):
                    obj = event["object"]
                    rv = resource_version(obj)
                    on_object(obj)
                    if stop.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:
                    rv = latest()
            except Exception:  # a dropped connection: resume from the last version seen
                time.sleep(0.5)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def job_sync_lag(batch: client.BatchV1Api, namespace: str) -> dict[str, float]:
    """p50 and p99 seconds from each Job's creation to the Job controller's first sync of it (its
    ``status.startTime``; both to the second): how far behind the controller-manager was in making pods, the
    cluster's side of a launch. Empty while no Job has been synced."""
    jobs = json.loads(retrying(lambda: batch.list_namespaced_job(namespace, resource_version="0",
                                                                 _preload_content=False)).data)["items"]
    lags = sorted((started - created).total_seconds() for job in jobs
                  if (created := parse_time(job["metadata"].get("creationTimestamp"))) is not None
                  and (started := parse_time((job.get("status") or {}).get("startTime"))) is not None)
    return {"job_sync_p50": percentile(lags, 0.5), "job_sync_p99": percentile(lags, 0.99)} if lags else {}


def ready_pods(batch: client.BatchV1Api, namespace: str) -> int:
    """The ready pods of all Jobs in ``namespace``, as the Jobs count them (``status.ready``). The list is read as
    the API server's JSON: typed models of 10,000 Jobs would take this process seconds at every poll."""
    jobs = json.loads(retrying(lambda: batch.list_namespaced_job(namespace, resource_version="0",
                                                                 _preload_content=False)).data)["items"]
    return sum(int((job.get("status") or {}).get("ready") or 0) for job in jobs)
