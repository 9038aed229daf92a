"""The capacity ledger of an admission pass (sj_operator.policy.capacity): its shortcuts decide as the plain
way of working the room out does."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from gang.placement import place_identical
from sj_operator.policy.admission import decide_pass
from sj_operator.policy.capacity import CapacityLedger
from sj_operator.policy.snapshot import ClusterSnapshot, InFlightRun
from tests.unit import test_admission as adm
from tests.unit.helpers import tol


def _every_capacity_reserve(state, pods, need, node_selector, tolerations) -> None:  # type: ignore[no-untyped-def]
    """`CapacityLedger.reserve_in_flight` as it was before its first-fit shortcut: every node's capacity worked out,
    then `place_identical` (the oracle for the shortcut)."""
    if pods < 1:
        return
    capacities = state._capacities(need, state._mask(node_selector, tolerations)[1], state._free)
    placeable = min(pods, sum(filter((0).__lt__, capacities)))
    state._charge(need, pods - placeable, state._pools[0])
    if placeable:
        state.commit(place_identical(placeable, state._names, capacities), need)


@st.composite
def busy_snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    """Snapshots with up to eight runs in flight, some of them on a few nodes only."""
    snap = draw(adm.snapshots(with_in_flight=False))
    runs = []
    for i in range(draw(st.integers(0, 8))):
        pods = draw(st.integers(1, 5))
        request = {r: draw(st.integers(0, 4)) * adm.UNIT[r] for r in adm.RESOURCES if draw(st.booleans())}
        runs.append(InFlightRun(f"ns/run-{i}", pods, request, draw(st.integers(0, pods)),
                                node_selector={"zone": draw(st.sampled_from("xy"))} if draw(st.booleans()) else {},
                                tolerations=(tol("dedicated", "Exists"),) if draw(st.booleans()) else ()))
    return replace(snap, in_flight=tuple(runs))


@settings(max_examples=300, deadline=None)
@given(snap=busy_snapshots(), config=adm.configs)
def test_runs_in_flight_reserve_the_same_room_as_placing_them_over_every_nodes_capacity(snap, config):
    """A run in flight that one node holds takes the first such node (found from the first-fit cursor); the
    admissions and reasons are those of working out every node's capacity for every run."""
    fast = decide_pass(snap, adm.NOW, config)
    with mock.patch.object(CapacityLedger, "reserve_in_flight", _every_capacity_reserve):
        full = decide_pass(snap, adm.NOW, config)
    assert fast.admitted == full.admitted and fast.waiting == full.waiting
