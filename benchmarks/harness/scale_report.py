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


class Keeper:
    """Writes a run's result where ``--json`` and ``--save`` say, to the same files each time: after each of its
    runs (`ran`: what it has so far, the runs named in its note), then whole (`conclude`). A benchmark stopped part
    way (at 10,000 units a whole run takes hours) keeps what its finished runs measured."""

    def __init__(self, args: argparse.Namespace, result: Result, *, pods: int, high_pods: int) -> None:
        self.args, self.result, self.pods, self.high_pods = args, result, pods, high_pods
        self.done: list[str] = []
        self.paths: list[Path] | None = None
        self.measured = results.commit()
        """The checkout as the run began: what every write of the result names (`results.result`)."""

    def data(self, note: str | None) -> dict[str, Any]:
        figures = self.result.figures
        figures["work_lost_operator_pod_seconds"] = sum(self.result.lost_operator)
        if not self.args.no_floor:
            figures["pods_preempted_plain"] = len(self.result.lost_plain)
            figures["work_lost_plain_pod_seconds"] = sum(self.result.lost_plain)
        params = results.parameters(self.args, units_pods=self.pods, high_priority_pods=self.high_pods,
                                    **{k: v for k, v in figures.items() if isinstance(v, str)})
        once = ("The floor ran once, before the operator's run (--floor-once: A-B, not A-B-A); the operator's "
                "ratios are taken against it alone." if getattr(self.args, "floor_once", False) else None)
        return results.result("bench_scale", params, scale_figures(figures, self.args.sjs),
                              note=" ".join(n for n in (note, once) if n) or None, measured=self.measured)

    def write(self, note: str | None) -> None:
        data = self.data(note)
        if self.paths is None:
            self.paths = results.targets(self.args, data)
        results.save(self.args, data, self.paths)

    def ran(self, run: str) -> None:
        """``run`` ended: the result so far is written, its note naming the runs that ended."""
        self.done.append(run)
        self.write(f"Part of a run: it stopped after {', '.join(self.done)}; what it had not run is missing.")

    def conclude(self, units: int) -> None:
        """The end of the run: the table printed (`report`), the result written whole, the plot where ``--plot``
        says."""
        report(self.result, units=units, pods=self.pods, high_pods=self.high_pods, nodes=self.args.nodes)
        self.write(None)
        if self.args.plot:
            plot(self.result, self.args.plot, units=units, high_pods=self.high_pods)


# --- the result's figures and their goals ---------------------------------------------------------

GOALS: dict[str, results.Goal] = {
    "operator_to_floor": {"min": 0.5},
    "operator_running_to_floor": {"max": 1.2},
    "operator_start_timeouts": {"max": 0},
    "loop_lag_over_1s": {"max": 0},
    "operator_events_dropped": {"max": 0},
    "work_lost_to_plain": {"max": 0.3},
}
"""The project's goals (issue 42), at every size: the operator launches at least half as fast as the floor (the
mean of its two timings, or the one with ``--floor-once``), and 99.5 % of its SJs run within 1.2 times the floor's
time to 99.5 % of its pods running (the same mean); over the run, it deletes no run for a start timeout (the timeout
counts from the scheduler's decision about every pod, so any one counted is one the goal forbids), its event loop is
never held over a second and it drops no Event; and it loses at most 0.3 of the work plain Jobs lose to the same
stream."""
RSS_GOAL_MIB = 400e6 / 2**20
"""The operator's peak RSS under 400 MB (381.5 MiB), set for 10,000 units (``RSS_GOAL_UNITS``) and more."""
RSS_GOAL_UNITS = 10_000
RUNNING = 0.995
"""The share of the work whose running ends a run's time to running: its pods ready (plain Jobs, the ceiling's,
Kueue's), or its SJs Running as the operator counts them."""
SHAPE_PARTS = ("owner", "failure-policy", "band", "env")
"""The parts of the operator's Job that ``bench_scale --ceiling-jobs-without`` takes out one at a time."""


def without_run(part: str) -> str:
    """The name of the run without ``part`` (one of `SHAPE_PARTS`), the prefix of its figures."""
    return f"ceiling_jobs_without_{part.replace('-', '_')}"


