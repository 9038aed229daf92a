"""Bounds on every field of the ScavengerJob spec (``sj_operator.api.bounds``; issue 40, point 2).

Each bound is accepted at its value and refused just past it, naming the field, by the one parse that
serves the webhook and the loop; where the API server's schema can say it, the generated CRD says the same
bound. And whatever validation accepts, however far out (the largest duration, quantity, counts), the pure
decision pass runs over without raising: the state machine, victim steering, the admission pass with its
messages, and the builders of the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sj_operator.api import InvalidSpec, Phase, ScavengerJobSpec, ScavengerJobStatus, SpecLimits, parse_spec
from sj_operator.api import bounds as b
from sj_operator.api.crd import build_crd, build_quota_crd
from sj_operator.api.parse import spec_size
from sj_operator.api.quota import ScavengerQuotaSpec
from sj_operator.api.spec import checkpoint_interval_seconds
from sj_operator.builders.job import build_run_job
from sj_operator.decide import ClusterView, decide, in_flight, observe_one, queued
from sj_operator.observed import JobView, NodeInfo, PodView, SJObject
from sj_operator.policy.admission import decide_pass, settled_until
from sj_operator.policy.lifecycle import LifecycleConfig, Run, quiet_until, step
from sj_operator.resources import format_amount, freeze, to_milli
from tests.specgen import RandomPicker, edge_spec, far_spec
from tests.unit.reference_pass import admission_snapshot
from tests.unit.test_crd import SCHEMA, _check, _object

# The model's own ceilings, not the cluster's (the operator's --max-termination-grace is at most the model's).
WIDEST = SpecLimits(max_termination_grace=b.MAX_TERMINATION_GRACE_SECONDS)
BASE: dict[str, Any] = {"image": "busybox:1.36"}


def _items(count: int, item: Callable[[int], Any]) -> list[Any]:
    return [item(i) for i in range(count)]


def _keys(count: int, value: str = "v") -> dict[str, str]:
    return {f"k{i}": value for i in range(count)}


def _volume(i: int) -> dict[str, Any]:
    return {"name": f"v{i}", "mountPath": f"/v{i}", "emptyDir": {}}


def _sized(total: int) -> dict[str, Any]:
    """A spec whose compact JSON is exactly ``total`` bytes (its args padded)."""
    spec: dict[str, Any] = {**BASE, "args": []}
    while spec_size(spec) + b.MAX_ARG_LENGTH + 3 <= total:
        spec["args"].append("x" * b.MAX_ARG_LENGTH)
    spec["args"].append("")
    spec["args"][-1] = "x" * (total - spec_size(spec))
    assert spec_size(spec) == total
    return spec


def _annotations(total: int) -> dict[str, str]:
    """Pod annotations whose keys and values are ``total`` bytes together."""
    values, rest = divmod(total - 2 * 2, b.MAX_POD_ANNOTATIONS_BYTES // 2)
    out = {f"a{i}": "x" * (b.MAX_POD_ANNOTATIONS_BYTES // 2) for i in range(values)}
    out[f"a{values}"] = "x" * rest
    return out


# (name, the field as InvalidSpec names it, a spec at the bound, a spec just past it, whether the CRD's
# structural schema refuses the one past it: False where a CEL rule or only the webhook does)
Case = tuple[str, str, dict[str, Any], dict[str, Any], bool]


def _case(name: str, field: str, at: dict[str, Any], past: dict[str, Any], schema: bool = True) -> Case:
    return name, field, {**BASE, **at}, {**BASE, **past}, schema


MPI: dict[str, Any] = {"parallelism": 2, "command": ["mpirun"]}
CASES: list[Case] = [
    _case("parallelism", "spec.parallelism", {"parallelism": b.MAX_PARALLELISM},
          {"parallelism": b.MAX_PARALLELISM + 1}),
    _case("priorityLevels", "spec.priorityLevels", {"priorityLevels": b.MAX_PRIORITY_LEVELS},
          {"priorityLevels": b.MAX_PRIORITY_LEVELS + 1}),
    _case("terminationGracePeriodSeconds", "spec.terminationGracePeriodSeconds",
          {"terminationGracePeriodSeconds": b.MAX_TERMINATION_GRACE_SECONDS},
          {"terminationGracePeriodSeconds": b.MAX_TERMINATION_GRACE_SECONDS + 1}),
    _case("maxInterruptions", "spec.maxInterruptions", {"maxInterruptions": b.MAX_INTERRUPTIONS},
          {"maxInterruptions": b.MAX_INTERRUPTIONS + 1}),
    _case("runAsUser", "spec.runAsUser", {"runAsUser": b.MAX_ID}, {"runAsUser": b.MAX_ID + 1}),
    _case("runAsGroup", "spec.runAsGroup", {"runAsGroup": b.MAX_ID}, {"runAsGroup": b.MAX_ID + 1}),
    _case("slotsPerWorker", "spec.mpi.slotsPerWorker", {**MPI, "mpi": {"slotsPerWorker": b.MAX_SLOTS_PER_WORKER}},
          {**MPI, "mpi": {"slotsPerWorker": b.MAX_SLOTS_PER_WORKER + 1}}),
    _case("tolerationSeconds", "spec.tolerations[0].tolerationSeconds",
          {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": b.MAX_TOLERATION_SECONDS}]},
          {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": b.MAX_TOLERATION_SECONDS + 1}]}),
    _case("duration", "spec.duration", {"duration": "720h"}, {"duration": "720h0m0.000001s"}, schema=False),
    _case("duration-go-max", "spec.duration", {"duration": "719h59m59.999999s"}, {"duration": "2562047h"},
          schema=False),
    _case("duration-length", "spec.duration", {"duration": "1h" + "0" * (b.MAX_DURATION_LENGTH - 4) + "1s"},
          {"duration": "1h" + "0" * (b.MAX_DURATION_LENGTH - 3) + "1s"}),
    _case("fallbackAfter", "spec.fallbackAfter", {"fallbackAfter": "720h"}, {"fallbackAfter": "721h"}, schema=False),
    _case("quantity", "spec.resources.requests[cpu]", {"resources": {"requests": {"cpu": b.MAX_QUANTITY}}},
          {"resources": {"requests": {"cpu": "1000000000000000001"}}}, schema=False),
    _case("quantity-int", "spec.resources.limits[memory]", {"resources": {"limits": {"memory": 10**18}}},
          {"resources": {"limits": {"memory": 10**18 + 1}}}, schema=False),
    _case("quantity-exponent", "spec.resources.limits[nvidia.com/gpu]",
          {"resources": {"limits": {"nvidia.com/gpu": "1e18"}}},
          {"resources": {"limits": {"nvidia.com/gpu": "1e400"}}}, schema=False),
    _case("quantity-length", "spec.resources.requests[cpu]",
          {"resources": {"requests": {"cpu": "0" * (b.MAX_QUANTITY_LENGTH - 1) + "1"}}},
          {"resources": {"requests": {"cpu": "0" * b.MAX_QUANTITY_LENGTH + "1"}}}),
    _case("sizeLimit", "spec.volumes[0].emptyDir.sizeLimit",
          {"volumes": [{"name": "v", "mountPath": "/v", "emptyDir": {"sizeLimit": "1E"}}]},
          {"volumes": [{"name": "v", "mountPath": "/v", "emptyDir": {"sizeLimit": "2E"}}]}, schema=False),
    _case("resources", "spec.resources.requests", {"resources": {"requests": _keys(b.MAX_RESOURCES, "1")}},
          {"resources": {"requests": _keys(b.MAX_RESOURCES + 1, "1")}}),
    _case("image", "spec.image", {"image": "x" * b.MAX_IMAGE_LENGTH}, {"image": "x" * (b.MAX_IMAGE_LENGTH + 1)}),
    _case("command", "spec.command", {"command": ["x"] * b.MAX_ARGS}, {"command": ["x"] * (b.MAX_ARGS + 1)}),
    _case("command-item", "spec.command[1]", {"command": ["sh", "x" * b.MAX_ARG_LENGTH]},
          {"command": ["sh", "x" * (b.MAX_ARG_LENGTH + 1)]}),
    _case("args", "spec.args", {"args": ["x"] * b.MAX_ARGS}, {"args": ["x"] * (b.MAX_ARGS + 1)}),
    _case("args-item", "spec.args[0]", {"args": ["x" * b.MAX_ARG_LENGTH]}, {"args": ["x" * (b.MAX_ARG_LENGTH + 1)]}),
    _case("workingDir", "spec.workingDir", {"workingDir": "/" * b.MAX_PATH_LENGTH},
          {"workingDir": "/" * (b.MAX_PATH_LENGTH + 1)}),
    _case("mountPath", "spec.volumes[0].mountPath",
          {"volumes": [{"name": "v", "mountPath": "/" * b.MAX_PATH_LENGTH, "emptyDir": {}}]},
          {"volumes": [{"name": "v", "mountPath": "/" * (b.MAX_PATH_LENGTH + 1), "emptyDir": {}}]}),
    _case("subPath", "spec.volumes[0].subPath",
          {"volumes": [{"name": "v", "mountPath": "/v", "subPath": "x" * b.MAX_PATH_LENGTH, "emptyDir": {}}]},
          {"volumes": [{"name": "v", "mountPath": "/v", "subPath": "x" * (b.MAX_PATH_LENGTH + 1), "emptyDir": {}}]}),
    _case("env", "spec.env", {"env": _items(b.MAX_ENV, lambda i: {"name": f"V{i}"})},
          {"env": _items(b.MAX_ENV + 1, lambda i: {"name": f"V{i}"})}),
    _case("env-name", "spec.env[0].name", {"env": [{"name": "V" * b.MAX_ENV_NAME_LENGTH}]},
          {"env": [{"name": "V" * (b.MAX_ENV_NAME_LENGTH + 1)}]}),
    _case("env-value", "spec.env[0].value", {"env": [{"name": "V", "value": "x" * b.MAX_ENV_VALUE_LENGTH}]},
          {"env": [{"name": "V", "value": "x" * (b.MAX_ENV_VALUE_LENGTH + 1)}]}),
    _case("env-valueFrom-key", "spec.env[0].valueFrom.secretKeyRef.key",
          {"env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "s",
                                                                "key": "k" * b.MAX_QUALIFIED_NAME_LENGTH}}}]},
          {"env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "s",
                                                                "key": "k" * (b.MAX_QUALIFIED_NAME_LENGTH + 1)}}}]}),
    _case("volumes", "spec.volumes", {"volumes": _items(b.MAX_VOLUMES, _volume)},
          {"volumes": _items(b.MAX_VOLUMES + 1, _volume)}),
    _case("tolerations", "spec.tolerations", {"tolerations": [{"operator": "Exists"}] * b.MAX_TOLERATIONS},
          {"tolerations": [{"operator": "Exists"}] * (b.MAX_TOLERATIONS + 1)}),
    _case("toleration-value", "spec.tolerations[0].value",
          {"tolerations": [{"key": "k", "value": "v" * b.MAX_LABEL_VALUE_LENGTH}]},
          {"tolerations": [{"key": "k", "value": "v" * (b.MAX_LABEL_VALUE_LENGTH + 1)}]}),
    _case("imagePullSecrets", "spec.imagePullSecrets",
          {"imagePullSecrets": _items(b.MAX_IMAGE_PULL_SECRETS, lambda i: {"name": f"s{i}"})},
          {"imagePullSecrets": _items(b.MAX_IMAGE_PULL_SECRETS + 1, lambda i: {"name": f"s{i}"})}),
    _case("nodeSelector", "spec.nodeSelector", {"nodeSelector": _keys(b.MAX_NODE_SELECTOR)},
          {"nodeSelector": _keys(b.MAX_NODE_SELECTOR + 1)}),
    _case("podLabels", "spec.podLabels", {"podLabels": _keys(b.MAX_POD_LABELS)},
          {"podLabels": _keys(b.MAX_POD_LABELS + 1)}),
    _case("podLabels-value", "spec.podLabels[k]", {"podLabels": {"k": "v" * b.MAX_LABEL_VALUE_LENGTH}},
          {"podLabels": {"k": "v" * (b.MAX_LABEL_VALUE_LENGTH + 1)}}),
    _case("podAnnotations", "spec.podAnnotations", {"podAnnotations": _keys(b.MAX_POD_ANNOTATIONS)},
          {"podAnnotations": _keys(b.MAX_POD_ANNOTATIONS + 1)}),
    _case("podAnnotations-bytes", "spec.podAnnotations",
          {"podAnnotations": _annotations(b.MAX_POD_ANNOTATIONS_BYTES)},
          {"podAnnotations": _annotations(b.MAX_POD_ANNOTATIONS_BYTES + 1)}, schema=False),
    _case("fallbacks", "spec.fallbacks", {"fallbacks": [{"parallelism": 1}] * b.MAX_FALLBACKS},
          {"fallbacks": [{"parallelism": 1}] * (b.MAX_FALLBACKS + 1)}),
    _case("fallback-args-item", "spec.fallbacks[0].args[0]", {"fallbacks": [{"args": ["x" * b.MAX_ARG_LENGTH]}]},
          {"fallbacks": [{"args": ["x" * (b.MAX_ARG_LENGTH + 1)]}]}),
    _case("fallback-nodeSelector", "spec.fallbacks[0].nodeSelector",
          {"fallbacks": [{"nodeSelector": _keys(b.MAX_NODE_SELECTOR)}]},
          {"fallbacks": [{"nodeSelector": _keys(b.MAX_NODE_SELECTOR + 1)}]}),
    ("spec-bytes", "spec", _sized(b.MAX_SPEC_BYTES), _sized(b.MAX_SPEC_BYTES + 1), False),
]


@pytest.mark.parametrize(("field", "at", "past"), [case[1:4] for case in CASES], ids=[case[0] for case in CASES])
def test_accepted_at_the_bound_and_refused_past_it_naming_the_field(field: str, at: dict[str, Any],
                                                                   past: dict[str, Any]) -> None:
    parse_spec(at, WIDEST)
    with pytest.raises(InvalidSpec) as refused:
        parse_spec(past, WIDEST)
    assert refused.value.field == field, refused.value
    assert "at most" in refused.value.message, refused.value


@pytest.mark.parametrize(("at", "past", "schema"), [case[2:] for case in CASES], ids=[case[0] for case in CASES])
def test_the_crd_says_the_same_bound(at: dict[str, Any], past: dict[str, Any], schema: bool) -> None:
    assert _check(SCHEMA, _object(at)) == []
    assert bool(_check(SCHEMA, _object(past))) is schema


def _rules(node: dict[str, Any]) -> list[str]:
    return [rule["rule"] for rule in node.get("x-kubernetes-validations", [])]


def test_the_crd_bounds_what_its_structural_schema_cannot_with_cel_rules() -> None:
    spec = SCHEMA["properties"]["spec"]["properties"]
    assert _rules(spec["duration"]) == ["duration(self) <= duration('720h')"]
    assert _rules(spec["fallbackAfter"]) == ["duration(self) <= duration('720h')"]
    key_rule = f"self.all(k, k.size() <= {b.MAX_QUALIFIED_NAME_LENGTH})"
    for name in ("nodeSelector", "podLabels", "podAnnotations"):
        assert key_rule in _rules(spec[name]), name
    assert key_rule in _rules(spec["resources"]["properties"]["requests"])
    quota = build_quota_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert key_rule in _rules(quota["properties"]["hard"])
    assert quota["properties"]["hard"]["maxProperties"] == b.MAX_RESOURCES
    assert quota["properties"]["hard"]["additionalProperties"]["maxLength"] == b.MAX_QUANTITY_LENGTH
    assert build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"][0][
        "rule"] == f"self.metadata.name.size() <= {b.MAX_NAME_LENGTH}"


def test_every_string_list_and_map_of_the_spec_is_bounded_in_the_crd() -> None:
    """No field of the spec's schema is left without a bound on its size, or a pattern, enum or CEL rule
    that fixes it."""
    unbounded: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        kind = "string" if node.get("x-kubernetes-int-or-string") else node.get("type")
        bounded = {"string": ("maxLength", "enum"), "array": ("maxItems",), "integer": ("maximum",),
                   "object": ("maxProperties", "properties")}.get(kind or "", ("enum",))
        if kind != "boolean" and not any(key in node for key in bounded):
            unbounded.append(path)
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}[*]")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(SCHEMA["properties"]["spec"], "spec")
    assert unbounded == []


def test_the_quota_is_bounded_too() -> None:
    ScavengerQuotaSpec.model_validate({"hard": {**_keys(b.MAX_RESOURCES - 1, "1"), "cpu": b.MAX_QUANTITY}})
    for hard in ({"cpu": "2E"}, {"cpu": "1e400"}, _keys(b.MAX_RESOURCES + 1, "1"), {"x" * 318: "1"}):
        with pytest.raises(ValueError, match="hard"):
            ScavengerQuotaSpec.model_validate({"hard": hard})


@pytest.mark.parametrize(("limits", "error"), [
    ({"max_termination_grace": b.MAX_TERMINATION_GRACE_SECONDS + 1}, "at most 3600"),
    ({"min_duration": b.MAX_DURATION + timedelta(seconds=1)}, "at most 720h"),
])
def test_the_cluster_limits_lie_within_the_model_bounds(limits: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        SpecLimits(**limits)


def test_a_grace_past_the_model_ceiling_is_refused_with_the_cluster_maximum() -> None:
    with pytest.raises(InvalidSpec, match=r"spec.terminationGracePeriodSeconds: must be at most 300 \(the cluster"):
        parse_spec({**BASE, "terminationGracePeriodSeconds": 10**30})


@pytest.mark.parametrize(("resource", "milli", "text"), [
    ("cpu", 10**403, "1.000e+400 CPU"),
    ("memory", 10**403, "1.000e+400"),
    ("nvidia.com/gpu", 10**303, "1.000e+300 nvidia.com/gpu"),
    ("cpu", 10**21, "1000000000000000000 CPU"),
])
def test_amounts_past_a_float_still_print(resource: str, milli: int, text: str) -> None:
    # A ScavengerQuota's hard amounts reach the admission messages with no webhook in front of them.
    assert format_amount(resource, milli) == text


# ----------------------------------------------------------------------------- the pure pass

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CFG = LifecycleConfig()
MINUTE = timedelta(minutes=1)
NODE = NodeInfo("n1", freeze({"cpu": 64_000, "memory": 256 * 2**30 * 1000, "pods": 110_000}), {}, (), False, True)


def _pod(i: int) -> PodView:
    return PodView(namespace="ns", name=f"demo-r1-{i}", uid=f"p{i}", sj="demo", run="demo-r1", node="n1",
                   phase="Running", deleting=False, requests={"cpu": 1000}, disruption=None, disrupted_at=None,
                   terminations=(), all_running=True, index=i, placed=NOW - timedelta(minutes=4))


def _states(spec: ScavengerJobSpec) -> list[tuple[ScavengerJobStatus, Run]]:
    """The SJ waiting, backing off after many interruptions, starting, running for a year, and just
    interrupted (at its maximum of interruptions)."""
    job = JobView("ns", "demo-r1", "juid", "demo", False, False, False, created=NOW - timedelta(minutes=5))
    pods = tuple(_pod(i) for i in range(min(spec.parallelism, 3)))
    disrupted = tuple(replace(p, disruption=("PreemptionByScheduler", "preempted"), deleting=True,
                              disrupted_at=NOW - timedelta(seconds=5)) for p in pods)
    year = NOW - timedelta(days=365)
    most = spec.max_interruptions if spec.max_interruptions is not None else b.MAX_INTERRUPTIONS
    return [
        (ScavengerJobStatus(), Run(job=None)),
        (ScavengerJobStatus(phase=Phase.INTERRUPTED, interrupted_count=most, attempt=3, job_name="demo-r3",
                            interrupted_timestamps=(year,), not_before=NOW + timedelta(days=1)), Run(job=None)),
        (ScavengerJobStatus(phase=Phase.STARTING, attempt=1, job_name="demo-r1", launched_timestamp=job.created),
         Run(job=job, pods=pods)),
        (ScavengerJobStatus(phase=Phase.RUNNING, attempt=1, job_name="demo-r1", launched_timestamp=year,
                            running_timestamps=(year,), priority_start_over_timestamp=year), Run(job=job, pods=pods)),
        (ScavengerJobStatus(phase=Phase.RUNNING, attempt=1, job_name="demo-r1", interrupted_count=most,
                            launched_timestamp=NOW - 5 * MINUTE, running_timestamps=(NOW - 4 * MINUTE,),
                            priority_start_over_timestamp=NOW - 4 * MINUTE), Run(job=job, pods=disrupted)),
    ]


def _raise(_: object, exc: Exception) -> None:
    raise exc


def pure_pass(spec: ScavengerJobSpec, raw: dict[str, Any]) -> None:
    """Everything the decision loop computes from one SJ's spec, without I/O."""
    sj = SJObject("ns", "demo", "uid", 1, "1", NOW - timedelta(days=30), False, raw, {})
    view = ClusterView((sj,), {}, {}, (), (NODE,))
    checkpoint_interval_seconds(spec)
    observed = []
    for status, run in _states(spec):
        step(spec, status, run, NOW, CFG, sj_name="demo")
        quiet_until(spec, status, NOW, run=run, cfg=CFG, sj_name="demo")
        observed.append(observe_one(sj, "1", {}, status, spec, view, ("ns", "demo-r1")))
    decide(observed, NOW, CFG, _raise)
    waiting = _states(spec)[1][0]
    queue = (queued(sj, spec, waiting, NOW), queued(replace(sj, name="fresh"), spec, ScavengerJobStatus(), NOW))
    for later in (NOW, NOW + b.MAX_DURATION + b.MAX_FALLBACK_AFTER):
        decide_pass(admission_snapshot(view, queue, (in_flight(replace(sj, name="other"), spec, 0),)), later)
        settled_until(queue, later)
    for index in range(len(spec.fallbacks) + 1):
        build_run_job(sj_name="demo", namespace="ns", sj_uid="uid", spec=spec.config(index),
                      status_interrupted_count=b.MAX_INTERRUPTIONS, attempt=2, priority_class_name="scavenger-band-0",
                      extra_pod_labels={}, config_index=index)


