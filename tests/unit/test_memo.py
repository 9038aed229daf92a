"""What a pass remembers (sj_operator.memo): parsed once per version, forgotten when gone; and a pass
does nothing for an SJ with nothing to write."""
from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from unittest import mock

from sj_operator.api import DEFAULT_LIMITS, InvalidSpec, parse_spec
from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.memo import ALIKE_KEPT, ALIKE_MOST_BYTES, PassMemo, Recent, as_content
from sj_operator.observed import SJObject
from tests.unit.helpers import settled_pass
from tests.unit.test_controller import FakeKube, stored_status, view

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def sj(generation: int = 1, rv: str = "1", spec: dict | None = None, uid: str = "u",
       status: dict | None = None) -> SJObject:
    return SJObject(namespace="ns", name="x", uid=uid, generation=generation, resource_version=rv, created=NOW,
                    deleting=False, spec=spec or {"image": "busybox"}, status=status or {})


def test_a_spec_is_parsed_once_per_generation() -> None:
    memo = PassMemo(DEFAULT_LIMITS)
    with mock.patch("sj_operator.memo.parse_spec", wraps=parse_spec) as parse:
        first = memo.spec_of(sj())
        assert memo.spec_of(sj(rv="2")) is first, "a new resourceVersion alone (a status write) reuses it"
        assert parse.call_count == 1
        changed = memo.spec_of(sj(generation=2, spec={"image": "other"}))
        assert parse.call_count == 2 and not isinstance(changed, InvalidSpec) and changed.image == "other"


def test_an_invalid_spec_is_remembered_too() -> None:
    memo = PassMemo(DEFAULT_LIMITS)
    assert isinstance(memo.spec_of(sj(spec={"image": ""})), InvalidSpec)
    assert isinstance(memo.spec_of(sj(spec={"image": ""})), InvalidSpec)


def test_a_status_is_parsed_once_per_version() -> None:
    memo = PassMemo(DEFAULT_LIMITS)
    one = memo.status_of(sj(), "5", {"phase": "Pending"})
    assert memo.status_of(sj(), "5", {"phase": "Pending"}) is one
    assert memo.status_of(sj(), "6", {"phase": "Running"}).phase == "Running"


def test_sjs_alike_share_one_parsed_spec_status_and_queue_shape_and_others_get_their_own() -> None:
    memo = PassMemo(DEFAULT_LIMITS)
    template = {"image": "busybox", "resources": {"requests": {"cpu": "1"}}, "nodeSelector": {"a": "b"}}
    reordered = {"nodeSelector": {"a": "b"}, "resources": {"requests": {"cpu": "1"}}, "image": "busybox"}
    with mock.patch("sj_operator.memo.parse_spec", wraps=parse_spec) as parse:
        one, two = memo.spec_of(sj(uid="a", spec=template)), memo.spec_of(sj(uid="b", spec=reordered))
        other = memo.spec_of(sj(uid="c", spec={**template, "image": "other"}))
    assert one is two and other is not one and parse.call_count == 2
    assert not isinstance(one, InvalidSpec) and not isinstance(other, InvalidSpec) and other.image == "other"
    waiting = {"phase": "Pending", "conditions": [{"type": "Queued", "status": "True", "reason": "Queued",
                                                    "lastTransitionTime": "2026-11-22T12:00:00Z"}]}
    status = memo.status_of(sj(uid="a"), "1", waiting)
    assert memo.status_of(sj(uid="b"), "7", dict(waiting)) is status
    later = {**waiting, "conditions": [{**waiting["conditions"][0], "lastTransitionTime": "2026-11-22T12:00:01Z"}]}
    assert memo.status_of(sj(uid="c"), "1", later) is not status
    entries = [memo.queued(sj(uid=u), one, status, NOW) for u in ("a", "b")]
    assert entries[0].request is entries[1].request and entries[0].node_selector is entries[1].node_selector
    assert dict(entries[0].request) == {"cpu": 1000, "pods": 1000} and dict(entries[0].node_selector) == {"a": "b"}


def test_a_spec_or_status_without_a_json_form_is_parsed_on_its_own() -> None:
    """Whatever the watch holds: a key that is not a string, a value JSON has no form for, a NaN."""
    for raw in ({1: "x", "image": "busybox"}, {"image": object()}, {"image": "busybox", "x": float("nan")}):
        assert as_content(raw) is None
        memo = PassMemo(DEFAULT_LIMITS)
        assert isinstance(memo.spec_of(sj(spec=raw)), InvalidSpec)  # type: ignore[arg-type]
        assert memo.spec_of(sj(uid="v", spec=raw)) is not memo.spec_of(sj(spec=raw))  # type: ignore[arg-type]


def test_a_large_spec_or_status_is_parsed_for_its_sj_alone_and_not_kept_beyond_it() -> None:
    big = {"image": "busybox", "podAnnotations": {"a": "x" * ALIKE_MOST_BYTES}}
    assert as_content(big) is None and as_content({"image": "busybox"}) is not None
    memo = PassMemo(DEFAULT_LIMITS)
    one, two = memo.spec_of(sj(uid="a", spec=big)), memo.spec_of(sj(uid="b", spec=big))
    assert not isinstance(one, InvalidSpec) and one is not two and len(memo._spec_contents) == 0
    status = {"phase": "Pending", "message": "m" * ALIKE_MOST_BYTES}
    assert memo.status_of(sj(uid="a"), "1", status) is not memo.status_of(sj(uid="b"), "1", status)
    assert len(memo._status_contents) == 0


def test_the_specs_kept_for_sjs_alike_are_the_last_ones_used() -> None:
    recent: Recent[int] = Recent(3)
    for i in range(3):
        recent.put(str(i), i)
    assert recent.get("0") == 0  # used: now the last one dropped
    recent.put("3", 3)
    assert [recent.get(k) for k in "0123"] == [0, None, 2, 3] and len(recent) == 3
    memo = PassMemo(DEFAULT_LIMITS)
    for i in range(ALIKE_KEPT + 10):
        memo.spec_of(sj(uid=f"u{i}", spec={"image": f"i{i}"}))
    assert len(memo._spec_contents) == ALIKE_KEPT


def test_entries_of_sjs_that_are_gone_are_forgotten() -> None:
    memo = PassMemo(DEFAULT_LIMITS)
    for i in range(2000):
        memo.status_of(sj(uid=f"u{i}"), "1", {})
    memo.forget_gone((sj(uid="u7"),))
    assert set(memo._statuses) == {"u7"}


def test_a_pass_does_not_carry_out_decisions_that_change_nothing() -> None:
    kube = FakeKube()
    controller = Controller(kube, OperatorConfig(threshold=0.0), clock=lambda: NOW)  # type: ignore[arg-type]
    asyncio.run(settled_pass(controller, view(sj())))  # queued: a status and an Event
    settled = sj(status=stored_status(kube), rv=str(kube.rv))
    with mock.patch.object(controller.writer, "apply", wraps=controller.writer.apply) as apply:
        asyncio.run(settled_pass(controller, view(settled)))
    assert apply.call_count == 0
