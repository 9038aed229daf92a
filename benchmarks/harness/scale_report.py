"""What ``bench_scale`` keeps of a run and shows of it (`conclude`): what its runs measured (`Result`), the figures
of its result with the goals beside them (`GOALS`, `scale_figures`), the table it prints (`report`) and the plot of
its timelines (`plot`, ``--plot``).

The script states the workload and measures it; how the measurements are shown is here, so that a change to the
table, the goals or the plot leaves the runs alone.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import results
from benchmarks.harness.processes import CpuSince
from benchmarks.harness.progress import log


@dataclass
class Result:
    """What the runs measured, as they measure it; `report`, `scale_figures` and `plot` show it."""
    figures: dict[str, Any] = field(default_factory=dict)
    floor_created: list[float] = field(default_factory=list)
    """Seconds after the first create at which each plain Job existed."""
    ceiling_created: list[float] = field(default_factory=list)
    """Seconds after the first create at which each SJ and its plain Job existed (``--ceiling``)."""
    operator_jobs: list[float] = field(default_factory=list)
    """Seconds after the first SJ create at which a watch saw each SJ's Job."""
    latencies: list[float] = field(default_factory=list)
    """Per SJ: seconds from its create call returning to its Job seen."""
    lost_plain: list[float] = field(default_factory=list)
    lost_operator: list[float] = field(default_factory=list)
    kueue_started: list[float] = field(default_factory=list)
    """Seconds after the first create at which Kueue let each Job start (unsuspended it)."""
    kueue_latencies: list[float] = field(default_factory=list)


def creation_figures(result: Result, run: str, units: int, took: float, apiserver: CpuSince) -> None:
    """``run``'s creation figures: its seconds, units per second, and the API server's cores meanwhile."""
    result.figures[f"{run}_seconds"] = took
    result.figures[f"{run}_per_second"] = units / took
    if (cpu := apiserver.seconds()) is not None:
        result.figures[f"{run}_apiserver_cores"] = cpu / took


def conclude(args: argparse.Namespace, result: Result, *, units: int, pods: int, high_pods: int) -> None:
    """The end of a run of ``args`` (bench_scale's arguments): the table printed (`report`), the work lost added to
    the figures, the result written where ``--json`` and ``--save`` say, the plot where ``--plot`` says."""
    report(result, units=units, pods=pods, high_pods=high_pods, nodes=args.nodes)
    result.figures["work_lost_operator_pod_seconds"] = sum(result.lost_operator)
    if not args.no_floor:
        result.figures["pods_preempted_plain"] = len(result.lost_plain)
        result.figures["work_lost_plain_pod_seconds"] = sum(result.lost_plain)
    params = results.parameters(args, units_pods=pods, high_priority_pods=high_pods,
                                **{k: v for k, v in result.figures.items() if isinstance(v, str)})
    results.save(args, results.result("bench_scale", params, scale_figures(result.figures, args.sjs)))
    if args.plot:
        plot(result, args.plot, units=units, high_pods=high_pods)


# --- the result's figures and their goals ---------------------------------------------------------

GOALS: dict[str, results.Goal] = {
    "operator_to_floor": {"min": 0.5},
    "work_lost_to_plain": {"max": 0.3},
}
"""The project's goals: the operator launches at least half as fast as the floor (the mean of its two timings),
and loses at most 0.3 of the work plain Jobs lose to the same stream."""
RSS_GOAL_MIB = 500e6 / 2**20
"""Peak RSS under 500 MB (476.8 MiB), set for 10,000 units (``RSS_GOAL_UNITS``)."""
RSS_GOAL_UNITS = 10_000
UNITS = (("_per_second", "/s"), ("_seconds", "s"), ("_cores", "cores"), ("_mib", "MiB"), ("_p50", "s"), ("_p99", "s"),
         ("_le", "s"))


def _unit(key: str) -> str:
    return next((unit for suffix, unit in UNITS if key.endswith(suffix) or f"{suffix}_" in key), "")


