"""Work lost per interruption, with victim steering on and off, on a real cluster.

Scripted scenario (same seed for both modes): one dedicated 4-CPU kwok node holds four
endless 1-CPU ScavengerJobs (duration 20s, 4 priority levels, so every app checkpoints
every 20 s after its start). Rounds: once all four run, wait a seeded random time from 2 s
to --max-delay (default 14 s), then a default-priority pod needing 1 CPU arrives for 6 s;
the real kube-scheduler preempts one SJ pod. The work that victim lost is the time since
its last checkpoint boundary: (preemption time - run start) mod duration. The interrupted
SJ queues again and restarts once the room is back.

Steering on: runs at or above level 1 are protected by their PodDisruptionBudget
(--protect-level 1). Steering off: nothing is ever protected (--protect-level 4), so the
scheduler alone picks the victim (the youngest pod).

Usage (KUBECONFIG pointing at the local cluster; takes a few minutes):
    python benchmarks/bench_steering.py [--rounds 10] [--seed 7] [--max-delay 14] [--verbose] [--json PATH] [--save]

``--json``/``--save`` write the figures as data (``benchmarks/harness/results.py``).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config

from benchmarks.harness import results
from benchmarks.harness.kube import claimed, create_namespace
from tests.e2e.kube import dedicated_node, sim_annotations, sim_container, wait_for
from tests.e2e.sj import InProcessOperator, create_sj, run_pods, sj_spec, status, test_config

DURATION = 20.0
SJS = ("a", "b", "c", "d")


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _succeeded(core: client.CoreV1Api, ns: str, name: str) -> bool:
    """Whether pod ``name`` has succeeded."""
    return bool(core.read_namespaced_pod(name, ns).status.phase == "Succeeded")


def _victim(core: client.CoreV1Api, api: client.ApiClient, ns: str) -> tuple[str, float] | None:
    """(SJ name, seconds since its last checkpoint boundary) of a freshly preempted SJ pod."""
    for name in SJS:
        st = status(api, ns, name)
        for pod in run_pods(api, ns, st.get("jobName", "")):
            cond = next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"), None)
            if cond is None or cond.status != "True" or pod.status.start_time is None:
                continue
            age = (cond.last_transition_time - pod.status.start_time).total_seconds()
            return name, age % DURATION
    return None


def _full(core: client.CoreV1Api, api: client.ApiClient, ns: str) -> bool:
    """All four SJs run (none is being interrupted), so the next arrival must preempt one."""
    for name in SJS:
        st = status(api, ns, name)
        if st.get("phase") != "Running" or st.get("message", "").startswith("interrupting"):
            return False
        pods = run_pods(api, ns, st.get("jobName", ""))
        if len(pods) != 1 or pods[0].metadata.deletion_timestamp or pods[0].status.phase != "Running":
            return False
    return True


def run_mode(api: client.ApiClient, protect_level: int, rounds: int, seed: int,
             verbose: bool = False, max_delay: float = 14.0) -> list[float]:
    core = client.CoreV1Api(api)
    rng = random.Random(seed)
    ns = create_namespace(core, "bench-steer")
    op = InProcessOperator(test_config(protect_level=protect_level, tick=timedelta(seconds=1)))
    op.start()
    lost: list[float] = []
    try:
        with dedicated_node(cpu="4") as node:
            pinned = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
            for name in SJS:
                create_sj(api, ns, name, sj_spec(run_for=None, cpu="1", duration=f"{int(DURATION)}s",
                                                  priorityLevels=4, **pinned))
                time.sleep(rng.uniform(1, 5))
            for i in range(rounds):
                wait_for("the node full of running SJ pods", lambda: _full(core, api, ns), timeout=120)
                time.sleep(rng.uniform(2, max_delay))
                if verbose:
                    now = datetime.now(UTC)
                    for n in SJS:
                        st = status(api, ns, n)
                        start = _parse(st["priorityStartOverTimestamp"])
                        labels = [p.metadata.labels.get("scavenger.dev/protected") for p in
                                  run_pods(api, ns, st["jobName"])]
                        print(f"    {n}: unsaved {(now - start).total_seconds():5.1f}s level {st['runningPriority']} "
                              f"protected {st['protected']} pod label {labels}", flush=True)
                owner = f"owner-{i}"
                core.create_namespaced_pod(ns, {
                    "metadata": {"name": owner, "annotations": sim_annotations(run_for="6s")},
                    "spec": {"restartPolicy": "Never", **pinned,
                             "containers": [sim_container(cpu="1", run_for="6s")]},
                })
                name, seconds = wait_for("a victim", lambda: _victim(core, api, ns), timeout=60)
                lost.append(seconds)
                print(f"  protect-level {protect_level} round {i + 1}: victim {name}, lost {seconds:5.1f} s",
                      flush=True)
                wait_for("owner done", partial(_succeeded, core, ns, owner), timeout=60)
                wait_for("victim's pods gone", lambda: _victim(core, api, ns) is None, timeout=60)
    finally:
        op.stop()
        core.delete_namespace(ns)
    return lost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-delay", type=float, default=14.0,
                        help="arrivals come 2..this many seconds after the node is full again")
    parser.add_argument("--only-steering", action="store_true", help="skip the run with steering off")
    parser.add_argument("--verbose", action="store_true", help="print every SJ's state at each arrival")
    results.add_arguments(parser)
    args = parser.parse_args()
    config.load_kube_config(os.environ.get("KUBECONFIG"))
    api = client.ApiClient()
    from tests.e2e.conftest import REPO  # noqa: F401  (the CRD must be applied: kubectl apply -f crds/)
    with claimed(api, "bench_steering"):
        lost = {}
        modes = [("steering on (protect level 1)", 1), ("steering off (never protected)", 4)]
        for label, level in modes[:1] if args.only_steering else modes:
            print(f"{label}:", flush=True)
            lost[label] = run_mode(api, level, args.rounds, args.seed, args.verbose, args.max_delay)
    print(f"\nwork lost per interruption (seconds since the victim's last checkpoint; duration {DURATION:.0f}s, "
          f"{args.rounds} interruptions each, arrivals 2-{args.max_delay:g}s after the node is full, "
          f"seed {args.seed}):")
    print("| mode | mean | median | max | total |\n| --- | --- | --- | --- | --- |")
    figures = []
    for label, values in lost.items():
        print(f"| {label} | {statistics.mean(values):.1f} | {statistics.median(values):.1f} | "
              f"{max(values):.1f} | {sum(values):.1f} |")
        figures += [results.figure(f"{label}: work lost per interruption, {name}", value, "s") for name, value in
                    (("mean", statistics.mean(values)), ("median", statistics.median(values)), ("max", max(values)),
                     ("total", sum(values)))]
    params = results.parameters(args, duration_seconds=DURATION)
    results.save(args, results.result("bench_steering", params, figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
