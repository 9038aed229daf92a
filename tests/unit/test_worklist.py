"""A pass looks only at what changed (issue 42): the SJs whose object, run or pods changed, whose clock came, or
whose reason to wait may have changed; every other SJ keeps its last decision. Whatever the changes and the
clocks do, the incremental controller writes, records and counts exactly what a controller that looks at every
SJ in every pass (``Controller(incremental=False)``, the reference) does: the same calls with the same
arguments in the same order, the same statuses, the same gauges."""
from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from benchmarks.bench_loop import NOW, SimulatedAPI
from sj_operator import decide
from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.decide import ClusterView
from sj_operator.kube import Conflict
from sj_operator.memo import Worklist
from sj_operator.observed import JobView, NodeInfo, PodView, SJObject, pod_view
from tests.unit.helpers import settled_pass

CORE = 1000
SPECS = (
    {"image": "busybox", "duration": "10m", "resources": {"requests": {"cpu": "1"}}},
    {"image": "busybox", "duration": "30m", "priorityLevels": 3, "resources": {"requests": {"cpu": "2"}}},
    {"image": "busybox", "duration": "10m", "parallelism": 2, "resources": {"requests": {"cpu": "1"}}},
    {"image": "busybox", "duration": "1h", "resources": {"requests": {"cpu": "3"}},
     "fallbacks": [{"resources": {"requests": {"cpu": "1"}}}], "fallbackAfter": "5m"},
    {"image": "", "duration": "10m"},  # invalid: failed at once
)


