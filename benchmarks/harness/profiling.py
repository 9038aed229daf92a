"""Where a process's time goes while a benchmark runs: py-spy samples it from outside, and the samples are
summed by package, function and Kubernetes API operation."""
from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.harness.progress import log


@contextmanager
def profiled(pid: int, output: Path | None, what: str) -> Iterator[Callable[[], None]]:
    """With ``output``: py-spy samples process ``pid`` (``what``, in the log; 50 Hz, all threads, without pausing
    it: so threads blocked in C, such as workers waiting for a response, count as busy) until the block ends,
    writes its stacks to ``output`` (collapsed: one stack and its samples per line; flamegraph tools read it),
    and logs `profile_summary`. What it yields stops the sampling earlier (a second call does nothing)."""
    if output is None:
        yield lambda: None
        return
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        raise SystemExit("--profile needs py-spy: pip install -e '.[bench]'")
    output.parent.mkdir(parents=True, exist_ok=True)
    log(f"  profiling {what} (py-spy) into {output}")
    proc = subprocess.Popen([str(spy), "record", "--pid", str(pid), "--rate", "50", "--format", "raw",
                             "--output", str(output), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop() -> None:
        if proc.returncode is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not output.exists():
            log(f"  py-spy wrote no profile: {err.decode(errors='replace').strip()[-300:]}")
        else:
            for line in profile_summary(output.read_text().splitlines()):
                log(f"  {line}")

    try:
        yield stop
    finally:
        stop()


def profile_summary(collapsed: list[str], top: int = 10) -> list[str]:
    """Shares of py-spy's samples from its collapsed stacks ("frame;frame;... count", a frame being
    "function (path:line)", the path relative to where Python found the module): the function each sample
    was in (its own time), by package and by function, and each Kubernetes API operation whose call was
    under way (the client's work and the wait for the API server together). Threads blocked in C, such as
    a worker waiting for a response, are sampled too."""
    own: dict[str, int] = {}
    packages: dict[str, int] = {}
    operations: dict[str, int] = {}
    total = 0
    for line in collapsed:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        function, _, where = frames[-1].partition(" (")
        path = where.rsplit(":", 1)[0]
        name = f"{function} ({path})"
        own[name] = own.get(name, 0) + n
        package = path.split("/", 1)[0].removesuffix(".py")
        packages[package] = packages.get(package, 0) + n
        for frame in frames:
            function, _, where = frame.partition(" (")
            if where.startswith("kubernetes/client/api/") and "." in function and "_with_http_info" not in function:
                operation = function.rsplit(".", 1)[1]
                operations[operation] = operations.get(operation, 0) + n
                break
    if not total:
        return ["no samples"]

    def shares(counts: dict[str, int]) -> str:
        return ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in
                         sorted(counts.items(), key=lambda kv: -kv[1])[:top])

    return [f"{total} samples; own time by package: {shares(packages)}",
            f"own time by function: {shares(own)}",
            f"under way, by API operation: {shares(operations)}"]
