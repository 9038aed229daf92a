"""The pure parts of `benchmarks/bench_write_costs.py`: what a measure is worth per item, and the shares of a plain
unit derived from the figures."""
from __future__ import annotations

import pytest

from benchmarks.bench_write_costs import KINDS, Measure, derived, every_measure, ms_each


@pytest.mark.parametrize(("spent", "took", "quiet", "count", "ms"), [
    (10.0, 5.0, 0.0, 1000, 10.0),   # nothing spent anyway: all of it is the items'
    (10.0, 5.0, 0.4, 1000, 8.0),    # 0.4 cores for 5 s are the cluster's own
    (1.0, 5.0, 0.4, 100, 0.0),      # a quiet reading above a short measure: nothing, never less
    (3.0, 2.0, 0.5, 2000, 1.0),
])
def test_a_measure_is_per_item_less_what_the_control_plane_spends_anyway(spent: float, took: float, quiet: float,
                                                                          count: int, ms: float) -> None:
    assert ms_each(spent, took, quiet, count) == pytest.approx(ms)


def test_the_shares_of_a_plain_unit_are_an_sj_and_its_status_then_with_two_events() -> None:
    costs = dict(zip(KINDS, (4.0, 6.0, 1.5), strict=True))
    shares = {f["metric"]: f["value"] for f in derived(50.0, costs)}
    assert shares == {"an SJ and its status, to a plain unit": pytest.approx(10.0 / 50.0),
                      "an SJ, its status and two Events, to a plain unit": pytest.approx(13.0 / 50.0)}


def test_each_kind_counts_in_the_shares_as_often_as_a_unit_writes_it() -> None:
    base = dict(zip(KINDS, (1.0, 1.0, 1.0), strict=True))
    for kind, times in zip(KINDS, ((1, 1), (1, 1), (0, 2)), strict=True):
        more = {**base, kind: 2.0}
        before = [f["value"] for f in derived(10.0, base)]
        after = [f["value"] for f in derived(10.0, more)]
        assert [round((a - b) * 10, 6) for a, b in zip(after, before, strict=True)] == list(times), kind


def test_the_note_has_every_measure_of_every_round_with_its_quiet_reading() -> None:
    rounds = [[Measure("plain unit", 38.04, 0.05, 61.2), Measure("Event recorded", 1.7, 0.061, 7.6)],
              [Measure("plain unit", 40.0, 0.2, 59.0)]]
    assert every_measure(rounds) == ("round 1: plain unit 38.04 ms (quiet 0.050 cores, 61 s), Event recorded 1.70 ms "
                                     "(quiet 0.061 cores, 8 s); round 2: plain unit 40.00 ms (quiet 0.200 cores, 59 s)")