class World(SimulatedAPI):
    """The simulated API of `bench_loop`, which takes the controller's writes back into the next view, with
    every call written down (what, on which object, with which arguments) and conflicts on demand."""

    def __init__(self, nodes: int) -> None:
        super().__init__()
        self.log: list[tuple[Any, ...]] = []
        self.conflicts = 0
        self.broken: set[str] = set()
        self.lagging = False
        self.unseen: dict[tuple[str, str], SJObject] = {}
        """The SJs as stored, while the watch lags (``lagging``)."""
        """The SJs (by name) whose state machine step raises."""
        self.nodes = [NodeInfo(name=f"n{i}", allocatable={"cpu": 4 * CORE, "memory": 2**40, "pods": 110_000},
                               labels={}, taints=(), unschedulable=False, ready=True) for i in range(nodes)]

    async def patch_sj_status(self, namespace: str, name: str, status: dict[str, Any], rv: str | None) -> Any:
        self.log.append(("status", name, rv, sorted(status.items(), key=str)))
        if self.conflicts:
            self.conflicts -= 1
            await self._call()
            raise Conflict("conflict")
        if not self.lagging:
            return await super().patch_sj_status(namespace, name, status, rv)
        # The watch lags: the status is stored, and the view shows it only after the next change.
        shown = self.sjs
        self.sjs = {**shown, **self.unseen}
        try:
            return await super().patch_sj_status(namespace, name, status, rv)
        finally:
            self.unseen[(namespace, name)] = self.sjs[(namespace, name)]
            self.sjs = shown

    async def create_child(self, body: dict[str, Any], owner_uid: str) -> dict[str, Any] | None:
        self.log.append(("create", body["kind"], body["metadata"]["name"]))
        return await super().create_child(body, owner_uid)

    async def event(self, **kw: Any) -> Any:
        self.log.append(("event", kw.get("name"), kw.get("reason"), kw.get("message"), kw.get("count")))
        return await super().event(**kw)

    async def update_event(self, *args: Any, **kw: Any) -> bool:
        self.log.append(("update-event", *args, sorted(kw.items(), key=str)))
        return await super().update_event(*args, **kw)

    async def label_pod(self, *args: Any) -> None:
        self.log.append(("label", *args))
        await super().label_pod(*args)

    async def delete_child(self, *args: Any) -> bool:
        self.log.append(("delete", *args))
        self.jobs.pop((args[1], args[2]), None)
        self.pods.pop((args[1], args[2]), None)
        return await super().delete_child(*args)

    async def delete_owned(self, *args: Any) -> bool:
        self.log.append(("delete-owned", *args))
        return await super().delete_owned(*args)

    # --- what the cluster does on its own ---------------------------------------------------------------
    def add_sj(self, i: int, spec: int) -> None:
        """SJ ``i`` with spec ``spec``; every seventh has no creation time (its queue entry moves with the clock)."""
        name = f"sj-{i:02d}"
        self.sjs[("bench", name)] = SJObject(namespace="bench", name=name, uid=f"uid-{i}", generation=1,
                                             resource_version=str(self.rv),
                                             created=None if i % 7 == 6 else NOW + timedelta(seconds=i),
                                             deleting=False, status={}, spec=SPECS[spec])

    def pick(self, mapping: dict[Any, Any], which: int) -> Any:
        keys = sorted(mapping)
        return keys[which % len(keys)] if keys else None

    def change(self, what: str, which: int, amount: int) -> None:
        self.rv += 1
        self.watch(lagging=what == "lag")
        if what == "new":
            self.add_sj(len(self.sjs) + 20 * amount, which % len(SPECS))
        elif what in SJ_CHANGES and (key := self.pick(self.sjs, which)):
            self.sjs[key] = SJ_CHANGES[what](self.sjs[key], str(self.rv))
            if self.sjs[key] is None:
                del self.sjs[key]
        elif what in RUN_CHANGES and (key := self.pick(self.jobs, which)):
            self.jobs[key], self.pods[key] = RUN_CHANGES[what](self.jobs[key], self.pods.get(key, ()))
            if self.jobs[key] is None:
                del self.jobs[key], self.pods[key]
        elif what == "other-pod":
            self.other_pod(which, amount)
        elif what == "cordon":
            node = self.nodes[which % len(self.nodes)]
            self.nodes[which % len(self.nodes)] = replace(node, unschedulable=not node.unschedulable)
        elif what == "conflict":
            self.conflicts = 1 + amount % 2
        elif what == "break" and (key := self.pick(self.sjs, which)):
            self.broken ^= {key[1]}

    def watch(self, *, lagging: bool) -> None:
        """While ``lagging``, the statuses written are not shown; else those written meanwhile are."""
        self.lagging = lagging
        if not lagging:
            self.sjs.update(self.unseen)
            self.unseen.clear()

    def other_pod(self, which: int, amount: int) -> None:
        """Another workload's pod lands on a node, or one goes."""
        if amount % 3 == 0 and self.others:
            self.others.pop(which % len(self.others))
            return
        self.others.append(pod_view({
            "metadata": {"namespace": "other", "name": f"o-{self.rv}", "uid": f"o-{self.rv}"},
            "spec": {"nodeName": self.nodes[which % len(self.nodes)].name,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": f"{amount * 100}m"}}}]},
            "status": {"phase": "Running"}}))


SJ_CHANGES: dict[str, Callable[[SJObject, str], Any]] = {
    "touch": lambda sj, rv: replace(sj, resource_version=rv),
    "suspend": lambda sj, rv: replace(sj, resource_version=rv, generation=sj.generation + 1,
                                      spec={**sj.spec, "suspend": not sj.spec.get("suspend", False)}),
    "deleting": lambda sj, rv: replace(sj, resource_version=rv, deleting=True),
    "delete": lambda sj, rv: None,
}
"""What becomes of an SJ's object (None: it is gone)."""
RUN_CHANGES: dict[str, Callable[[JobView, tuple[PodView, ...]], tuple[Any, tuple[PodView, ...]]]] = {
    "job-deleting": lambda job, pods: (replace(job, deleting=True), pods),
    "job-gone": lambda job, pods: (None, ()),
    "finish": lambda job, pods: (replace(job, complete=True),
                                 tuple(replace(p, phase="Succeeded", all_running=False) for p in pods)),
    "unscheduled": lambda job, pods: (job, tuple(replace(p, node=None, phase="Pending", all_running=False)
                                                 for p in pods)),
    "evict": lambda job, pods: (job, tuple(replace(p, disruption=("PreemptionByScheduler", "preempted"),
                                                   disrupted_at=NOW, phase="Failed", all_running=False) for p in pods)),
}
"""What becomes of a run's Job and pods (a Job None: the run is gone)."""


EVENTS = st.lists(st.tuples(
    st.sampled_from(["new", "touch", "suspend", "delete", "deleting", "finish", "evict", "job-gone", "job-deleting",
                     "unscheduled", "lag", "other-pod", "cordon", "conflict", "break", "busy", "busy", "time", "same",
                     "nothing"]),
    st.integers(0, 50), st.integers(0, 7)), min_size=1, max_size=30)
STEPS = (timedelta(seconds=1), timedelta(seconds=20), timedelta(minutes=3), timedelta(minutes=11),
         timedelta(minutes=31), timedelta(hours=2), timedelta(hours=7), timedelta(days=2))


def gauges(controller: Controller) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for metric in controller.metrics.registry.collect()
            if metric.name in ("scavenger_sjs", "scavenger_pending_sjs", "scavenger_used_capacity_ratio")
            for s in metric.samples}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Every run protected, then one finished and one interrupted: steering exempts a run whose clock has not come.
