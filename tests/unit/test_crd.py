"""The generated CRD: no drift from the models, structural, and accepting every valid spec."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from sj_operator.api import ScavengerJobSpec, ScavengerJobStatus, parse_spec, parse_status
from sj_operator.api.crd import CRD_FILE_NAME, CRDS, build_cluster_quota_crd, build_crd, render_crd_yaml
from sj_operator.api.reference import REFERENCE_PATH, render_reference

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "crds" / CRD_FILE_NAME

CRD = build_crd()
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
SPEC_SCHEMA = SCHEMA["properties"]["spec"]
STATUS_SCHEMA = SCHEMA["properties"]["status"]


CHART_CRDS = REPO / "deploy/chart/crds"


@pytest.mark.parametrize(("which", "folder"), [(which, folder) for which in CRDS for folder in ("crds", "chart")])
def test_committed_crd_matches_the_models(which: str, folder: str) -> None:
    path = (REPO / "crds" if folder == "crds" else CHART_CRDS) / CRDS[which].file_name
    assert path.read_text() == render_crd_yaml(which), (
        f"{path.relative_to(REPO)} is stale: regenerate it with `make crd`")


def test_every_committed_crd_is_generated() -> None:
    names = {crd.file_name for crd in CRDS.values()}
    assert {p.name for p in (REPO / "crds").glob("*.yaml")} == names
    assert {p.name for p in CHART_CRDS.glob("*.yaml")} == names


def test_committed_api_reference_matches_the_crds() -> None:
    assert (REPO / REFERENCE_PATH).read_text() == render_reference(), (
        f"{REFERENCE_PATH} is stale: regenerate it with `make crd` "
        f"(`python -m sj_operator.api.reference > {REFERENCE_PATH}`)"
    )


def test_committed_crd_parses_to_the_built_dict() -> None:
    assert yaml.safe_load(CRD_PATH.read_text()) == CRD


def test_names_and_subresources() -> None:
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1"
    assert CRD["metadata"]["name"] == "scavengerjobs.scavenger.dev"
    assert CRD["spec"]["group"] == "scavenger.dev"
    assert CRD["spec"]["scope"] == "Namespaced"
    assert CRD["spec"]["names"] == {
        "kind": "ScavengerJob",
        "listKind": "ScavengerJobList",
        "plural": "scavengerjobs",
        "singular": "scavengerjob",
        "shortNames": ["sj"],
        "categories": ["all", "scavenger"],
    }
    assert [v["name"] for v in CRD["spec"]["versions"]] == ["v1alpha1"]
    assert VERSION["served"] and VERSION["storage"]
    assert VERSION["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    columns = {c["name"]: c for c in VERSION["additionalPrinterColumns"]}
    assert list(columns) == ["Phase", "Interruptions", "Priority", "Admitted", "Job", "Message", "Age"]
    assert columns["Admitted"]["jsonPath"] == '.status.conditions[?(@.type=="Admitted")].reason'
    assert "priority" not in columns["Admitted"], "why an SJ waits shows in the default view"
    assert columns["Phase"] == {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}
    assert columns["Interruptions"]["type"] == "integer"
    assert columns["Interruptions"]["jsonPath"] == ".status.interruptedCount"
    assert columns["Priority"]["type"] == "integer"
    assert columns["Priority"]["jsonPath"] == ".status.runningPriority"
    assert columns["Job"]["jsonPath"] == ".status.jobName" and columns["Job"]["priority"] == 1
    assert columns["Message"]["jsonPath"] == ".status.message" and columns["Message"]["priority"] == 1
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in columns.values():
        path = column["jsonPath"].lstrip(".").split(".")
        if path[0] == "status" and "[" not in path[1]:
            assert STATUS_SCHEMA["properties"][path[1]]["type"] == column["type"]


def test_schema_covers_every_model_field() -> None:
    assert set(SPEC_SCHEMA["properties"]) == {f.alias for f in ScavengerJobSpec.model_fields.values()}
    assert set(STATUS_SCHEMA["properties"]) == {f.alias for f in ScavengerJobStatus.model_fields.values()}
    assert SPEC_SCHEMA["required"] == ["image"]
    assert SCHEMA["required"] == ["spec"]


def test_enums() -> None:
    assert STATUS_SCHEMA["properties"]["phase"]["enum"] == [
        "Pending", "Starting", "Running", "Interrupted", "Succeeded", "Failed", "Suspended",
    ]  # fmt: skip
    assert SPEC_SCHEMA["properties"]["mpi"]["properties"]["implementation"]["enum"] == ["OpenMPI", "MPICH"]


def test_server_side_constraints() -> None:
    props = SPEC_SCHEMA["properties"]
    assert props["image"]["minLength"] == 1
    assert (props["parallelism"]["minimum"], props["parallelism"]["maximum"]) == (1, 1000)
    assert (props["priorityLevels"]["minimum"], props["priorityLevels"]["maximum"]) == (1, 100)
    for name in ("terminationGracePeriodSeconds", "maxInterruptions", "runAsUser", "runAsGroup"):
        assert props[name]["minimum"] == 0, name
    assert props["mpi"]["properties"]["slotsPerWorker"]["minimum"] == 1


def test_spec_defaults_match_the_model() -> None:
    props = SPEC_SCHEMA["properties"]
    defaults = {name: node["default"] for name, node in props.items() if "default" in node}
    assert defaults == {
        "parallelism": 1,
        "duration": "30m",
        "priorityLevels": 3,
        "terminationGracePeriodSeconds": 30,
        "suspend": False,
        "fallbackAfter": "10m",
    }
    model_defaults = parse_spec({"image": "x"}).model_dump(mode="json", by_alias=True)
    for name, value in defaults.items():
        assert model_defaults[name] == value
    assert not _find(STATUS_SCHEMA, lambda node: "default" in node)


# ----------------------------------------------------------------------------- structural


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += _walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}[*]")
    if "items" in node:
        found += _walk(node["items"], f"{path}[]")
    return found


def _find(node: dict[str, Any], predicate: Any) -> list[str]:
    return [path for path, child in _walk(node) if predicate(child)]


def test_schema_is_structural() -> None:
    for path, node in _walk(SCHEMA):
        assert "$ref" not in node and "$defs" not in node, path
        assert "allOf" not in node and "oneOf" not in node and "not" not in node, path
        assert "title" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "anyOf" not in node, path
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"} or node.get(
            "x-kubernetes-preserve-unknown-fields"
        ), path
        if node.get("type") == "object":
            assert node.get("additionalProperties") is not False, path
            assert not ("properties" in node and "additionalProperties" in node), path
            if path != ".metadata":
                assert (
                    "properties" in node
                    or "additionalProperties" in node
                    or node.get("x-kubernetes-preserve-unknown-fields")
                ), path
            for name in node.get("required", []):
                assert name in node["properties"], f"{path}.{name}"
        if node.get("type") == "array":
            assert isinstance(node["items"], dict), path


def test_no_field_is_free_form() -> None:
    """Every field is typed: the API server keeps a free-form object nested 10,000 deep, past the depth Python's
    JSON decoder takes, so one such SJ would stop the operator's watch of every SJ."""
    assert _find(SCHEMA, lambda node: node.get("x-kubernetes-preserve-unknown-fields")) == []


