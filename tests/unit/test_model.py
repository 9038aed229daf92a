"""Defaulting, validation and (de)serialisation of the ScavengerJob API models."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gang.hostfile import MPIImplementation
from sj_operator.api import (
    InvalidSpec,
    Phase,
    ScavengerJobSpec,
    ScavengerJobStatus,
    SpecLimits,
    checkpoint_interval_seconds,
    format_duration,
    format_timestamp,
    parse_duration,
    parse_spec,
    parse_status,
)

BASE = {"image": "busybox:1.36"}


def spec_with(**fields: Any) -> dict[str, Any]:
    """A raw spec: the minimal valid one with ``fields`` set (camelCase keys)."""
    return {**BASE, **fields}


def emptydir(name: str, path: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "mountPath": path, "emptyDir": {}, **extra}


# ----------------------------------------------------------------------------- contract


SPEC_FIELDS = {
    "image", "command", "args", "env", "workingDir", "resources", "parallelism", "volumes",
    "checkpointVolume", "duration", "priorityLevels", "runAsUser", "runAsGroup",
    "terminationGracePeriodSeconds", "nodeSelector", "tolerations", "serviceAccountName",
    "imagePullSecrets", "podLabels", "podAnnotations", "maxInterruptions", "suspend", "mpi", "fallbacks",
    "fallbackAfter",
}  # fmt: skip
STATUS_FIELDS = {
    "phase", "interruptedCount", "runningTimestamps", "interruptedTimestamps", "finishedTimestamp",
    "priorityStartOverTimestamp", "runningPriority", "jobName", "message", "conditions",
    "attempt", "launchedTimestamp", "startTimeouts", "notBefore", "protected", "priorityClassName",
    "lastInterruptionReason", "configIndex", "wastedRuns",
}  # fmt: skip


def test_spec_aliases_are_the_contract() -> None:
    assert {f.alias for f in ScavengerJobSpec.model_fields.values()} == SPEC_FIELDS


def test_status_aliases_are_the_contract() -> None:
    assert {f.alias for f in ScavengerJobStatus.model_fields.values()} == STATUS_FIELDS


def test_phases() -> None:
    assert [p.value for p in Phase] == [
        "Pending", "Starting", "Running", "Interrupted", "Succeeded", "Failed", "Suspended",
    ]  # fmt: skip


# ----------------------------------------------------------------------------- defaults


def test_defaults() -> None:
    spec = parse_spec(BASE)
    assert spec.image == "busybox:1.36"
    assert spec.parallelism == 1
    assert spec.duration == timedelta(minutes=30)
    assert spec.priority_levels == 3
    assert spec.termination_grace_period_seconds == 30
    assert spec.suspend is False
    assert spec.mpi is None
    assert spec.max_interruptions is None
    assert spec.command is None and spec.args is None
    assert spec.env == () and spec.volumes == () and spec.tolerations == ()
    assert spec.resources.requests == {} and spec.resources.limits == {}
    assert spec.checkpoint_dir is None
    assert not spec.is_gang


def test_mpi_defaults() -> None:
    spec = parse_spec(spec_with(parallelism=2, command=["mpirun"], mpi={}))
    assert spec.mpi is not None
    assert spec.mpi.slots_per_worker == 1
    assert spec.mpi.implementation is MPIImplementation.OPENMPI


def test_null_fields_count_as_absent() -> None:
    spec = parse_spec(spec_with(parallelism=None, env=None, mpi=None))
    assert spec.parallelism == 1 and spec.env == ()


def test_accepts_any_mapping() -> None:
    class View(dict[str, Any]):
        pass

    assert parse_spec(View(BASE)).image == "busybox:1.36"


@pytest.mark.parametrize(
    ("resources", "requests", "limits"),
    [
        ({}, {}, {}),
        ({"requests": {"cpu": "1", "memory": "1Gi"}}, {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}),
        ({"limits": {"cpu": 2}}, {"cpu": "2"}, {"cpu": "2"}),
        (
            {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "2Gi"}},
            {"cpu": "500m", "memory": "2Gi"},
            {"cpu": "1", "memory": "2Gi"},
        ),
        (
            {"requests": {"nvidia.com/gpu": 1, "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
            {"nvidia.com/gpu": "1", "memory": "1Gi"},
            {"memory": "1Gi", "nvidia.com/gpu": "1"},
        ),
    ],
)
def test_missing_resource_side_is_copied(
    resources: dict[str, Any], requests: dict[str, str], limits: dict[str, str]
) -> None:
    spec = parse_spec(spec_with(resources=resources))
    assert spec.effective_resources.requests == requests
    assert spec.effective_resources.limits == limits


def test_parsed_quantities() -> None:
    spec = parse_spec(spec_with(resources={"requests": {"cpu": "250m", "memory": "1Ki"}}))
    assert spec.resources.parsed_requests() == {"cpu": Decimal("0.25"), "memory": Decimal(1024)}
    assert spec.resources.parsed_limits() == {"cpu": Decimal("0.25"), "memory": Decimal(1024)}


FULL_SPEC: dict[str, Any] = {
    "image": "registry.example/counter:1.2",
    "command": ["python", "-m", "counter"],
    "args": ["--steps", "1000"],
    "env": [
        {"name": "MODE", "value": "fast"},
        {"name": "EMPTY"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ],
    "workingDir": "/work",
    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi"}},
    "parallelism": 4,
    "volumes": [
        {"name": "ckpt", "mountPath": "/ckpt", "subPath": "run/a", "persistentVolumeClaim": {"claimName": "ckpt"}},
        {"name": "config", "mountPath": "/etc/app", "readOnly": True, "configMap": {"name": "app-config"}},
        {"name": "creds", "mountPath": "/creds", "secret": {"secretName": "app-creds"}},
        {"name": "scratch", "mountPath": "/scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    ],
    "checkpointVolume": "ckpt",
    "duration": "1h30m",
    "priorityLevels": 5,
    "runAsUser": 1000,
    "runAsGroup": 0,
    "terminationGracePeriodSeconds": 0,
    "nodeSelector": {"kubernetes.io/arch": "amd64", "pool": ""},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
        {"operator": "Exists"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ],
    "serviceAccountName": "runner",
    "imagePullSecrets": [{"name": "regcred"}],
    "podLabels": {"team": "ml", "example.com/tier": "batch"},
    "podAnnotations": {"sim.scavenger.dev/run-for": "20s", "note": "any value, even with spaces"},
    "maxInterruptions": 0,
    "suspend": True,
    "mpi": {"slotsPerWorker": 2, "implementation": "MPICH"},
}


def test_every_field() -> None:
    spec = parse_spec(FULL_SPEC)
    assert spec.command == ("python", "-m", "counter")
    value_from = spec.env[2].value_from
    assert value_from is not None and value_from.model_dump(by_alias=True, exclude_none=True) == {
        "fieldRef": {"fieldPath": "status.podIP"}}
    assert spec.working_dir == "/work"
    assert spec.parallelism == 4 and spec.is_gang
    assert spec.volumes[3].empty_dir is not None and spec.volumes[3].empty_dir.size_limit == "1Gi"
    assert spec.checkpoint_dir == "/ckpt"
    assert spec.duration == timedelta(hours=1, minutes=30)
    assert spec.priority_levels == 5
    assert (spec.run_as_user, spec.run_as_group) == (1000, 0)
    assert spec.termination_grace_period_seconds == 0
    assert spec.tolerations[2].toleration_seconds == 30
    assert spec.service_account_name == "runner"
    assert spec.image_pull_secrets[0].name == "regcred"
    assert spec.pod_annotations["sim.scavenger.dev/run-for"] == "20s"
    assert spec.max_interruptions == 0
    assert spec.suspend is True
    assert spec.mpi is not None and spec.mpi.implementation is MPIImplementation.MPICH


def test_dump_round_trips() -> None:
    spec = parse_spec(FULL_SPEC)
    dumped = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["duration"] == "1h30m"
    assert parse_spec(dumped) == spec


def test_spec_is_immutable() -> None:
    spec = parse_spec(BASE)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type is private
        spec.image = "other"  # type: ignore[misc]


# ----------------------------------------------------------------------------- validation

TWO_VOLUMES = [emptydir("a", "/a"), emptydir("b", "/b")]

INVALID_SPECS: list[tuple[Any, str, str]] = [
    # image
    ({"parallelism": 2}, "spec.image", "is required"),
    ({"image": ""}, "spec.image", "must not be empty"),
    ({"image": "busy box"}, "spec.image", "must not contain whitespace"),
    ({"image": 3}, "spec.image", "must be a string"),
    # scalars
    (spec_with(parallelism=0), "spec.parallelism", "must be at least 1"),
    (spec_with(parallelism=1001), "spec.parallelism", "must be at most 1000"),
    (spec_with(parallelism="3"), "spec.parallelism", "must be an integer"),
    (spec_with(parallelism=True), "spec.parallelism", "must be an integer"),
    (spec_with(parallelism=2.0), "spec.parallelism", "must be an integer"),
    (spec_with(duration="0s"), "spec.duration", "must be at least 10s"),
    (spec_with(duration="1s"), "spec.duration", "must be at least 10s"),
    (spec_with(duration="-5m"), "spec.duration", "must be at least 10s"),
    (spec_with(duration="30"), "spec.duration", "must be a duration such as 90s, 30m, 2h or 1h30m"),
    (spec_with(duration="1d"), "spec.duration", "must be a duration such as 90s, 30m, 2h or 1h30m"),
    (spec_with(duration=1800), "spec.duration", "must be a duration such as 90s, 30m, 2h or 1h30m"),
    (spec_with(priorityLevels=0), "spec.priorityLevels", "must be at least 1"),
    (spec_with(priorityLevels=101), "spec.priorityLevels", "must be at most 100"),
    (spec_with(terminationGracePeriodSeconds=-1), "spec.terminationGracePeriodSeconds", "must be at least 0"),
    (spec_with(maxInterruptions=-1), "spec.maxInterruptions", "must be at least 0"),
    (spec_with(runAsUser=-1), "spec.runAsUser", "must be at least 0"),
    (spec_with(runAsGroup=-2), "spec.runAsGroup", "must be at least 0"),
    (spec_with(suspend="yes"), "spec.suspend", "must be a boolean"),
    (spec_with(command="echo hi"), "spec.command", "must be a list"),
    (spec_with(args=["ok", 1]), "spec.args[1]", "must be a string"),
    (spec_with(workingDir=""), "spec.workingDir", "must not be empty"),
    (spec_with(serviceAccountName="Bad_Name"), "spec.serviceAccountName", "must be a DNS-1123 subdomain"),
    (spec_with(imagePullSecrets=[{}]), "spec.imagePullSecrets[0].name", "is required"),
    # unknown fields
    (spec_with(replicas=3), "spec.replicas", "unknown field"),
    (spec_with(resources={"request": {"cpu": "1"}}), "spec.resources.request", "unknown field"),
    (spec_with(volumes=[emptydir("a", "/a", hostPath={"path": "/"})]), "spec.volumes[0].hostPath", "unknown field"),
    # volumes
    (
        spec_with(volumes=[emptydir("a", "/a"), emptydir("b", "data")]),
        "spec.volumes[1].mountPath",
        "must be an absolute path",
    ),
    (spec_with(volumes=[emptydir("Data", "/a")]), "spec.volumes[0].name", "must be a DNS-1123 label"),
    (spec_with(volumes=[emptydir("a" * 64, "/a")]), "spec.volumes[0].name", "must be at most 63 characters"),
    (spec_with(volumes=[*TWO_VOLUMES, emptydir("a", "/c")]), "spec.volumes[2].name", "duplicates spec.volumes[0].name"),
    (
        spec_with(volumes=[*TWO_VOLUMES, emptydir("c", "/b")]),
        "spec.volumes[2].mountPath",
        "duplicates spec.volumes[1].mountPath",
    ),
    (spec_with(volumes=[{"name": "a", "mountPath": "/a"}]), "spec.volumes[0]", "exactly one of"),
    (
        spec_with(volumes=[{"name": "a", "mountPath": "/a", "emptyDir": {}, "secret": {"secretName": "s"}}]),
        "spec.volumes[0]",
        "(found: secret, emptyDir)",
    ),
    (
        spec_with(volumes=[{"name": "a", "mountPath": "/a", "persistentVolumeClaim": {}}]),
        "spec.volumes[0].persistentVolumeClaim.claimName",
        "is required",
    ),
    (
        spec_with(volumes=[{"name": "a", "mountPath": "/a", "configMap": {"name": "Not.Valid"}}]),
        "spec.volumes[0].configMap.name",
        "must be a DNS-1123 subdomain",
    ),
    (spec_with(volumes=[emptydir("a", "/a", subPath="/abs")]), "spec.volumes[0].subPath", "must be a relative path"),
    (spec_with(volumes=[emptydir("a", "/a", subPath="x/../..")]), "spec.volumes[0].subPath", "must not contain '..'"),
    (spec_with(volumes=[emptydir("a", "/a", readOnly="yes")]), "spec.volumes[0].readOnly", "must be a boolean"),
    (
        spec_with(volumes=[{"name": "a", "mountPath": "/a", "emptyDir": {"medium": "Disk"}}]),
        "spec.volumes[0].emptyDir.medium",
        "must be '' or 'Memory'",
    ),
    (spec_with(volumes="a"), "spec.volumes", "must be a list"),
    (spec_with(volumes=["a"]), "spec.volumes[0]", "must be an object"),
    # checkpointVolume
    (spec_with(volumes=TWO_VOLUMES, checkpointVolume="c"), "spec.checkpointVolume", "'c' is not the name of one"),
    (spec_with(checkpointVolume="c"), "spec.checkpointVolume", "is not the name of one of spec.volumes"),
    (
        spec_with(volumes=[{"name": "c", "mountPath": "/c", "configMap": {"name": "cm"}}], checkpointVolume="c"),
        "spec.checkpointVolume",
        "must name a writable volume",
    ),
    (
        spec_with(volumes=[emptydir("c", "/c", readOnly=True)], checkpointVolume="c"),
        "spec.checkpointVolume",
        "must name a writable volume",
    ),
    # resources
    (spec_with(resources={"requests": {"cpu": "1 core"}}), "spec.resources.requests[cpu]", "is not a valid quantity"),
    (spec_with(resources={"limits": {"memory": "-1Gi"}}), "spec.resources.limits[memory]", "must not be negative"),
    (spec_with(resources={"requests": {"cpu": 0.5}}), "spec.resources.requests[cpu]", "must be a quantity"),
    (spec_with(resources={"requests": {"cpu": True}}), "spec.resources.requests[cpu]", "must be a quantity"),
    (
        spec_with(resources={"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "1500m"}}),
        "spec.resources.limits[cpu]",
        "must be at least the request (2)",
    ),
    (
        spec_with(resources={"requests": {"bad name": "1"}}),
        "spec.resources.requests[bad name]",
        "invalid resource name",
    ),
    # mpi
    (spec_with(mpi={}), "spec.mpi", "requires parallelism of at least 2"),
    (spec_with(parallelism=2, mpi={"slotsPerWorker": 0}), "spec.mpi.slotsPerWorker", "must be at least 1"),
    (
        spec_with(parallelism=2, mpi={"implementation": "LAM"}),
        "spec.mpi.implementation",
        "must be 'OpenMPI' or 'MPICH'",
    ),
    (spec_with(parallelism=2, mpi={"slots": 2}), "spec.mpi.slots", "unknown field"),
    # labels and annotations
    (spec_with(podLabels={"scavenger.dev/run": "x"}), "spec.podLabels[scavenger.dev/run]", "reserved for the operator"),
    (spec_with(podLabels={"team": "a b"}), "spec.podLabels[team]", "invalid label value"),
    (spec_with(podLabels={"team": "x" * 64}), "spec.podLabels[team]", "must be at most 63 characters"),
    (spec_with(podLabels={"-team": "a"}), "spec.podLabels[-team]", "invalid key"),
    (spec_with(podLabels={"team": 1}), "spec.podLabels[team]", "must be a string"),
    (spec_with(podAnnotations={"Bad Key/x": "v"}), "spec.podAnnotations[Bad Key/x]", "prefix must be a DNS subdomain"),
    (spec_with(nodeSelector={"zone": 1}), "spec.nodeSelector[zone]", "must be a string"),
    (spec_with(nodeSelector={"a/b/c": "x"}), "spec.nodeSelector[a/b/c]", "invalid key"),
    # tolerations
    (
        spec_with(tolerations=[{"key": "k", "operator": "In"}]),
        "spec.tolerations[0].operator",
        "must be 'Exists' or 'Equal'",
    ),
    (spec_with(tolerations=[{"key": "k", "effect": "Never"}]), "spec.tolerations[0].effect", "must be 'NoSchedule'"),
    (spec_with(tolerations=[{"value": "v"}]), "spec.tolerations[0].operator", "must be Exists when key is empty"),
    (
        spec_with(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        "spec.tolerations[0].value",
        "must be empty when operator is Exists",
    ),
    (
        spec_with(tolerations=[{"key": "k", "tolerationSeconds": 5}]),
        "spec.tolerations[0].effect",
        "must be NoExecute when tolerationSeconds is set",
    ),
    (spec_with(tolerations=[{"key": "bad key", "operator": "Exists"}]), "spec.tolerations[0].key", "invalid key"),
    (spec_with(tolerations=[{"key": "k", "wait": 1}]), "spec.tolerations[0].wait", "unknown field"),
    # env
    (
        spec_with(env=[{"name": "A"}, {"name": "SJ_NAME", "value": "x"}]),
        "spec.env[1].name",
        "SJ_NAME is set by the operator",
    ),
    (spec_with(env=[{"value": "x"}]), "spec.env[0].name", "is required"),
    (spec_with(env=[{"name": "A=B"}]), "spec.env[0].name", "must not contain '='"),
    (
        spec_with(env=[{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        "spec.env[0].valueFrom",
        "cannot be set together with value",
    ),
    (spec_with(env=[{"name": "A", "valueFrom": {}}]), "spec.env[0].valueFrom", "must set exactly one of fieldRef"),
    (
        spec_with(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"},
                                                   "secretKeyRef": {"name": "s", "key": "k"}}}]),
        "spec.env[0].valueFrom",
        "(found: fieldRef, secretKeyRef)",
    ),
    (spec_with(env=[{"name": "A", "valueFrom": {"fieldRef": {}}}]), "spec.env[0].valueFrom.fieldRef.fieldPath",
     "is required"),
    (spec_with(env=[{"name": "A", "valueFrom": {"a": {"a": {"a": {}}}}}]), "spec.env[0].valueFrom.a", "unknown field"),
    (spec_with(env=[{"name": "A", "value": 1}]), "spec.env[0].value", "must be a string"),
    # not an object at all
    ("image: x", "spec", "must be an object"),
]


@pytest.mark.parametrize(
    ("raw", "field", "message"), INVALID_SPECS, ids=[f"{i}-{case[1]}" for i, case in enumerate(INVALID_SPECS)]
)
def test_invalid_spec_names_the_field(raw: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        parse_spec(raw)
    assert caught.value.field == field
    assert message in caught.value.message
    assert str(caught.value) == f"{field}: {caught.value.message}"


def test_invalid_spec_str() -> None:
    error = InvalidSpec("spec.volumes[1].mountPath", "must be an absolute path")
    assert str(error) == "spec.volumes[1].mountPath: must be an absolute path"
    assert isinstance(error, ValueError)


def test_first_offending_field_wins() -> None:
    with pytest.raises(InvalidSpec) as caught:
        parse_spec({"image": "x", "parallelism": 0, "priorityLevels": 0})
    assert caught.value.field == "spec.parallelism"


def test_invalid_spec_is_not_chained_to_pydantic() -> None:
    with pytest.raises(InvalidSpec) as caught:
        parse_spec({})
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


# ----------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("2h", timedelta(hours=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("1.5h", timedelta(minutes=90)),
        ("1h0m5s", timedelta(hours=1, seconds=5)),
        (".5s", timedelta(milliseconds=500)),
        ("2.s", timedelta(seconds=2)),
        ("1500us", timedelta(microseconds=1500)),
        ("3\u00b5s", timedelta(microseconds=3)),
        ("3\u03bcs", timedelta(microseconds=3)),
        ("1999ns", timedelta(microseconds=1)),
        ("1m1m", timedelta(minutes=2)),
        ("0", timedelta(0)),
        ("+5s", timedelta(seconds=5)),
        ("-1m30s", -timedelta(seconds=90)),
        ("100h", timedelta(hours=100)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["", "30", "m", "1d", "1 h", "1h 30m", "1H", "-", "1.2.3s", "h1", "0x10s", "1e3s", "\uff11s"]
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_parse_duration_rejects_non_strings() -> None:
    with pytest.raises(ValueError):
        parse_duration(30)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(minutes=30), "30m"),
        (timedelta(hours=2), "2h"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(seconds=1, milliseconds=500), "1s500ms"),
        (timedelta(hours=1, seconds=5), "1h5s"),
        (timedelta(days=2), "48h"),
        (timedelta(microseconds=1), "1us"),
        (-timedelta(seconds=90), "-1m30s"),
    ],
)
def test_format_duration(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@given(st.timedeltas(min_value=timedelta(days=-10_000), max_value=timedelta(days=10_000)))
def test_duration_round_trip(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


@pytest.mark.parametrize(
    ("duration", "levels", "seconds"),
    [
        ("30m", 3, 600),
        ("30m", 1, 1799),
        ("1h", 4, 900),
        ("10m", 7, 85),
        ("2s", 1, 1),
        ("2s", 100, 1),
        ("1500ms", 1, 1),
        ("90s", 100, 1),
        ("1h30m", 2, 2700),
    ],
)
def test_checkpoint_interval(duration: str, levels: int, seconds: int) -> None:
    # The model's own floor (over 1s), below the operator's configurable minimum.
    lowest = SpecLimits(min_duration=timedelta(seconds=1, microseconds=1))
    spec = parse_spec(spec_with(duration=duration, priorityLevels=levels), lowest)
    interval = checkpoint_interval_seconds(spec)
    assert interval == seconds
    assert 1 <= interval < spec.duration.total_seconds()


# ----------------------------------------------------------------------------- status


def test_missing_status_is_default() -> None:
    for raw in (None, {}):
        status = parse_status(raw)
        assert status == ScavengerJobStatus()
        assert status.phase is None
        assert status.interrupted_count == 0
        assert status.attempt == 0
        assert status.start_timeouts == 0
        assert status.protected is False
        assert status.running_timestamps == ()


RAW_STATUS = {
    "phase": "Running",
    "interruptedCount": 2,
    "runningTimestamps": ["2026-01-02T03:04:05Z", "2026-01-02T05:00:00Z"],
    "interruptedTimestamps": ["2026-01-02T04:00:00Z"],
    "priorityStartOverTimestamp": "2026-01-02T05:00:00Z",
    "runningPriority": 1,
    "jobName": "counter-r3",
    "message": "all 1 pods running",
    "conditions": [
        {
            "type": "Running",
            "status": "True",
            "reason": "AllPodsRunning",
            "message": "all 1 pods running",
            "lastTransitionTime": "2026-01-02T05:00:00Z",
            "observedGeneration": 1,
        }
    ],
    "attempt": 3,
    "launchedTimestamp": "2026-01-02T04:59:50Z",
    "startTimeouts": 1,
    "notBefore": "2026-01-02T04:01:00Z",
    "protected": True,
    "priorityClassName": "scavenger-1",
    "configIndex": 1,
    "wastedRuns": 0,
}


def test_status_round_trip() -> None:
    status = parse_status(RAW_STATUS)
    assert status.phase is Phase.RUNNING
    assert status.running_timestamps[0] == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert status.conditions[0].last_transition_time == datetime(2026, 1, 2, 5, tzinfo=UTC)
    assert status.to_patch() == RAW_STATUS


def test_to_patch_omits_none_and_formats_timestamps() -> None:
    plus_two = timezone(timedelta(hours=2))
    status = ScavengerJobStatus(
        phase=Phase.INTERRUPTED,
        interrupted_count=1,
        interrupted_timestamps=(datetime(2026, 1, 2, 5, 4, 5, 123456, tzinfo=plus_two),),
        not_before=datetime(2026, 1, 2, 3, 5, 0),
    )
    assert status.to_patch() == {
        "phase": "Interrupted",
        "interruptedCount": 1,
        "runningTimestamps": [],
        "interruptedTimestamps": ["2026-01-02T03:04:05Z"],
        "conditions": [],
        "attempt": 0,
        "startTimeouts": 0,
        "notBefore": "2026-01-02T03:05:00Z",
        "protected": False,
        "wastedRuns": 0,
        "configIndex": 0,
    }


def test_to_patch_with_nulls_clears_none_fields() -> None:
    patch = ScavengerJobStatus(phase=Phase.PENDING).to_patch(nulls=True)
    assert patch["phase"] == "Pending"
    for cleared in ("notBefore", "jobName", "runningPriority", "finishedTimestamp", "launchedTimestamp"):
        assert patch[cleared] is None


def test_timestamps_are_utc_whole_seconds() -> None:
    status = parse_status({"finishedTimestamp": "2026-01-02T05:04:05.75+02:00"})
    assert status.finished_timestamp == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5, 999, tzinfo=UTC)) == "2026-01-02T03:04:05Z"


def test_status_is_tolerant() -> None:
    status = parse_status(
        {
            "phase": "Exploded",
            "interruptedCount": "two",
            "runningTimestamps": ["2026-01-02T03:04:05Z", "yesterday"],
            "conditions": [{"type": "Ready"}, {"type": "Running", "status": "False"}],
            "attempt": 4,
            "kopf": {"progress": {}},
            "someFutureField": 1,
        }
    )
    assert status.phase is None
    assert status.interrupted_count == 0
    assert status.running_timestamps == (datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),)
    assert [c.type for c in status.conditions] == ["Running"]
    assert status.attempt == 4


def test_status_not_a_mapping() -> None:
    assert parse_status("garbage") == ScavengerJobStatus()  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- shared records of given fields
def test_models_given_the_same_fields_share_one_record_of_them() -> None:
    """Statuses (and their conditions) and specs parsed from different objects with the same fields share
    pydantic's set of given fields; a copy with changes gets the record of its own fields, and the
    original's record is left as it was."""
    first = parse_status({"phase": "Pending", "interruptedCount": 1, "conditions": [
        {"type": "Admitted", "status": "False", "reason": "Threshold", "message": "a"}]})
    second = parse_status({"phase": "Running", "interruptedCount": 4, "conditions": [
        {"type": "Admitted", "status": "True", "reason": "Launched", "message": "b"}]})
    assert first.model_fields_set == {"phase", "interrupted_count", "conditions"}
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    assert first.conditions[0].__pydantic_fields_set__ is second.conditions[0].__pydantic_fields_set__
    assert first.model_fields_set != first.conditions[0].model_fields_set
    specs = [parse_spec(spec_with(parallelism=n, resources={"requests": {"cpu": "1"}})) for n in (2, 3)]
    assert specs[0].__pydantic_fields_set__ is specs[1].__pydantic_fields_set__
    assert specs[0].resources.__pydantic_fields_set__ is specs[1].resources.__pydantic_fields_set__

    changed = first.model_copy(update={"job_name": "sj-a-r2"})
    assert changed.model_fields_set == {"phase", "interrupted_count", "conditions", "job_name"}
    assert first.model_fields_set == second.model_fields_set == {"phase", "interrupted_count", "conditions"}
    assert changed.__pydantic_fields_set__ is first.model_copy(update={"job_name": "x"}).__pydantic_fields_set__
    assert (changed.phase, changed.job_name, first.job_name) == (Phase.PENDING, "sj-a-r2", None)


def test_only_so_many_records_of_given_fields_are_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `SHARED_FIELD_SETS` distinct sets of given fields, a model keeps a record of its own."""
    from sj_operator.api import frozen
    monkeypatch.setattr(frozen, "_shared", {})
    monkeypatch.setattr(frozen, "SHARED_FIELD_SETS", 1)
    a, b = parse_status({"phase": "Pending"}), parse_status({"phase": "Pending"})
    c, d = parse_status({"message": "x"}), parse_status({"message": "x"})
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert c.__pydantic_fields_set__ is not d.__pydantic_fields_set__
    assert c.model_fields_set == d.model_fields_set == {"message"}
    assert len(frozen._shared) == 1