SEEDS = st.integers(0, 2**64 - 1)


@settings(max_examples=300)
@given(SEEDS)
def test_every_spec_at_the_edges_of_its_bounds_is_accepted_and_decided(seed: int) -> None:
    raw = edge_spec(RandomPicker(seed))
    pure_pass(parse_spec(raw, WIDEST), raw)


@settings(max_examples=300)
@given(SEEDS)
def test_whatever_validation_accepts_the_pure_pass_decides_without_raising(seed: int) -> None:
    """Specs pushed past a bound, as far as the schema's patterns admit (``2562047h``, ``1e400``, 64
    digits): validation refuses them, and if it did not, the pass would have to handle them."""
    raw = far_spec(RandomPicker(seed))
    try:
        spec = parse_spec(raw, WIDEST)
    except InvalidSpec:
        return
    pure_pass(spec, raw)


@pytest.mark.parametrize("raw", [
    {**BASE, "duration": "720h", "priorityLevels": b.MAX_PRIORITY_LEVELS, "parallelism": b.MAX_PARALLELISM,
     "maxInterruptions": b.MAX_INTERRUPTIONS, "fallbackAfter": "720h",
     "fallbacks": [{"resources": {"requests": {"cpu": b.MAX_QUANTITY}}}] * b.MAX_FALLBACKS},
    {**BASE, "resources": {"requests": {"cpu": b.MAX_QUANTITY, "memory": b.MAX_QUANTITY, "x.io/y": "1e-400"}}},
    {**BASE, "resources": {"limits": {"memory": "0." + "0" * 61 + "1"}}},
], ids=["largest-numbers", "largest-quantities", "longest-quantity"])
def test_the_largest_accepted_spec_is_decided(raw: dict[str, Any]) -> None:
    pure_pass(parse_spec(raw, WIDEST), raw)


def test_the_milli_amount_of_the_largest_quantity_is_exact() -> None:
    assert to_milli(b.MAX_QUANTITY) == 10**21