WITHOUT_RUNS = tuple(without_run(part) for part in SHAPE_PARTS)
"""Those runs' names."""
RATIOS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("operator_to_floor", "operator_per_second", ("floor_mean_per_second",)),
    ("kueue_to_floor", "kueue_per_second", ("floor_mean_per_second",)),
    ("operator_running_to_floor", "operator_running_seconds", ("floor_mean_running_seconds", "floor_running_seconds")),
    ("ceiling_running_to_floor", "ceiling_running_seconds", ("floor_mean_running_seconds", "floor_running_seconds")),
    ("ceiling_shaped_running_to_floor", "ceiling_shaped_running_seconds",
     ("floor_mean_running_seconds", "floor_running_seconds")),
    ("ceiling_shaped_jobs_running_to_floor", "ceiling_shaped_jobs_running_seconds",
     ("floor_mean_running_seconds", "floor_running_seconds")),
    ("ceiling_recorded_running_to_floor", "ceiling_recorded_running_seconds",
     ("floor_mean_running_seconds", "floor_running_seconds")),
    ("ceiling_watched_running_to_floor", "ceiling_watched_running_seconds",
     ("floor_mean_running_seconds", "floor_running_seconds")),
    *((f"{run}_running_to_floor", f"{run}_running_seconds", ("floor_mean_running_seconds", "floor_running_seconds"))
      for run in WITHOUT_RUNS),
    ("kueue_running_to_floor", "kueue_running_seconds", ("floor_mean_running_seconds", "floor_running_seconds")),
)
"""The side-by-side figures: each a figure of a run over the floor's (the first of those measured: the mean of
the two floors, or the first floor alone in a result from before the second was timed to running)."""
UNITS = (("_per_second", "/s"), ("_seconds", "s"), ("_cores", "cores"), ("_mib", "MiB"), ("_p50", "s"), ("_p99", "s"),
         ("_le", "s"))


def _unit(key: str) -> str:
    return next((unit for suffix, unit in UNITS if key.endswith(suffix) or f"{suffix}_" in key), "")


def goal(key: str, units: int) -> results.Goal | None:
    """The goal of figure ``key`` in a run of ``units`` (`GOALS`; the peak RSS's from `RSS_GOAL_UNITS` on)."""
    if key == "operator_peak_rss_mib":
        return {"max": RSS_GOAL_MIB} if units >= RSS_GOAL_UNITS else None
    return GOALS.get(key)


def ratios(figures: Mapping[str, Any]) -> dict[str, float]:
    """The side-by-side figures (`RATIOS`) the run measured both sides of, and the work lost to the stream against
    plain Jobs'."""
    out: dict[str, float] = {}
    for name, key, floors in RATIOS:
        floor = next((figures[f] for f in floors if figures.get(f)), None)
        if floor and key in figures:
            out[name] = figures[key] / floor
    if figures.get("work_lost_plain_pod_seconds"):
        out["work_lost_to_plain"] = figures["work_lost_operator_pod_seconds"] / figures["work_lost_plain_pod_seconds"]
    return out


def scale_figures(figures: Mapping[str, Any], units: int) -> list[dict[str, Any]]:
    """The run's figures (``Result.figures``) as the result's, then its ratios (`ratios`), each with its goal
    (`goal`); names that are not numbers (Kueue's version) are left to the parameters."""
    out: list[dict[str, Any]] = []
    for key, value in [*figures.items(), *ratios(figures).items()]:
        if isinstance(value, Mapping):
            out += [results.figure(f"{key}: {name}", n) for name, n in value.items()]
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out.append(results.figure(key, value, _unit(key), goal(key, units)))
    return out


# --- the table ------------------------------------------------------------------------------------

Row = tuple[str, str, str, str, str]
"""A row of the table: what it shows, then plain Jobs', the operator's and Kueue's figure, and a note."""


def report(result: Result, *, units: int, pods: int, high_pods: int, nodes: int) -> None:
    """Prints the run side by side (plain Jobs, the operator, Kueue when it ran; the ceiling when it ran), then its
    goals: ``units`` of work, ``pods`` pods, on ``nodes`` kwok nodes, ``high_pods`` high-priority pods in the
    stream."""
    f = result.figures
    print()
    print(f"{units} units of work ({f.get('gangs', 0)} gangs of 2-16, {pods} pods) on {nodes} kwok "
          f"nodes; {high_pods} high-priority pods in the stream")
    table = rows(result)
    kueue = "kueue_seconds" in f
    header: Row = ("", "plain Jobs", "operator", "Kueue", "")
    widths = [max(len(row[i]) for row in (header, *table)) for i in range(4)]
    for row in (header, *table):
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].rjust(widths[2])]
        if kueue:
            cells.append(row[3].rjust(widths[3]))
        print("  ".join([*cells, row[4]]).rstrip())
    if "calls_per_sj" in f:
        print("operator API calls per SJ: " + ", ".join(f"{op} {n:.2f}" for op, n in f["calls_per_sj"].items()))
    if "writes_per_sj_to_running_by" in f:
        print("operator writes per SJ to 99.5% Running: "
              + ", ".join(f"{op} {n:.2f}" for op, n in f["writes_per_sj_to_running_by"].items()))
    if kueue:
        print(f"Kueue {f.get('kueue_version', '')}: the same burst as suspended Jobs, admitted by a ClusterQueue "
              f"holding the operator's threshold of the nodes; no stream")
    print("goals:")
    for line in goal_lines(f, units):
        print(f"  {line}")


