"""Nested models parsed from equal content are one instance (``frozen.shared``): SJs that differ in one field
share their resources, tolerations, env vars, volumes, fallbacks and conditions, and parsing gives the same values
as without the table."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sj_operator.api import InvalidSpec, ScavengerJobSpec, ScavengerJobStatus, frozen, parse_spec, parse_status
from tests.specgen import RandomPicker, invalid_spec, valid_spec


@pytest.fixture(autouse=True)
def table(monkeypatch: pytest.MonkeyPatch) -> Iterator[OrderedDict[Any, Any]]:
    """A table of its own for each test (what other tests parsed is not in it)."""
    models: OrderedDict[Any, Any] = OrderedDict()
    monkeypatch.setattr(frozen, "_models", models)
    monkeypatch.setattr(frozen, "_once", set())
    yield models


def spec(n: int, **fields: Any) -> dict[str, Any]:
    """A raw spec of its own (``args`` differ with ``n``) with ``fields``."""
    return {"image": "busybox", "args": [f"--part={n}"], **fields}


def status(n: int, *conditions: dict[str, Any]) -> dict[str, Any]:
    """A raw status of its own (``attempt`` differs with ``n``) with ``conditions``."""
    return {"phase": "Pending", "attempt": n, "conditions": list(conditions)}


def queued(second: int = 0, **fields: Any) -> dict[str, Any]:
    return {"type": "Queued", "status": "True", "reason": "Queued", "message": "waiting for idle capacity",
            "lastTransitionTime": f"2026-11-23T12:00:{second:02d}Z", **fields}


WAITING = {"type": "Admitted", "status": "False", "reason": "ThresholdReached",
           "message": "needs 1 pod of 1 CPU (1 CPU in all); requests may reach 70% of 10 CPU and 7 CPU is requested",
           "lastTransitionTime": "2026-11-23T12:00:00Z", "observedGeneration": 1}
RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}}
TOLERATION = {"key": "scavenger.dev/pool", "operator": "Equal", "value": "burst", "effect": "NoSchedule"}
ENV = {"name": "MODE", "value": "fast"}
VOLUME = {"name": "ckpt", "mountPath": "/ckpt", "emptyDir": {"sizeLimit": "1Gi"}}
FALLBACK = {"parallelism": 2, "resources": {"requests": {"cpu": "500m"}}, "tolerations": [TOLERATION]}

Part = Callable[[Any], object]
SHARED_PARTS: list[tuple[str, Callable[[int], Any], Part]] = [
    ("resources", lambda n: parse_spec(spec(n, resources=RESOURCES)), lambda s: s.resources),
    ("toleration", lambda n: parse_spec(spec(n, tolerations=[TOLERATION])), lambda s: s.tolerations[0]),
    ("env var", lambda n: parse_spec(spec(n, env=[ENV])), lambda s: s.env[0]),
    ("volume", lambda n: parse_spec(spec(n, volumes=[VOLUME], checkpointVolume="ckpt")), lambda s: s.volumes[0]),
    ("image pull secret", lambda n: parse_spec(spec(n, imagePullSecrets=[{"name": "registry"}])),
     lambda s: s.image_pull_secrets[0]),
    ("mpi", lambda n: parse_spec(spec(n, parallelism=3, command=["mpirun"], mpi={"slotsPerWorker": 2})),
     lambda s: s.mpi),
    ("fallback", lambda n: parse_spec(spec(n, fallbacks=[FALLBACK])), lambda s: s.fallbacks[0]),
    ("a fallback's resources", lambda n: parse_spec(spec(n, fallbacks=[{**FALLBACK, "parallelism": n + 1}])),
     lambda s: s.fallbacks[0].resources),
    ("condition", lambda n: parse_status(status(n, queued(n), WAITING)), lambda s: s.conditions[1]),
    ("condition, keys in another order", lambda n: parse_status(status(n, dict(reversed(WAITING.items()))
                                                                       if n % 2 else WAITING)),
     lambda s: s.conditions[0]),
]


@pytest.mark.parametrize(("what", "parse", "part"), SHARED_PARTS, ids=[case[0] for case in SHARED_PARTS])
def test_equal_content_parses_into_one_instance(what: str, parse: Callable[[int], Any], part: Part) -> None:
    """From the second time content comes, every parse of it gives the same instance (the first is made on its
    own: content seen once is remembered by its hash alone); the parsed objects themselves are their own."""
    parsed = [parse(n) for n in range(4)]
    parts = [part(p) for p in parsed]
    assert parts[1] is parts[2] is parts[3]
    assert all(p == parts[0] for p in parts)
    assert len({id(p) for p in parsed}) == len(parsed)


def test_the_spec_and_a_fallback_share_resources_alike() -> None:
    specs = [parse_spec(spec(n, resources=RESOURCES, fallbacks=[{"resources": RESOURCES}])) for n in range(3)]
    assert specs[2].resources is specs[1].resources is specs[2].fallbacks[0].resources
    assert specs[2].config(1).resources is specs[2].resources


DIFFERENT_PARTS: list[tuple[str, Callable[[int], Any], Part]] = [
    ("resources", lambda n: parse_spec(spec(0, resources={"requests": {"cpu": str(n + 1)}})), lambda s: s.resources),
    ("a quantity's type", lambda n: parse_spec(spec(0, resources={"requests": {"cpu": [1, "1"][n % 2]}})),
     lambda s: s.resources),
    ("toleration", lambda n: parse_spec(spec(0, tolerations=[{**TOLERATION, "value": f"pool-{n}"}])),
     lambda s: s.tolerations[0]),
    ("condition's time", lambda n: parse_status(status(0, queued(n))), lambda s: s.conditions[0]),
    ("condition's message", lambda n: parse_status(status(0, {**WAITING, "message": f"{n} CPU is requested"})),
     lambda s: s.conditions[0]),
    ("condition's generation", lambda n: parse_status(status(0, {**WAITING, "observedGeneration": n + 1})),
     lambda s: s.conditions[0]),
]


@pytest.mark.parametrize(("what", "parse", "part"), DIFFERENT_PARTS, ids=[case[0] for case in DIFFERENT_PARTS])
def test_different_content_parses_into_different_instances(what: str, parse: Callable[[int], Any],
                                                           part: Part) -> None:
    parts = [part(parse(n)) for n in (0, 1, 0, 1, 0, 1)]  # each content three times: the last two are shared
    assert parts[2] is parts[4] and parts[3] is parts[5]
    assert parts[4] is not parts[5]


class Pool(StrEnum):
    BURST = "burst"


KEYS_APART: list[tuple[object, object]] = [
    ({"a": 1}, {"a": 1.0}),
    ({"a": 1}, {"a": True}),
    ({"a": 0}, {"a": False}),
    ({"a": 1}, {"a": "1"}),
    ({"a": None}, {"a": "None"}),
    ({"a": None}, {}),
    ({"a": [1, 2]}, {"a": [2, 1]}),
    ({"a": ["x", "y"]}, {"a": {"x": "y"}}),
    ({"a": {"b": "c"}}, {"a": {"b": "c", "d": "e"}}),
    ({"a": "b", "c": "d"}, {"a": "c", "b": "d"}),
    ({"a": []}, {"a": {}}),
    ({"a": [[1], 2]}, {"a": [[1, 2]]}),
]


@pytest.mark.parametrize(("one", "other"), KEYS_APART)
def test_content_keys_tell_json_values_apart(one: dict[str, Any], other: dict[str, Any]) -> None:
    """Python's ``==`` takes ``1``, ``1.0`` and ``True`` for one value: the key does not."""
    assert frozen._flat(one, frozen.SHARED_MOST_SIZE) != frozen._flat(other, frozen.SHARED_MOST_SIZE)


