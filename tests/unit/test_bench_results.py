"""`benchmarks/harness/results.py`: a benchmark's result as data (its machine, its commit, its goals), and what
the benchmarks put in it."""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks import bench_loop
from benchmarks.harness import results

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme

processor\t: 1
model name\t: AMD EPYC 7B13
"""
MEMINFO = "MemTotal:        2048 kB\nMemFree:          512 kB\n"


@pytest.mark.parametrize(("value", "goal", "expected"), [
    (99.0, {"max": 100}, True),
    (100.0, {"max": 100}, True),
    (100.5, {"max": 100}, False),
    (0.49, {"min": 0.5}, False),
    (0.5, {"min": 0.5}, True),
    (3.0, {"min": 1, "max": 5}, True),
    (6.0, {"min": 1, "max": 5}, False),
    (0.0, {"max": 0}, True),
])
def test_a_goal_is_met_when_the_value_is_within_its_bounds(value: float, goal: dict[str, float],
                                                           expected: bool) -> None:
    assert results.met(value, goal) is expected


@pytest.mark.parametrize("goal", [{}, {"under": 5}, {"max": 5, "target": 3}])
def test_a_goal_is_only_a_minimum_and_a_maximum(goal: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="min"):
        results.met(1.0, goal)


def test_a_figure_carries_its_goal_and_whether_it_was_met_only_when_it_has_one() -> None:
    assert results.figure("quiet pass: median", 108.2, "ms", {"max": 100}) == {
        "metric": "quiet pass: median", "value": 108.2, "unit": "ms", "goal": {"max": 100}, "met": False}
    assert results.figure("admitted", 574) == {"metric": "admitted", "value": 574, "unit": ""}


def test_the_machine_is_read_from_proc() -> None:
    machine = results.machine(cpuinfo=CPUINFO, meminfo=MEMINFO)
    assert machine["cpu"] == "AMD EPYC 7B13"
    assert machine["memory_bytes"] == 2048 * 1024
    assert machine["cores"] >= 1 and machine["usable_cores"] >= 1
    assert machine["kernel"].startswith("Linux ") and machine["python"].startswith("CPython 3.")
    assert len(machine["load"]) == 3


def test_a_machine_without_those_files_is_recorded_as_unknown() -> None:
    machine = results.machine(cpuinfo="", meminfo="")
    assert machine["memory_bytes"] is None
    assert set(machine) == {"cores", "usable_cores", "cpu", "memory_bytes", "os", "kernel", "python", "load"}


def test_an_arm_cpu_is_named_by_its_hardware_line() -> None:
    assert results.machine(cpuinfo="processor\t: 0\nHardware\t: BCM2835\n", meminfo="")["cpu"] == "BCM2835"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_the_commit_measured_and_whether_tracked_files_differed_from_it(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "add", "code.py")
    git(tmp_path, "commit", "-q", "-m", "code")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert results.commit(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "benchmarks-result.json").write_text("{}")  # untracked: a result just written
    assert results.commit(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "code.py").write_text("x = 2\n")
    assert results.commit(tmp_path) == {"commit": head, "dirty": True}


def test_a_result_names_the_commit_read_as_its_benchmark_began_not_where_the_checkout_is_now(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "add", "code.py")
    git(tmp_path, "commit", "-q", "-m", "measured")
    began = results.commit(tmp_path)
    (tmp_path / "code.py").write_text("x = 2\n")
    git(tmp_path, "commit", "-q", "-am", "a later commit, made while the benchmark ran")
    now = git(tmp_path, "rev-parse", "HEAD")
    assert began["commit"] != now
    data = results.result("bench_scale", {}, [], repo=tmp_path, measured=began)
    assert (data["commit"], data["dirty"]) == (began["commit"], False)
    assert results.result("bench_scale", {}, [], repo=tmp_path)["commit"] == now, "without it: the checkout now"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert results.commit(tmp_path) == {"commit": None, "dirty": None}


def test_a_result_says_what_ran_where_and_when() -> None:
    data = results.result("bench_loop", {"waiting": 10}, [results.figure("x", 1.0, "ms", {"max": 2})],
                          argv=[str(results.REPO / "benchmarks" / "bench_loop.py"), "--waiting", "10", "--save"],
                          now=datetime(2026, 11, 27, 23, 5, 7, tzinfo=UTC))
    assert data["schema"] == 1 and data["benchmark"] == "bench_loop"
    assert data["command"] == "python benchmarks/bench_loop.py --waiting 10 --save"
    assert data["date"] == "2026-11-27T23:05:07Z"
    assert data["commit"] == results.commit()["commit"] and isinstance(data["dirty"], bool)
    assert data["machine"]["cores"] >= 1
    assert data["parameters"] == {"waiting": 10} and data["figures"][0]["met"] is True
    assert data["note"] is None
    assert json.loads(results.dumps(data)) == data


def test_the_parameters_leave_out_where_the_result_goes() -> None:
    args = argparse.Namespace(waiting=10, json=Path("x.json"), save=True, plot=Path("p.png"), every=[1, 2])
    assert results.parameters(args, queued=5) == {"waiting": 10, "plot": "p.png", "every": [1, 2], "queued": 5}


def test_a_saved_result_is_named_by_benchmark_date_and_commit_and_never_overwrites(tmp_path: Path) -> None:
    data = {"benchmark": "bench_loop", "date": "2026-11-27T23:05:07Z", "commit": "ab64c5a0123", "dirty": False}
    first = results.default_path(data, tmp_path)
    assert first.name == "bench_loop-20261127T230507Z-ab64c5a.json"
    first.write_text("{}")
    assert results.default_path(data, tmp_path).name == "bench_loop-20261127T230507Z-ab64c5a-2.json"
    assert results.default_path({**data, "dirty": True}, tmp_path).name.endswith("-ab64c5a-dirty.json")
    assert results.default_path({**data, "commit": None}, tmp_path).name.endswith("-unknown.json")


def test_json_and_save_write_the_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    results.add_arguments(parser)
    monkeypatch.setattr(results, "RESULTS", tmp_path / "kept")
    monkeypatch.setattr(results, "default_path", lambda data, directory=None: tmp_path / "kept" / "r.json")
    data = {"benchmark": "b", "date": "2026-11-27T23:05:07Z", "commit": None}
    written = results.save(parser.parse_args(["--json", str(tmp_path / "out.json"), "--save"]), data)
    assert written == [tmp_path / "out.json", tmp_path / "kept" / "r.json"]
    assert all(json.loads(path.read_text()) == data for path in written)
    assert results.save(parser.parse_args([]), data) == []


def test_the_kept_results_are_loaded(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text('{"benchmark": "b"}')
    (tmp_path / "a.json").write_text('{"benchmark": "a"}')
    (tmp_path / "notes.txt").write_text("not a result")
    assert results.load(tmp_path) == [{"benchmark": "a"}, {"benchmark": "b"}]


def test_every_benchmark_writes_its_result() -> None:
    for script in sorted((results.REPO / "benchmarks").glob("bench_*.py")):
        assert "results.add_arguments(parser)" in script.read_text(), script.name


def test_the_loop_benchmark_states_its_goals_beside_its_figures() -> None:
    thresholds = gc.get_threshold()
    try:  # the benchmark sets the collector as the operator does; the tests keep theirs
        figures = asyncio.run(bench_loop.main(argparse.Namespace(
            waiting=60, running=20, nodes=4, passes=2, distinct=False, collect_during_passes=False)))
    finally:
        gc.set_threshold(*thresholds)
    by_metric = {f["metric"]: f for f in figures}
    quiet = by_metric["steady-state pass (nothing changed): median"]
    assert quiet["unit"] == "ms" and "goal" not in quiet  # the goal is set for the default size only
    assert by_metric["API calls during the timed passes"] == {
        "metric": "API calls during the timed passes", "value": 0, "unit": "", "goal": {"max": 0}, "met": True}
    assert bench_loop.DEFAULT_SIZE == {"waiting": 10_000, "running": 1_000, "nodes": 1_000}


def test_the_kept_results_are_well_formed() -> None:
    for data in results.load():
        assert data["schema"] == 1 and data["benchmark"] and data["command"].startswith("python benchmarks/")
        assert data["commit"] is None or len(data["commit"]) == 40
        assert data["machine"] is not None or data["note"], data["benchmark"]
        for f in data["figures"]:
            assert isinstance(f["value"], (int, float)) and "unit" in f
            if "goal" in f:
                assert f["met"] is results.met(f["value"], f["goal"])