def rows(result: Result) -> list[Row]:
    """The table's rows (`Row`): what the floor, the operator and Kueue each measured ("-": not measured, or nothing
    to measure, as a plain Job's start timeouts), the ceiling's beside them."""
    f = result.figures
    side = ratios(f)
    floor = "floor_seconds" in f
    ran = "floor_after_per_second" in f
    floor_running = "floor_mean_running_seconds" if "floor_mean_running_seconds" in f else "floor_running_seconds"
    throughput = (f"{side['operator_to_floor']:.2f} of the floor (the mean of {f['floor_per_second']:.1f} before "
                  f"the operator's run and {f['floor_after_per_second']:.1f} after it)" if ran
                  else f"{side['operator_to_floor']:.2f} of the floor (run once, before the operator's run: "
                       f"--floor-once)" if "operator_to_floor" in side else "no floor run (--no-floor)")
    if "kueue_to_floor" in side:
        throughput += f"; Kueue {side['kueue_to_floor']:.2f} of it"
    running = (f"the operator at {side['operator_running_to_floor']:.2f} of the floor's (goal <= "
               f"{GOALS['operator_running_to_floor']['max']:g}"
               + (f"; the floor {f['floor_running_seconds']:.0f} s before and {f['floor_after_running_seconds']:.0f} "
                  f"s after" if "floor_after_running_seconds" in f else "") + ")"
               if "operator_running_to_floor" in side else "")
    if "kueue_running_to_floor" in side:
        running += f"; Kueue {side['kueue_running_to_floor']:.2f}"
    return [
        ("throughput (units/s)", _figure(f, "floor_mean_per_second", ".1f"), _figure(f, "operator_per_second", ".1f"),
         _figure(f, "kueue_per_second", ".1f"), throughput),
        ("the last Job after (s)", _figure(f, "floor_seconds", ".1f"), _figure(f, "operator_seconds", ".1f"),
         _figure(f, "kueue_seconds", ".1f"), "from the first create; Kueue's: started (unsuspended)"),
        *_ceiling_rows(f),
        (f"{RUNNING:.1%} running after (s)", _figure(f, floor_running, ".0f"),
         _figure(f, "operator_running_seconds", ".0f"), _figure(f, "kueue_running_seconds", ".0f"),
         "; ".join(n for n in ("pods ready; the operator's: SJs Running", running) if n)),
        ("create -> Job p50 / p99 (s)", "0 / 0" if floor else "-", _pair(f, "latency", ".1f"),
         _pair(f, "kueue_latency", ".1f"), "a plain Job is what is created; Kueue's: created -> started"),
        ("Job -> its first sync p50 / p99 (s)", _pair(f, "floor_job_sync"), _pair(f, "operator_job_sync"), "-",
         "the Job controller's status.startTime"),
        ("launches paced (worker-s)", "-", _figure(f, "operator_launch_paced", ".0f"), "-",
         "launch workers' time waiting for the Job controller and the scheduler to take up the runs made"),
        ("start timeouts", "-", _figure(f, "operator_start_timeouts", ".0f"), "-",
         "runs deleted and retried (goal 0); a plain Job's pods wait"),
        ("API server CPU (cores)", _figure(f, "floor_apiserver_cores", ".2f"),
         _figure(f, "operator_apiserver_cores", ".2f"), _figure(f, "kueue_apiserver_cores", ".2f"), ""),
        ("controller CPU until the last Job (s)", "-", _figure(f, "operator_cpu_seconds", ".1f"),
         _figure(f, "kueue_cpu_seconds", ".1f"),
         f"{_figure(f, 'operator_gc_seconds_to_jobs', '.1f')} s of the operator's wall time in GC meanwhile"),
        ("client writes per unit", "1" if floor else "-",
         f"1 + {f['writes_per_sj']:.2f} by the operator" if "writes_per_sj" in f else "-", "-",
         f"{_figure(f, 'writes_per_sj_without_gang_services', '.2f')} without gang Services"),
        ("operator writes per unit to 99.5% Running", "-", _figure(f, "writes_per_sj_to_running", ".2f"), "-",
         "Events and steering included"),
        ("peak RSS (MiB)", "-", _figure(f, "operator_peak_rss_mib", ".0f"), _figure(f, "kueue_peak_rss_mib", ".0f"),
         f"the operator's goal: under {RSS_GOAL_MIB * 2**20 / 1e6:.0f} MB ({RSS_GOAL_MIB:.1f} MiB) from "
         f"{RSS_GOAL_UNITS:,} units"),
        ("operator's loop held at most (s)", "-", f"<= {_figure(f, 'loop_lag_worst_le', 'g')}", "-",
         f"{_figure(f, 'loop_lag_over_1s', '.0f')} lags over 1 s (goal 0; scavenger_event_loop_lag_seconds)"),
        ("Events dropped", "-", _figure(f, "operator_events_dropped", ".0f"), "-",
         f"at the operator's backlog cap (goal 0); {_figure(f, 'operator_events_replaced', '.0f')} steering Events "
         f"replaced by their SJ's next toggle"),
        ("operator's full GC pauses at most (s)", "-", f"<= {_figure(f, 'gc_full_worst_le', 'g')}", "-",
         f"{_figure(f, 'gc_full_over_1s', '.0f')} over 1 s; {_figure(f, 'gc_seconds', '.1f')} s in all collections"),
        ("operator's GC by generation (s in n)", "-", " / ".join(
            f"{_figure(f, f'gc_seconds_gen{g}', '.1f')} in {_figure(f, f'gc_count_gen{g}', '.0f')}" for g in range(3)),
         "-", "young / middle / full; freed "
         + " / ".join(_figure(f, f"gc_collected_gen{g}", ".3g") for g in range(3))),
        ("pods preempted / SJ runs interrupted", f"{len(result.lost_plain)}" if ran else "-",
         _figure(f, "operator_interruptions", ".0f"), "-", "Kueue: no stream"),
        ("work lost (pod-seconds)", f"{sum(result.lost_plain):.0f}" if ran else "-",
         f"{sum(result.lost_operator):.0f}", "-",
         f"{_ratio(sum(result.lost_operator), sum(result.lost_plain))} of plain Jobs'" if ran else ""),
    ]


