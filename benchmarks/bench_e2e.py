"""Time from ScavengerJob creation to its Job (and to phase Running) on a real cluster.

Run: ``python benchmarks/bench_e2e.py [--count N] [--burst] [--kubeconfig PATH] [--json PATH] [--save]``
(KUBECONFIG from the environment when ``--kubeconfig`` is not given; the ScavengerJob CRD is
applied from ``crds/`` when the cluster lacks it).

The operator runs in this process (a thread with its own event loop, as in the e2e tests) with a 1s
tick. In a fresh namespace the benchmark creates N small SJs (cpu 50m, simulated to run 2s) and
records, per SJ, the moment the create call returned, the moment a watch on batch/v1 Jobs labelled
``scavenger.dev/job-name`` first shows its Job, and the moment a watch on SJs first shows phase
Running. Sequential mode (default) creates one SJ at a time and waits for it to be Running before the
next, so each figure is the latency of an otherwise idle operator; ``--burst`` creates all N at once
(8 client threads) and also reports how long until every SJ has its Job. In a burst a run can end before
the operator gets to record Running (the SJ goes straight to Succeeded); such SJs are counted and left
out of the Running row (``--run-for 30s`` avoids that). One unmeasured warm-up SJ runs first, so the
figures do not include the operator's start-up (watch caches, Lease). The namespace is deleted at the
end, whatever happens. ``--json``/``--save`` write the figures as data (``benchmarks/harness/results.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import yaml  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402
from urllib3.exceptions import HTTPError  # noqa: E402

from benchmarks.harness import results  # noqa: E402
from sj_operator.names import (  # noqa: E402
    GROUP,
    KIND,
    LABEL_SJ,
    PLURAL,
    VERSION,
)
from tests.e2e.kube import unique  # noqa: E402
from tests.e2e.sj import InProcessOperator, test_config  # noqa: E402


def sj_body(name: str, run_for: str = "2s") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "image": "busybox:1.36",
            "command": ["sh", "-c", f"sleep {run_for.rstrip('s')}"],
            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
            "terminationGracePeriodSeconds": 1,
            "podAnnotations": {"sim.scavenger.dev/run-for": run_for},
        },
    }


def resource_version(obj: Any) -> str:
    """Of a typed object or list (V1Job, V1JobList) or a raw dict (custom objects)."""
    if isinstance(obj, dict):
        return str(obj["metadata"]["resourceVersion"])
    return str(obj.metadata.resource_version)


class RawWatch(watch.Watch):
    """A watch whose objects stay the API server's JSON (dicts). The client's typed models cost about a
    millisecond per object to build; a watch in this process would take that from the threads creating
    the measured objects (they share its interpreter lock and the machine's cores) while they are timed."""

    def get_return_type(self, func: Callable[..., Any]) -> None:
        return None


class Recorder:
    """Watches Jobs and SJs of one namespace; records when each SJ's Job / phase Running is first seen."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.job_seen: dict[str, float] = {}
        self.running_seen: dict[str, float] = {}
        self.finished: dict[str, str] = {}  # SJ name -> terminal phase (Succeeded/Failed) if seen
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    # Each watch gets an ApiClient of its own: its long-running request must not take a pooled
    # connection from the operator or the creating threads.
    def start(self) -> None:
        batch = client.BatchV1Api(client.ApiClient())
        custom = client.CustomObjectsApi(client.ApiClient())
        jobs_rv = resource_version(batch.list_namespaced_job(self.namespace, label_selector=LABEL_SJ))
        sjs_rv = resource_version(custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL))
        self._threads = [
            threading.Thread(target=self._watch, name="watch jobs", daemon=True,
                             args=(batch.list_namespaced_job, (self.namespace,), {"label_selector": LABEL_SJ},
                                   jobs_rv, self._on_job)),
            threading.Thread(target=self._watch, name="watch sjs", daemon=True,
                             args=(custom.list_namespaced_custom_object, (GROUP, VERSION, self.namespace, PLURAL),
                                   {}, sjs_rv, self._on_sj)),
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, list_fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], rv: str,
               on_event: Callable[[float, Any], None]) -> None:
        """Streams events from `rv` on, resuming after server-side timeouts until stopped."""
        while not self._stop.is_set():
            w = RawWatch()
            try:
                for event in w.stream(list_fn, *args, resource_version=rv, timeout_seconds=30,
                                      allow_watch_bookmarks=True, **kwargs):
                    at = time.monotonic()
                    if event["type"] == "ERROR":
                        raw = event.get("raw_object") or {}
                        raise ApiException(status=raw.get("code", 500), reason=raw.get("reason", "watch error"))
                    obj = event["object"]
                    rv = resource_version(obj)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        on_event(at, obj)
                    if self._stop.is_set():
                        w.stop()
                        break
            except ApiException as exc:
                if exc.status == 410:  # history compacted: everything before now was already seen
                    rv = resource_version(list_fn(*args, **kwargs, limit=1))
                    continue
                self.errors.append(exc)
                time.sleep(0.5)
            except Exception as exc:  # connection trouble: resume from the last resourceVersion
                if self._stop.is_set():
                    return
                self.errors.append(exc)
                time.sleep(0.5)

    def _on_job(self, at: float, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        owners = meta.get("ownerReferences") or []
        sj = next((o["name"] for o in owners if o["kind"] == KIND and o.get("controller")), None)
        if sj is None:
            sj = (meta.get("labels") or {}).get(LABEL_SJ)
        with self._cond:
            if sj and sj not in self.job_seen:
                self.job_seen[sj] = at
                self._cond.notify_all()

    def _on_sj(self, at: float, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        phase = (body.get("status") or {}).get("phase")
        with self._cond:
            if phase == "Running" and name not in self.running_seen:
                self.running_seen[name] = at
                self._cond.notify_all()
            if phase in ("Succeeded", "Failed") and name not in self.finished:
                self.finished[name] = phase
                self._cond.notify_all()

    def started_or_ended(self, name: str) -> bool:
        return name in self.running_seen or name in self.finished

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


class RecorderProcess(Recorder):
    """A `Recorder` whose watches run in a process of their own, so that decoding every event of a burst
    takes nothing from the threads creating the measured objects in this one (they would share its
    interpreter lock). The child sends what it sees first (each SJ's Job, Running, terminal phase) with the
    monotonic time its watch saw it, which is the same clock here."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None

    def start(self) -> None:
        spawn = multiprocessing.get_context("spawn")
        parent, child = spawn.Pipe()
        self._process = spawn.Process(
            target=_record, args=(self.namespace, child), name="recorder", daemon=True)
        self._process.start()
        child.close()
        if not parent.poll(120) or parent.recv() != "started":  # it lists before the first create
            raise RuntimeError("the recorder process did not start")
        self._conn = parent
        reader = threading.Thread(target=self._read, args=(parent,), name="recorder reader", daemon=True)
        reader.start()
        self._threads = [reader]

    def _read(self, conn: Connection) -> None:
        while True:
            try:
                jobs, running, finished = conn.recv()
            except (EOFError, OSError):
                return
            with self._cond:
                for name, at in jobs:
                    self.job_seen.setdefault(name, at)
                for name, at in running:
                    self.running_seen.setdefault(name, at)
                self.finished.update((name, phase) for name, phase in finished if name not in self.finished)
                self._cond.notify_all()

    def stop(self) -> None:
        super().stop()
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send("stop")
        if self._process is not None:
            self._process.join(30)
            if self._process.is_alive():
                self._process.kill()


def _record(namespace: str, conn: Connection) -> None:
    """The recorder process: a `Recorder` whose new sightings go to ``conn`` every 50 ms, until told to stop."""
    config.load_kube_config()
    rec = Recorder(namespace)
    rec.start()
    conn.send("started")
    sent = (0, 0, 0)
    while True:
        stop = conn.poll(0.05)
        with rec._cond:
            jobs, running, finished = list(rec.job_seen.items()), list(rec.running_seen.items()), \
                list(rec.finished.items())
        if (len(jobs), len(running), len(finished)) != sent:  # dicts keep their order: what is new is last
            conn.send((jobs[sent[0]:], running[sent[1]:], finished[sent[2]:]))
            sent = (len(jobs), len(running), len(finished))
        if stop:
            rec.stop()
            return


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


def create_namespace(core: client.CoreV1Api) -> str:
    name = unique("bench-e2e")
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
    """Deletes the namespace, its SJs, Jobs and pods first (``collections``: each a call that may take minutes
    at 10,000 objects; without them the namespace controller deletes them in the background)."""
    core = client.CoreV1Api(api)
    first = (
        lambda: client.CustomObjectsApi(api).delete_collection_namespaced_custom_object(GROUP, VERSION, name, PLURAL),
        lambda: client.BatchV1Api(api).delete_collection_namespaced_job(name, propagation_policy="Background"),
        lambda: core.delete_collection_namespaced_pod(name, grace_period_seconds=0),
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


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))]


