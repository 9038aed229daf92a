"""`benchmarks/bench_loop.py --memory` still measures what the controller keeps per SJ."""
from __future__ import annotations

import argparse
import asyncio
import re

import pytest

from benchmarks import bench_loop


def test_the_memory_benchmark_finds_what_the_controller_keeps_per_sj(capsys: pytest.CaptureFixture[str]) -> None:
    kept = {}
    for distinct in (False, True):
        asyncio.run(bench_loop.memory(argparse.Namespace(waiting=60, running=20, nodes=4, distinct=distinct), top=3))
        out = capsys.readouterr().out
        found = re.search(r"the controller keeps (\d+) bytes per SJ \(.* for 80 SJs: 20 running, 60 waiting, 4 nodes\)",
                          out)
        assert found is not None, out
        kept[distinct] = int(found.group(1))
        assert len(re.findall(r"B/SJ  .+:\d+$", out, re.MULTILINE)) == 3
    assert kept[False] > 1000  # at least its decision and queue entry, and what is shared
    assert kept[True] > kept[False] + 1500, "SJs all different share no parsed spec or status"
