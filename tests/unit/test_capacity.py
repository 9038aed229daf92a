"""The capacity ledger of an admission pass (sj_operator.policy.capacity): its shortcuts decide as the plain
way of working the room out does."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gang.placement import place_identical
from sj_operator.policy.admission import _ledger, decide_pass
from sj_operator.policy.capacity import CapacityLedger, NodeColumns
from sj_operator.policy.snapshot import ClusterSnapshot, InFlightRun, NodeView
from tests.unit import test_admission as adm
from tests.unit.helpers import tol


def _every_capacity_reserve(state, pods, need, node_selector, tolerations, runs=1) -> None:  # type: ignore[no-untyped-def]
    """`CapacityLedger.reserve_in_flight` as it was before its first-fit shortcut and before runs of one shape were
    reserved at once: for each run, every node's capacity worked out, then `place_identical` (the oracle for both)."""
    for _ in range(runs):
        if pods < 1:
            return
        capacities = state._capacities(need, state._mask(node_selector, tolerations)[1], state._free)
        placeable = min(pods, sum(filter((0).__lt__, capacities)))
        state._charge(need, pods - placeable, state._pools[0])
        if placeable:
            state.commit(place_identical(placeable, state._names, capacities), need)


@st.composite
def busy_snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    """Snapshots with up to a dozen runs in flight of a few shapes (runs of one shape in a row are reserved at once),
    some of them on a few nodes only."""
    snap = draw(adm.snapshots(with_in_flight=False))
    shapes = []
    for _ in range(draw(st.integers(1, 3))):
        pods = draw(st.sampled_from([1, 1, 2, 3, 5]))
        shapes.append((pods, {r: draw(st.integers(0, 4)) * adm.UNIT[r] for r in adm.RESOURCES if draw(st.booleans())},
                       {"zone": draw(st.sampled_from("xy"))} if draw(st.booleans()) else {},
                       (tol("dedicated", "Exists"),) if draw(st.booleans()) else ()))
    runs = []
    for i in range(draw(st.integers(0, 12))):
        pods, request, selector, tolerations = draw(st.sampled_from(shapes))
        runs.append(InFlightRun(f"ns/run-{i}", pods, request, draw(st.sampled_from([0, 0, pods, pods - 1])),
                                node_selector=selector, tolerations=tolerations))
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


def _room(state: CapacityLedger) -> tuple[object, ...]:
    """What a ledger's reservations left: each node's free room, the totals, each pool's usage."""
    return state._free, state._free_total, [pool.used for pool in state._pools]


@settings(max_examples=300, deadline=None)
@given(snap=busy_snapshots(), config=adm.configs)
def test_runs_of_one_shape_in_a_row_leave_the_room_that_reserving_them_one_by_one_does(snap, config):
    """The ledger after the runs in flight are reserved, runs of one shape at once, is node for node the ledger
    after each is reserved over every node's capacity in turn."""
    fast = _ledger(snap, config, None)
    with mock.patch.object(CapacityLedger, "reserve_in_flight", _every_capacity_reserve):
        full = _ledger(snap, config, None)
    assert _room(fast) == _room(full)


@pytest.mark.parametrize(("runs", "free"), [
    (0, [2, 2, 2]),
    (1, [1, 2, 2]),
    (2, [0, 2, 2]),
    (3, [0, 1, 2]),   # the first node full: the next takes the rest
    (6, [0, 0, 0]),
    (8, [0, 0, 0]),   # two that no node holds: counted, no room taken
])
def test_single_pod_runs_fill_each_node_in_turn(runs: int, free: list[int]) -> None:
    nodes = tuple(NodeView(f"n{i}", {"cpu": 2000, "pods": 110}) for i in range(3))
    state = CapacityLedger(nodes, {}, Fraction(1))
    state.reserve_in_flight(1, (("cpu", 1000),), {}, (), runs=runs)
    assert [room // 1000 for room in state._free["cpu"]] == free
    assert state._pools[0].used.get("cpu", 0) == 1000 * runs


COLUMNS = ("_nodes", "_names", "_position", "_allocatable", "_free", "_free_total", "_max_free", "_pool_of")


@settings(max_examples=150, deadline=None)
@given(first=adm.nodes_strategy(), changes=st.lists(st.tuples(
    st.sampled_from(["requested", "cordon", "allocatable", "gone", "same", "all-requested"]), st.integers(0, 7),
    st.integers(0, 12)), max_size=8))
def test_columns_kept_between_passes_make_the_ledger_made_anew(first, changes) -> None:  # type: ignore[no-untyped-def]
    """Passes one after another, some nodes' requests (or more of them) changed in between: the ledger made from
    the columns kept is the ledger made from the nodes alone, and admits the same."""
    columns, nodes = NodeColumns(), list(first)
    for what, which, amount in [("same", 0, 0), *changes]:
        if nodes:
            i = which % len(nodes)
            if what == "requested":
                nodes[i] = replace(nodes[i], requested={"cpu": amount * adm.UNIT["cpu"]})
            elif what == "all-requested":
                nodes = [replace(n, requested={**n.requested, "memory": amount * adm.UNIT["memory"]}) for n in nodes]
            elif what == "cordon":
                nodes[i] = replace(nodes[i], unschedulable=not nodes[i].unschedulable)
            elif what == "allocatable":
                nodes[i] = replace(nodes[i], allocatable={**nodes[i].allocatable, "cpu": amount * adm.UNIT["cpu"]})
            elif what == "gone":
                del nodes[i]
        kept = CapacityLedger(tuple(nodes), {}, Fraction(7, 10), columns=columns)
        anew = CapacityLedger(tuple(nodes), {}, Fraction(7, 10))
        for name in COLUMNS:
            assert getattr(kept, name) == getattr(anew, name), (what, name)
        need = (("cpu", adm.UNIT["cpu"]),)
        assert kept.try_place(2, need, {}, ()) == anew.try_place(2, need, {}, ())


def test_a_ledger_taking_room_leaves_the_columns_kept_as_they_were() -> None:
    nodes = (NodeView("a", allocatable={"cpu": 4000}), NodeView("b", allocatable={"cpu": 4000}))
    columns = NodeColumns()
    ledger = CapacityLedger(nodes, {}, Fraction(1), columns=columns)
    assert ledger.try_place(2, (("cpu", 3000),), {}, ()) is not None
    again = CapacityLedger(nodes, {}, Fraction(1), columns=columns)
    assert again._free == {"cpu": [4000, 4000]} and again._free_total == {"cpu": 8000}