def test_content_keys_do_not_depend_on_the_order_of_keys() -> None:
    assert frozen._flat({"a": 1, "b": [{"c": "d", "e": 2.5}]}, 100) == frozen._flat({"b": [{"e": 2.5, "c": "d"}],
                                                                                     "a": 1}, 100)


NOT_PLAIN_JSON: list[object] = [
    {"a": ("tuple",)},
    {"a": datetime(2026, 1, 1, tzinfo=UTC)},
    {"a": Pool.BURST},
    {1: "int key"},
    {"a": {2: "int key, nested"}},
    {"a": [object()]},
    {"a": "x" * frozen.SHARED_MOST_SIZE},
    {"a": ["x" * 100] * (frozen.SHARED_MOST_SIZE // 100 + 1)},
]


@pytest.mark.parametrize("raw", NOT_PLAIN_JSON, ids=range(len(NOT_PLAIN_JSON)))
def test_only_small_plain_json_content_has_a_key(raw: dict[Any, Any]) -> None:
    with pytest.raises(frozen._NotJSON):
        frozen._flat(raw, frozen.SHARED_MOST_SIZE)


NOT_SHARED: list[tuple[str, Callable[[], Any], Part]] = [
    ("larger than SHARED_MOST_SIZE", lambda: parse_status(status(0, {**WAITING, "message": "x" * 5000})),
     lambda s: s.conditions[0]),
    ("keys that do not sort", lambda: ScavengerJobStatus.model_validate(status(0, {**WAITING, 7: "x"}),
                                                                         context=frozen.SHARING),
     lambda s: s.conditions[0]),
    ("a datetime", lambda: parse_status(status(0, {**WAITING, "lastTransitionTime": datetime(2026, 1, 1, tzinfo=UTC)})),
     lambda s: s.conditions[0]),
    ("parse_status(share=False)", lambda: parse_status(status(0, WAITING), share=False), lambda s: s.conditions[0]),
    ("parse_spec(share=False)", lambda: parse_spec(spec(0, resources=RESOURCES), share=False),
     lambda s: s.resources),
    ("model_validate without SHARING", lambda: ScavengerJobStatus.model_validate(status(0, WAITING)),
     lambda s: s.conditions[0]),
    ("a model given, not a dict", lambda: ScavengerJobSpec.model_validate(
        {"image": "busybox", "resources": parse_spec(spec(0, resources=RESOURCES), share=False).resources},
        context=frozen.SHARING), lambda s: s.resources),
]


@pytest.mark.parametrize(("what", "parse", "part"), NOT_SHARED, ids=[case[0] for case in NOT_SHARED])
def test_some_content_is_not_shared(what: str, parse: Callable[[], Any], part: Part,
                                    table: OrderedDict[Any, Any]) -> None:
    parts = [part(parse()) for _ in range(3)]
    assert parts[0] == parts[1] == parts[2]
    assert parts[1] is not parts[2]
    assert not table


def test_the_table_is_bounded_and_parsing_goes_on_when_it_is_full(monkeypatch: pytest.MonkeyPatch,
                                                                 table: OrderedDict[Any, Any]) -> None:
    """Past `SHARED_MODELS` contents, the one used longest ago is dropped (and the contents seen once are
    forgotten): content that keeps coming back stays shared while a flood of other content passes through."""
    monkeypatch.setattr(frozen, "SHARED_MODELS", 3)
    kept = [parse_status(status(0, WAITING)).conditions[0] for _ in range(2)][1]
    first = None
    for second in range(60):
        for _ in range(2):  # each content twice: it is kept, and the table is full
            parsed = parse_status(status(second, queued(second), WAITING))
            assert parsed.conditions[0].last_transition_time == datetime(2026, 11, 23, 12, 0, second, tzinfo=UTC)
            assert parsed.conditions[1] is kept
        first = first or parsed.conditions[0]
        assert len(table) <= 3 and len(frozen._once) <= 3
    assert len(table) == 3
    again = [parse_status(status(0, queued(0))).conditions[0] for _ in range(3)]
    assert again[0] == first == parse_status(status(0, queued(0)), share=False).conditions[0]
    assert again[0] is not first and again[1] is again[2]  # dropped long ago: a new instance, shared again


def test_a_copy_with_changes_leaves_the_shared_instance_as_it_was() -> None:
    condition = [parse_status(status(n, WAITING)).conditions[0] for n in range(2)][1]
    changed = condition.model_copy(update={"message": "admitted", "status": "True"})
    assert (changed.message, changed.status) == ("admitted", "True")
    assert (condition.message, condition.status) == (WAITING["message"], "False")
    again = parse_status(status(2, WAITING)).conditions[0]
    assert again is condition and again.message == WAITING["message"]
    resources = [parse_spec(spec(n, resources=RESOURCES)).resources for n in range(2)][1]
    resources.model_copy(update={"requests": {"cpu": "9"}})
    assert parse_spec(spec(2, resources=RESOURCES)).resources is resources
    assert resources.requests == resources.limits == {"cpu": "1", "memory": "1Gi"}


def test_invalid_content_is_never_kept() -> None:
    """A content that raised raises again, and a valid part kept does not hide another part that is invalid."""
    below = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    for _ in range(3):
        with pytest.raises(InvalidSpec, match=r"^spec.resources.limits\[cpu\]: must be at least the request"):
            parse_spec(spec(0, resources=below))
        with pytest.raises(InvalidSpec, match=r"^spec.fallbacks\[0\].resources.limits\[cpu\]"):
            parse_spec(spec(0, resources=RESOURCES, fallbacks=[{"resources": below}]))
        with pytest.raises(InvalidSpec, match=r"^spec.tolerations\[1\].value: must be empty when operator is Exists"):
            parse_spec(spec(0, tolerations=[TOLERATION, {"key": "k", "operator": "Exists", "value": "v"}]))
    tolerant = parse_status(status(0, WAITING, {**WAITING, "status": "Maybe"}, queued()))
    assert [c.type for c in tolerant.conditions] == ["Admitted", "Queued"]


STATUSES: list[dict[str, Any]] = [
    {},
    status(0, queued(), WAITING),
    status(1, WAITING, {**WAITING, "type": "Reconciled", "status": "Unknown", "reason": None}),
    status(2, {"type": "Running", "status": "True", "lastTransitionTime": "2026-01-02T05:04:05.75+02:00",
               "someFutureField": {"nested": [1, 2.5, True]}}),
    status(3, {"type": "Ready"}, {"type": "Running", "status": "False"}, WAITING),
]


@pytest.mark.parametrize("raw", STATUSES, ids=range(len(STATUSES)))
def test_a_status_parses_as_it_does_without_the_table(raw: dict[str, Any]) -> None:
    alone = parse_status(raw, share=False)
    for _ in range(3):
        parsed = parse_status(raw)
        assert parsed == alone and parsed.to_patch() == alone.to_patch()
        assert [type(c) for c in parsed.conditions] == [type(c) for c in alone.conditions]
        assert hash(parsed.conditions) == hash(alone.conditions)


SEEDS = st.integers(0, 2**64 - 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SEEDS)
def test_a_spec_parses_as_it_does_without_the_table(seed: int) -> None:
    """Generated specs (``tests/specgen.py``), valid and invalid: the same model, field by field and type by type,
    or the same error, with the table (when their content is new, and when it is kept) and without."""
    raw = valid_spec(RandomPicker(seed))
    alone = parse_spec(raw, share=False)
    for _ in range(3):
        parsed = parse_spec(raw)
        assert parsed == alone
        assert parsed.model_dump(by_alias=True) == alone.model_dump(by_alias=True)
        for name in ScavengerJobSpec.model_fields:
            assert type(getattr(parsed, name)) is type(getattr(alone, name)), name
    broken, field, breaker = invalid_spec(RandomPicker(seed))
    with pytest.raises(InvalidSpec) as unshared:
        parse_spec(broken, share=False)
    for _ in range(2):
        with pytest.raises(InvalidSpec) as error:
            parse_spec(broken)
        assert str(error.value) == str(unshared.value), breaker
        assert error.value.field == field, breaker
