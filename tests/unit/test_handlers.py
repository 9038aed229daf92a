"""The kopf wiring: what kopf is told to keep per object.

`handlers.NoDiffBase` makes kopf skip the essence it would build of every object on every event. That is
sound only while no change-detecting handler exists; these tests fail the day one is registered, and show
that kopf still indexes what it sees with the storage in place.
"""
from __future__ import annotations

import asyncio
import contextlib
import copy

import kopf

from benchmarks.bench_events import NODE, NODES, Events
from sj_operator import handlers
from sj_operator.observed import NodeInfo


def test_no_handler_detects_changes_so_the_diff_base_is_never_read() -> None:
    registry = kopf.get_default_registry()
    assert registry._changing.get_all_handlers() == []  # on.create/update/delete/resume/field
    assert registry._spawning.get_all_handlers() == []  # daemons and timers diff too
    indexes = registry._indexing.get_all_handlers()
    assert sorted(h.id for h in indexes) == ["cluster_quotas", "namespaces", "nodes", "quotas"]
    # Pods, Jobs and SJs are the operator's own watch caches' (sj_operator.caches): no kopf handler watches them.
    watched = [str(h.selector) for h in [*indexes, *registry._watching.get_all_handlers()]]
    assert not [w for w in watched if any(f"'{kind}'" in w for kind in ("pods", "jobs", "scavengerjobs"))], watched


def test_kopf_indexes_every_event_with_no_diff_base() -> None:
    events = Events(NODES)  # kopf's processing with the operator's handlers and NoDiffBase

    def nodes() -> tuple[NodeInfo, ...]:
        return tuple(events.indexers.indices["nodes"].get("node", ()))

    asyncio.run(events.handle(copy.deepcopy(NODE), None))
    assert [(n.name, n.ready, n.unschedulable) for n in nodes()] == [("node-1", True, False)]
    assert events.memo.wake.is_set()
    assert isinstance(events.settings.persistence.diffbase_storage, handlers.NoDiffBase)
    assert events.settings.persistence.diffbase_storage.build(body=kopf.Body(NODE)) == {}

    cordoned = copy.deepcopy(NODE)
    cordoned["metadata"]["resourceVersion"] = "8"
    cordoned["spec"]["unschedulable"] = True
    asyncio.run(events.handle(cordoned, "MODIFIED"))
    assert [n.unschedulable for n in nodes()] == [True]

    asyncio.run(events.handle(cordoned, "DELETED"))
    assert nodes() == ()


def test_the_process_is_unhealthy_with_the_first_task_that_stopped_and_why() -> None:
    async def run() -> list[str | None]:
        async def forever() -> None:
            await asyncio.Event().wait()

        async def fails() -> None:
            raise RuntimeError("watch caches not complete after 600s")

        loop = asyncio.create_task(forever(), name="decision loop")
        election = asyncio.create_task(fails(), name="leader election")
        seen = [handlers.stopped([loop])]
        await asyncio.gather(election, return_exceptions=True)
        seen.append(handlers.stopped([loop, election]))
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        seen.append(handlers.stopped([loop, election]))
        return seen

    assert asyncio.run(run()) == [
        None,
        "the leader election task stopped: watch caches not complete after 600s",
        "the decision loop task stopped",
    ]


def test_cleanup_drops_the_launches_not_begun_before_it_waits_for_the_lanes_and_releases_the_lease() -> None:
    """A stopping replica forgets the launches it has not begun (the next leader's), then waits for the lanes, then
    gives up its Lease: no launch it paced is made once another replica may lead."""
    calls: list[str] = []

    class Controller:
        def drop_launches(self) -> None:
            calls.append("drop")

        async def settle(self) -> None:
            calls.append("settle")

    class Elector:
        async def release(self) -> None:
            calls.append("release")

    memo = kopf.Memo()
    memo.controller, memo.elector = Controller(), Elector()
    asyncio.run(handlers.cleanup(memo=memo))
    assert calls == ["drop", "settle", "release"]


def test_the_loop_lets_events_gather_for_the_longest_window_while_the_control_plane_is_behind(monkeypatch) -> None:
    """The window before each pass is `pacing.batch_window` of the last pass, and the longest while the controller is
    unhurried (`Controller.unhurried`): read at each turn of the loop."""
    from datetime import timedelta

    from sj_operator.pacing import BATCH_WINDOW

    unhurried = [False, True, False]
    windows: list[float] = []

    class Metrics:
        def set_leading(self, leading: bool) -> None:
            pass

    class Controller:
        metrics = Metrics()

        @property
        def unhurried(self) -> bool:
            return unhurried[len(windows)]

        def drop_launches(self) -> None:
            pass

    class Config:
        tick = timedelta(seconds=0)

    class Watchdog:
        def progressed(self) -> None:
            pass

    class Elector:
        leading = False  # every turn ends before a pass: the windows are all there is to see

    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        windows.append(seconds)
        if len(windows) == len(unhurried):
            raise asyncio.CancelledError
        await real_sleep(0)

    monkeypatch.setattr(handlers.asyncio, "sleep", sleep)
    memo = kopf.Memo()
    memo.controller, memo.config, memo.watchdog, memo.elector = Controller(), Config(), Watchdog(), Elector()
    memo.ready, memo.wake = asyncio.Event(), asyncio.Event()
    memo.ready.set()

    async def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await handlers._decision_loop(memo)

    asyncio.run(run())
    assert windows == [BATCH_WINDOW[0], BATCH_WINDOW[1], BATCH_WINDOW[0]]
