"""What a long benchmark prints as it goes: timestamped lines, work done a tenth at a time (and timed, or followed
by more work as each piece is done), and what it waits for. A run on a cluster takes minutes to hours, and these
lines are how a reader sees where it is."""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def in_parallel(fn: Callable[[int], None], count: int, threads: int, what: str) -> float:
    """Runs ``fn(i)`` for every i, ``threads`` at a time, printing progress; the seconds it took."""
    done = [0]
    lock = threading.Lock()
    start = time.monotonic()

    def one(i: int) -> None:
        fn(i)
        with lock:
            done[0] += 1
            if done[0] % max(1, count // 10) == 0:
                log(f"  {what}: {done[0]}/{count} ({time.monotonic() - start:.0f}s)")

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, range(count)))
    return time.monotonic() - start


def in_parallel_then(first: Callable[[int], None], then: Callable[[int], None], count: int, threads: int,
                     what: str) -> None:
    """``first(i)`` for every i as `in_parallel` runs it (``threads`` at a time, its progress printed as ``what``),
    and ``then(i)`` as soon as ``first(i)`` returned, by as many threads again; returns once every ``then`` has
    (also when a ``first`` raised)."""
    made: queue.Queue[int | None] = queue.Queue()

    def first_of(i: int) -> None:
        first(i)
        made.put(i)

    def follow() -> None:
        while (i := made.get()) is not None:
            then(i)

    workers = [threading.Thread(target=follow, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        in_parallel(first_of, count, threads, what)
    finally:
        for _ in workers:
            made.put(None)
        for worker in workers:
            worker.join()


def timed_creates(create: Callable[[int], None], names: Sequence[str], threads: int,
                  what: str) -> tuple[float, dict[str, float]]:
    """``create(i)`` for every unit, ``threads`` at a time: the seconds it took, and when each create returned
    (monotonic), by ``names[i]``."""
    created: dict[str, float] = {}

    def one(i: int) -> None:
        create(i)
        created[names[i]] = time.monotonic()

    return in_parallel(one, len(names), threads, what), created


def wait_until(what: str, probe: Callable[[], tuple[bool, str]], timeout: float, every: float = 5) -> float:
    """Asks ``probe`` every ``every`` seconds until it says done (printing the progress it gives meanwhile);
    the seconds it took. Raises TimeoutError after ``timeout``."""
    start = time.monotonic()
    while True:
        ok, progress = probe()
        if ok:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s ({progress})")
        log(f"  {what}: {progress}")
        time.sleep(every)
