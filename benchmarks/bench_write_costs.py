"""What the writes that record a unit of work cost the control plane, beside what a plain Job's whole unit costs
it, against the local cluster in ``KUBECONFIG``.

Run: ``KUBECONFIG=... python benchmarks/bench_write_costs.py [--units N] [--nodes N] [--writes N] [--rounds N]
[--json PATH] [--save]`` (about ten minutes at the defaults on the local cluster).

Issue 42 asks for 10,000 SJs Running within 1.2 times the time of 10,000 plain Jobs. On a machine whose cores the
control plane has to itself and keeps busy, a run's time is its core-seconds over the cores, so the goal leaves an
operator 0.2 of what the plain Jobs cost the cluster for everything it adds. Some of what it adds no operator can
leave out: the users' SJs are created (the plain Jobs' users create nothing else), and the SPEC has every SJ's
status say ``Running``. This measures those writes one kind at a time, each on a cluster doing nothing else, as
the control plane's CPU (etcd, the API server, the controller manager, the scheduler and kwok: `CONTROL_PLANE`)
per write:

- **a plain unit**: ``--units`` one-pod plain Jobs (`bench_scale.plain_job`) created by 8 threads on ``--nodes``
  kwok nodes, from the first create until 99.5 % of their pods are ready as the Jobs count them (looked at every
  5 s): the cluster's CPU per unit (the floor's unit in `bench_scale`, whose units are a tenth gangs);
- **an SJ created** (`bench_scale.scavenger_job`, a one-pod SJ), **its status patched** as the operator's state
  machine records a run that starts at once (`bench_scale.operator_record`), and **an Event** as the operator
  records one (`kube.event_body`): ``--writes`` of each, 8 threads at a time, each kind timed on its own.

Before each measure the control plane's CPU is read for `QUIET` seconds with nothing written (the kwok nodes'
heartbeats, its controllers' resyncs), and the measure leaves that out for as long as it lasted. Each round runs
them all in a namespace of its own, deleted and waited for before the next (a deletion beside a measure slows it);
the figures are the medians of ``--rounds``, and the result's note has every measure with its quiet reading.
Derived from them: the share of a plain unit that an SJ and its status take (what any operator keeping the SPEC's
status adds before its process runs) and the share with the two Events the operator records for a run that starts
at once. These are a quiet cluster's figures: in a burst the same writes cost more (the API server closes watches
that fall behind, kwok replays its pods' stages), which the ceiling runs of `bench_scale` (``--ceiling-recorded``)
show.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402

from benchmarks.bench_scale import (  # noqa: E402
    LOW,
    SELECTOR,
    TAINT,
    operator_objects,
    operator_record,
    plain_job,
    record_event,
    record_status,
    scavenger_job,
)
from benchmarks.harness import results  # noqa: E402
from benchmarks.harness.kube import (  # noqa: E402
    claimed,
    delete_nodes,
    earlier_runs_gone,
    ensure_crd,
    make_kwok_nodes,
    priority_classes,
    ready_pods,
    retrying,
    run_namespace,
)
from benchmarks.harness.processes import CONTROL_PLANE, CpuSince  # noqa: E402
from benchmarks.harness.progress import in_parallel, log, wait_until  # noqa: E402
from benchmarks.harness.scale_report import RUNNING  # noqa: E402
from sj_operator.names import GROUP, PLURAL, VERSION  # noqa: E402
from tests.e2e.kube import unique  # noqa: E402

NAMESPACES = "bench-costs"
THREADS = 8
"""Client threads, as `bench_scale` creates its units."""
SETTLE = 3.0
"""Seconds after the last write before the CPU is read: what the writes set off (watch events sent, a
controller's sync) is theirs."""
QUIET = 15.0
"""Seconds the control plane's CPU is read with nothing written, before each measure: what it spends anyway (the
kwok nodes' heartbeats, its controllers' resyncs) is taken out of the measure for as long as it lasted."""
POLL = 5.0
"""Seconds between two looks at the plain units' ready pods (a list of their Jobs)."""
UNIT = "plain unit"
KINDS = ("SJ created", "SJ status patched as Running", "Event recorded")


class ControlPlaneCpu:
    """The control plane's CPU (`CONTROL_PLANE`) from the moment this is made, and the seconds since."""

    def __init__(self) -> None:
        self.parts = [CpuSince.of_command(pattern) for _, pattern in CONTROL_PLANE]
        self.start = time.monotonic()

    def seconds(self) -> tuple[float, float]:
        """CPU seconds and wall seconds since."""
        spent = [part.seconds() for part in self.parts]
        if any(s is None for s in spent):
            raise SystemExit("a process of the local cluster was not found: this needs the cluster of hack/cluster")
        return sum(s for s in spent if s is not None), time.monotonic() - self.start


def quiet_cores() -> float:
    """The cores the control plane keeps busy with nothing written (`QUIET`)."""
    cpu = ControlPlaneCpu()
    time.sleep(QUIET)
    spent, took = cpu.seconds()
    return spent / took


@dataclass(frozen=True)
class Measure:
    what: str
    ms: float
    """The control plane's CPU per item, what it spends anyway taken out."""
    quiet: float
    """The cores it kept busy with nothing written, just before."""
    seconds: float
    """How long the measure lasted."""


def per_item(work: Callable[[int], None], count: int, what: str,
             done: Callable[[], None] = lambda: None) -> Measure:
    """The control plane's CPU per item for ``work`` over ``count`` items, ``THREADS`` at a time (``done``: waits
    until what they set off has finished), less what it spends anyway (read just before, `quiet_cores`)."""
    quiet = quiet_cores()
    cpu = ControlPlaneCpu()
    in_parallel(work, count, THREADS, what)
    done()
    time.sleep(SETTLE)
    spent, took = cpu.seconds()
    return Measure(what, ms_each(spent, took, quiet, count), quiet, took)


def ms_each(spent: float, took: float, quiet: float, count: int) -> float:
    """Milliseconds of CPU per item: ``spent`` CPU seconds over ``took`` wall seconds, less ``quiet`` cores for as
    long, over ``count`` items (never below nothing: a quiet reading can be above a short measure's)."""
    return max(0.0, spent - quiet * took) * 1000 / count


def plain_units(api: client.ApiClient, units: int) -> Measure:
    """Per plain unit: ``units`` one-pod plain Jobs from the first create until 99.5 % of their pods are ready."""
    batch = client.BatchV1Api(api)
    with run_namespace(api, NAMESPACES, "the plain units'", followed=True) as namespace:
        def make(i: int) -> None:
            retrying(lambda: batch.create_namespaced_job(namespace, plain_job(f"job-{i:05d}", 1)))

        def ready() -> None:
            wait_until("plain pods ready",
                       lambda: ((n := ready_pods(batch, namespace)) >= RUNNING * units, f"{n}/{units}"),
                       timeout=1800, every=POLL)

        return per_item(make, units, UNIT, ready)


def recording_writes(api: client.ApiClient, writes: int) -> list[Measure]:
    """Per write of each of `KINDS`: ``writes`` SJs created, their statuses patched as Running, as many Events."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    made: dict[int, dict[str, Any]] = {}
    with run_namespace(api, NAMESPACES, "the writes'", followed=True) as namespace:
        def create(i: int) -> None:
            made[i] = retrying(lambda: custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, scavenger_job(f"sj-{i:05d}", 1, "10m")))

        def status(i: int) -> None:
            sj = made[i]
            record_status(custom, sj, operator_record(sj, operator_objects(sj)[-1][1], datetime.now(UTC))[0])

        def event(i: int) -> None:
            sj = made[i]
            record_event(core, sj, "Launched",
                         f"run {sj['metadata']['name']}-r1 launched (1 pod(s), priority class scavenger-band-0)",
                         datetime.now(UTC))

        works = (create, status, event)
        return [per_item(work, writes, kind) for kind, work in zip(KINDS, works, strict=True)]


def one_round(measures: Sequence[Measure]) -> str:
    """A round's measures, each with its quiet reading and how long it lasted."""
    return ", ".join(f"{m.what} {m.ms:.2f} ms (quiet {m.quiet:.3f} cores, {m.seconds:.0f} s)" for m in measures)


def every_measure(rounds: Sequence[Sequence[Measure]]) -> str:
    """The result's note: every round's measures (`one_round`)."""
    return "; ".join(f"round {r}: {one_round(measures)}" for r, measures in enumerate(rounds, 1))


def derived(unit: float, costs: dict[str, float]) -> list[dict[str, Any]]:
    """The shares of a plain unit (``unit``, ms) that the writes of ``costs`` (ms per write) take: an SJ and its
    status (what an operator keeping the SPEC's status cannot leave out), and those with two Events (a run that
    starts at once, as the operator records it)."""
    required = costs["SJ created"] + costs["SJ status patched as Running"]
    recorded = required + 2 * costs["Event recorded"]
    return [results.figure("an SJ and its status, to a plain unit", required / unit),
            results.figure("an SJ, its status and two Events, to a plain unit", recorded / unit)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=2000, help="plain one-pod Jobs per round (default 2,000)")
    parser.add_argument("--nodes", type=int, default=200, help="kwok nodes of 8 CPU for them (default 200)")
    parser.add_argument("--writes", type=int, default=2000, help="writes of each kind per round (default 2,000)")
    parser.add_argument("--rounds", type=int, default=3)
    results.add_arguments(parser)
    args = parser.parse_args()
    config.load_kube_config()
    client.Configuration._default.connection_pool_maxsize = 16
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    rounds: list[list[Measure]] = []
    with claimed(api, "bench_write_costs"):
        earlier_runs_gone(api, NAMESPACES)
        ensure_crd(api)
        try:
            make_kwok_nodes(core, [f"{unique('costs')}-{i:04d}" for i in range(args.nodes)],
                            {"cpu": "8", "memory": "32Gi", "pods": "110"}, SELECTOR, [TAINT], THREADS)
            with priority_classes(client.SchedulingV1Api(api), {LOW: -100}):
                for _ in range(args.rounds):
                    rounds.append([plain_units(api, args.units), *recording_writes(api, args.writes)])
                    log(f"round {len(rounds)}/{args.rounds}: {one_round(rounds[-1])}")
        finally:
            delete_nodes(core, SELECTOR)
    medians = {what: statistics.median(m.ms for measures in rounds for m in measures if m.what == what)
               for what in (UNIT, *KINDS)}
    figures = [results.figure(f"{what}: control plane CPU", ms, "ms") for what, ms in medians.items()]
    figures += derived(medians[UNIT], {kind: medians[kind] for kind in KINDS})
    print(f"\nmedian of {args.rounds} rounds ({args.units} plain units, {args.writes} writes of each kind):")
    for f in figures:
        print(f"  {f['metric']:<52} {f['value']:.3g}{' ' + f['unit'] if f['unit'] else ''}")
    results.save(args, results.result("bench_write_costs", results.parameters(args), figures,
                                      note=every_measure(rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
