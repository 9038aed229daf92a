"""``docs/benchmarks.md``, rendered from the results kept in ``benchmarks/results/``.

Run: ``python -m benchmarks.harness.report [--output docs/benchmarks.md]`` (``make bench-report``); with
``--output`` the page's plots are written beside it (``benchmarks/*.svg``, drawn by ``plots``), without it the
page goes to stdout. ``tests/unit/test_bench_report.py`` fails when the committed page or a committed plot is
not what this renders from the committed results.

What each benchmark measures, how and its command are written here (``CATALOG``); its goals and its figures come
from the results themselves.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import plots, results, scale_report

PAGE = results.REPO / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Benchmark:
    name: str
    """The script's name, as in its results' ``benchmark``."""
    title: str
    command: str
    """How to run it and save its result."""
    needs: str
    """What it needs, and about how long it takes."""
    method: str
    """What it measures and how (Markdown)."""
    shown: tuple[str, ...] = ()
    """The figures the table shows, in this order (all when empty); every figure is in the result's file."""


LOOP_PASSES = ("steady-state pass (nothing changed)", "pass after one waiting SJ changed",
               "pass after another workload's pod landed (admission decided again)")
POLICY_SCENARIOS = ("partly used, threshold 70%", "idle cluster, threshold 100%", "busy cluster, threshold 90%",
                    "starving 64-pod head")

