"""The write plan: which lane each decision of a pass takes, read from what the state machine says it is."""
from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from sj_operator.api import Phase, ScavengerJobStatus, parse_spec
from sj_operator.decide import Decided, Observed
from sj_operator.observed import SJObject, job_view
from sj_operator.pacing import EVENT_DEFERRAL, EVENT_QUIET
from sj_operator.policy.lifecycle import Event, Run, SetProtection, Step, StepKind
from sj_operator.write.plan import Launches, WritePlan, joined, plan_writes

NOW = datetime(2024, 1, 1, tzinfo=UTC)
CLOCK = 1000.0
QUIET = Launches(busy_since=None, clock=CLOCK)
LAUNCHING = Launches(busy_since=CLOCK, clock=CLOCK)
BEFORE = ScavengerJobStatus(phase=Phase.PENDING)
AFTER = ScavengerJobStatus(phase=Phase.STARTING, attempt=1, job_name="work-r1")


def decided(kind: StepKind | None = None, *, changes: bool = True, made_ago: float = 0.0) -> Decided:
    sj = SJObject(namespace="ns", name="work", uid="u-work", generation=1, resource_version="7", created=NOW,
                  deleting=False, spec={"image": "busybox"}, status={})
    job = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j",
                                 "creationTimestamp": (NOW - timedelta(seconds=made_ago)).isoformat()}})
    observed = Observed(sj, "7", {}, BEFORE, parse_spec({"image": "busybox"}), Run(job=job))
    actions = (SetProtection("work-r1", True),) if kind == "steers" else ()
    events = (Event("Normal", "Note", "something"),) if changes else ()
    return Decided(observed, Step(AFTER if changes else BEFORE, actions, events, kind=kind))


def lane(plan: WritePlan, d: Decided) -> str:
    lanes = [name for name in ("first", "rest", "steering", "held") if d in getattr(plan, name)]
    assert len(lanes) <= 1, lanes
    return lanes[0] if lanes else "none"


@pytest.mark.parametrize(("d", "admitted", "busy", "launches", "expected"), [
    (decided(changes=False), False, False, QUIET, "none"),
    (decided(), False, False, QUIET, "rest"),
    (decided(), True, False, QUIET, "first"),
    (decided(), False, True, QUIET, "none"),
    (decided("queues"), False, False, QUIET, "rest"),
    (decided("queues"), True, False, QUIET, "none"),
    (decided("steers"), False, False, QUIET, "steering"),
    (decided("steers"), False, False, LAUNCHING, "steering"),
    (decided("steers"), False, True, QUIET, "none"),
    (decided("records-run"), False, False, QUIET, "rest"),
    (decided("records-run"), False, False, LAUNCHING, "held"),
    (decided("records-run", made_ago=EVENT_DEFERRAL), False, False, LAUNCHING, "rest"),
    (decided(), False, False, LAUNCHING, "rest"),
], ids=["changes-nothing", "transition", "admitted", "launch-under-way", "queued", "queued-and-admitted-at-once",
        "steering", "steering-during-launches", "steering-under-way", "record", "record-during-launches",
        "record-waited-long-enough", "transition-during-launches"])
def test_each_decision_takes_the_lane_its_step_says(d: Decided, admitted: bool, busy: bool, launches: Launches,
                                                    expected: str) -> None:
    plan = plan_writes([d], admitted={"ns/work"} if admitted else set(), busy={"u-work"} if busy else set(),
                       launches=launches, now=NOW)
    assert lane(plan, d) == expected
    assert (plan.due_in is not None) == (expected == "held")


def test_a_held_record_is_due_when_the_launches_pause_and_the_plan_asks_for_the_soonest() -> None:
    younger, older = decided("records-run", made_ago=1.0), decided("records-run", made_ago=3.0)
    plan = plan_writes([younger, older], admitted=set(), busy=set(), launches=LAUNCHING, now=NOW)
    assert plan.held == (younger, older) and plan.due_in == EVENT_QUIET


