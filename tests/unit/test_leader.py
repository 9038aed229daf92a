"""A replica campaigns for the Lease only with complete watch caches (`leader.campaign_once_ready`)."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from sj_operator.leader import CachesIncomplete, campaign_once_ready


class Campaign:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self) -> None:
        self.runs += 1


def test_a_replica_with_complete_caches_campaigns():
    async def run() -> int:
        ready, campaign = asyncio.Event(), Campaign()
        ready.set()
        await campaign_once_ready(ready, campaign, 600)
        return campaign.runs

    assert asyncio.run(run()) == 1


def test_a_replica_campaigns_only_once_its_caches_are_complete():
    async def run() -> list[int]:
        ready, campaign = asyncio.Event(), Campaign()
        task = asyncio.create_task(campaign_once_ready(ready, campaign, 600))
        for _ in range(5):
            await asyncio.sleep(0)
        before = campaign.runs
        ready.set()
        await task
        return [before, campaign.runs]

    assert asyncio.run(run()) == [0, 1]


def test_caches_not_complete_in_time_end_the_task_without_campaigning(caplog: pytest.LogCaptureFixture):
    asked: list[float] = []

    async def expired(waiting: Awaitable[bool], timeout: float) -> bool:  # the timeout has passed
        asked.append(timeout)
        waiting.close()  # type: ignore[attr-defined]  # a coroutine never awaited
        raise TimeoutError

    async def run() -> Campaign:
        campaign = Campaign()
        with pytest.raises(CachesIncomplete, match="not complete after 90s"):
            await campaign_once_ready(asyncio.Event(), campaign, 90, wait_for=expired)
        return campaign

    assert asyncio.run(run()).runs == 0
    assert asked == [90]
    assert "not campaigning for the Lease" in caplog.text