CATALOG: tuple[Benchmark, ...] = (
    Benchmark(
        "bench_loop", "One pass of the decision loop",
        "make bench-loop (python benchmarks/bench_loop.py --save)",
        "no cluster; a minute or two",
        "One pass of the decision loop (`Controller.reconcile`) over a simulated cluster that took the operator's "
        "own writes until it settled: 1,000 one-CPU SJs running on 1,000 nodes, 10,000 queued behind the 70 % "
        "threshold. Then passes that write nothing, as on most watch events, the clock one second later each "
        "time, 20 of each kind: nothing changed; one waiting SJ's object replaced; another workload's pod landed "
        "on a node, so the admission is decided again. The timed passes should make no API call. Last, one pass "
        "that is not steady: every running SJ's checkpoint period ends at once; timed until it returns (the "
        "background lane's simulated calls included), with the longest stretch it held the event loop. The "
        "garbage collector is set as the operator sets it (paused during a pass; `--collect-during-passes` "
        "lets it run). `--memory` measures instead what the controller keeps per SJ (`tracemalloc`, nothing "
        "timed, at most 4 KB per SJ). The goals of the medians are set for the default size (`--waiting 10000 "
        "--running 1000 --nodes 1000`: a quiet pass 5 ms, one SJ changed 10 ms, a pod landed 50 ms) and for "
        "`--scale` (100,000 waiting and 10,000 running SJs on 10,000 nodes: a quiet pass 10 ms, a pod landed, "
        "so an admission pass, 500 ms).",
        shown=(*(f"{what}: median" for what in LOOP_PASSES), "steady-state pass (nothing changed): p95",
               "API calls during the timed passes", "pass after every running SJ's checkpoint period ended at once",
               "the loop held at most, meanwhile", "bytes the controller keeps per SJ"),
    ),
    Benchmark(
        "bench_policy", "One admission pass of the pure policy",
        "make bench (python benchmarks/bench_policy.py --save)",
        "no cluster; a minute",
        "`decide()` over 5,000 waiting SJs (mostly single pods, some gangs of up to 16 pods, some interrupted, "
        "some backing off, some pinned to a zone) and 500 nodes of 8 CPU / 32Gi, in four scenarios, 50 passes "
        "each: the wall-clock time of a pass (min, median, p95), the peak memory one pass allocates "
        "(`tracemalloc`) and how many SJs it admits.",
        shown=tuple(f"{scenario}: {figure}" for scenario in POLICY_SCENARIOS
                    for figure in ("admitted", "median", "p95")),
    ),
    Benchmark(
        "bench_events", "What one watch event costs",
        "make bench-events (python benchmarks/bench_events.py --save)",
        "no cluster; half a minute",
        "What one watch event costs before any pass sees it: the operator's own watch caches' CPU per pod, Job "
        "and SJ event (the stream's line decoded, the view made and indexed: `sj_operator/caches.py`); kopf's "
        "processing of a node's modified event with the operator's handlers registered (nodes and quotas are "
        "what kopf still watches); the cyclic garbage kopf leaves per event (its `Body` and `Patch` point back "
        "at themselves); and the CPU young collections spend on that garbage, by how many events each gathers. "
        "CPU time of this process only (`time.process_time`).",
    ),
    Benchmark(
        "bench_thrash", "Capacity burnt by wasted runs",
        "python benchmarks/bench_thrash.py --save",
        "no cluster; seconds",
        "The share of SJ capacity burnt by wasted runs (interrupted before their first checkpoint) under a bursty "
        "high-priority load, simulated with the operator's own backoff function (`policy.lifecycle.thrash_delay`): "
        "16 one-CPU slots, 16 endless SJs with a 20-minute period, calm stretches of 15 to 45 minutes between "
        "bursts of 3 to 8 minutes in which a high-priority pod arrives every 10 s on average (each holding a "
        "slot 20 to 90 s) and preempts the youngest SJ run; 24 hours, 5 seeds; the anti-thrash backoff off and "
        "on.",
    ),
    Benchmark(
        "bench_e2e", "From an SJ's creation to its Job, on a cluster",
        "make bench-e2e (python benchmarks/bench_e2e.py --save, then with --burst)",
        "a cluster (`KUBECONFIG`); minutes",
        "End-to-end latency on the local cluster with the operator in-process at a 1 s tick: 50 SJs (cpu 50m, "
        "simulated 2 s run) in a fresh namespace; the time from the create call returning to a watch seeing the "
        "SJ's Job, and to the SJ's phase `Running`. Sequential creates one SJ at a time, each Running before the "
        "next; `--burst` creates all 50 at once (8 client threads). One unmeasured warm-up SJ runs first.",
    ),
    Benchmark(
        "bench_writes", "What one write costs the operator's process",
        "make bench-writes (python benchmarks/bench_writes.py --save)",
        "a cluster (`KUBECONFIG`); a minute",
        "Each round makes 600 suspended Jobs of a one-pod run's size (no pod is made), 24 at a time as the launch "
        "workers do, first through `Kube.create_child` (on the event loop, `Kube._send`), then through the "
        "kubernetes client in a worker thread (`Kube._call`, as every write went before 2026-11-27); the CPU "
        "time of the process (loop and worker threads together) per Job, and Jobs per second; the median of 3 "
        "rounds.",
    ),
    Benchmark(
        "bench_write_costs", "What recording a unit costs the control plane",
        "make bench-write-costs (python benchmarks/bench_write_costs.py --save)",
        "the local cluster (`hack/cluster up`); ten minutes",
        "The control plane's CPU (etcd, the API server, the controller manager, the scheduler, kwok), with what "
        "it spends with nothing written (read for 15 s before each measure) taken out: per plain unit, 2,000 one-"
        "pod low-priority Jobs made by 8 threads on 200 kwok nodes, from the first create until 99.5 % of their "
        "pods are ready (the floor's unit of `bench_scale`, whose units are a tenth gangs); per write, 2,000 each"
        " of a one-pod SJ created, its status patched as the operator's state machine records a run that starts "
        "at once (`Running`), and an Event as the operator records one, each kind timed on its own; the medians "
        "of 3 rounds (the note has every measure). Derived: the share of a plain unit that an SJ and its status "
        "take (what any operator keeping the SPEC's status adds before its process runs: issue 42's goal of 1.2 "
        "times the plain Jobs' time leaves 0.2), and with the two Events of a run that starts at once. A quiet "
        "cluster's figures: in a burst the same writes cost more (`bench_scale --ceiling-recorded`).",
    ),
    Benchmark(
        "bench_steering", "Work lost per interruption, victim steering on and off",
        "python benchmarks/bench_steering.py --save",
        "a cluster (`KUBECONFIG`); a few minutes per mode",
        "Over the same seeded scenario with the real kube-scheduler: four endless 1-CPU SJs (duration 20 s, 4 "
        "levels) fill a 4-CPU node; rounds of a default-priority pod needing 1 CPU arriving a random time after "
        "the node is full again. With steering on (`--protect-level 1`) and off (nothing ever protected, so the "
        "scheduler alone evicts the youngest pod). Lost work is the victim's time since its last checkpoint "
        "boundary.",
    ),
    Benchmark(
        "bench_scale", "Scale, side by side with the floor and with Kueue",
        "make bench-scale BENCH_ARGS='--sjs 2000 --nodes 200 --settle 30 --stream 60' "
        "(python benchmarks/bench_scale.py --kueue --save ...); issue 42's comparison at 10,000 units: "
        "make bench-scale BENCH_ARGS='--sjs 10000 --nodes 1000 --ceiling'",
        "the local cluster (started when none runs); 16 minutes at 2,000 units, A-B-A with --settle 30 and "
        "--stream 30 (33694b1), and 45 with --ceiling, --settle 60 and --stream 60 (28005a2), most of it "
        "waiting for each run's namespace to go; 97 at 10,000 units on 1,000 nodes with --ceiling --floor-once "
        "--settle 120 --stream 60 and Kueue (a07fc30)",
        "One seeded workload (most units one pod, a tenth gangs of 2 to 16, 100m CPU each) on kwok nodes made "
        "for the run, sent through the same cluster in turn: as plain low-priority Jobs created directly by 8 "
        "client threads (the floor: the operator can never be faster; done again after the operator's run, "
        "A-B-A, and the operator's figures taken against the mean of the two; with `--floor-once`, A-B: the first "
        "alone); with `--ceiling`, each SJ and its "
        "Job created by the benchmark with no operator (the most any operator could reach: where it is itself far "
        "from the floor, the cluster on its cores is the limit, not the operator); with `--ceiling-as-operator`, "
        "the same with each SJ's Job and a gang's Service as the operator builds them (what its objects cost the "
        "cluster, apart from its process); with `--ceiling-recorded`, those objects and each SJ's run recorded as the "
        "operator records a run that starts at once (its status patch as Running, its Launched and Running Events: "
        "what every write a recording operator must make costs the cluster); as ScavengerJobs with the "
        "operator as its own process at its defaults; with `--kueue`, as suspended Jobs through Kueue's manager "
        "with a ClusterQueue holding the operator's 70 % of the nodes. Of each: the time from the first create to "
        "the last Job (Kueue's: to the last it started) and to 99.5 % running (pods ready as their Jobs count "
        "them, the operator's SJs Running as it counts them; looked at every 15 s); created → Job p50 / p99 (0 for "
        "a plain Job, which is what is created; Kueue's: created → started); the API server's CPU; the "
        "controller's CPU and peak RSS. Of the operator, over the whole run: the runs it deleted for a start "
        "timeout (`scavenger_start_timeouts_total`), its event loop's lags over a second, the Events it dropped "
        "at its backlog's cap (`scavenger_events_dropped_total`). Of each run, in the result's file: where the "
        "machine's CPU went until it ran (by process), the writes the API server served (by resource and verb), "
        "and with `--profile-control-plane` what the API server's and the controller manager's own CPU profiles "
        "show it went to (by kind of request, by controller). After a settling time a Poisson stream of "
        "high-priority pods (0.5/s, each needing most of a node for 20 s) preempts: a plain Job's pod restarts "
        "from nothing, a gang loses every member's run, an SJ loses the time since its checkpoint period began. "
        "The goals (`GOALS` in `benchmarks/harness/scale_report.py`): the operator launches at least half as "
        "fast as the floor; 99.5 % of its SJs run within 1.2 times the floor's time to 99.5 % of its pods "
        "running; no start timeout (its clock starts once the scheduler decided about every pod, so any one "
        "counted is one the goal forbids), no lag of the loop over a second, no Event dropped; it loses at most "
        "0.3 of the work plain Jobs lose; its peak RSS stays under 400 MB at 10,000 units. A run whose pod watches "
        "the API server closed (`*_watches_closed_to_running: pods`, clients that fell behind) was disturbed: kwok "
        "lists its pods again and replays their stages, and its CPU (`*_cpu_to_running: kwok`) and the run's time "
        "grow with it.",
        shown=("operator_to_floor", "operator_per_second", "floor_mean_per_second", "operator_running_to_floor",
               "operator_running_seconds", "floor_mean_running_seconds", "ceiling_running_to_floor",
               "ceiling_running_seconds", "ceiling_shaped_running_to_floor", "ceiling_shaped_running_seconds",
               "ceiling_shaped_jobs_running_to_floor", "ceiling_shaped_jobs_running_seconds",
               "ceiling_recorded_running_to_floor", "ceiling_recorded_running_seconds",
               *(f"{run}_running_seconds" for run in scale_report.WITHOUT_RUNS),
               "ceiling_watched_running_to_floor", "ceiling_watched_running_seconds",
               *(f"{run}_{part}" for run in ("floor", "operator", "ceiling", "ceiling_recorded")
                 for part in ("watches_closed_to_running: pods", "cpu_to_running: kwok")),
               "latency_p50", "latency_p99",
               "operator_start_timeouts", "loop_lag_over_1s", "operator_events_dropped", "operator_cpu_seconds",
               "writes_per_sj", "writes_per_sj_to_running", "operator_peak_rss_mib", "operator_interruptions",
               "work_lost_to_plain", "kueue_per_second", "kueue_running_seconds", "kueue_peak_rss_mib"),
    ),
)