def _ceiling_rows(f: Mapping[str, Any]) -> list[Row]:
    """The ceiling (``--ceiling``), the ceiling of the operator's objects (``--ceiling-as-operator``), that of its
    objects and records (``--ceiling-recorded``) and the ceiling watched by a standby replica (``--standby``), when
    they ran: the units per second, and the time to
    99.5 % of their pods running."""
    out: list[Row] = []
    floor, floor_running = f.get("floor_mean_per_second"), f.get("floor_mean_running_seconds")
    for run, what in (("ceiling", "the ceiling: SJ + its Job, no operator"),
                      ("ceiling_shaped", "the ceiling of the operator's objects (SJ, its Job and Service)"),
                      ("ceiling_recorded", "the ceiling of its objects and records (+ status, Events)"),
                      ("ceiling_watched", "the ceiling watched by a standby replica")):
        if f"{run}_per_second" not in f:
            continue
        rate = f[f"{run}_per_second"]
        note = [f"{rate / floor:.2f} of the floor" if floor else "",
                f"the replica's CPU {f['standby_cpu_seconds']:.1f} s" if run == "ceiling_watched" else "",
                f"the operator reached {f['operator_per_second'] / rate:.2f} of it" if "operator_per_second" in f
                else ""]
        out.append((what, "-", f"{rate:.1f} units/s", "-", "; ".join(n for n in note if n)))
        if f"{run}_running_seconds" in f:
            running = f[f"{run}_running_seconds"]
            out.append((f"  {RUNNING:.1%} of its pods running after", "-", f"{running:.0f} s", "-",
                        f"{running / floor_running:.2f} of the floor's" if floor_running else ""))
    return out


def goal_lines(figures: Mapping[str, Any], units: int) -> list[str]:
    """Each goal the run is judged on (`scale_figures`): the figure, its goal, and whether it is met."""
    judged = [f for f in scale_figures(figures, units) if "goal" in f]
    if not judged:
        return ["none judged (a figure a goal is set on was not measured)"]
    return [f"{f['metric']} {f['value']:.3g} ("
            + " and ".join(f"{'>=' if bound == 'min' else '<='} {limit:.4g}" for bound, limit in f["goal"].items())
            + (") met" if f["met"] else ") NOT MET") for f in judged]


def _pair(figures: Mapping[str, Any], key: str, spec: str = ".0f") -> str:
    """``key``'s p50 / p99, or "-" when the run did not measure them."""
    if f"{key}_p50" not in figures:
        return "-"
    return f"{figures[f'{key}_p50']:{spec}} / {figures[f'{key}_p99']:{spec}}"


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
