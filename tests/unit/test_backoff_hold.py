"""The backoff hold (issue 43, point 6): an SJ backing off after a wasted run keeps its place in the queue, and
the room it would start in is held for it, so the SJs behind it may only backfill room it would not use."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings

from sj_operator.policy.admission import AdmissionPass, PolicyConfig, decide, decide_pass
from sj_operator.policy.snapshot import ClusterSnapshot, NamespaceQuota, QueuedSJ, Shape
from sj_operator.resources import freeze
from tests.unit import test_admission as adm

NOW = adm.NOW
S = timedelta(seconds=1)
UNTIL = NOW + 30 * S
"""When the backing-off SJs' backoff ends."""
FULL = PolicyConfig(threshold=1.0, starvation_after=timedelta(days=365))
STARVE = PolicyConfig(threshold=1.0, starvation_after=timedelta(minutes=10), aging_step=timedelta(days=365))


def backing_off(key: str, cpu: int = 3000, interrupted: int = 1, **kw) -> QueuedSJ:
    """Interrupted within its first checkpoint period: backing off until `UNTIL`."""
    return adm.sj(key, cpu=cpu, interrupted=interrupted, age_min=kw.pop("age_min", 30), not_before=UNTIL,
                  waiting_from=NOW - 5 * S, **kw)


def later(key: str, cpu: int = 3000, **kw) -> QueuedSJ:
    """Created after the interrupted SJ and never interrupted."""
    return adm.sj(key, cpu=cpu, age_min=kw.pop("age_min", 1), **kw)


def four_cpu(*names: str, **kw) -> list:
    return [adm.node(name, cpu=4000, **kw) for name in names or ("a",)]


def walk(nodes: list, queue: list[QueuedSJ], config: PolicyConfig = FULL, **kw) -> AdmissionPass:
    snap = adm.snapshot(nodes, queue, **kw)
    result = decide_pass(snap, NOW, config)
    assert result.admitted == decide(snap, NOW, config), "explaining changes nothing that is admitted"
    return result


def placed(admissions: list) -> list[tuple[str, tuple[str, ...]]]:
    return [(a.key, a.nodes) for a in admissions]


HELD_FOR_A = ("the room it would take is held for ns/a, ahead of it in the queue and backing off until "
              f"{UNTIL.isoformat()}")


@pytest.mark.parametrize(("nodes", "queue", "admitted", "held", "kept"), [
    # The issue: room came back during the interrupted SJ's backoff; an SJ created later needs that very room.
    (four_cpu(), [backing_off("ns/a"), later("ns/b")], [], [("ns/a", ("a",))], ["ns/b"]),
    # Room it would not use is backfilled.
    (four_cpu(), [backing_off("ns/a"), later("ns/b"), later("ns/c", cpu=1000)],
     [("ns/c", ("a",))], [("ns/a", ("a",))], ["ns/b"]),
    # The room is not back yet: nothing is held (as for an eligible head that does not fit), the rest backfills.
    (four_cpu(used={"cpu": 2000}), [backing_off("ns/a"), later("ns/b", cpu=2000)],
     [("ns/b", ("a",))], [], []),
    # More than the cluster could ever give it: it holds nothing, ever.
    (four_cpu(), [backing_off("ns/a", cpu=8000), later("ns/b")], [("ns/b", ("a",))], [], []),
    # Several backing off in a row: each holds in its turn, in queue order.
    (four_cpu("a", "b"), [backing_off("ns/a", interrupted=2), backing_off("ns/a2"), later("ns/b")],
     [], [("ns/a", ("a",)), ("ns/a2", ("b",))], ["ns/b"]),
    # The second does not fit beside the first: it holds nothing, and what is left is backfilled.
    (four_cpu(), [backing_off("ns/a", interrupted=2), backing_off("ns/a2"), later("ns/b", cpu=1000)],
     [("ns/b", ("a",))], [("ns/a", ("a",))], []),
    # An eligible SJ ahead of it is admitted first; the hold comes next.
    (four_cpu(), [adm.sj("ns/first", cpu=2000, interrupted=2), backing_off("ns/a", cpu=2000), later("ns/b", cpu=2000)],
     [("ns/first", ("a",))], [("ns/a", ("a",))], ["ns/b"]),
    # A gang holds room for all its pods at once.
    (four_cpu("a", "b"), [backing_off("ns/a", pods=2), later("ns/b"), later("ns/c", cpu=1000)],
     [("ns/c", ("a",))], [("ns/a", ("a", "b"))], ["ns/b"]),
    # Its node selector: only the room it may use is held.
    ([adm.node("x", cpu=4000, labels={"zone": "x"}), adm.node("y", cpu=4000, labels={"zone": "y"})],
     [backing_off("ns/a", node_selector={"zone": "y"}), later("ns/b", age_min=2), later("ns/b2")],
     [("ns/b", ("x",))], [("ns/a", ("y",))], ["ns/b2"]),
    # Its backoff is over: it is admitted like any other.
    (four_cpu(), [replace(backing_off("ns/a"), not_before=NOW), later("ns/b")], [("ns/a", ("a",))], [], []),
], ids=["issue-43", "backfill-beside-the-hold", "not-back-yet-holds-nothing", "never-fits-holds-nothing",
        "several-in-a-row", "second-does-not-fit", "eligible-ahead-first", "gang", "node-selector", "backoff-over"])
