"""The one worker pool the write side runs its API calls in.

A pool holds a queue of items and up to ``size`` worker tasks that take them in order, one after another (first
in, first out; or in turn by namespace, `RoundRobin`).
Workers start when items are queued and end when none is left: no task per item (thousands of tasks started
in one turn of the loop would hold it), and no task at all while there is nothing to do. The status writes
of a pass, the launches, the steering writes, the Events and the faults' conditions each have one.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar

from sj_operator.pacing import Pacer

__all__ = ["Pool", "Queue", "RoundRobin", "concurrently", "idle"]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Queue(Protocol[T]):
    """What a pool takes its items from: a ``deque``, or a `RoundRobin`."""

    def extend(self, items: Iterable[T], /) -> None: ...

    def popleft(self) -> T: ...

    def clear(self) -> None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[T]: ...


class RoundRobin(Generic[T]):
    """Items taken in turn by ``key`` (a namespace): each key's in the order queued, and one item of each key that
    has any before a second of any. A tenant that queues thousands at once (launches paced by the control plane
    take minutes to go) does not hold another's one item behind them all."""

    def __init__(self, key: Callable[[T], str]) -> None:
        self._key = key
        self._by_key: dict[str, deque[T]] = {}
        self._turns: deque[str] = deque()
        """The keys with items, the next to take first."""
        self._len = 0

    def extend(self, items: Iterable[T], /) -> None:
        for item in items:
            key = self._key(item)
            waiting = self._by_key.get(key)
            if waiting is None:
                waiting = self._by_key[key] = deque()
                self._turns.append(key)
            waiting.append(item)
            self._len += 1

    def popleft(self) -> T:
        """The next item; IndexError when none is left (as a deque's)."""
        key = self._turns.popleft()
        waiting = self._by_key[key]
        item = waiting.popleft()
        self._len -= 1
        if waiting:
            self._turns.append(key)
        else:
            del self._by_key[key]
        return item

    def clear(self) -> None:
        self._by_key.clear()
        self._turns.clear()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[T]:
        for key in self._turns:
            yield from self._by_key[key]


class Pool(Generic[T]):
    """Items handled by ``handle`` in the order their ``queue`` gives them, by at most ``size`` workers at once.

    ``ready``: awaited by a worker before it takes the next item (the Events wait for launches to pause);
    False when the worker should stop. ``drained``: called by each worker that finds the queue empty (the
    loop is woken to decide again). ``pace``: seconds of the loop's time each worker may hold before it gives
    the other tasks a turn (for work that may not wait for the API at all). ``contained``: an item whose
    handling raises is logged with its traceback, named by ``describe`` (its SJ's key: never the item itself,
    which may hold a raw SJ), and the worker goes on with the next (a background lane: one item's fault stops
    neither the others nor the loop); when False, it ends the worker and is its caller's. ``queue``: where the items
    wait (a deque by default: first in, first out)."""

    def __init__(self, name: str, size: int, handle: Callable[[T], Awaitable[None]], *,
                 ready: Callable[[], Awaitable[bool]] | None = None, drained: Callable[[], None] | None = None,
                 pace: float | None = None, contained: bool = True,
                 describe: Callable[[T], str] = lambda item: type(item).__name__,
                 queue: Queue[T] | None = None) -> None:
        self.name, self.size, self._handle = name, size, handle
        self._contained, self._describe = contained, describe
        self._ready, self._drained, self._pace = ready, drained, pace
        self.queue: Queue[T] = deque() if queue is None else queue
        self._workers: list[asyncio.Task[None]] = []

    def submit(self, items: Iterable[T]) -> None:
        """Queues ``items`` and starts the workers they need, up to ``size``."""
        self.queue.extend(items)
        self._workers = [t for t in self._workers if not t.done()]
        for _ in range(min(self.size - len(self._workers), len(self.queue))):
            self._workers.append(asyncio.create_task(self._work(), name=self.name))

    def drop(self, where: Callable[[T], bool] | None = None) -> list[T]:
        """Forgets the items no worker has taken yet (``where``: those it holds for; the others keep their order),
        and returns them."""
        items = list(self.queue)
        dropped = items if where is None else [item for item in items if where(item)]
        self.queue.clear()
        if where is not None:
            self.queue.extend(item for item in items if not where(item))
        return dropped

    @property
    def tasks(self) -> tuple[asyncio.Task[None], ...]:
        return tuple(self._workers)

    async def idle(self) -> None:
        """Waits until every worker is done."""
        await idle(lambda: self._workers)

    async def _work(self) -> None:
        pacer = Pacer(self._pace) if self._pace is not None else None
        queue = self.queue
        while queue:
            if self._ready is not None and not await self._ready():
                return
            if not queue:
                return
            item = queue.popleft()
            try:
                await self._handle(item)
            except Exception:
                if not self._contained:
                    raise
                log.exception("the %s lane could not handle %s", self.name, self._describe(item))
            if pacer is not None:
                await pacer.breathe()
        if self._drained is not None:
            self._drained()


async def concurrently(steps: Iterable[Awaitable[R]], size: int, hold_budget: float) -> list[R]:
    """Runs API-bound steps in a pool of at most ``size`` workers; their results in order. Steps that did not
    wait for the API (nothing to patch) give the loop a turn: the workers may all resume in one turn of the
    loop, so each has its share of ``hold_budget``."""
    pending = list(steps)
    results: list[R | None] = [None] * len(pending)
    if not pending:
        return []
    workers = min(size, len(pending))

    async def run(item: tuple[int, Awaitable[R]]) -> None:
        results[item[0]] = await item[1]

    pool: Pool[tuple[int, Awaitable[R]]] = Pool("writes", workers, run, pace=hold_budget / workers,
                                                   contained=False)
    pool.submit(enumerate(pending))
    await asyncio.gather(*pool.tasks)  # a step's exception is the caller's
    return results  # type: ignore[return-value]  # every step has run


async def idle(tasks: Callable[[], Iterable[asyncio.Task[None]]]) -> None:
    """Waits until every task of ``tasks()`` is done, asked again after each wait (workers started meanwhile
    are waited for too)."""
    while pending := [t for t in tasks() if not t.done()]:
        await asyncio.wait(pending)