def test_the_plans_of_a_passs_slices_join_in_order() -> None:
    a, b, c = decided(), replace(decided("steers")), decided("records-run")
    parts = [plan_writes([d], admitted=set(), busy=set(), launches=LAUNCHING, now=NOW) for d in (a, b, c)]
    whole = plan_writes([a, b, c], admitted=set(), busy=set(), launches=LAUNCHING, now=NOW)
    assert joined(parts) == whole


# --- the steering lane: toggles first, level writes with the room left --------------------------------------

def steered(name: str, toggle: bool, *, routine: bool = False, protect: bool = True) -> Decided:
    """A running SJ's steering decision: a protection toggle (its label and Event, no status; ``routine``: one its
    run's clock asked for; ``protect``: the protection given, else taken away), or a level write."""
    sj = SJObject(namespace="ns", name=name, uid=f"u-{name}", generation=1, resource_version="7", created=NOW,
                  deleting=False, spec={"image": "busybox"}, status={})
    running = ScavengerJobStatus(phase=Phase.RUNNING, job_name=f"{name}-r1", running_priority=0)
    observed = Observed(sj, "7", {}, running, parse_spec({"image": "busybox"}), Run(job=None))
    if toggle:
        return Decided(observed, Step(running, (SetProtection(f"{name}-r1", protect, NOW if routine else None),),
                                      (Event("Normal", "Protected", "protected", routine=True),), kind="steers"))
    return Decided(observed, Step(running.model_copy(update={"running_priority": 1}), kind="steers"))


@pytest.mark.parametrize(("due", "toggles_room", "levels_room", "taken"), [
    ("TTLL", 4, 4, "TTLL"),  # room for all
    ("LTLT", 4, 4, "TTLL"),  # toggles first, whatever the order they came in
    ("LTLT", 1, 4, "T"),  # a toggle left out: no level write
    ("LTTL", 2, 1, "TTL"),  # every toggle taken: the level writes take their own room
    ("LLLL", 0, 2, "LL"),  # no toggle due: level writes up to their room
    ("LLTT", 2, 0, "TT"),  # no room for level writes
    ("TTTT", 0, 4, ""),  # no room for toggles: nothing, not even the level writes
    ("", 3, 3, ""),
], ids=["room-for-all", "toggles-first", "toggle-left-out", "levels-own-room", "levels-only", "no-level-room",
        "no-toggle-room", "nothing-due"])
def test_the_steering_lane_serves_every_toggle_before_any_level_write(due: str, toggles_room: int, levels_room: int,
                                                                      taken: str) -> None:
    from sj_operator.write.steering import steering_order
    decisions = [steered(f"s{i}", kind == "T") for i, kind in enumerate(due)]
    chosen = steering_order(decisions, toggles_room=toggles_room, levels_room=levels_room)
    assert "".join("T" if d.step.actions else "L" for d in chosen) == taken
    # In the order they came in, within each kind.
    assert chosen == [d for d in decisions if d.step.actions and d in chosen] + [
        d for d in decisions if not d.step.actions and d in chosen]


@pytest.mark.parametrize(("due", "starting", "taken"), [
    ("RTL", 0, "RTL"),
    ("RTL", 1, "RTL"),  # a run restarting after a preemption: steering goes on
    ("RTL", 63, "RTL"),
    ("RTL", 64, "TL"),  # a burst of runs starting: the routine toggle waits, a drain's and the level write do not
    ("RRL", 5000, "L"),  # no toggle taken, none left out but routine ones: the level write goes
    ("RTTL", 64, "T"),  # room for one toggle: the other is left out, so no level write
], ids=["idle", "one-starting", "just-below", "at-the-threshold", "only-routine-due", "no-room"])
def test_routine_toggles_yield_to_many_runs_starting(due: str, starting: int, taken: str) -> None:
    """R: a routine toggle (its run's clock asked for it), T: another toggle (a drain's, the bound's, an
    exemption's), L: a level write."""
    from sj_operator.write.steering import STEERING_YIELDS_AT, steering_order
    assert STEERING_YIELDS_AT == 64
    decisions = [steered(f"s{i}", kind != "L", routine=kind == "R") for i, kind in enumerate(due)]
    room = 1 if "TT" in due else 4
    chosen = steering_order(decisions, toggles_room=room, levels_room=4, starting=starting)
    kinds = {id(d): kind for d, kind in zip(decisions, due, strict=True)}
    assert "".join(kinds[id(d)] for d in chosen) == taken


