"""Hostile input is normal input: arbitrary objects of every watched kind through every view maker and
watch cache, and every spec the validation accepts through whole passes of the controller (against the
fake API), with hostile pods and Jobs beside it. Nothing may escape, and a spec the validation accepted
may not even be skipped as a fault.

Seeded and short in ``make test`` (the ``deterministic`` profile, ``SJ_FUZZ_EXAMPLES`` examples each,
200 by default); ``make fuzz`` runs them long and random."""
from __future__ import annotations

import asyncio
import copy
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sj_operator.api import DEFAULT_LIMITS, InvalidSpec, parse_spec, parse_status
from sj_operator.caches import ObjectCache, PodCache
from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.decide import ClusterView
from sj_operator.metrics import Metrics
from sj_operator.names import ANNOTATION_COMPLETION_INDEX, ANNOTATION_CONFIG_INDEX, LABEL_PROTECTED, LABEL_RUN, LABEL_SJ
from sj_operator.observed import (
    SJObject,
    adopted_job,
    job_view,
    node_info,
    pod_view,
    quota_view,
    sj_object,
)
from sj_operator.policy.tenancy import resource_quota_view
from tests.specgen import RandomPicker, valid_spec
from tests.unit.helpers import settled_pass
from tests.unit.test_controller import FakeKube, node

EXAMPLES = int(os.environ.get("SJ_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)

# --- what the API server accepts where it takes a string, a number or a map -----------------------------------
ODD_STRINGS = ("²", "٣", "9" * 5000, "1e400", "-1", "NaN", "∞", "\x00", "0x10", " 1", "1 ", "", "true",
               "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2026-13-45T99:99:99Z", "📦" * 50)
TEXT = st.text(max_size=30) | st.sampled_from(ODD_STRINGS)
NUMBER = st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
QUANTITY = st.sampled_from(("1", "500m", "1e3", "1E18", "9223372036854775807", "1Ei", "0.000000001", "1e-9",
                            "123456789012345678901234567890", "8Ti", "0", "1.5")) | TEXT
STRING_MAP = st.dictionaries(TEXT, TEXT, max_size=4)
TIME = st.sampled_from(("2026-11-22T12:00:00Z", "1970-01-01T00:00:00Z")) | TEXT
JSON = st.recursive(st.none() | st.booleans() | NUMBER | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=12)


def _resources() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={"requests": st.dictionaries(TEXT | st.sampled_from(("cpu", "memory")),
                                                                           QUANTITY, max_size=3),
                                               "limits": st.dictionaries(st.sampled_from(("cpu", "memory")),
                                                                         QUANTITY, max_size=2)})


def _metadata(labels: st.SearchStrategy[dict[str, str]] = STRING_MAP) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"name": TEXT, "namespace": TEXT, "uid": TEXT, "resourceVersion": TEXT},
        optional={"labels": labels, "annotations": STRING_MAP | st.fixed_dictionaries(
            {ANNOTATION_COMPLETION_INDEX: TEXT, ANNOTATION_CONFIG_INDEX: TEXT}), "generation": NUMBER,
            "creationTimestamp": TIME, "deletionTimestamp": TIME,
            "ownerReferences": st.lists(st.fixed_dictionaries({"kind": TEXT, "apiVersion": TEXT, "uid": TEXT,
                                                               "name": TEXT}), max_size=2)})


CONDITION = st.fixed_dictionaries({"type": st.sampled_from(("DisruptionTarget", "PodScheduled", "Ready", "Complete",
                                                            "Failed", "SuccessCriteriaMet")) | TEXT,
                                   "status": st.sampled_from(("True", "False", "Unknown")) | TEXT},
                                  optional={"reason": TEXT, "message": TEXT, "lastTransitionTime": TIME})
CONTAINER_STATUS = st.fixed_dictionaries({"name": TEXT}, optional={"state": st.fixed_dictionaries({}, optional={
    "running": st.just({}), "terminated": st.fixed_dictionaries({"exitCode": NUMBER}, optional={
        "reason": TEXT, "finishedAt": TIME})})})
POD_LABELS = STRING_MAP | st.fixed_dictionaries({LABEL_SJ: TEXT, LABEL_RUN: TEXT},
                                                optional={LABEL_PROTECTED: TEXT, ANNOTATION_COMPLETION_INDEX: TEXT})