def number(value: float) -> str:
    """A figure as a reader wants it: whole numbers with thousands separators, else three significant digits."""
    if isinstance(value, bool) or not math.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) >= 1:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def with_unit(value: float, unit: str) -> str:
    if not unit:
        return number(value)
    return f"{number(value)}{unit}" if unit in ("%", "/s") else f"{number(value)} {unit}"


def goal_text(goal: Mapping[str, float], unit: str) -> str:
    parts = [f"≥ {with_unit(goal['min'], unit)}"] if "min" in goal else []
    parts += [f"≤ {with_unit(goal['max'], unit)}"] if "max" in goal else []
    return " and ".join(parts)


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def machine_text(machine: Mapping[str, Any] | None) -> str:
    if not machine:
        return "not recorded"
    cores = machine.get("usable_cores") or machine.get("cores")
    parts = [f"{cores} cores" if cores else "", machine.get("cpu") or "",
             gib(machine["memory_bytes"]) if machine.get("memory_bytes") else "",
             machine.get("kernel") or "", machine.get("python") or ""]
    if machine.get("load"):
        parts.append("load " + " / ".join(f"{n:.1f}" for n in machine["load"]))
    return ", ".join(p for p in parts if p) or "not recorded"


def commit_text(result: Mapping[str, Any]) -> str:
    if not result.get("commit"):
        return "unknown"
    return f"{result['commit'][:7]}{' (dirty)' if result.get('dirty') else ''}"