@example(sjs=[1, 0, 2, 0], nodes=2, threshold=0.7, events=[
    ("busy", 25, 5), ("finish", 46, 0), ("finish", 2, 4), ("evict", 41, 2), ("time", 32, 3), ("new", 49, 3),
    ("busy", 35, 3), ("evict", 32, 5), ("nothing", 29, 4), ("busy", 38, 0)])
# A run evicted within its first checkpoint period: its SJ backs off in the kept queue, holding the room the SJs
# behind it wait for ("held for ..."), until its backoff ends and it starts again (issue 43.6).
@example(sjs=[0, 0, 0, 0, 1], nodes=1, threshold=1.0, events=[
    ("busy", 0, 0), ("nothing", 0, 0), ("evict", 0, 0), ("nothing", 0, 0), ("new", 0, 0), ("nothing", 0, 0),
    ("time", 0, 0), ("touch", 1, 0), ("time", 0, 1), ("nothing", 0, 0), ("time", 0, 2), ("busy", 0, 0),
    ("nothing", 0, 0)])
# A run's Job replaced by an equal one while its SJ's decide step breaks: both passes reuse the decision (the
# worklist and the memo both compare the Job by value).
@example(sjs=[0], nodes=1, threshold=0.5, events=[
    ("new", 0, 0), ("job-deleting", 0, 0), ("break", 0, 0), ("job-deleting", 0, 0)])
# Runs through their periods three minutes a pass: protection toggled on their pods, the levels written after, the
# routine Protected/Unprotected Events counted into one per SJ and reason and their counts written.
@example(sjs=[0, 1, 2], nodes=2, threshold=1.0, events=[("time", 0, 2)] * 12 + [("time", 0, 1)] * 4)
@given(sjs=st.lists(st.integers(0, len(SPECS) - 1), min_size=1, max_size=9), nodes=st.integers(1, 3),
       threshold=st.sampled_from([0.5, 0.7, 1.0]), events=EVENTS)
def test_the_incremental_pass_writes_exactly_what_a_pass_over_every_sj_writes(
        sjs: list[int], nodes: int, threshold: float, events: list[tuple[str, int, int]]) -> None:
    """Two clusters, two controllers, the same changes and clocks: one controller looks only at what changed,
    the other at every SJ in every pass. After every pass their calls, statuses and gauges are the same."""
    worlds = (World(nodes), World(nodes))
    clocks = [NOW, 0.0]
    # Neither pass gives the loop a turn part way (`pacing.Pacer`, by the wall clock): on a loaded machine the longer
    # pass over every SJ did, and its background writes went on within it rather than in the next pass.
    controllers = tuple(Controller(world, OperatorConfig(threshold=threshold, starvation_after=timedelta(minutes=30)),  # type: ignore[arg-type]
                                   clock=lambda: clocks[0], monotonic=lambda: clocks[1], incremental=incremental,
                                   hold_budget=math.inf)
                        for world, incremental in zip(worlds, (True, False), strict=True))
    for world in worlds:
        for i, spec in enumerate(sjs):
            world.add_sj(i, spec)
    views: list[ClusterView | None] = [None, None]

    step = decide.step

    def breaks(spec: Any, status: Any, run: Any, now: Any, cfg: Any, **kw: Any) -> Any:
        if kw["sj_name"] in worlds[0].broken:
            raise RuntimeError("a bug")
        return step(spec, status, run, now, cfg, **kw)

    async def one_pass(controller: Controller, view: ClusterView, settle: bool) -> None:
        await (settled_pass(controller, view) if settle else controller.reconcile(view))

    # Each controller in a loop of its own: what it left in the background goes on only in its next passes.
    with mock.patch("sj_operator.decide.step", breaks), asyncio.Runner() as mine, asyncio.Runner() as reference:
        runners = (mine, reference)
        for k, (what, which, amount) in enumerate([("nothing", 0, 0), *events]):
            if what == "time":
                clocks[0] += STEPS[amount]
                clocks[1] += STEPS[amount].total_seconds()
            else:
                clocks[0] += timedelta(seconds=1)
                clocks[1] += 1.0
            for i, (world, controller) in enumerate(zip(worlds, controllers, strict=True)):
                world.change(what, which, amount)
                if what != "same" or views[i] is None:
                    views[i] = world.view()
                view = views[i]
                assert view is not None
                runners[i].run(one_pass(controller, view, settle=what != "busy"))
            assert worlds[0].log == worlds[1].log, f"pass {k} ({what}): the calls differ"
            assert {key: sj.status for key, sj in worlds[0].sjs.items()} == {
                key: sj.status for key, sj in worlds[1].sjs.items()}, f"pass {k} ({what})"
            assert gauges(controllers[0]) == gauges(controllers[1]), f"pass {k} ({what}): the gauges differ"


