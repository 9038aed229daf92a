"""The plots of ``docs/benchmarks.md``, drawn from the results kept in ``benchmarks/results/`` as SVG files under
``docs/benchmarks/`` (``make bench-report`` writes them with the page).

The drawing is deterministic, so that ``tests/unit/test_bench_report.py`` can compare each committed file with a
fresh one byte for byte: matplotlib's own defaults (no user's matplotlibrc), a fixed id salt, no date, the
bundled DejaVu Sans for the layout and text left as text. Byte equality holds for one matplotlib release only,
so the ``docs`` and ``bench`` extras pin it (``MATPLOTLIB``). matplotlib is imported only to draw: the page
itself renders without it.
"""
from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import results

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MATPLOTLIB = "3.10.7"
"""The matplotlib release the committed plots were drawn with (pinned in pyproject's extras)."""
DIRECTORY = results.REPO / "docs" / "benchmarks"
"""Where the plots are kept, beside the page (``docs/benchmarks.md`` shows them as ``benchmarks/<file>``)."""
STYLE = {
    "svg.hashsalt": "scavenger",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
}

Run = Mapping[str, Any]


@dataclass(frozen=True)
class Plot:
    benchmark: str
    file: str
    """Its file's name under ``DIRECTORY``."""
    caption: str
    """What it shows, under it on the page (Markdown)."""
    size: tuple[float, float]
    """Inches, at 100 per inch."""
    uses: Callable[[Run], bool]
    """Whether a run is one it draws."""
    draw: Callable[[Figure, Sequence[Run]], None]
    """Draws the runs it uses, oldest first."""


def value(run: Run, metric: str) -> float | None:
    """The figure ``metric`` of ``run``, or None when it did not measure it."""
    found = [f["value"] for f in run["figures"] if f["metric"] == metric]
    return float(found[0]) if found else None


def drawable(run: Run, metric: str) -> float:
    """The figure ``metric`` of ``run``, or NaN (a gap in the line) when it did not measure it."""
    found = value(run, metric)
    return math.nan if found is None else found


def goal(runs: Sequence[Run], metric: str, bound: str) -> float | None:
    """The newest goal's ``bound`` (``min``, ``max``) the runs state for ``metric``."""
    for run in reversed(runs):
        for f in run["figures"]:
            if f["metric"] == metric and bound in f.get("goal", {}):
                return float(f["goal"][bound])
    return None


def run_label(run: Run) -> str:
    """A run on an axis: its date and time, and its short commit."""
    return f"{str(run['date'])[:16].replace('T', ' ')}\n{str(run.get('commit') or 'unknown')[:7]}"


# --- bench_scale: rates, CPU and memory, size by size -----------------------------------------------------

SCALE_PANELS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("launch rate", "units launched per second", (
        ("operator", "operator_per_second"), ("plain Jobs (the floor)", "floor_mean_per_second"),
        ("no operator (the ceiling)", "ceiling_per_second"), ("Kueue", "kueue_per_second"))),
    ("CPU until the burst was launched", "CPU seconds", (
        ("operator", "operator_cpu_seconds"), ("Kueue's manager", "kueue_cpu_seconds"))),
    ("peak memory", "MiB (peak RSS)", (
        ("operator", "operator_peak_rss_mib"), ("Kueue's manager", "kueue_peak_rss_mib"))),
)
"""Each panel: its title, its y axis and its bars (label, metric); a bar no run measured is left out."""
SCALE_COLOURS = {"operator": "C0", "plain Jobs (the floor)": "C1", "no operator (the ceiling)": "C2",
                 "Kueue": "C3", "Kueue's manager": "C3"}
"""One colour per contender, the same in every panel."""


def newest_per_size(runs: Sequence[Run]) -> list[Run]:
    """The newest run of each burst size (``parameters.sjs``), by size."""
    by_size = {int(run["parameters"]["sjs"]): run for run in runs}
    return [by_size[size] for size in sorted(by_size)]


def _scale_bars(axes: Axes, runs: Sequence[Run], lines: Sequence[tuple[str, str]]) -> None:
    """One group of bars per burst size, one bar per contender that any run measured, its value on it."""
    measured = [(label, metric) for label, metric in lines if any(value(run, metric) is not None for run in runs)]
    width = 0.8 / max(len(measured), 1)
    for j, (label, metric) in enumerate(measured):
        points = [(i + (j - (len(measured) - 1) / 2) * width, value(run, metric)) for i, run in enumerate(runs)]
        kept = [(x, y) for x, y in points if y is not None]
        bars = axes.bar([x for x, _ in kept], [y for _, y in kept], width, label=label, color=SCALE_COLOURS[label])
        axes.bar_label(bars, fmt="{:.3g}", padding=2)


def _scale_goals(axes: Axes, title: str, runs: Sequence[Run]) -> None:
    """The goals beside the bars: a share of the floor's rate (operator_to_floor), and the memory's bound."""
    ratio = goal(runs, "operator_to_floor", "min")
    if title == "launch rate" and ratio is not None:
        floors = [(i, value(run, "floor_mean_per_second")) for i, run in enumerate(runs)]
        kept = [(i, ratio * floor) for i, floor in floors if floor is not None]
        axes.hlines([y for _, y in kept], [i - 0.45 for i, _ in kept], [i + 0.45 for i, _ in kept],
                    linestyles="--", colors="grey", label=f"goal: the operator at {ratio:g} × the floor")
    bound = goal(runs, "operator_peak_rss_mib", "max")
    if title == "peak memory" and bound is not None:
        axes.axhline(bound, linestyle="--", color="grey", label="goal of the operator (at its size)")