POD = st.fixed_dictionaries({
    "metadata": _metadata(POD_LABELS),
    "spec": st.fixed_dictionaries({}, optional={
        "nodeName": TEXT, "overhead": st.dictionaries(TEXT, QUANTITY, max_size=2),
        "containers": st.lists(st.fixed_dictionaries({"name": TEXT}, optional={"resources": _resources()}), max_size=2),
        "initContainers": st.lists(st.fixed_dictionaries({"name": TEXT}, optional={
            "resources": _resources(), "restartPolicy": st.sampled_from(("Always",)) | TEXT}), max_size=2)}),
    "status": st.fixed_dictionaries({}, optional={
        "phase": st.sampled_from(("Pending", "Running", "Succeeded", "Failed")) | TEXT, "startTime": TIME,
        "conditions": st.lists(CONDITION, max_size=3), "containerStatuses": st.lists(CONTAINER_STATUS, max_size=2)}),
})
JOB = st.fixed_dictionaries({
    "metadata": _metadata(STRING_MAP | st.fixed_dictionaries({LABEL_SJ: TEXT})),
    "spec": st.fixed_dictionaries({}, optional={"managedBy": TEXT, "parallelism": NUMBER, "template": JSON}),
    "status": st.fixed_dictionaries({}, optional={"conditions": st.lists(CONDITION, max_size=3), "startTime": TIME}),
})
NODE = st.fixed_dictionaries({
    "metadata": _metadata(),
    "spec": st.fixed_dictionaries({}, optional={"unschedulable": st.booleans(), "taints": st.lists(
        st.fixed_dictionaries({"key": TEXT, "effect": TEXT}, optional={"value": TEXT}), max_size=2)}),
    "status": st.fixed_dictionaries({}, optional={"allocatable": st.dictionaries(TEXT, QUANTITY, max_size=3),
                                                  "conditions": st.lists(CONDITION, max_size=2)}),
})
SJ_STATUS = st.fixed_dictionaries({}, optional={
    "phase": st.sampled_from(("Pending", "Starting", "Running", "Interrupted", "Succeeded", "Failed", "Suspended"))
    | TEXT,
    "interruptedCount": NUMBER, "attempt": NUMBER, "jobName": TEXT, "configIndex": NUMBER, "message": TEXT,
    "runningTimestamps": st.lists(TIME, max_size=3), "interruptedTimestamps": st.lists(TIME, max_size=3),
    "priorityStartOverTimestamp": TIME, "runningPriority": NUMBER, "notBefore": TIME,
    "lastInterruptionReason": TEXT, "conditions": st.lists(CONDITION, max_size=3) | JSON,
})
SJ = st.fixed_dictionaries({"metadata": _metadata(), "spec": st.dictionaries(TEXT, JSON, max_size=4),
                            "status": SJ_STATUS})
QUOTA = st.fixed_dictionaries({"metadata": _metadata(), "spec": st.fixed_dictionaries({}, optional={
    "hard": st.dictionaries(TEXT, QUANTITY, max_size=3), "weight": NUMBER | TEXT})})
RESOURCE_QUOTA = st.fixed_dictionaries({"metadata": _metadata(), "status": st.fixed_dictionaries({}, optional={
    "hard": st.dictionaries(TEXT, QUANTITY, max_size=3), "used": st.dictionaries(TEXT, QUANTITY, max_size=3)})})

VIEWS = ((POD, pod_view), (JOB, job_view), (JOB, adopted_job), (SJ, sj_object), (NODE, node_info),
         (QUOTA, quota_view), (RESOURCE_QUOTA, resource_quota_view))


@FUZZ
@given(st.sampled_from(range(len(VIEWS))).flatmap(lambda i: st.tuples(st.just(i), VIEWS[i][0])))
def test_every_view_maker_is_total_on_what_the_api_server_accepts(drawn: tuple[int, dict[str, Any]]) -> None:
    index, body = drawn
    VIEWS[index][1](body)


@FUZZ
@given(SJ_STATUS)
def test_a_status_of_any_shape_parses(raw: dict[str, Any]) -> None:
    parse_status(raw)


@FUZZ
@given(st.dictionaries(TEXT, JSON, max_size=6))
def test_a_spec_of_any_shape_is_parsed_or_refused_naming_a_field(raw: dict[str, Any]) -> None:
    try:
        parse_spec(raw, DEFAULT_LIMITS)
    except InvalidSpec as exc:
        assert exc.field


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(("ADDED", "MODIFIED", "DELETED", "BOOKMARK")), POD | JSON), max_size=8),
       st.lists(st.tuples(st.sampled_from(("ADDED", "MODIFIED", "DELETED")), JOB | SJ | JSON), max_size=8))
def test_watch_caches_take_any_event_stream(pods: list[tuple[str, Any]], objects: list[tuple[str, Any]]) -> None:
    """Whatever the events hold (shapes the API server would not even send included), a cache neither raises
    nor stops: an object it cannot read is skipped."""
    pod_cache = PodCache()
    caches = (ObjectCache(make=job_view), ObjectCache(make=adopted_job), ObjectCache(make=sj_object, kind="SJ"))
    for kind, obj in pods:
        if isinstance(obj, dict):
            pod_cache.apply(kind, obj)
    for kind, obj in objects:
        for cache in caches:
            if isinstance(obj, dict):
                cache.apply(kind, copy.deepcopy(obj))
    pod_cache.active()
    pod_cache.runs()


