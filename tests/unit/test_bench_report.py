"""`benchmarks/harness/report.py`: docs/benchmarks.md, rendered from the results kept in benchmarks/results/."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness import plots, report, results


def run(date: str, commit: str | None, quiet_ms: float, **more: Any) -> dict[str, Any]:
    return {"schema": 1, "benchmark": "bench_loop", "command": "python benchmarks/bench_loop.py --save",
            "commit": commit, "dirty": False, "date": date,
            "machine": {"cores": 2, "usable_cores": 2, "cpu": "AMD EPYC", "memory_bytes": 8 * 2**30,
                        "os": "Debian", "kernel": "Linux 6.1", "python": "CPython 3.11.7", "load": [1.0, 0.5, 0.25]},
            "parameters": {"waiting": 10_000},
            "figures": [results.figure("steady-state pass (nothing changed): median", quiet_ms, "ms", {"max": 100}),
                        results.figure("pass after one waiting SJ changed: median", 105.0, "ms"),
                        results.figure("not shown", 1.0)],
            "note": None, **more}


def rows(page: str, name: str) -> list[str]:
    """The table rows of benchmark ``name``'s section."""
    section = page.split(f"(`{name}`)\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| 2")]


def test_each_benchmark_has_its_method_command_goal_and_results_newest_first() -> None:
    page = report.render([run("2026-11-26T07:15:00Z", "a" * 40, 98.0),
                          run("2026-11-27T16:06:00Z", "b" * 40, 108.4, dirty=True)])
    assert page.startswith("# Benchmarks\n")
    loop = page.split("(`bench_loop`)\n", 1)[1].split("\n## ", 1)[0]
    assert "`Controller.reconcile`" in loop
    assert "- **Command**: `make bench-loop (python benchmarks/bench_loop.py --save)`" in loop
    assert "- **Goal**: steady-state pass (nothing changed): median ≤ 100 ms" in loop
    newest, oldest = rows(page, "bench_loop")
    assert newest.startswith("| 2026-11-27 16:06 UTC | bbbbbbb (dirty) | 2 cores, AMD EPYC, 8.0 GiB, Linux 6.1, "
                             "CPython 3.11.7, load 1.0 / 0.5 / 0.2 | `python benchmarks/bench_loop.py --save` | ")
    assert "steady-state pass (nothing changed): median = 108 ms (goal ≤ 100 ms)<br>" in newest
    assert "not shown" not in newest  # only the figures the catalog shows; all are in the file
    assert newest.endswith("| **not met**: steady-state pass (nothing changed): median |")
    assert oldest.startswith("| 2026-11-26 07:15 UTC | aaaaaaa | ") and oldest.endswith("| **met** |")


def test_a_benchmark_without_results_says_so_and_one_without_goals_shows_none() -> None:
    page = report.render([])
    for bench in report.CATALOG:
        assert f"(`{bench.name}`)\n" in page
    assert "No result kept yet." in page.split("(`bench_e2e`)", 1)[1].split("\n## ", 1)[0]
    assert "- **Goal**: none set" in page


def test_a_result_with_unknowns_and_a_note_is_shown_as_such() -> None:
    old = run("2026-11-27T16:34:33", None, 90.0, machine=None, note="converted from an older file")
    (row,) = rows(report.render([old]), "bench_loop")
    assert row.startswith("| 2026-11-27 16:34 | unknown | not recorded | ")
    assert "- 2026-11-27 16:34, unknown: converted from an older file" in report.render([old])


def test_a_benchmark_not_in_the_catalog_still_gets_its_section() -> None:
    page = report.render([{**run("2026-11-27T16:06:00Z", "c" * 40, 1.0), "benchmark": "bench_new"}])
    assert "## bench_new (`bench_new`)" in page and len(rows(page, "bench_new")) == 1


@pytest.mark.parametrize(("value", "unit", "text"), [
    (906181.0, "", "906,181"), (197.4, "ms", "197 ms"), (45.08, "ms", "45.1 ms"), (0.4897, "", "0.49"),
    (9.0, "%", "9%"), (71.11, "/s", "71.1/s"), (0.0, "", "0"), (0.4164, "MiB", "0.416 MiB"),
])
def test_figures_are_written_as_a_reader_wants_them(value: float, unit: str, text: str) -> None:
    assert report.with_unit(value, unit) == text


def test_a_goal_reads_as_its_bounds() -> None:
    assert report.goal_text({"min": 0.5}, "") == "≥ 0.5"
    assert report.goal_text({"min": 1, "max": 100}, "ms") == "≥ 1 ms and ≤ 100 ms"