def draw_scale(figure: Figure, runs: Sequence[Run]) -> None:
    runs = newest_per_size(runs)
    positions = list(range(len(runs)))
    for axes, (title, unit, lines) in zip(figure.subplots(1, len(SCALE_PANELS)), SCALE_PANELS, strict=True):
        _scale_bars(axes, runs, lines)
        _scale_goals(axes, title, runs)
        axes.set_title(title)
        axes.set_xticks(positions, [f"{run['parameters']['sjs']:,} units" for run in runs])
        axes.set_ylabel(unit)
        axes.margins(y=0.15)
        axes.grid(axis="x", visible=False)
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize="small", frameon=False)


# --- bench_loop: pass times, run by run ------------------------------------------------------------------

def pass_kinds(run: Run) -> list[str]:
    """The kinds of timed pass a loop run measured (its figures ``<kind>: median``)."""
    return [f["metric"].removesuffix(": median") for f in run["figures"] if f["metric"].endswith(": median")]


def same_size(runs: Sequence[Run]) -> list[Run]:
    """The runs over the newest run's cluster (a pass over another size is another quantity)."""
    size = runs[-1]["parameters"]
    keys = ("waiting", "running", "nodes")
    return [run for run in runs if all(run["parameters"].get(k) == size.get(k) for k in keys)]


def draw_loop(figure: Figure, runs: Sequence[Run]) -> None:
    runs = same_size(runs)
    axes = figure.subplots()
    positions = list(range(len(runs)))
    kinds = pass_kinds(runs[-1])
    for k, kind in enumerate(kinds):
        shifted = [x + (k - (len(kinds) - 1) / 2) * 0.06 for x in positions]  # the p95 bars side by side
        medians = [drawable(run, f"{kind}: median") for run in runs]
        p95s = [drawable(run, f"{kind}: p95") for run in runs]
        line = axes.plot(shifted, medians, marker="o", label=f"{kind.split(' (')[0]}: median")
        axes.vlines(shifted, medians, p95s, color=line[0].get_color(), alpha=0.4, linewidth=3)
    bound = goal(runs, f"{kinds[0]}: median", "max")
    if bound is not None:
        axes.axhline(bound, linestyle="--", color="grey", label=f"goal of a steady pass: ≤ {bound:g} ms")
    size = runs[-1]["parameters"]
    axes.set_title(f"one pass, {size['waiting']:,} waiting SJs, {size['running']:,} running, "
                   f"{size['nodes']:,} nodes (the bar: up to the p95)")
    axes.set_xticks(positions, [run_label(run) for run in runs])
    axes.set_xlim(-0.5, len(runs) - 0.5)
    axes.set_ylabel("ms")
    axes.set_ylim(bottom=0)
    axes.legend(loc="lower left")


PLOTS: dict[str, Plot] = {plot.benchmark: plot for plot in (
    Plot("bench_scale", "bench_scale.svg",
         "The newest run of each burst size: the operator's launch rate beside the floor's (plain Jobs created "
         "directly) and Kueue's, the CPU each controller spent until every unit was launched, and its peak memory.",
         (12.0, 3.6), lambda run: "sjs" in run["parameters"], draw_scale),
    Plot("bench_loop", "bench_loop.svg",
         "Each kept run over the newest run's cluster size, oldest first: the median pass of each kind, and its "
         "95th percentile.",
         (8.0, 4.0), lambda run: bool(pass_kinds(run)), draw_loop),
)}
"""The benchmarks whose results make a picture, by benchmark."""


def drawn(plot: Plot, runs: Sequence[Run]) -> list[Run]:
    """The runs ``plot`` draws, oldest first (none: no plot)."""
    return sorted((run for run in runs if plot.uses(run)), key=lambda run: str(run["date"]))


def svg(plot: Plot, runs: Sequence[Run]) -> str:
    """``plot`` of ``runs`` as SVG text, the same for the same runs."""
    import matplotlib
    import matplotlib.style
    from matplotlib.figure import Figure

    with matplotlib.style.context("default"), matplotlib.rc_context(STYLE):
        figure = Figure(figsize=plot.size, layout="constrained")
        plot.draw(figure, drawn(plot, runs))
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def render(kept: Sequence[Run]) -> dict[str, str]:
    """Each plot's file name and SVG text, for the results ``kept`` (a plot with no run to draw is not made)."""
    made = {}
    for plot in PLOTS.values():
        runs = [run for run in kept if run["benchmark"] == plot.benchmark]
        if drawn(plot, runs):
            made[plot.file] = svg(plot, runs)
    return made


def write(kept: Sequence[Run], directory: Path = DIRECTORY) -> list[Path]:
    """Writes the plots of the results ``kept`` into ``directory``; the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in render(kept).items():
        (directory / name).write_text(text)
        paths.append(directory / name)
    return paths
