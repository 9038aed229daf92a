"""What a waiting SJ's reason says of other tenants' SJs: nothing by name. The ``Admitted=False`` message is
written into the SJ's status, in its namespace, where its tenant reads it: it names the starving head the room
is kept for, or the backing-off SJ it is held for, only when that SJ is of the same namespace; of another
namespace's SJ it says only that there is one, not its name, its namespace, nor since or until when it waits
(`policy.admission._kept_for`, `_held_for`). The words SJs refused for one reason share stay shared: one message
for the SJs of the named SJ's namespace and one for all the others (`policy.admission._Why`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.policy import admission
from sj_operator.policy.admission import PolicyConfig, decide_pass
from sj_operator.policy.queue import waiting_since
from sj_operator.policy.snapshot import NamespaceQuota, NodeView, QueuedSJ
from sj_operator.resources import freeze
from tests.unit import test_admission as adm
from tests.unit import test_controller as ctl
from tests.unit.test_admission_walk import TENANTS, alike_queues
from tests.unit.test_backoff_hold import FULL, NOW, STARVE, UNTIL, backing_off, four_cpu, later, walk

A, B = "tenant-a", "tenant-b"


def starving(key: str) -> QueuedSJ:
    """Made an hour ago and interrupted once: first in the queue, starving under `STARVE`."""
    return adm.sj(key, cpu=3000, age_min=60, interrupted=1)


SINCE = waiting_since(starving(f"{A}/head")).isoformat()
KEPT_FOR_AN_SJ_ELSEWHERE = ("the room that frees up is kept for an SJ of another namespace, first in the queue and "
                            "starving")
HELD_FOR_AN_SJ_ELSEWHERE = ("the room it would take is held for an SJ of another namespace, ahead of it in the queue "
                            "and backing off")


@dataclass(frozen=True)
class Case:
    nodes: list[NodeView]
    queue: list[QueuedSJ]
    config: PolicyConfig
    explained: str
    """The SJ whose reason is read."""
    message: str
    fair_share: bool = False
    """Each namespace has a quota (without caps): the walk deals by fair share."""


CASES = {
    "kept-for-a-head-of-its-namespace": Case(
        four_cpu(used={"cpu": 2000}), [starving(f"{A}/head"), later(f"{A}/small", cpu=500)], STARVE, f"{A}/small",
        f"needs 1 pod of 0.5 CPU; the room that frees up is kept for {A}/head, first in the queue and waiting since "
        f"{SINCE}"),
    "kept-for-a-head-of-another-namespace": Case(
        four_cpu(used={"cpu": 2000}), [starving(f"{A}/head"), later(f"{B}/small", cpu=500)], STARVE, f"{B}/small",
        f"needs 1 pod of 0.5 CPU; {KEPT_FOR_AN_SJ_ELSEWHERE}"),
    "held-for-an-sj-of-its-namespace": Case(
        four_cpu(), [backing_off(f"{A}/a"), later(f"{A}/b")], FULL, f"{A}/b",
        f"needs 1 pod of 3 CPU; the room it would take is held for {A}/a, ahead of it in the queue and backing off "
        f"until {UNTIL.isoformat()}"),
    "held-for-an-sj-of-another-namespace": Case(
        four_cpu(), [backing_off(f"{A}/a"), later(f"{B}/b")], FULL, f"{B}/b",
        f"needs 1 pod of 3 CPU; {HELD_FOR_AN_SJ_ELSEWHERE}"),
    "held-for-several-the-first-of-another-namespace": Case(
        four_cpu("a", "b"), [backing_off(f"{A}/a", interrupted=2), backing_off(f"{B}/a2"), later(f"{B}/b")], FULL,
        f"{B}/b", f"needs 1 pod of 3 CPU; {HELD_FOR_AN_SJ_ELSEWHERE} (and for 1 more backing-off SJ(s) ahead of it)"),
    "held-for-an-sj-of-another-namespace-by-fair-share": Case(
        four_cpu(), [backing_off(f"{A}/a"), later(f"{B}/b")], FULL, f"{B}/b",
        f"needs 1 pod of 3 CPU; {HELD_FOR_AN_SJ_ELSEWHERE}", fair_share=True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_reason_names_an_sj_only_to_the_sjs_of_its_namespace(case: Case) -> None:
    snap = adm.snapshot(case.nodes, case.queue)
    if case.fair_share:
        snap = replace(snap, quotas={A: NamespaceQuota(), B: NamespaceQuota()})
    why = decide_pass(snap, NOW, case.config).waiting[case.explained]
    assert (why.reason, why.message) == ("NoNodeFitsGang", case.message)
    own = case.explained.split("/")[0]
    others = {sj.key.split("/")[0] for sj in case.queue} - {own}
    assert not [ns for ns in others if ns in why.message], "no other namespace is named"
    if others:
        assert "+00:00" not in why.message, "nor since or until when another tenant's SJ waits"


@pytest.mark.parametrize("order", [(A, B, A, B), (B, A, B, A)], ids=["named-first", "unnamed-first"])
def test_sjs_alike_of_several_namespaces_share_one_message_per_side_of_the_namespace_line(order) -> None:
    """Behind a hold, SJs alike of two namespaces in turn: each is refused for the reason the first was (the
    ledger is asked once), in the words for its side (named to the holder's namespace, unnamed to the other), and
    the SJs of a side share one message."""
    queue = [backing_off(f"{A}/held")] + [later(f"{ns}/sj-{i}", age_min=10 - i) for i, ns in enumerate(order)]
    with mock.patch("sj_operator.policy.admission._place", wraps=admission._place) as place:
        waiting = decide_pass(adm.snapshot(four_cpu(), queue), NOW, FULL).waiting
    assert place.call_count == 2, "the hold, then the first SJ refused; the SJs alike behind it are not asked"
    named = waiting[f"{A}/sj-{order.index(A)}"]
    unnamed = waiting[f"{B}/sj-{order.index(B)}"]
    assert f"held for {A}/held" in named.message
    assert unnamed.message == f"needs 1 pod of 3 CPU; {HELD_FOR_AN_SJ_ELSEWHERE}"
    assert {id(w) for w in waiting.values()} == {id(named), id(unnamed)}, "one message per side, not one per SJ"


def test_the_sjs_behind_a_starving_head_of_another_namespace_are_told_so_without_its_name() -> None:
    queue = [starving(f"{A}/head"), later(f"{A}/x", cpu=500, age_min=3), later(f"{B}/y", cpu=500, age_min=2)]
    waiting = walk(four_cpu(used={"cpu": 2000}), queue, STARVE).waiting
    assert waiting[f"{A}/x"].message.endswith(f"kept for {A}/head, first in the queue and waiting since {SINCE}")
    assert waiting[f"{B}/y"].message == f"needs 1 pod of 0.5 CPU; {KEPT_FOR_AN_SJ_ELSEWHERE}"


CAPS = st.none() | st.lists(st.integers(0, 8), min_size=len(TENANTS), max_size=len(TENANTS))
"""Each tenant's cap of CPU (in CPUs), or no quotas at all (no fair share)."""


@settings(max_examples=300, deadline=None)
@given(snap=adm.snapshots(), queue=alike_queues(), config=adm.configs, caps=CAPS)
def test_no_reason_names_an_sj_or_the_namespace_of_another_tenant(snap: Any, queue: list[QueuedSJ], config: Any,
                                                                  caps: list[int] | None) -> None:
    """Any queue of SJs of several namespaces (holds, a starving head, refusals shared, quotas and fair share):
    each waiting SJ's message names no namespace but its own."""
    snap = replace(snap, queue=tuple(queue))
    if caps is not None:
        snap = replace(snap, quotas={ns: NamespaceQuota(hard=freeze({"cpu": cap * 1000}))
                                     for ns, cap in zip(TENANTS, caps, strict=True)})
    for key, why in decide_pass(snap, NOW, config).waiting.items():
        own = key.split("/")[0]
        assert not [ns for ns in TENANTS if ns != own and ns in why.message], (key, why.message)


def test_the_status_written_into_a_tenants_namespace_does_not_name_another_tenants_sj(kube: ctl.FakeKube) -> None:
    """Through the loop: the reason the controller writes into the status of the SJ of one namespace, whose room is
    held for a backing-off SJ of another, says so without naming it or its namespace."""
    controller = Controller(kube, OperatorConfig(), clock=lambda: ctl.NOW)  # type: ignore[arg-type]
    again = replace(ctl.sj(ctl.AFTER_A_WASTED_RUN, name="again", created=ctl.NOW - timedelta(hours=1), cpu="4"),
                    namespace=A)
    newer = replace(ctl.sj(ctl.PENDING, name="newer", cpu="4"), namespace=B)
    ctl.run(controller, ctl.view(again, newer))
    assert ctl.launched(kube) == []
    [written] = [body for kind, body in kube.calls if kind == "status"]  # the newer SJ's reason; not the other's
    why = next(c for c in written["conditions"] if c["type"] == "Admitted")
    assert why["reason"] == "NoNodeFitsGang" and HELD_FOR_AN_SJ_ELSEWHERE in why["message"]
    assert A not in why["message"] and "again" not in why["message"]


@pytest.fixture
def kube() -> ctl.FakeKube:
    return ctl.FakeKube()
