"""How much capacity wasted runs burn, with and without the anti-thrash backoff (no cluster needed).

Run: ``python benchmarks/bench_thrash.py [--hours H] [--seeds N] [--json PATH] [--save]``.

A simulated pool of ``--slots`` one-CPU slots is shared by endless single-pod SJs (checkpoint period
20 minutes) and a bursty high-priority load: calm stretches with a few high-priority pods, then bursts
in which they arrive quickly for a few minutes. A high-priority pod that finds no free slot preempts the
youngest SJ run (the scheduler's choice among equals), and a freed slot goes to the next waiting SJ at
once: without a backoff, a burst preempts run after run that has just started. A run interrupted before
it completed a checkpoint period saved nothing: its time was burnt. The backoff is the operator's own
(``sj_operator.policy.lifecycle.thrash_delay``), so the figures follow the shipped defaults.
"""
from __future__ import annotations

import argparse
import heapq
import random
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's code, not the installed one's

from benchmarks.harness import results  # noqa: E402
from sj_operator.policy.lifecycle import LifecycleConfig, thrash_delay  # noqa: E402

TICK = 5  # seconds
PERIOD = 20 * 60  # each SJ checkpoints every 20 minutes


@dataclass
class SJ:
    name: int
    started: int | None = None
    wasted_runs: int = 0
    not_before: int = 0
    interruptions: int = 0


def _preempt(victim: SJ, now: int, cfg: LifecycleConfig) -> tuple[int, int]:
    """The victim's run ends: (seconds burnt, seconds saved by its checkpoints); it backs off if wasted."""
    ran = now - (victim.started or now)
    victim.wasted_runs = victim.wasted_runs + 1 if ran < PERIOD else 0
    victim.interruptions += 1
    victim.started = None
    victim.not_before = now + int(thrash_delay(victim.wasted_runs, cfg).total_seconds())
    return ran % PERIOD, ran - ran % PERIOD


def simulate(seed: int, hours: float, slots: int, sjs: int, cfg: LifecycleConfig) -> dict[str, float]:
    rng = random.Random(seed)
    end = int(hours * 3600)
    jobs = [SJ(i) for i in range(sjs)]
    high: list[int] = []  # end times of the running high-priority pods (a heap)
    burnt = useful = 0
    next_arrival = 0
    burst_until = -1
    next_burst = rng.randint(10 * 60, 40 * 60)
    for now in range(0, end, TICK):
        while high and high[0] <= now:
            heapq.heappop(high)
        if now >= next_burst:
            burst_until = now + rng.randint(3 * 60, 8 * 60)
            next_burst = burst_until + rng.randint(15 * 60, 45 * 60)
        rate = 1 / 10 if now < burst_until else 1 / 600  # arrivals per second
        while next_arrival <= now:
            running = sorted((j for j in jobs if j.started is not None), key=lambda j: -(j.started or 0))
            if len(high) + len(running) >= slots and running:  # preempt the youngest run
                lost, saved = _preempt(running[0], now, cfg)
                burnt, useful = burnt + lost, useful + saved
            if len(high) < slots:
                heapq.heappush(high, now + rng.randint(20, 90))
            next_arrival += max(1, int(rng.expovariate(rate)))
        free = slots - len(high) - sum(1 for j in jobs if j.started is not None)
        waiting = sorted((j for j in jobs if j.started is None and j.not_before <= now),
                         key=lambda j: (-j.interruptions, j.name))
        for job in waiting[:max(free, 0)]:
            job.started = now
    for job in jobs:  # what the runs still going have saved so far
        if job.started is not None:
            useful += (end - job.started) - (end - job.started) % PERIOD
    used = burnt + useful
    return {"burnt_share": burnt / used if used else 0.0, "useful_hours": useful / 3600,
            "interruptions": sum(j.interruptions for j in jobs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--sjs", type=int, default=16)
    results.add_arguments(parser)
    args = parser.parse_args()
    modes = {"off": LifecycleConfig(thrash_backoff=timedelta(0)), "on (defaults 30s..10m)": LifecycleConfig()}
    print(f"{args.slots} slots, {args.sjs} endless SJs (period 20m), bursty high-priority load, "
          f"{args.hours:g} h simulated, {args.seeds} seeds")
    print("| anti-thrash backoff | capacity burnt by wasted runs | useful SJ hours | interruptions |")
    print("| --- | --- | --- | --- |")
    figures: list[dict[str, Any]] = []
    for label, cfg in modes.items():
        runs = [simulate(seed, args.hours, args.slots, args.sjs, cfg) for seed in range(args.seeds)]
        mean = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
        print(f"| {label} | {mean['burnt_share']:.1%} | {mean['useful_hours']:.0f} | {mean['interruptions']:.0f} |")
        figures += [results.figure(f"backoff {label}: capacity burnt by wasted runs", mean["burnt_share"] * 100, "%"),
                    results.figure(f"backoff {label}: useful SJ hours", mean["useful_hours"], "h"),
                    results.figure(f"backoff {label}: interruptions", mean["interruptions"])]
    results.save(args, results.result("bench_thrash", results.parameters(args), figures))


if __name__ == "__main__":
    main()
