"""The processes a benchmark starts beside itself (the operator, Kueue's manager) and what they use.

A process is started with its output in a log file and handed over once it says it is ready, and it is always
stopped again (SIGTERM, then killed). Its CPU time and peak memory are read from ``/proc``: the kernel's own
accounting, which costs the process nothing, so measuring it does not change what is measured.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from benchmarks.harness.results import REPO

OWN_COMMANDS = "benchmarks/bench_"
"""In the command line of a benchmark (and of the shell make runs it in): never the process looked for."""


def scratch(name: str) -> Path:
    """A path for a process's log or files: ``name`` in ``$TMPDIR`` (or /tmp)."""
    return Path(os.environ.get("TMPDIR", "/tmp")) / name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def started(args: list[str], logfile: Path, ready: Callable[[], bool], what: str,
            timeout: float, env: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A process started with its output in ``logfile``, once ``ready()`` (connection errors are "not
    yet"); stopped with SIGTERM, then killed after 30 s. ``env`` is added to this process's environment."""
    with logfile.open("wb") as out:
        proc = subprocess.Popen(args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            with suppress(OSError):
                if ready():
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start (log: {logfile})")
            time.sleep(0.5)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def command_line(pattern: str) -> tuple[int, str] | None:
    """The pid and command line (arguments joined by spaces) of the first process whose command line contains
    ``pattern`` (a process this benchmark did not start, such as the API server; never a benchmark's own); None
    when there is none."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if pattern in cmdline and OWN_COMMANDS not in cmdline:
            return int(pid), cmdline
    return None


def command_cpu_seconds(pattern: str) -> float | None:
    """CPU seconds (user + system) of the first process whose command line contains ``pattern``
    (`command_line`); None when there is none."""
    found = command_line(pattern)
    if found is None:
        return None
    try:
        return cpu_seconds(found[0])
    except OSError:  # it ended meanwhile
        return None


@contextmanager
def niced(pattern: str, niceness: int) -> Iterator[None]:
    """The process whose command line contains ``pattern`` (`command_line`) at CPU niceness ``niceness`` until the
    block ends, then as its main thread was. On Linux niceness belongs to each thread, so every thread it has is
    set (those it makes later inherit it from their maker). A lower niceness than now needs root (``CAP_SYS_NICE``): a
    PermissionError says so."""
    found = command_line(pattern)
    if found is None:
        raise RuntimeError(f"no process runs {pattern.strip()!r}")
    tasks = Path(f"/proc/{found[0]}/task")

    def every_thread(value: int) -> int:
        """Sets every thread to ``value``; the niceness the process's main thread had."""
        was = 0
        for tid in map(int, filter(str.isdigit, os.listdir(tasks))):
            with suppress(ProcessLookupError):  # a thread that ended meanwhile
                if tid == found[0]:
                    was = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, value)
        return was

    try:
        before = every_thread(niceness)
    except PermissionError as e:
        raise PermissionError(f"setting {pattern.strip()!r} to niceness {niceness} needs root: {e}") from e
    try:
        yield
    finally:
        with suppress(OSError):
            every_thread(before)


def peak_rss_mib(pid: int) -> float:
    """The most resident memory process ``pid`` has held so far (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class CpuSince:
    """A process's CPU time from the moment this is made: ``read`` gives its CPU seconds so far (None when the
    process is not found)."""

    def __init__(self, read: Callable[[], float | None]) -> None:
        self.read = read
        self.start = read()

    @classmethod
    def of_pid(cls, pid: int) -> CpuSince:
        return cls(lambda: cpu_seconds(pid))

    @classmethod
    def of_command(cls, pattern: str) -> CpuSince:
        """Of the process whose command line contains ``pattern`` (`command_cpu_seconds`)."""
        return cls(lambda: command_cpu_seconds(pattern))

    def seconds(self) -> float | None:
        """The CPU seconds spent since; None when the process was not found then or now."""
        now = self.read()
        return None if now is None or self.start is None else now - self.start


KWOK = "bin/kwok-controller "
"""What the command line of the local cluster's kwok holds."""

CONTROL_PLANE = (("etcd", "bin/etcd "), ("kube-apiserver", "bin/kube-apiserver "),
                 ("kube-controller-manager", "bin/kube-controller-manager "), ("kube-scheduler", "bin/kube-scheduler "),
                 ("kwok", KWOK))
"""The local cluster's processes (a name, and what their command line holds: the binaries of ``.bin/``)."""


def machine_cpu() -> tuple[float, float]:
    """This machine's CPU seconds so far, busy and idle (``/proc/stat``: waiting for I/O counts as idle)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), idle / os.sysconf("SC_CLK_TCK")


class CpuAccount:
    """Where this machine's CPU went from the moment this is made: the local cluster's processes
    (`CONTROL_PLANE`), the ones given by pid (the operator, Kueue's manager), the rest of what was busy
    (this benchmark, its watcher, the system) and what was idle. On a machine whose cores the control plane
    shares, it tells the CPU a run added from what its own process took."""

    def __init__(self, processes: Mapping[str, int] | None = None) -> None:
        self.parts = {name: CpuSince.of_command(pattern) for name, pattern in CONTROL_PLANE}
        self.parts.update({name: CpuSince.of_pid(pid) for name, pid in (processes or {}).items()})
        self.start = machine_cpu()

    def seconds(self) -> dict[str, float]:
        """The CPU seconds of each part since, ``other`` for the rest of the busy time and ``idle``; a part not
        found then or now is left out (and counted in ``other``)."""
        busy, idle = (now - then for now, then in zip(machine_cpu(), self.start, strict=True))
        parts = {name: s for name, since in self.parts.items() if (s := since.seconds()) is not None}
        return {**parts, "other": max(0.0, busy - sum(parts.values())), "idle": idle}


def apiserver_cpu() -> CpuSince:
    """The API server's CPU from now on, when it runs on this machine (the local cluster's control plane)."""
    return CpuSince.of_command("bin/kube-apiserver")
