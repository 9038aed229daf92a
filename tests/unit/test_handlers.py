"""The kopf wiring: what kopf is told to keep per object.

`handlers.NoDiffBase` makes kopf skip the essence it would build of every object on every event. That is
sound only while no change-detecting handler exists; these tests fail the day one is registered, and show
that kopf still indexes what it sees with the storage in place.
"""
from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf

from benchmarks.bench_events import JOBS, Events
from sj_operator import handlers
from sj_operator.observed import JobView

JOB: dict[str, Any] = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "sj-a-r1", "namespace": "team", "uid": "job-1", "resourceVersion": "7",
                 "labels": {"scavenger.dev/job-name": "sj-a", "scavenger.dev/run": "sj-a-r1"}},
    "spec": {"parallelism": 1},
    "status": {"active": 1, "startTime": "2026-11-26T10:00:00Z"},
}


def test_no_handler_detects_changes_so_the_diff_base_is_never_read() -> None:
    registry = kopf.get_default_registry()
    assert registry._changing.get_all_handlers() == []  # on.create/update/delete/resume/field
    assert registry._spawning.get_all_handlers() == []  # daemons and timers diff too
    indexes = registry._indexing.get_all_handlers()
    assert len(indexes) == 5
    # Pods are the pod cache's (sj_operator.pod_cache), not kopf's: no kopf handler of any sort watches them.
    assert not [h for h in indexes if "pods" in str(h.selector)]


def test_kopf_indexes_every_event_with_no_diff_base() -> None:
    events = Events(JOBS)  # kopf's processing with the operator's handlers and NoDiffBase

    def runs() -> tuple[JobView, ...]:
        index = events.indexers.indices["runs"]
        return tuple(index.get(("team", "sj-a-r1"), ()))

    asyncio.run(events.handle(copy.deepcopy(JOB), None))
    assert [(j.sj, j.failed) for j in runs()] == [("sj-a", False)]
    assert events.memo.wake.is_set()
    assert isinstance(events.settings.persistence.diffbase_storage, handlers.NoDiffBase)
    assert events.settings.persistence.diffbase_storage.build(body=kopf.Body(JOB)) == {}

    moved = copy.deepcopy(JOB)
    moved["metadata"]["resourceVersion"] = "8"
    moved["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    asyncio.run(events.handle(moved, "MODIFIED"))
    assert [j.failed for j in runs()] == [True]

    asyncio.run(events.handle(moved, "DELETED"))
    assert runs() == ()


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