def test_the_room_a_backing_off_sj_would_start_in_is_held(nodes, queue, admitted, held, kept):
    result = walk(nodes, queue)
    assert placed(result.admitted) == admitted
    assert placed(result.held) == held
    kept_out = [key for key, why in result.waiting.items() if "is held for" in why.message]
    assert kept_out == kept
    assert not {a.key for a in result.held} & set(result.waiting), "a backing-off SJ keeps its own reason"
    for key in kept:
        assert result.waiting[key].reason == "NoNodeFitsGang"


def test_those_kept_out_say_whom_the_room_is_held_for():
    waiting = walk(four_cpu(), [backing_off("ns/a"), later("ns/b")]).waiting
    assert waiting["ns/b"].message == f"needs 1 pod of 3 CPU; {HELD_FOR_A}"
    several = walk(four_cpu("a", "b"), [backing_off("ns/a", interrupted=2), backing_off("ns/a2"), later("ns/b")])
    assert several.waiting["ns/b"].message == (f"needs 1 pod of 3 CPU; {HELD_FOR_A} (and for 1 more backing-off SJ(s) "
                                               "ahead of it)")


def test_an_sj_that_would_not_fit_without_the_hold_either_says_why_with_the_numbers_but_for_the_hold():
    waiting = walk(four_cpu("a", "b", used={"cpu": 1000}), [backing_off("ns/a", cpu=1000),
                                                            later("ns/big", cpu=3500)]).waiting
    assert waiting["ns/big"].message == ("needs 1 pod of 3.5 CPU; the largest free cpu on a node it may use is 3 CPU "
                                         "on a"), "not 3 CPU on b: a's room is held, not taken"
    waiting = walk(four_cpu(used={"cpu": 1000}), [backing_off("ns/a", cpu=1000), later("ns/big", cpu=5000)]).waiting
    assert waiting["ns/big"].message == ("needs 1 pod of 5 CPU (5 CPU in all); requests may reach 100% of the 4 CPU "
                                         "allocatable (4 CPU) and 1 CPU is requested"), "the hold's 1 CPU is no request"


def test_the_hold_lasts_until_the_backoff_ends_then_the_sj_is_admitted_in_its_room():
    snap = adm.snapshot(four_cpu(), [backing_off("ns/a"), later("ns/b")])
    for moment in (NOW, UNTIL - timedelta(microseconds=1)):
        assert decide(snap, moment, FULL) == []
    assert placed(decide(snap, UNTIL, FULL)) == [("ns/a", ("a",))]


def test_a_backing_off_sj_holds_its_fallback_once_that_is_due():
    """Its gang no longer places; it has waited past its fallback_after since its interruption, so the
    fallback is what it would start with: that room is held."""
    gang = backing_off("ns/a", pods=3, fallbacks=(Shape(1, freeze({"cpu": 3000})),),
                       fallback_after=timedelta(seconds=1))
    result = walk(four_cpu("a", "b"), [gang, later("ns/b"), later("ns/b2")])
    assert [(a.key, a.nodes, a.config_index) for a in result.held] == [("ns/a", ("a",), 1)]
    assert placed(result.admitted) == [("ns/b", ("b",))]
    assert HELD_FOR_A in result.waiting["ns/b2"].message