# --- the worklist itself -----------------------------------------------------------------------------------

def an_sj(i: int, rv: int = 1) -> SJObject:
    return SJObject(namespace="ns", name=f"sj{i}", uid=f"u{i}", generation=1, resource_version=str(rv), created=NOW,
                    deleting=False)


def test_changes_finds_the_sjs_replaced_added_and_gone_and_nothing_in_an_equal_view() -> None:
    work = Worklist()
    sjs = tuple(an_sj(i) for i in range(5))
    view = ClusterView(sjs=sjs, jobs={}, run_pods={}, active_pods=(), nodes=())
    assert work.changes(view) == ({f"u{i}" for i in range(5)}, set())
    assert work.changes(replace(view, sjs=tuple(sjs))) == (set(), set()), "the same objects in a new tuple"
    changed = (sjs[0], an_sj(1, rv=2), *sjs[3:], an_sj(9))
    assert work.changes(replace(view, sjs=changed)) == ({"u1", "u9"}, {"u2"})
    assert [sj.uid for sj in work.in_order({"u9", "u0", "u4", "u2"})] == ["u0", "u4", "u9"]
    assert work.position("u9") == 4 and work.position("u2") == -1


def test_the_layout_moves_when_the_sjs_are_indexed_anew_and_not_when_one_is_replaced_in_place() -> None:
    """`Worklist.layout` tells the runs in flight (`Ledger.in_flight`) when to sort again: after SJs came or went
    or a relisting reordered them, not after a watch event replaced an SJ where it was."""
    work = Worklist()
    sjs = tuple(an_sj(i) for i in range(3))
    view = ClusterView(sjs=sjs, jobs={}, run_pods={}, active_pods=(), nodes=())
    work.changes(view)
    first = work.layout
    work.changes(replace(view, sjs=(sjs[0], an_sj(1, rv=2), sjs[2])))
    assert work.layout == first, "replaced in place: the others keep their order"
    work.changes(replace(view, sjs=(sjs[2], sjs[0], an_sj(1, rv=2))))
    assert work.layout > first and work.position("u2") == 0, "reordered (a relisting)"
    moved = work.layout
    work.changes(replace(view, sjs=(sjs[2], sjs[0], an_sj(1, rv=2), an_sj(3))))
    assert work.layout > moved
    work.reset()
    assert work.layout > moved + 1


def test_due_pops_each_deadline_once_and_only_the_current_one() -> None:
    work = Worklist()
    work.wake("a", NOW + timedelta(minutes=5))
    work.wake("b", NOW + timedelta(minutes=1))
    work.wake("a", NOW + timedelta(minutes=2))  # its decision was made again: the first deadline is stale
    assert work.due(NOW) == set()
    assert work.due(NOW + timedelta(minutes=1)) == {"b"}
    assert work.due(NOW + timedelta(minutes=10)) == {"a"}
    assert work.due(NOW + timedelta(minutes=10)) == set()
    work.wake("c", None)
    assert work.every == {"c"}


def test_a_pass_that_does_not_end_leaves_the_next_one_to_look_at_every_sj() -> None:
    world = World(2)
    for i in range(4):
        world.add_sj(i, 0)
    controller = Controller(world, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    asyncio.run(settled_pass(controller, world.view()))
    with mock.patch.object(controller.memo.work, "reset", wraps=controller.memo.work.reset) as reset:
        asyncio.run(settled_pass(controller, world.view()))
        assert reset.call_count == 0, "a pass after one that ended looks at what changed"
        with mock.patch.object(controller.writer, "delete_strays", side_effect=RuntimeError("a bug")), \
                pytest.raises(RuntimeError):
            asyncio.run(settled_pass(controller, world.view()))
        asyncio.run(settled_pass(controller, world.view()))
        assert reset.call_count == 1, "what the broken pass took from the view is looked at again"
