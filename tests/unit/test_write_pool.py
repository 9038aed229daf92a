"""The write side's worker pool: items in order (or in turn by namespace), at most ``size`` at once, and one item's
fault contained."""
from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sj_operator.write.pool import Pool, RoundRobin, concurrently


def test_a_background_lane_logs_an_item_that_raises_and_goes_on_with_the_next(caplog: pytest.LogCaptureFixture) -> None:
    handled: list[int] = []

    async def handle(item: int) -> None:
        if item == 2:
            raise RuntimeError("a bug on item 2")
        handled.append(item)

    async def main() -> None:
        pool: Pool[int] = Pool("test", 1, handle, describe=lambda item: f"item #{item}")
        pool.submit(range(5))
        await pool.idle()

    with caplog.at_level(logging.ERROR, logger="sj_operator.write.pool"):
        asyncio.run(main())
    assert handled == [0, 1, 3, 4], "one worker: the items after the fault are still handled, in order"
    [record] = caplog.records
    assert "the test lane could not handle item #2" in record.getMessage() and record.exc_info is not None


def test_an_item_that_raises_is_named_by_its_kind_not_its_contents(caplog: pytest.LogCaptureFixture) -> None:
    """A queued item may hold a raw SJ (its spec, its environment): the log names it, never prints it."""
    async def handle(item: dict[str, str]) -> None:
        raise RuntimeError("a bug")

    async def main() -> None:
        pool: Pool[dict[str, str]] = Pool("test", 1, handle)
        pool.submit([{"env": "SECRET=hunter2"}])
        await pool.idle()

    with caplog.at_level(logging.ERROR, logger="sj_operator.write.pool"):
        asyncio.run(main())
    [record] = caplog.records
    assert record.getMessage() == "the test lane could not handle dict" and "hunter2" not in caplog.text


def test_concurrent_steps_leave_a_fault_to_their_caller() -> None:
    async def fails() -> int:
        raise RuntimeError("step")

    async def ok() -> int:
        return 1

    with pytest.raises(RuntimeError, match="step"):
        asyncio.run(concurrently([ok(), fails(), ok()], 2, 0.01))


def test_at_most_size_items_are_handled_at_once() -> None:
    running, most = [0], [0]

    async def handle(item: int) -> None:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0)
        running[0] -= 1

    async def main() -> None:
        pool: Pool[int] = Pool("test", 3, handle)
        pool.submit(range(20))
        await pool.idle()

    asyncio.run(main())
    assert most == [3]


@pytest.mark.parametrize(("queued", "taken"), [
    ([], ""),
    (["a1"], "a1"),
    (["a1", "a2", "a3", "b1"], "a1 b1 a2 a3"),         # b's one launch does not wait behind a's burst
    (["a1", "a2", "b1", "b2", "c1"], "a1 b1 c1 a2 b2"),
    ([["a1", "a2"], ["b1"], ["a3", "c1"]], "a1 b1 c1 a2 a3"),  # queued in three passes
])
def test_round_robin_takes_one_item_of_each_namespace_in_turn(queued: list[Any], taken: str) -> None:
    """Items named by their namespace's letter and their order within it; each list a separate `extend`."""
    queue: RoundRobin[str] = RoundRobin(lambda item: item[0])
    for part in queued if queued and isinstance(queued[0], list) else [queued]:
        queue.extend(part)
    assert len(queue) == len(taken.split()) and sorted(queue) == sorted(taken.split())
    assert " ".join(queue.popleft() for _ in range(len(queue))) == taken
    assert not queue
    with pytest.raises(IndexError):
        queue.popleft()


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.lists(st.sampled_from("abcd"), max_size=12), max_size=5))
def test_round_robin_keeps_each_namespaces_order_and_never_takes_twice_from_one_while_another_waits(
        parts: list[list[str]]) -> None:
    """Whatever is queued, in however many parts: every item is taken once, each namespace's in the order queued,
    and between two items of one namespace, every namespace waiting at the first is taken from."""
    queue: RoundRobin[tuple[str, int]] = RoundRobin(lambda item: item[0])
    counter = itertools.count()
    queued = [[(ns, next(counter)) for ns in part] for part in parts]
    for part in queued:
        queue.extend(part)
    waiting = {ns for part in queued for ns, _ in part}
    taken = []
    while queue:
        taken.append(queue.popleft())
    assert sorted(taken, key=lambda item: item[1]) == [item for part in queued for item in part]
    for ns in waiting:
        mine = [item for item in taken if item[0] == ns]
        assert mine == sorted(mine, key=lambda item: item[1])
    left = {ns: sum(1 for item in taken if item[0] == ns) for ns in waiting}
    seen: dict[str, int] = dict.fromkeys(waiting, 0)
    for ns, _ in taken:  # all queued before the first take: a strict rotation among those with items left
        seen[ns] += 1
        assert all(seen[ns] <= seen[other] + 1 for other in waiting if seen[other] < left[other])
    queue.extend([("a", -1)])
    queue.clear()
    assert len(queue) == 0 and list(queue) == []