def test_patterns_compile_and_defaults_validate() -> None:
    for path, node in _walk(SCHEMA):
        if "pattern" in node:
            re.compile(node["pattern"])
        if "default" in node:
            assert _check(node, node["default"]) == [], path


# ----------------------------------------------------------------------------- validation


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    raise AssertionError(f"unknown type {kind}")


def _check(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """A minimal OpenAPI v3 validator for what the CRD uses; unknown fields count as errors."""
    if schema.get("x-kubernetes-int-or-string"):
        return _check_int_or_string(schema, value, path)
    kind = schema.get("type")
    if kind is None:
        assert schema.get("x-kubernetes-preserve-unknown-fields"), path
        return []
    if not _type_ok(kind, value):
        return [f"{path}: must be of type {kind}"]
    errors = _check_bounds(schema, value, path) + _check_text(schema, value, path) + _check_size(schema, value, path)
    if kind == "object":
        errors += _check_object(schema, value, path)
    if kind == "array":
        for index, item in enumerate(value):
            errors += _check(schema["items"], item, f"{path}[{index}]")
    return errors


def _check_int_or_string(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    if not (_type_ok("integer", value) or _type_ok("string", value)):
        return [f"{path}: must be an integer or a string"]
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return [f"{path}: does not match {schema['pattern']}"]
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        return [f"{path}: longer than {schema['maxLength']}"]
    return []


def _check_size(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    for keyword, what in (("maxItems", "items"), ("maxProperties", "properties")):
        if keyword in schema and len(value) > schema[keyword]:
            return [f"{path}: more than {schema[keyword]} {what}"]
    return []


def _check_bounds(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: must be one of {schema['enum']}")
    if "minimum" in schema:
        low = schema["minimum"]
        if value < low or (schema.get("exclusiveMinimum") and value == low):
            errors.append(f"{path}: below minimum {low}")
    if "maximum" in schema:
        high = schema["maximum"]
        if value > high or (schema.get("exclusiveMaximum") and value == high):
            errors.append(f"{path}: above maximum {high}")
    return errors


def _check_text(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    if not isinstance(value, str):
        return errors
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{path}: does not match {schema['pattern']}")
    if schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value)
        except ValueError:
            errors.append(f"{path}: not a date-time")
    return errors


def _check_object(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors = [f"{path}.{name}: required" for name in schema.get("required", []) if name not in value]
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for name, child in value.items():
        if name in properties:
            errors += _check(properties[name], child, f"{path}.{name}")
        elif isinstance(extra, dict):
            errors += _check(extra, child, f"{path}[{name}]")
        elif not schema.get("x-kubernetes-preserve-unknown-fields") and path != ".metadata":
            errors.append(f"{path}.{name}: unknown field")
    return errors


def _object(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scavenger.dev/v1alpha1",
        "kind": "ScavengerJob",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


VALID_SPECS: list[dict[str, Any]] = [
    {"image": "busybox"},
    {"image": "busybox", "command": ["sh", "-c", "sleep 3600"], "args": [], "workingDir": "/tmp"},
    {"image": "busybox", "resources": {"requests": {"cpu": 1, "memory": "512Mi"}}},
    {"image": "busybox", "resources": {"limits": {"cpu": "1.5", "nvidia.com/gpu": 1, "memory": "1e9"}}},
    {"image": "busybox", "duration": "1h30m", "priorityLevels": 100, "terminationGracePeriodSeconds": 0},
    {"image": "busybox", "duration": "1.5h"},
    {"image": "busybox", "duration": "90s", "priorityLevels": 1},
    {"image": "busybox", "maxInterruptions": 0, "suspend": True, "runAsUser": 0, "runAsGroup": 0},
    {
        "image": "busybox",
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B"},
            {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}},
        ],
    },
    {
        "image": "busybox",
        "volumes": [
            {"name": "ckpt", "mountPath": "/ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}},
            {"name": "cm", "mountPath": "/cm", "readOnly": True, "subPath": "a/b", "configMap": {"name": "cm"}},
            {"name": "sec", "mountPath": "/sec", "secret": {"secretName": "sec"}},
            {"name": "tmp", "mountPath": "/tmp", "emptyDir": {}},
            {"name": "shm", "mountPath": "/dev/shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "disk", "mountPath": "/disk", "emptyDir": {"medium": "", "sizeLimit": 1073741824}},
        ],
        "checkpointVolume": "ckpt",
    },
    {
        "image": "busybox",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [
            {"operator": "Exists"},
            {"key": "k", "operator": "Equal", "value": "v", "effect": "PreferNoSchedule"},
            {"key": "k", "effect": "NoExecute", "tolerationSeconds": 0},
        ],
        "serviceAccountName": "runner",
        "imagePullSecrets": [{"name": "regcred"}],
        "podLabels": {"team": "ml", "empty": ""},
        "podAnnotations": {"sim.scavenger.dev/run-for": "20s", "sim.scavenger.dev/exit-code": "3"},
    },
    {"image": "mpi:latest", "command": ["mpirun"], "parallelism": 3, "mpi": {}},
    {"image": "mpi:latest", "command": ["mpiexec"], "parallelism": 1000,
     "mpi": {"slotsPerWorker": 4, "implementation": "MPICH"}},
]


@pytest.mark.parametrize("spec", VALID_SPECS)
def test_valid_specs_pass_the_schema(spec: dict[str, Any]) -> None:
    parsed = parse_spec(spec)  # valid for the model ...
    assert _check(SCHEMA, _object(spec)) == []  # ... and for the API server
    canonical = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert _check(SCHEMA, _object(canonical)) == []


INVALID_FOR_SERVER: list[tuple[dict[str, Any], str]] = [
    ({}, ".spec.image: required"),
    ({"image": ""}, ".spec.image: shorter than 1"),
    ({"image": "x", "parallelism": 0}, ".spec.parallelism: below minimum 1"),
    ({"image": "x", "parallelism": "2"}, ".spec.parallelism: must be of type integer"),
    ({"image": "x", "priorityLevels": 101}, ".spec.priorityLevels: above maximum 100"),
    ({"image": "x", "terminationGracePeriodSeconds": -1}, ".spec.terminationGracePeriodSeconds: below minimum 0"),
    ({"image": "x", "duration": "30"}, ".spec.duration: does not match"),
    ({"image": "x", "duration": "-1h"}, ".spec.duration: does not match"),
    ({"image": "x", "resources": {"requests": {"cpu": "-1"}}}, ".spec.resources.requests[cpu]: does not match"),
    ({"image": "x", "resources": {"requests": {"cpu": 0.5}}}, ".spec.resources.requests[cpu]: must be an integer"),
    ({"image": "x", "mpi": {"implementation": "LAM"}}, ".spec.mpi.implementation: must be one of"),
    ({"image": "x", "volumes": [{"name": "a", "emptyDir": {}}]}, ".spec.volumes[0].mountPath: required"),
    ({"image": "x", "tolerations": [{"operator": "In"}]}, ".spec.tolerations[0].operator: must be one of"),
    ({"image": "x", "replicas": 2}, ".spec.replicas: unknown field"),
]


@pytest.mark.parametrize(("spec", "error"), INVALID_FOR_SERVER)
def test_schema_rejects_what_the_server_can_check(spec: dict[str, Any], error: str) -> None:
    errors = _check(SCHEMA, _object(spec))
    assert any(e.startswith(error) for e in errors), errors


def test_status_patch_passes_the_schema() -> None:
    status = parse_status(
        {
            "phase": "Running",
            "interruptedCount": 1,
            "runningTimestamps": ["2026-01-02T03:04:05Z"],
            "interruptedTimestamps": ["2026-01-02T02:00:00Z"],
            "finishedTimestamp": "2026-01-02T09:00:00Z",
            "priorityStartOverTimestamp": "2026-01-02T03:04:05Z",
            "runningPriority": 2,
            "jobName": "demo-r2",
            "message": "running",
            "conditions": [{"type": "Running", "status": "True", "lastTransitionTime": "2026-01-02T03:04:05Z"}],
            "attempt": 2,
            "launchedTimestamp": "2026-01-02T03:03:00Z",
            "startTimeouts": 1,
            "notBefore": "2026-01-02T02:01:00Z",
            "protected": True,
            "priorityClassName": "scavenger-0",
        }
    )
    assert _check(SCHEMA, _object({"image": "x"}, status.to_patch())) == []
    assert _check(SCHEMA, _object({"image": "x"}, {"phase": "Exploded"})) != []


def test_the_cluster_quota_crd_is_cluster_scoped_and_accepts_a_selector() -> None:
    crd = build_cluster_quota_crd()
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["sjcq"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    good = {"apiVersion": "scavenger.dev/v1alpha1", "kind": "ScavengerClusterQuota", "metadata": {"name": "tenants"},
            "spec": {"namespaceSelector": {"matchLabels": {"tier": "tenant"}, "matchExpressions": [
                {"key": "gpu", "operator": "DoesNotExist"}, {"key": "team", "operator": "In", "values": ["a", "b"]}]},
                "hard": {"cpu": "8", "memory": "32Gi"}, "weight": 2}}
    assert _check(schema, good) == []
    bad = {**good, "spec": {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}}
    assert any(e.startswith(".spec.namespaceSelector.matchExpressions[0].operator: must be one of")
               for e in _check(schema, bad)), _check(schema, bad)
    requirement = schema["properties"]["spec"]["properties"]["namespaceSelector"]["properties"]["matchExpressions"]
    assert [rule["fieldPath"] for rule in requirement["items"]["x-kubernetes-validations"]] == [".values"]