# --- whole passes: every spec the validation accepts -------------------------------------------------------------
EDGES: tuple[tuple[str, Any], ...] = (
    ("duration", "1s"), ("duration", "10s"), ("duration", "8760h"), ("duration", "2562047h"),
    ("duration", "106751d"), ("duration", "999999999h"), ("duration", "0.001s"),
    ("priorityLevels", 1), ("priorityLevels", 1000), ("priorityLevels", 2**31 - 1), ("priorityLevels", 2**63 - 1),
    ("parallelism", 1), ("parallelism", 1000), ("parallelism", 100000),
    ("terminationGracePeriodSeconds", 0), ("terminationGracePeriodSeconds", 2**31 - 1),
    ("terminationGracePeriodSeconds", 2**63 - 1),
    ("maxInterruptions", 0), ("maxInterruptions", 2**31 - 1), ("maxInterruptions", 2**63 - 1),
    ("fallbackAfter", "1s"), ("fallbackAfter", "2562047h"), ("fallbackAfter", "999999999h"),
    ("resources", {"requests": {"cpu": "1e18", "memory": "1Ei"}}),
    ("resources", {"requests": {"cpu": "1n", "memory": "1"}}),
    ("resources", {"requests": {"cpu": "123456789012345678901234567890", "memory": "1Gi"}}),
    ("resources", {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1e6"}}),
    ("fallbacks", [{"parallelism": 1, "resources": {"requests": {"cpu": "1e18"}}}]),
    ("suspend", True),
)


def _at_the_edges(seed: int, edges: list[int]) -> dict[str, Any]:
    """A valid spec with some fields at the far ends of what the validation may accept: where the result is
    refused, the spec as it was (the property is about every spec the validation accepts)."""
    spec = valid_spec(RandomPicker(seed))
    for index in edges:
        field, value = EDGES[index]
        candidate = {**spec, field: copy.deepcopy(value)}
        try:
            parse_spec(candidate, DEFAULT_LIMITS)
        except InvalidSpec:
            continue
        spec = candidate
    return spec


def _pod_of(body: dict[str, Any], namespace: str, sj_name: str, run: str) -> dict[str, Any]:
    """A hostile pod that claims to be a member of the SJ's run."""
    meta = dict(body.get("metadata") or {})
    meta.update(namespace=namespace, labels={**(meta.get("labels") or {}), LABEL_SJ: sj_name, LABEL_RUN: run})
    return {**body, "metadata": meta}


@pytest.mark.timeout(900)  # whole passes: about a second per ten examples, more under load
@FUZZ
@given(st.integers(0, 2**64 - 1), st.lists(st.integers(0, len(EDGES) - 1), max_size=4), SJ_STATUS,
       st.lists(POD, max_size=3), st.lists(JOB, max_size=2), st.integers(0, 10**6))
def test_whole_passes_over_every_accepted_spec_raise_nothing_and_skip_nothing(
        seed: int, edges: list[int], status: dict[str, Any], pods: list[dict[str, Any]], jobs: list[dict[str, Any]],
        later: int) -> None:
    spec = _at_the_edges(seed, edges)
    parse_spec(spec, DEFAULT_LIMITS)
    sj = SJObject(namespace="ns", name="work", uid="u-work", generation=1, resource_version="7", created=NOW,
                  deleting=False, spec=spec, status=status)
    pod_views = tuple(pod_view(_pod_of(p, "ns", "work", run)) for p in pods for run in ("work-r1", "work-r2"))
    job_views = {("ns", view.name): view for view in (job_view(_pod_of(j, "ns", "work", "work-r1")) for j in jobs)}
    cluster = ClusterView(sjs=(sj,), jobs=job_views,
                          run_pods={("ns", run): tuple(p for p in pod_views if p.run == run)
                                    for run in ("work-r1", "work-r2")},
                          active_pods=tuple(p for p in pod_views if p.holds_resources),
                          nodes=(node("n1"), node("n2")))
    clock = [NOW]
    metrics = Metrics()
    controller = Controller(FakeKube(), OperatorConfig(), clock=lambda: clock[0], metrics=metrics)  # type: ignore[arg-type]
    for step in (timedelta(0), timedelta(seconds=later), timedelta(days=400)):
        clock[0] = clock[0] + step
        asyncio.run(settled_pass(controller, cluster))
        assert not controller.quarantine.faults, (spec, controller.quarantine.faults)
    skipped = [s for metric in metrics.registry.collect() if metric.name == "scavenger_skipped_objects"
               for s in metric.samples if s.name.endswith("_total") and s.value]
    assert not skipped, skipped