@pytest.mark.parametrize(("protect", "until"), [
    (True, "forever"),  # not protected yet: nothing its clock brings would not wait too
    (False, "set-aside"),  # protected: its protection's bound does not wait
], ids=["protect", "unprotect"])
def test_a_run_set_aside_is_decided_again_in_time_for_what_does_not_wait(protect: bool, until: str) -> None:
    from sj_operator.policy.lifecycle import FOREVER
    from sj_operator.write.steering import SET_ASIDE, set_aside_until
    expected = {"forever": FOREVER, "set-aside": NOW + SET_ASIDE}[until]
    assert set_aside_until(steered("s", True, routine=True, protect=protect), NOW) == expected


def test_the_lane_returns_the_routine_toggles_that_wait_while_it_yields() -> None:
    """Not yielding, every decision is taken; yielding (and the wake asked for once it stops), the routine toggle
    is returned, to be set aside, and the others are taken."""
    from sj_operator.write import steering
    woken: list[None] = []

    async def passes() -> tuple[list[Decided], set[str], list[Decided], set[str]]:
        lane = steering.SteeringLane(lambda d: asyncio.sleep(0), lambda: woken.append(None))
        due = [steered("r", True, routine=True), steered("t", True), steered("l", False)]
        first, taken = lane.steer(due), set(lane.under_way)
        await asyncio.gather(*lane.tasks)
        lane.starting(steering.STEERING_YIELDS_AT)
        second = lane.steer(due)
        assert second == [due[0]]
        again = set(lane.under_way)
        await asyncio.gather(*lane.tasks)
        woken.clear()  # (the lane also asks for a pass as its toggles are done)
        lane.starting(steering.STEERING_YIELDS_AT)
        assert not woken, "still yielding"
        lane.starting(steering.STEERING_YIELDS_AT - 1)
        return first, taken, second, again

    first, taken, _, again = asyncio.run(passes())
    assert first == [] and taken == {"u-r", "u-t", "u-l"}
    assert again == {"u-t", "u-l"} and woken


def test_level_writes_under_way_never_take_a_toggles_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two toggles in flight at most, one level write: while a level write is under way the next pass's toggles
    still have their whole room; the level writes left out are decided again (not queued)."""
    import asyncio

    from sj_operator.write import steering
    monkeypatch.setattr(steering, "STEERING_IN_FLIGHT", 2)
    monkeypatch.setattr(steering, "LEVEL_WRITES_IN_FLIGHT", 1)
    gate, applied = asyncio.Event(), []

    async def apply(d: Decided) -> None:
        await gate.wait()
        applied.append(d.observed.sj.name)

    async def passes() -> tuple[list[str], list[str]]:
        lane = steering.SteeringLane(apply, lambda: None)
        lane.steer([steered("l1", False), steered("l2", False)])
        first = sorted(lane.under_way)
        lane.steer([steered("t1", True), steered("t2", True), steered("t3", True), steered("l2", False)])
        second = sorted(lane.under_way)
        gate.set()
        await asyncio.gather(*lane.tasks)
        return first, second

    first, second = asyncio.run(passes())
    assert first == ["u-l1"]
    assert second == ["u-l1", "u-t1", "u-t2"]
    assert sorted(applied) == ["l1", "t1", "t2"]