def test_every_benchmark_script_is_in_the_catalog() -> None:
    scripts = {p.stem for p in (results.REPO / "benchmarks").glob("bench_*.py")}
    assert scripts == {b.name for b in report.CATALOG}


def test_the_page_and_its_plots_are_what_the_kept_results_render(tmp_path: Path) -> None:
    """docs/benchmarks.md and docs/benchmarks/*.svg are generated: after a result is kept (or the catalog or a
    plot edited), `make bench-report`. The plots are compared byte for byte, which holds for the matplotlib
    release they were drawn with: the one the docs extra pins."""
    try:
        import matplotlib
    except ImportError:
        pytest.fail("matplotlib draws the benchmarks' plots: pip install -e '.[docs]'")
    assert matplotlib.__version__ == plots.MATPLOTLIB, "the plots are drawn with the docs extra's matplotlib"
    assert report.PAGE.read_text() == report.render(results.load()), "run `make bench-report`"
    assert report.main(["--output", str(tmp_path / "page.md")]) == 0
    assert (tmp_path / "page.md").read_text() == report.PAGE.read_text()
    fresh = {path.name: path.read_text() for path in (tmp_path / "benchmarks").glob("*.svg")}
    committed = {path.name: path.read_text() for path in plots.DIRECTORY.glob("*.svg")}
    assert set(fresh) == {"bench_loop.svg", "bench_scale.svg"}
    assert committed == fresh, "run `make bench-report`"


def test_the_extras_pin_the_matplotlib_the_plots_are_drawn_with() -> None:
    extras = tomllib.loads((results.REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("docs", "bench"):
        assert f"matplotlib=={plots.MATPLOTLIB}" in extras[extra], extra


def scale_run(date: str, sjs: int, operator_rate: float) -> dict[str, Any]:
    figures = [results.figure("operator_per_second", operator_rate, "/s"),
               results.figure("floor_mean_per_second", 2 * operator_rate, "/s"),
               results.figure("operator_to_floor", 0.5, "", {"min": 0.5})]
    return {**run(date, "d" * 40, 1.0), "benchmark": "bench_scale", "parameters": {"sjs": sjs},
            "figures": figures}


def test_the_scale_plot_shows_the_newest_run_of_each_size_smallest_first() -> None:
    runs = [scale_run("2026-11-28T10:00:00Z", 2_000, 60.0), scale_run("2026-11-27T10:00:00Z", 10_000, 50.0),
            scale_run("2026-11-29T10:00:00Z", 2_000, 70.0)]
    drawn = plots.newest_per_size(plots.drawn(plots.PLOTS["bench_scale"], runs))
    assert [(r["parameters"]["sjs"], plots.value(r, "operator_per_second")) for r in drawn] == [
        (2_000, 70.0), (10_000, 50.0)]
    assert plots.goal(drawn, "operator_to_floor", "min") == 0.5
    assert plots.value(drawn[0], "kueue_per_second") is None


def test_the_loop_plot_draws_the_timed_runs_over_the_newest_runs_size() -> None:
    small = run("2026-11-25T07:15:00Z", "a" * 40, 10.0, parameters={"waiting": 100})
    memory = {**run("2026-11-28T07:15:00Z", "a" * 40, 1.0), "figures": [results.figure("bytes per SJ", 900.0)]}
    kept = [run("2026-11-27T16:06:00Z", "b" * 40, 108.4), small, memory, run("2026-11-26T07:15:00Z", "c" * 40, 98.0)]
    drawn = plots.same_size(plots.drawn(plots.PLOTS["bench_loop"], kept))
    assert [r["commit"][0] for r in drawn] == ["c", "b"]  # oldest first; not the memory run nor the smaller one
    assert plots.pass_kinds(drawn[-1]) == ["steady-state pass (nothing changed)", "pass after one waiting SJ changed"]
    assert plots.run_label(drawn[-1]) == "2026-11-27 16:06\nbbbbbbb"


def test_a_section_shows_its_plot_only_when_a_run_makes_one() -> None:
    assert "](benchmarks/" not in report.render([])
    page = report.render([run("2026-11-27T16:06:00Z", "b" * 40, 108.4)])
    loop = page.split("(`bench_loop`)\n", 1)[1].split("\n## ", 1)[0]
    assert "![One pass of the decision loop](benchmarks/bench_loop.svg)" in loop
    assert "](benchmarks/bench_scale.svg)" not in page
