"""`benchmarks/bench_events.py` still drives kopf's processing (it reaches into kopf's internals, which a kopf
upgrade may move) and still finds the cyclic garbage it measures."""
from __future__ import annotations

import argparse
import asyncio
import re

import pytest

from benchmarks import bench_events


def test_the_event_benchmark_runs_and_finds_kopfs_cyclic_garbage(capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(bench_events.main(argparse.Namespace(pods=40, every=[10, 40])))
    out = capsys.readouterr().out
    assert re.search(r"the watch caches: \d+ us of CPU per pod event, \d+ per Job event", out), out
    garbage = re.search(r"each event leaves (\d+) objects of cyclic garbage: (.*)", out)
    assert garbage is not None, out
    assert int(garbage.group(1)) > 0 and "Patch" in garbage.group(2)
    assert len(re.findall(r"a young collection every +\d+ events", out)) == 2
