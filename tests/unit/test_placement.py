"""Whole-gang placement on free node capacity (gang.placement)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gang.placement import UNBOUNDED, fit_gang, node_accepts, place_identical, pods_that_fit, tolerates
from sj_operator.policy.snapshot import NodeView, Taint


@dataclass(frozen=True)
class Tol:
    """Any object with these attributes is a toleration to gang.placement (the operator passes its
    validated API type); this one may also carry what the API would refuse, such as an unknown operator."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

GI = 2**30 * 1000


def node(name: str, cpu: int = 8000, memory: int = 32 * GI, used_cpu: int = 0, used_memory: int = 0, **kw) -> NodeView:
    return NodeView(
        name=name,
        allocatable={"cpu": cpu, "memory": memory},
        requested={"cpu": used_cpu, "memory": used_memory},
        **kw,
    )


NO_SCHEDULE = Taint("dedicated", "batch", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        pytest.param(Tol("dedicated", "Equal", "batch", "NoSchedule"), NO_SCHEDULE, True, id="equal-all-match"),
        pytest.param(Tol("dedicated", "Equal", "", "NoSchedule"), Taint("dedicated", "", "NoSchedule"), True,
                     id="equal-empty-value-matches-empty-value"),
        pytest.param(
            Tol("dedicated", "Equal", "other", "NoSchedule"), NO_SCHEDULE, False, id="equal-value-differs"
        ),
        pytest.param(
            Tol("dedicated", "", "batch", "NoSchedule"), NO_SCHEDULE, True, id="empty-operator-is-equal"
        ),
        pytest.param(Tol("dedicated", "Exists", "", "NoSchedule"), NO_SCHEDULE, True, id="exists-ignores-value"),
        pytest.param(Tol("gpu", "Exists", "", "NoSchedule"), NO_SCHEDULE, False, id="exists-key-differs"),
        pytest.param(Tol("", "Exists", "", ""), NO_SCHEDULE, True, id="empty-key-exists-tolerates-all"),
        pytest.param(Tol("", "Exists", "", ""), Taint("x", "", "NoExecute"), True, id="tolerates-all-noexecute"),
        pytest.param(Tol("dedicated", "Equal", "batch", ""), NO_SCHEDULE, True, id="empty-effect-matches-all"),
        pytest.param(Tol("dedicated", "Equal", "batch", "NoExecute"), NO_SCHEDULE, False, id="effect-differs"),
        pytest.param(Tol("dedicated", "Gt", "batch", ""), NO_SCHEDULE, False, id="unknown-operator"),
    ],
)
def test_tolerates(toleration: Tol, taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


@pytest.mark.parametrize(
    ("candidate", "selector", "tolerations", "expected"),
    [
        pytest.param(node("a"), {}, (), True, id="plain"),
        pytest.param(node("a", unschedulable=True), {}, (), False, id="cordoned"),
        pytest.param(node("a", labels={"zone": "x"}), {"zone": "x"}, (), True, id="selector-match"),
        pytest.param(node("a", labels={"zone": "y"}), {"zone": "x"}, (), False, id="selector-value-differs"),
        pytest.param(node("a"), {"zone": "x"}, (), False, id="selector-label-missing"),
        pytest.param(node("a", taints=(NO_SCHEDULE,)), {}, (), False, id="noschedule-untolerated"),
        pytest.param(node("a", taints=(Taint("k", "v", "NoExecute"),)), {}, (), False, id="noexecute-untolerated"),
        pytest.param(node("a", taints=(Taint("k", "v", "PreferNoSchedule"),)), {}, (), True, id="prefer-ignored"),
        pytest.param(
            node("a", taints=(NO_SCHEDULE,)),
            {},
            (Tol("dedicated", "Exists"),),
            True,
            id="noschedule-tolerated",
        ),
        pytest.param(
            node("a", taints=(NO_SCHEDULE, Taint("gpu", "", "NoSchedule"))),
            {},
            (Tol("dedicated", "Exists"),),
            False,
            id="one-of-two-taints-tolerated",
        ),
    ],
)
def test_node_accepts(candidate: NodeView, selector: dict, tolerations: tuple, expected: bool) -> None:
    assert node_accepts(candidate, selector, tolerations) is expected


@pytest.mark.parametrize(
    ("request_", "free", "expected"),
    [
        ({"cpu": 1000}, {"cpu": 3500}, 3),
        ({"cpu": 1000, "memory": 4 * GI}, {"cpu": 8000, "memory": 10 * GI}, 2),
        ({"nvidia.com/gpu": 1000}, {"cpu": 8000}, 0),
        ({"cpu": 1000}, {"cpu": -500}, 0),
        ({}, {"cpu": 0}, UNBOUNDED),
        ({"nvidia.com/gpu": 1}, {"cpu": 8000}, 0),  # one milli-unit of what the node lacks: no room
        ({"cpu": 1}, {"cpu": 0}, 0),  # the smallest request still counts
    ],
)
def test_pods_that_fit(request_: dict, free: dict, expected: int) -> None:
    assert pods_that_fit(request_, free) == expected


@pytest.mark.parametrize(
    ("pods", "capacities", "expected"),
    [
        pytest.param(1, [0, 2, 5], ("b",), id="single-pod-first-fit"),
        pytest.param(3, [2, 3, 5], ("b", "b", "b"), id="first-node-holding-all"),
        pytest.param(5, [2, 3, 1], ("b", "b", "b", "a", "a"), id="split-largest-first"),
        pytest.param(4, [2, 3, 1], ("b", "b", "b", "a"), id="remainder-on-first-holding"),
        pytest.param(2, [1, 1, 1], ("a", "b"), id="equal-capacities-in-order"),
        pytest.param(7, [2, 3, 1], None, id="too-few-in-total"),
        pytest.param(1, [0, -1, 0], None, id="no-room"),
        pytest.param(2, [-3, 2, 0], ("b", "b"), id="negative-capacity-ignored"),
    ],
)
def test_place_identical(pods: int, capacities: list[int], expected: tuple[str, ...] | None) -> None:
    assert place_identical(pods, ["a", "b", "c"], capacities) == expected


def test_place_identical_rejects_empty_gang() -> None:
    with pytest.raises(ValueError):
        place_identical(0, ["a"], [1])


@pytest.mark.parametrize(
    ("pods", "request_", "nodes", "expected"),
    [
        pytest.param(
            2, {"cpu": 2000}, [node("b"), node("a", used_cpu=7000)], ("b", "b"), id="skips-full-node-sorted-by-name"
        ),
        pytest.param(
            3,
            {"cpu": 2000},
            [node(n, used_cpu=6000) for n in "abc"],
            ("a", "b", "c"),
            id="fragmented-gang-spread",
        ),
        pytest.param(4, {"cpu": 2000}, [node(n, used_cpu=6000) for n in "abc"], None, id="fragmented-too-small"),
        pytest.param(2, {"cpu": 3000}, [node(n, used_cpu=6000) for n in "abc"], None, id="pod-larger-than-every-hole"),
        pytest.param(
            2,
            {"cpu": 1000, "memory": 8 * GI},
            [node("a", used_memory=30 * GI), node("b", used_cpu=7500), node("c")],
            ("c", "c"),
            id="every-resource-must-fit",
        ),
        pytest.param(1, {"nvidia.com/gpu": 1000}, [node("a")], None, id="missing-resource-is-zero"),
        pytest.param(
            1,
            {"nvidia.com/gpu": 1000},
            [node("a"), NodeView("g", allocatable={"nvidia.com/gpu": 2000})],
            ("g",),
            id="extended-resource",
        ),
        pytest.param(2, {"cpu": 1000}, [node("a", unschedulable=True), node("b")], ("b", "b"), id="cordoned"),
        pytest.param(2, {}, [node("b"), node("a")], ("a", "a"), id="empty-request"),
        pytest.param(1, {}, [], None, id="no-nodes"),
    ],
)
def test_fit_gang(pods: int, request_: dict, nodes: list[NodeView], expected: tuple[str, ...] | None) -> None:
    assert fit_gang(pods, request_, nodes, {}, ()) == expected


def test_fit_gang_respects_selector_and_taints() -> None:
    nodes = [
        node("a", labels={"zone": "x"}, taints=(NO_SCHEDULE,)),
        node("b", labels={"zone": "y"}),
        node("c", labels={"zone": "x"}),
    ]
    assert fit_gang(1, {"cpu": 1000}, nodes, {"zone": "x"}, ()) == ("c",)
    assert fit_gang(1, {"cpu": 1000}, nodes, {"zone": "x"}, (Tol("dedicated", "Exists"),)) == ("a",)
    assert fit_gang(1, {"cpu": 1000}, nodes, {"zone": "z"}, ()) is None


free_amounts = st.integers(min_value=0, max_value=16)
node_lists = st.lists(
    st.tuples(free_amounts, free_amounts, free_amounts, free_amounts, st.booleans()),
    min_size=0,
    max_size=8,
).map(
    lambda rows: [
        NodeView(
            f"n{i}",
            allocatable={"cpu": a * 500, "memory": b * GI},
            requested={"cpu": c * 500, "memory": d * GI},
            unschedulable=cordoned,
        )
        for i, (a, b, c, d, cordoned) in enumerate(rows)
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    nodes=node_lists,
    pods=st.integers(min_value=1, max_value=12),
    cpu=st.integers(min_value=0, max_value=6),
    memory=st.integers(min_value=0, max_value=6),
)
def test_fit_gang_is_exact_and_never_overcommits(nodes: list[NodeView], pods: int, cpu: int, memory: int) -> None:
    request = {"cpu": cpu * 500, "memory": memory * GI}
    positive = {resource: amount for resource, amount in request.items() if amount > 0}

    def room(n: NodeView) -> int:
        """Pods of the gang the node can take, counted one by one."""
        count = 0
        while count < pods and all(
            n.requested.get(r, 0) + (count + 1) * amount <= n.allocatable.get(r, 0) for r, amount in positive.items()
        ):
            count += 1
        return count

    placement = fit_gang(pods, request, nodes, {}, ())
    schedulable = {n.name: n for n in nodes if not n.unschedulable}
    if placement is None:
        assert sum(room(n) for n in schedulable.values()) < pods
        return
    assert len(placement) == pods
    for name, count in Counter(placement).items():
        assert count <= room(schedulable[name])
    assert fit_gang(pods, request, list(reversed(nodes)), {}, ()) == placement