def row(label: str, values: Iterable[float]) -> str:
    v = sorted(values)
    if not v:
        return f"{label:<20} {'-':>6}"
    return (f"{label:<20} {len(v):>6} {v[0]:>9.0f} {statistics.median(v):>9.0f} {percentile(v, 0.95):>9.0f} "
            f"{v[-1]:>9.0f}")


def latency_figures(label: str, values: Iterable[float]) -> list[dict[str, Any]]:
    """Min, median, p95 and max of ``values`` (ms), as figures of the result."""
    v = sorted(values)
    if not v:
        return []
    return [results.figure(f"{label}: {name}", value, "ms") for name, value in
            (("min", v[0]), ("median", statistics.median(v)), ("p95", percentile(v, 0.95)), ("max", v[-1]))]


def report(created: dict[str, float], rec: Recorder) -> list[dict[str, Any]]:
    """Prints the table; its figures."""
    to_job = [(rec.job_seen[n] - t) * 1000 for n, t in created.items() if n in rec.job_seen]
    to_running = [(rec.running_seen[n] - t) * 1000 for n, t in created.items() if n in rec.running_seen]
    header = f"{'':<20} {'SJs':>6} {'min ms':>9} {'median':>9} {'p95':>9} {'max':>9}"
    print(header)
    print("-" * len(header))
    print(row("create -> Job", to_job))
    print(row("create -> Running", to_running))
    if rec.errors:
        print(f"the watches reconnected {len(rec.errors)} time(s); last error: {rec.errors[-1]!r}")
    missing = [n for n in created if n not in rec.running_seen]
    if missing:
        never = [n for n in missing if n not in rec.finished]
        print(f"{len(missing)} SJ(s) never seen Running ({len(missing) - len(never)} reached a terminal phase "
              f"first): {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return [*latency_figures("create -> Job", to_job), *latency_figures("create -> Running", to_running),
            results.figure("SJs never seen Running", len(missing))]