def scale_figures(figures: Mapping[str, Any], units: int) -> list[dict[str, Any]]:
    """The run's figures (``Result.figures``) as the result's, with the ratios its goals are set on; names that are
    not numbers (Kueue's version) are left to the parameters."""
    out: list[dict[str, Any]] = []
    for key, value in figures.items():
        if isinstance(value, Mapping):
            out += [results.figure(f"{key}: {name}", n) for name, n in value.items()]
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            goal = {"max": RSS_GOAL_MIB} if key == "operator_peak_rss_mib" and units >= RSS_GOAL_UNITS else None
            out.append(results.figure(key, value, _unit(key), goal))
    if figures.get("floor_mean_per_second"):
        ratio = figures["operator_per_second"] / figures["floor_mean_per_second"]
        out.append(results.figure("operator_to_floor", ratio, "", GOALS["operator_to_floor"]))
    if figures.get("work_lost_plain_pod_seconds"):
        out.append(results.figure("work_lost_to_plain", figures["work_lost_operator_pod_seconds"]
                                  / figures["work_lost_plain_pod_seconds"], "", GOALS["work_lost_to_plain"]))
    return out


# --- the table ------------------------------------------------------------------------------------

def report(result: Result, *, units: int, pods: int, high_pods: int, nodes: int) -> None:
    """Prints the run side by side (plain Jobs, the operator; the ceiling and Kueue when they ran): ``units`` of
    work, ``pods`` pods, on ``nodes`` kwok nodes, ``high_pods`` high-priority pods in the stream."""
    f = result.figures
    print()
    print(f"{units} units of work ({f.get('gangs', 0)} gangs of 2-16, {pods} pods) on {nodes} kwok "
          f"nodes; {high_pods} high-priority pods in the stream")
    floor = f.get("floor_mean_per_second")
    rows = [
        ("throughput (units/s)", _figure(f, "floor_mean_per_second", ".1f"), f"{f['operator_per_second']:.1f}",
         f"{f['operator_per_second'] / floor:.2f} of the floor (the mean of {f['floor_per_second']:.1f} before "
         f"the operator's run and {f['floor_after_per_second']:.1f} after it)" if floor else
         "no floor run (--no-floor)"),
        ("all Jobs exist after (s)", _figure(f, "floor_seconds", ".1f"), f"{f['operator_seconds']:.1f}", ""),
        *([("the ceiling: SJ + its Job, no operator", "-", f"{f['ceiling_per_second']:.1f} units/s",
            (f"{f['ceiling_per_second'] / floor:.2f} of the floor; " if floor else "")
            + f"the operator reached {f['operator_per_second'] / f['ceiling_per_second']:.2f} of it")]
          if "ceiling_per_second" in f else []),
        *([("the ceiling watched by a standby replica", "-", f"{f['ceiling_watched_per_second']:.1f} units/s",
            (f"{f['ceiling_watched_per_second'] / floor:.2f} of the floor; " if floor else "")
            + f"the replica's CPU {f['standby_cpu_seconds']:.1f} s; the operator reached "
            f"{f['operator_per_second'] / f['ceiling_watched_per_second']:.2f} of it")]
          if "ceiling_watched_per_second" in f else []),
        ("99.5% running after (s)", _figure(f, "floor_running_seconds", ".0f"),
         f"{f.get('operator_running_seconds', float('nan')):.0f}", "pods ready / SJs Running"),
        ("create -> Job p50 / p99 (s)", "-", f"{f['latency_p50']:.1f} / {f['latency_p99']:.1f}", ""),
        ("Job -> its first sync p50 / p99 (s)", _pair(f, "floor_job_sync"), _pair(f, "operator_job_sync"),
         "the Job controller's status.startTime"),
        ("API server CPU (cores)", _figure(f, "floor_apiserver_cores", ".2f"),
         f"{f.get('operator_apiserver_cores', float('nan')):.2f}", ""),
        ("operator CPU until every Job exists (s)", "-", _figure(f, "operator_cpu_seconds", ".1f"),
         f"{_figure(f, 'operator_gc_seconds_to_jobs', '.1f')} s of wall time in GC meanwhile"),
        ("client writes per unit", "1", f"1 + {f['writes_per_sj']:.2f} by the operator",
         f"{f['writes_per_sj_without_gang_services']:.2f} without gang Services"),
        ("operator writes per unit to 99.5% Running", "-", _figure(f, "writes_per_sj_to_running", ".2f"),
         "Events and steering included"),
        ("operator peak RSS (MiB)", "-", f"{f['operator_peak_rss_mib']:.0f}", ""),
        ("operator's loop held at most (s)", "-", f"<= {_figure(f, 'loop_lag_worst_le', 'g')}",
         f"{_figure(f, 'loop_lag_over_1s', '.0f')} lags over 1 s (scavenger_event_loop_lag_seconds)"),
        ("operator's full GC pauses at most (s)", "-", f"<= {_figure(f, 'gc_full_worst_le', 'g')}",
         f"{_figure(f, 'gc_full_over_1s', '.0f')} over 1 s; {_figure(f, 'gc_seconds', '.1f')} s in all collections"),
        ("operator's GC by generation (s in n)", "-", " / ".join(
            f"{_figure(f, f'gc_seconds_gen{g}', '.1f')} in {_figure(f, f'gc_count_gen{g}', '.0f')}" for g in range(3)),
         "young / middle / full; freed " + " / ".join(_figure(f, f"gc_collected_gen{g}", ".3g") for g in range(3))),
        ("pods preempted / SJ runs interrupted", f"{len(result.lost_plain)}" if floor else "-",
         f"{f['operator_interruptions']:.0f}", ""),
        ("work lost (pod-seconds)", f"{sum(result.lost_plain):.0f}" if floor else "-",
         f"{sum(result.lost_operator):.0f}",
         f"{_ratio(sum(result.lost_operator), sum(result.lost_plain))} of plain Jobs'" if floor else ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'':<{width}}  {'plain Jobs':>12}  {'operator':>28}  ")
    for label, plain, operator, note in rows:
        print(f"{label:<{width}}  {plain:>12}  {operator:>28}  {note}")
    print("operator API calls per SJ: " + ", ".join(f"{op} {n:.2f}" for op, n in f["calls_per_sj"].items()))
    if "kueue_seconds" in f:
        print(f"Kueue {f['kueue_version']}, the same burst as suspended Jobs: all started after "
              f"{f['kueue_seconds']:.1f}s "
              f"({f['kueue_per_second']:.1f}/s"
              + (f", {f['kueue_per_second'] / floor:.2f} of the floor" if floor else "") + "); "
              f"create -> started p50 {f['kueue_latency_p50']:.1f}s p99 {f['kueue_latency_p99']:.1f}s; API server "
              f"{f.get('kueue_apiserver_cores', float('nan')):.2f} cores; Kueue CPU {f['kueue_cpu_seconds']:.1f}s, "
              f"peak RSS {f['kueue_peak_rss_mib']:.0f} MiB")


def _pair(figures: Mapping[str, Any], key: str) -> str:
    """``key``'s p50 / p99, or "-" when the run did not measure them."""
    if f"{key}_p50" not in figures:
        return "-"
    return f"{figures[f'{key}_p50']:.0f} / {figures[f'{key}_p99']:.0f}"


def _figure(figures: Mapping[str, Any], key: str, spec: str) -> str:
    return format(figures[key], spec) if key in figures else "-"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


# --- the plot -------------------------------------------------------------------------------------

def plot(result: Result, path: Path, *, units: int, high_pods: int) -> None:
    """The run as a PNG at ``path`` (``--plot``; matplotlib): the Jobs existing over time after the burst of
    ``units``, created -> running Job, and the work lost to the ``high_pods`` high-priority pods."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.5))
    if result.floor_created:
        left.plot(sorted(result.floor_created), range(1, len(result.floor_created) + 1), label="plain Jobs (the floor)")
    left.plot(result.operator_jobs, range(1, len(result.operator_jobs) + 1), label="ScavengerJobs' Jobs")
    if result.ceiling_created:
        left.plot(sorted(result.ceiling_created), range(1, len(result.ceiling_created) + 1),
                  label="SJ + Job, no operator (the ceiling)")
    if result.kueue_started:
        left.plot(result.kueue_started, range(1, len(result.kueue_started) + 1), label="Kueue: Jobs started")
    left.set(title=f"Jobs existing after a burst of {units}", xlabel="seconds after the first create", ylabel="Jobs")
    left.legend()
    middle.plot(result.latencies, [i / len(result.latencies) for i in range(1, len(result.latencies) + 1)],
                label="operator: SJ created -> its Job", color="tab:orange")
    if result.kueue_latencies:
        middle.plot(result.kueue_latencies, [i / len(result.kueue_latencies)
                                             for i in range(1, len(result.kueue_latencies) + 1)],
                    label="Kueue: Job created -> started", color="tab:green")
        middle.legend()
    middle.set(title="created -> running Job (after the burst)", xlabel="seconds", ylabel="fraction of units")
    middle.axvline(result.figures["latency_p99"], linestyle=":", color="grey")
    right.bar(["plain Jobs", "operator"], [sum(result.lost_plain) / 3600, sum(result.lost_operator) / 3600],
              color=["tab:blue", "tab:orange"])
    right.set(title=f"work lost to {high_pods} high-priority pods", ylabel="pod-hours")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    log(f"plot written to {path}")