def test_a_starving_head_behind_a_hold_waits_for_it_and_blocks_the_rest():
    """The backing-off SJ is ahead of the starving head: its hold comes first; the head, kept out by it,
    still ends the pass (nothing behind it is admitted or held)."""
    head = adm.sj("ns/head", cpu=3000, age_min=60, interrupted=1)
    result = walk(four_cpu(), [backing_off("ns/a", interrupted=2), head, later("ns/small", cpu=500),
                               backing_off("ns/behind", cpu=500)], STARVE)
    assert placed(result.held) == [("ns/a", ("a",))] and result.admitted == []
    assert HELD_FOR_A in result.waiting["ns/head"].message
    assert "kept for ns/head" in result.waiting["ns/small"].message
    assert "ns/behind" not in result.waiting


def test_a_backing_off_sj_is_never_the_starving_head():
    """It cannot start, so the starvation rule looks past it: the first eligible SJ that could run is the head."""
    result = walk(four_cpu(used={"cpu": 2000}), [backing_off("ns/a", age_min=600),
                                                 adm.sj("ns/head", cpu=3000, age_min=60), later("ns/small", cpu=500)],
                  STARVE)
    assert result.held == [] and result.admitted == []
    assert "kept for ns/head" in result.waiting["ns/small"].message


# --- quotas and fair share ---------------------------------------------------------------------------------

CAPPED = {"team": NamespaceQuota(hard=freeze({"cpu": 4000}), capped_by={"cpu": "ScavengerQuota team/cap"})}


def with_quotas(nodes: list, queue: list[QueuedSJ]) -> ClusterSnapshot:
    return replace(adm.snapshot(nodes, queue), quotas=CAPPED)


def test_the_hold_counts_against_its_namespaces_quota():
    """The quota's room is held too: a later SJ of the same namespace would take it, and the interrupted one could
    then not start within its quota. Another namespace's SJ runs beside it."""
    snap = with_quotas(four_cpu("a", "b", "c"), [backing_off("team/a"), later("team/b", cpu=2000),
                                                 later("other/c", cpu=2000)])
    result = decide_pass(snap, NOW, FULL)
    assert placed(result.held) == [("team/a", ("b",))]
    assert placed(result.admitted) == [("other/c", ("a",))], "fair share deals namespaces by name at equal shares"
    assert result.waiting["team/b"].reason == "QuotaExceeded"
    assert result.waiting["team/b"].message == (
        "needs 1 pod of 2 CPU; namespace team may request 4 CPU for its SJs at once (ScavengerQuota team/cap) and "
        "they request 3 CPU, counting 3 CPU held for team/a, backing off")


def test_fair_share_deals_the_hold_as_an_admission():
    """With fair share the namespaces take turns by their dominant share: the held room counts in the backing-off
    SJ's namespace, so the other namespace's SJ comes next and takes the room left, as it would were the backoff
    over (uncounted, the backing-off SJ's sibling would come next)."""
    queue = [backing_off("blue/a", cpu=2000), later("blue/b", cpu=2000, age_min=3), later("red/c", cpu=2000)]
    snap = replace(adm.snapshot(four_cpu(), queue), quotas={"blue": NamespaceQuota(), "red": NamespaceQuota()})
    result = decide_pass(snap, NOW, FULL)
    over = decide(replace(snap, queue=tuple(replace(sj, not_before=NOW) for sj in snap.queue)), NOW, FULL)
    assert [a.key for a in over] == ["blue/a", "red/c"]
    assert placed(result.held) == [("blue/a", ("a",))]
    assert placed(result.admitted) == [("red/c", ("a",))]
    assert "is held for blue/a" in result.waiting["blue/b"].message


# --- the rule as a whole --------------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(snap=adm.snapshots(), config=adm.configs)
def test_a_backoff_changes_when_an_sj_starts_never_what_the_sjs_behind_it_get(snap: ClusterSnapshot,
                                                                              config: PolicyConfig) -> None:
    """Without starvation (which looks past backing-off SJs for its head), the pass admits exactly what it would
    admit were every backoff over, less the backing-off SJs, whose room it holds where they would start."""
    config = replace(config, starvation_after=timedelta(days=3650))
    backing = {sj.key for sj in snap.queue if sj.not_before is not None and sj.not_before > NOW}
    over = replace(snap, queue=tuple(replace(sj, not_before=NOW) if sj.key in backing else sj for sj in snap.queue))
    result = decide_pass(snap, NOW, config)
    eligible = decide(over, NOW, config)
    assert result.admitted == [a for a in eligible if a.key not in backing]
    assert result.held == [a for a in eligible if a.key in backing]