def run_sequential(custom: client.CustomObjectsApi, namespace: str, rec: Recorder, count: int, run_for: str,
                   timeout: float) -> dict[str, float]:
    created: dict[str, float] = {}
    for i in range(count):
        name = f"seq-{i:04d}"
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sj_body(name, run_for))
        created[name] = time.monotonic()
        rec.wait(f"{name} Running", partial(rec.started_or_ended, name), timeout)
    return created


def run_burst(custom: client.CustomObjectsApi, namespace: str, rec: Recorder, count: int, run_for: str,
              timeout: float) -> tuple[dict[str, float], float, float, float]:
    names = [f"burst-{i:04d}" for i in range(count)]
    created: dict[str, float] = {}
    lock = threading.Lock()

    def create(name: str) -> None:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sj_body(name, run_for))
        at = time.monotonic()
        with lock:
            created[name] = at

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, names))
    all_created = time.monotonic()
    rec.wait(f"Jobs of all {count} SJs", lambda: all(n in rec.job_seen for n in names), timeout)
    all_jobs = max(rec.job_seen[n] for n in names)
    rec.wait(f"all {count} SJs Running", lambda: all(map(rec.started_or_ended, names)), timeout)
    all_running = max((rec.running_seen[n] for n in names if n in rec.running_seen), default=float("nan"))
    return created, (all_created - start) * 1000, (all_jobs - start) * 1000, (all_running - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")
    parser.add_argument("--count", "-n", type=int, default=50, help="number of SJs (default 50)")
    parser.add_argument("--burst", action="store_true", help="create all SJs at once")
    parser.add_argument("--run-for", default="2s", help="simulated run time of each SJ's pod (default 2s)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for one step (default 60)")
    parser.add_argument("--verbose", "-v", action="store_true", help="show the operator's log")
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG")
    if not kubeconfig:
        parser.error("no cluster: pass --kubeconfig or set KUBECONFIG")
    if os.environ.get("KUBECONFIG") != kubeconfig:
        # The operator (kopf's login, Kube.from_environment) loads the default kubeconfig, whose path the
        # kubernetes client reads from $KUBECONFIG when it is imported: start again with it set.
        os.environ["KUBECONFIG"] = kubeconfig
        os.execv(sys.executable, [sys.executable, *sys.argv])
    config.load_kube_config(config_file=kubeconfig)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("kopf").setLevel(logging.ERROR)

    api = client.ApiClient()
    ensure_crd(api)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    namespace = create_namespace(core)
    operator = InProcessOperator(test_config(namespaces=(namespace,)))
    rec = Recorder(namespace)
    try:
        operator.start()
        rec.start()
        print(f"operator in-process (tick {operator.config.tick.total_seconds():.0f}s), namespace {namespace}, "
              f"server {api.configuration.host}")
        warm = "warm-up"
        t0 = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sj_body(warm))
        rec.wait("the warm-up SJ Running", partial(rec.started_or_ended, warm), args.timeout)
        print(f"warm-up SJ (operator just started): create -> Job {(rec.job_seen[warm] - t0) * 1000:.0f} ms",
              flush=True)
        figures = [results.figure("warm-up SJ: create -> Job", (rec.job_seen[warm] - t0) * 1000, "ms")]
        if args.burst:
            created, create_ms, jobs_ms, running_ms = run_burst(custom, namespace, rec, args.count, args.run_for,
                                                                 args.timeout)
            print(f"burst of {args.count} SJs (8 client threads): all created after {create_ms:.0f} ms, "
                  f"all Jobs after {jobs_ms:.0f} ms, all Running after {running_ms:.0f} ms")
            figures += [results.figure("burst: all created after", create_ms, "ms"),
                        results.figure("burst: all Jobs after", jobs_ms, "ms"),
                        results.figure("burst: all Running after", running_ms, "ms")]
        else:
            created = run_sequential(custom, namespace, rec, args.count, args.run_for, args.timeout)
            print(f"{args.count} SJs created one at a time (each Running before the next)")
        figures += report(created, rec)
        if operator.error is not None:
            print(f"the operator stopped with {operator.error!r}", file=sys.stderr)
            return 1
        params = results.parameters(args, tick_seconds=operator.config.tick.total_seconds())
        results.save(args, results.result("bench_e2e", params, figures))
        return 0
    finally:
        rec.stop()
        operator.stop()
        delete_namespace(api, namespace)


if __name__ == "__main__":
    sys.exit(main())