def date_text(date: str) -> str:
    return date.replace("T", " ")[:16] + (" UTC" if date.endswith("Z") else "")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def figures_text(figures: Iterable[Mapping[str, Any]], shown: Sequence[str]) -> str:
    """The figures ``shown`` (all when empty), in its order, each with its goal."""
    figures = list(figures)
    if shown:
        figures = sorted((f for f in figures if f["metric"] in shown), key=lambda f: shown.index(f["metric"]))
    lines = []
    for f in figures:
        line = f"{f['metric']} = {with_unit(f['value'], f.get('unit', ''))}"
        if "goal" in f:
            line += f" (goal {goal_text(f['goal'], f.get('unit', ''))})"
        lines.append(line)
    return "<br>".join(cell(line) for line in lines)


def goals_text(figures: Iterable[Mapping[str, Any]]) -> str:
    judged = [f for f in figures if "goal" in f]
    if not judged:
        return "–"
    missed = [f["metric"] for f in judged if not f["met"]]
    return "**met**" if not missed else cell("**not met**: " + ", ".join(missed))


def goals_of(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The goals the runs state, newest first, each once, as text."""
    goals: dict[str, str] = {}
    for run in runs:
        for f in run["figures"]:
            if "goal" in f:
                goals.setdefault(f["metric"], f"{f['metric']} {goal_text(f['goal'], f.get('unit', ''))}")
    return list(goals.values())


def section(bench: Benchmark, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    goals = goals_of(runs)
    out = [f"## {bench.title} (`{bench.name}`)", "", bench.method, "",
           f"- **Command**: `{bench.command}`", f"- **Needs**: {bench.needs}",
           f"- **Goal**: {'; '.join(goals) if goals else 'none set'}", ""]
    if not runs:
        return [*out, "No result kept yet.", ""]
    out += ["| date | commit | machine | command | figures | goals |", "| --- | --- | --- | --- | --- | --- |"]
    notes = []
    for run in runs:
        out.append(f"| {date_text(run['date'])} | {commit_text(run)} | {cell(machine_text(run.get('machine')))} | "
                   f"`{cell(run['command'])}` | {figures_text(run['figures'], bench.shown)} | "
                   f"{goals_text(run['figures'])} |")
        if run.get("note"):
            notes.append(f"- {date_text(run['date'])}, {commit_text(run)}: {run['note']}")
    if bench.shown:
        out += ["", "The table shows the main figures; every figure of a run is in its file."]
    if notes:
        out += ["", *notes]
    plot = plots.PLOTS.get(bench.name)
    if plot is not None and plots.drawn(plot, runs):
        out += ["", f"![{bench.title}]({plots.DIRECTORY.name}/{plot.file})", "", plot.caption]
    return [*out, ""]


def render(kept: Iterable[Mapping[str, Any]]) -> str:
    """The page for the results ``kept``."""
    by_name: dict[str, list[Mapping[str, Any]]] = {b.name: [] for b in CATALOG}
    for result in kept:
        by_name.setdefault(result["benchmark"], []).append(result)
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `make bench-report` (python -m benchmarks.harness.report) from benchmarks/results/: "
        "do not edit. -->",
        "",
        "Every benchmark under `benchmarks/` writes its result as data: `--json PATH` writes it there, `--save` "
        "keeps it as `benchmarks/results/<benchmark>-<date>-<commit>.json` (the `make bench-*` targets pass "
        "`--save`). A result carries the command that produced it, the commit measured (and whether the "
        "checkout differed from it), the date (UTC), the machine (cores, CPU model, memory, kernel, Python, "
        "load averages when it was written), the benchmark's parameters and its figures, each goal beside the "
        "figure it is set for (`benchmarks/harness/results.py` describes the format). This page is rendered "
        "from the results kept; `make bench-report` renders it again.",
        "",
        "The machines these benchmarks run on vary from day to day (one same commit's loop passes took 13 % "
        "longer on one day than on the day before), so compare runs on one machine, and the load averages "
        "say what else ran meanwhile.",
        "",
    ]
    for bench in CATALOG:
        runs = sorted(by_name.pop(bench.name), key=lambda r: str(r["date"]), reverse=True)
        lines += section(bench, runs)
    for name, runs in sorted(by_name.items()):
        bench = Benchmark(name, name, f"python benchmarks/{name}.py --save", "", "")
        lines += section(bench, sorted(runs, key=lambda r: str(r["date"]), reverse=True))
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--results", type=Path, default=results.RESULTS, help="the results' directory")
    parser.add_argument("--output", type=Path, help="write the page here (default: stdout)")
    args = parser.parse_args(argv)
    kept = results.load(args.results)
    page = render(kept)
    if args.output:
        args.output.write_text(page)
        plots.write(kept, args.output.parent / plots.DIRECTORY.name)
    else:
        print(page, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
