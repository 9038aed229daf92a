"""The write side's worker pool: items in order, at most ``size`` at once, and one item's fault contained."""
from __future__ import annotations

import asyncio
import logging

import pytest

from sj_operator.write.pool import Pool, concurrently


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
