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
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402

from benchmarks.harness import results  # noqa: E402
from benchmarks.harness.kube import claimed, create_namespace, delete_namespace, ensure_crd  # noqa: E402
from benchmarks.harness.recorder import Recorder  # noqa: E402
from benchmarks.harness.stats import percentile  # noqa: E402
from sj_operator.names import GROUP, KIND, PLURAL, VERSION  # noqa: E402
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
    with claimed(api, "bench_e2e"):
        ensure_crd(api)
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        namespace = create_namespace(core, "bench-e2e")
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
