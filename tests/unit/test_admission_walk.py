"""The admission walk behind a full threshold (issue 42): an SJ of the shape of the SJ refused just before it,
without fallbacks, while the pass took no room since, is refused for the same reason without the ledger being
asked again (`policy.admission._Refused`). The walk's answer is the very one it gives asking for every SJ."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from sj_operator.policy.admission import _Refused, decide_pass
from sj_operator.policy.snapshot import QueuedSJ, Shape
from sj_operator.resources import freeze
from tests.unit import test_admission as adm
from tests.unit.helpers import tol

NOW = adm.NOW
SHAPES = ({"cpu": 2000}, {"cpu": 2000, "memory": adm.GI}, {"cpu": 500})
TENANTS = ("tenant-a", "tenant-b", "tenant-c")
"""The namespaces of the SJs (names no message has otherwise): SJs alike of several tenants, one after the other,
are refused for one reason in words that name an SJ only to those of its namespace (`policy.admission._Why`)."""


@st.composite
def alike_queues(draw: st.DrawFn) -> list[QueuedSJ]:
    """Queues of a few shapes, most SJs alike, of a few namespaces, with ages, interruptions, backoffs and some
    fallbacks."""
    queue = []
    for i in range(draw(st.integers(0, 40))):
        shape = draw(st.integers(0, len(SHAPES) - 1))
        queue.append(QueuedSJ(
            key=f"{draw(st.sampled_from(TENANTS))}/sj-{i:02d}",
            created=NOW - timedelta(minutes=draw(st.integers(0, 90))),
            interrupted_count=draw(st.integers(0, 1)), pods=draw(st.sampled_from([1, 1, 1, 2])),
            request=dict(SHAPES[shape]),
            node_selector={"zone": "x"} if draw(st.integers(0, 5)) == 0 else {},
            tolerations=(tol("dedicated", "Exists"),) if draw(st.integers(0, 5)) == 0 else (),
            not_before=NOW + timedelta(minutes=draw(st.integers(-5, 5))) if draw(st.integers(0, 6)) == 0 else None,
            fallbacks=(Shape(1, freeze({"cpu": 500})),) if draw(st.integers(0, 6)) == 0 else (),
            fallback_after=timedelta(minutes=draw(st.integers(0, 60)))))
    return queue


@settings(max_examples=300, deadline=None)
@given(snap=adm.snapshots(), queue=alike_queues(), config=adm.configs, explain=st.booleans())
def test_the_walk_answers_as_asking_the_ledger_for_every_sj(snap: Any, queue: list[QueuedSJ], config: Any,
                                                            explain: bool) -> None:
    snap = replace(snap, queue=tuple(queue))
    walked = decide_pass(snap, NOW, config, explain=explain)
    with mock.patch.object(_Refused, "again", lambda self, sj, state, waiting: False):
        assert walked == decide_pass(snap, NOW, config, explain=explain)


def test_alike_sjs_behind_a_full_threshold_are_refused_without_asking_the_ledger_again() -> None:
    nodes = [adm.node("n1", cpu=4000, used={"cpu": 3000})]
    queue = [adm.sj(f"ns/sj-{i:02d}", cpu=2000, age_min=1 + i / 100) for i in range(50)]
    with mock.patch("sj_operator.policy.admission._place", wraps=__import__(
            "sj_operator.policy.admission", fromlist=["_place"])._place) as place:
        result = decide_pass(adm.snapshot(nodes, queue), NOW)
    assert not result.admitted and len(result.waiting) == 50
    assert len({(w.reason, w.message) for w in result.waiting.values()}) == 1
    assert place.call_count == 1, "the first one asked, the 49 alike behind it not"


def test_a_hold_after_a_refusal_has_the_sj_alike_behind_it_asked_again_and_a_backing_off_sj_is_never_refused() -> None:
    """The backoff hold takes room as an admission does: the SJ alike the one refused before the hold is asked
    again, and waits with the words the walk writes asking for every SJ; a backing-off SJ alike the one just
    refused is placed (as a hold, here of nothing), never refused, and keeps its own reason."""
    nodes = [adm.node("n1", cpu=4000, used={"cpu": 1000})]
    until = NOW + timedelta(minutes=2)
    queue = [adm.sj("ns/a", cpu=3000, age_min=40), adm.sj("ns/b", cpu=500, age_min=30, not_before=until),
             adm.sj("ns/c", cpu=3000, age_min=20), adm.sj("ns/d", cpu=3000, age_min=10, not_before=until)]
    snap = adm.snapshot(nodes, queue)
    with mock.patch("sj_operator.policy.admission._place", wraps=__import__(
            "sj_operator.policy.admission", fromlist=["_place"])._place) as place:
        result = decide_pass(snap, NOW)
    assert [a.key for a in result.held] == ["ns/b"] and not result.admitted
    assert set(result.waiting) == {"ns/a", "ns/c"}, "the backing-off SJs keep their own reason"
    assert place.call_count == 4, "the SJ alike behind the hold is asked again, the backing-off one placed"
    with mock.patch.object(_Refused, "again", lambda self, sj, state, waiting: False):
        assert result == decide_pass(snap, NOW)
