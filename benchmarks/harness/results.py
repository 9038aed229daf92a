"""A benchmark's result as data: what ran, on which code and machine, what it measured, and its goals.

Every benchmark under ``benchmarks/`` takes ``--json PATH`` (write the result there) and ``--save`` (write it
to ``benchmarks/results/<benchmark>-<UTC date and time>-<short commit>.json``, where the results are kept);
``make bench-report`` renders ``docs/benchmarks.md`` from the results kept. A result is one JSON object:

* ``schema``: this format's version (1);
* ``benchmark``: the script's name (``bench_loop``);
* ``command``: the command line that produced it, as run from the repository's root;
* ``commit``: the full hash of the commit measured, and ``dirty``: whether tracked files differed from it
  (null when not known);
* ``date``: when the result was written, UTC (ISO 8601, ``Z``);
* ``machine``: ``cores`` (``os.cpu_count``), ``usable_cores`` (this process's CPU affinity), ``cpu``
  (``/proc/cpuinfo``'s model name), ``memory_bytes`` (``/proc/meminfo``'s MemTotal), ``os``, ``kernel``,
  ``python``, and ``load``: the load averages over 1, 5 and 15 minutes when the result was written (what else
  ran meanwhile);
* ``parameters``: the benchmark's arguments and settings;
* ``figures``: what it measured, in order, each ``{"metric", "value", "unit"}`` and, when the project set one,
  ``"goal": {"max": X}`` or ``{"min": X}`` with ``"met"``: whether the value is within it;
* ``note``: anything a reader must know about the result (null when nothing).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA = 1
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
"""Where the results are kept (``--save``)."""
OUTPUT_FLAGS = ("json", "save")
"""Arguments that say where the result goes, not what was measured."""

Goal = Mapping[str, float]


def met(value: float, goal: Goal) -> bool:
    """Whether ``value`` is within ``goal`` (``{"max": X}``, ``{"min": X}`` or both)."""
    unknown = set(goal) - {"min", "max"}
    if unknown or not goal:
        raise ValueError(f"a goal is {{'min': X}} and/or {{'max': X}}, not {dict(goal)}")
    return goal.get("min", value) <= value <= goal.get("max", value)


def figure(metric: str, value: float, unit: str = "", goal: Goal | None = None) -> dict[str, Any]:
    """One measured figure, with its goal beside it when it has one."""
    out: dict[str, Any] = {"metric": metric, "value": value, "unit": unit}
    if goal is not None:
        out["goal"] = dict(goal)
        out["met"] = met(value, goal)
    return out


def _first(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text, re.MULTILINE)
    return found.group(1).strip() if found else None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine(cpuinfo: str | None = None, meminfo: str | None = None) -> dict[str, Any]:
    """The machine this process runs on (``cpuinfo``, ``meminfo``: the ``/proc`` files' text, read when not
    given)."""
    cpuinfo = _read("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    meminfo = _read("/proc/meminfo") if meminfo is None else meminfo
    memory_kib = _first(r"^MemTotal:\s*(\d+)\s*kB", meminfo)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    load = [round(n, 2) for n in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "cpu": _first(r"^model name\s*:(.*)$", cpuinfo) or _first(r"^Hardware\s*:(.*)$", cpuinfo)
        or platform.processor() or None,
        "memory_bytes": int(memory_kib) * 1024 if memory_kib else None,
        "os": _first(r'^PRETTY_NAME="?([^"\n]*)"?', _read("/etc/os-release")) or platform.system(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load": load,
    }


def commit(repo: Path = REPO) -> dict[str, Any]:
    """``{"commit": full hash, "dirty": bool}`` of ``repo``'s checkout (tracked files only), or nulls when it is
    not a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout

    try:
        head = git("rev-parse", "HEAD").strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": head, "dirty": dirty}


def command(argv: Sequence[str] | None = None) -> str:
    """The command line that ran this process, the script's path relative to the repository."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve()
    if script.is_relative_to(REPO):
        argv[0] = str(script.relative_to(REPO))
    return shlex.join(["python", *argv])


def parameters(args: argparse.Namespace, **more: Any) -> dict[str, Any]:
    """The arguments that say what was measured (not where the result goes), and ``more`` settings."""
    def plain(value: Any) -> Any:
        return value if value is None or isinstance(value, (bool, int, float, str, list)) else str(value)

    return {**{k: plain(v) for k, v in vars(args).items() if k not in OUTPUT_FLAGS}, **more}


def result(benchmark: str, params: Mapping[str, Any], figures: Sequence[Mapping[str, Any]], *,
           note: str | None = None, argv: Sequence[str] | None = None, now: datetime | None = None,
           repo: Path = REPO, measured: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A whole result, as written to its JSON file; ``measured``: the checkout's `commit` as read when the
    benchmark began (read now without it), so that a result written part way through a long run, or at its end,
    names what was measured even when the checkout has moved on meanwhile."""
    now = datetime.now(UTC) if now is None else now
    return {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "command": command(argv),
        **(commit(repo) if measured is None else measured),
        "date": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "parameters": dict(params),
        "figures": [dict(f) for f in figures],
        "note": note,
    }


def default_path(data: Mapping[str, Any], directory: Path = RESULTS) -> Path:
    """``<benchmark>-<date, UTC>-<short commit>.json`` in ``directory``, not taken yet."""
    stamp = re.sub(r"[-:]", "", str(data["date"]))
    short = str(data["commit"])[:7] if data.get("commit") else "unknown"
    stem = f"{data['benchmark']}-{stamp}-{short}{'-dirty' if data.get('dirty') else ''}"
    path, n = directory / f"{stem}.json", 1
    while path.exists():
        n += 1
        path = directory / f"{stem}-{n}.json"
    return path


def dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json PATH`` and ``--save``."""
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the result (JSON) here")
    parser.add_argument("--save", action="store_true",
                        help="write the result to benchmarks/results/<benchmark>-<date>-<commit>.json")


def targets(args: argparse.Namespace, data: Mapping[str, Any]) -> list[Path]:
    """Where ``--json`` and ``--save`` say ``data`` goes."""
    return [*([args.json] if getattr(args, "json", None) else []),
            *([default_path(data)] if getattr(args, "save", False) else [])]


def save(args: argparse.Namespace, data: Mapping[str, Any], paths: Sequence[Path] | None = None) -> list[Path]:
    """Writes ``data`` to ``paths``, or where ``--json`` and ``--save`` say (`targets`); the paths written. A run
    that writes what it has so far more than once passes the same ``paths`` each time, so the last replaces the
    rest."""
    paths = targets(args, data) if paths is None else list(paths)
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(data))
        print(f"result written to {path}", flush=True)
    return paths


def load(directory: Path = RESULTS) -> list[dict[str, Any]]:
    """The results kept in ``directory``."""
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]
