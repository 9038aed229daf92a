"""Generated ScavengerJob specs: valid ones, and invalid ones that each break exactly one rule.

Shared by the property test (hypothesis draws the choices) and the e2e test that sends a sample to the
real API server (a seeded ``random.Random`` draws them). Every invalid spec comes with the path of the
field it broke, as :class:`sj_operator.api.InvalidSpec` names it (``spec.volumes[1].mountPath``).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from sj_operator.api import bounds
from sj_operator.api.fields import format_duration
from sj_operator.names import RESERVED_ENV_NAMES

T = TypeVar("T")
Spec = dict[str, Any]


class Picker(Protocol):
    def choice(self, options: Sequence[T]) -> T: ...
    def integer(self, low: int, high: int) -> int: ...


class RandomPicker:
    """Choices from a seeded generator (the e2e sample)."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def choice(self, options: Sequence[T]) -> T:
        return self.rnd.choice(list(options))

    def integer(self, low: int, high: int) -> int:
        return self.rnd.randint(low, high)


IMAGES = ("busybox:1.36", "registry.example/team/app@sha256:" + "a" * 64, "scavenger/generic-counter:dev")
CPUS = ("100m", "250m", "1", "2", "1500m", 3)
MEMORIES = ("64Mi", "1Gi", "512Mi", "2G")
DURATIONS = ("10s", "90s", "30m", "1h30m", "2h", "45m", "1.5h")
LABEL_KEYS = ("team", "example.com/tier", "app.kubernetes.io/name")
LABEL_VALUES = ("a", "blue-1", "x.y_z", "")


def _volume(p: Picker, index: int) -> dict[str, Any]:
    source = p.choice(("persistentVolumeClaim", "emptyDir", "configMap", "secret"))
    body = {"persistentVolumeClaim": {"claimName": f"claim-{index}"}, "emptyDir": {},
            "configMap": {"name": f"cm-{index}"}, "secret": {"secretName": f"s-{index}"}}[source]
    return {"name": f"vol-{index}", "mountPath": f"/data/{index}", source: body}


def valid_spec(p: Picker) -> Spec:
    """A spec the operator accepts (with the default limits)."""
    spec: Spec = {"image": p.choice(IMAGES), "duration": p.choice(DURATIONS)}
    if p.choice((True, False)):
        spec["command"] = ["sh", "-c", "run"]
    if p.choice((True, False)):
        spec["args"] = [str(p.integer(0, 9)) for _ in range(p.integer(0, 3))]
    env_count = p.integer(0, 3)
    if env_count:
        spec["env"] = [{"name": f"VAR_{i}", "value": str(i)} for i in range(env_count)]
    cpu, memory = p.choice(CPUS), p.choice(MEMORIES)
    spec["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    if p.choice((True, False)):
        spec["resources"]["limits"] = {"cpu": cpu, "memory": memory}
    spec["parallelism"] = p.integer(1, 16)
    volumes = [_volume(p, i) for i in range(p.integer(0, 3))]
    if volumes:
        spec["volumes"] = volumes
        writable = [v["name"] for v in volumes if "persistentVolumeClaim" in v or "emptyDir" in v]
        if writable and p.choice((True, False)):
            spec["checkpointVolume"] = p.choice(writable)
    spec["priorityLevels"] = p.integer(1, 10)
    spec["terminationGracePeriodSeconds"] = p.integer(0, 300)
    _placement(spec, p)
    if spec["parallelism"] >= 2 and "command" in spec and p.choice((True, False)):
        spec["mpi"] = {"slotsPerWorker": p.integer(1, 4)}
    return spec


def _placement(spec: Spec, p: Picker) -> None:
    if p.choice((True, False)):
        spec["nodeSelector"] = {p.choice(LABEL_KEYS): p.choice(LABEL_VALUES)}
    if p.choice((True, False)):
        spec["tolerations"] = [p.choice(({"operator": "Exists"}, {"key": "spot", "value": "true",
                                          "effect": "NoSchedule"}, {"key": "x", "operator": "Exists"}))]
    if p.choice((True, False)):
        spec["runAsUser"] = p.integer(0, 65535)


# An invalidator breaks one rule of a valid spec and returns the path of the field it broke.
Invalidator = Callable[[Spec, Picker], str]


def _set(field: str, *values: Any) -> Invalidator:
    def breaks(spec: Spec, p: Picker) -> str:
        spec[field] = p.choice(values)
        return f"spec.{field}"
    breaks.__name__ = f"{field}={values!r}"
    return breaks


def _bad_request(spec: Spec, p: Picker) -> str:
    resource = p.choice(("cpu", "memory"))
    spec["resources"] = {"requests": {resource: p.choice(("-1", "abc", "1.5.5", "12Gx", "-500m"))}}
    return f"spec.resources.requests[{resource}]"


def _limit_below_request(spec: Spec, p: Picker) -> str:
    spec["resources"] = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    resource = p.choice(("cpu", "memory"))
    spec["resources"]["limits"][resource] = {"cpu": "1900m", "memory": "1000Mi"}[resource]
    return f"spec.resources.limits[{resource}]"


def _reserved_env(spec: Spec, p: Picker) -> str:
    env = spec.setdefault("env", [])
    env.append({"name": p.choice(sorted(RESERVED_ENV_NAMES)), "value": "x"})
    return f"spec.env[{len(env) - 1}].name"


def _env_value_and_source(spec: Spec, p: Picker) -> str:
    env = spec.setdefault("env", [])
    env.append({"name": "BOTH", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    return f"spec.env[{len(env) - 1}].valueFrom"


def _volume_sources(spec: Spec, p: Picker) -> str:
    volumes = spec.setdefault("volumes", [])
    volume: dict[str, Any] = {"name": "broken", "mountPath": "/broken"}
    if p.choice((True, False)):
        volume.update(emptyDir={}, configMap={"name": "cm"})
    volumes.append(volume)
    return f"spec.volumes[{len(volumes) - 1}]"


def _relative_mount(spec: Spec, p: Picker) -> str:
    volumes = spec.setdefault("volumes", [])
    volumes.append({"name": "rel", "mountPath": p.choice(("data", "./x", "rel/path")), "emptyDir": {}})
    return f"spec.volumes[{len(volumes) - 1}].mountPath"


def _missing_checkpoint_volume(spec: Spec, p: Picker) -> str:
    spec["checkpointVolume"] = p.choice(("nope", "missing-vol"))
    return "spec.checkpointVolume"


def _read_only_checkpoint_volume(spec: Spec, p: Picker) -> str:
    volumes = spec.setdefault("volumes", [])
    volumes.append({"name": "ro", "mountPath": "/ro", "configMap": {"name": "cm"}})
    spec["checkpointVolume"] = "ro"
    return "spec.checkpointVolume"


def _mpi_without_gang(spec: Spec, p: Picker) -> str:
    spec.update(parallelism=1, command=["mpirun"], mpi={})
    return "spec.mpi"


def _mpi_without_command(spec: Spec, p: Picker) -> str:
    spec.pop("command", None)
    spec.update(parallelism=p.integer(2, 8), mpi={})
    return "spec.command"


def _bad_label_key(spec: Spec, p: Picker) -> str:
    field = p.choice(("nodeSelector", "podLabels"))
    key = p.choice(("bad key", "-x", "a/b/c", "UPPER_/x"))
    spec[field] = {key: "v"}
    return f"spec.{field}[{key}]"


def _reserved_pod_label(spec: Spec, p: Picker) -> str:
    key = p.choice(("scavenger.dev/run", "scavenger.dev/anything"))
    spec["podLabels"] = {key: "x"}
    return f"spec.podLabels[{key}]"


def _toleration_value_with_exists(spec: Spec, p: Picker) -> str:
    tolerations = spec.setdefault("tolerations", [])
    tolerations.append({"key": "k", "operator": "Exists", "value": "v"})
    return f"spec.tolerations[{len(tolerations) - 1}].value"


# --- the far ends of every bound (``sj_operator.api.bounds``) ----------------------------------------

PAST_DURATIONS = (format_duration(bounds.MAX_DURATION + timedelta(microseconds=1)), "721h", "2562047h",
                  "9999999999h", "23999999976h")
"""Durations past ``MAX_DURATION``: just past it, Go's largest, and past what a ``timedelta`` holds."""
PAST_QUANTITIES = ("1000000000000000001", "1.0000001E", "2Ei", "1e19", "1e400", "1e999999", "9" * 64,
                   "1" + "0" * bounds.MAX_QUANTITY_LENGTH, 10**19)
EDGE_QUANTITIES = (bounds.MAX_QUANTITY, "1000000000000000000", "1e18", "0.5e18", "999999999999999999",
                   10**18, "1e-400", "0", "1n", "0." + "0" * 61 + "1")
"""Quantities at the ends of what is accepted: the largest, the smallest, the longest."""


def _far(bound: int) -> tuple[int, ...]:
    return (bound + 1, 2 * bound, 2**31, 2**63, 10**30)


def _past_quantity(spec: Spec, p: Picker) -> str:
    where = p.choice(("requests", "limits"))
    resource = p.choice(("cpu", "memory", "nvidia.com/gpu"))
    spec["resources"] = {where: {resource: p.choice(PAST_QUANTITIES)}}
    return f"spec.resources.{where}[{resource}]"


def _too_many(field: str, most: int, item: Callable[[int], Any]) -> Invalidator:
    def breaks(spec: Spec, p: Picker) -> str:
        spec.pop("checkpointVolume", None)
        spec.pop("mpi", None)
        spec[field] = [item(i) for i in range(most + 1)]
        return f"spec.{field}"
    breaks.__name__ = f"too many {field}"
    return breaks


def _too_many_keys(field: str, most: int) -> Invalidator:
    def breaks(spec: Spec, p: Picker) -> str:
        spec[field] = {f"k{i}": "v" for i in range(most + 1)}
        return f"spec.{field}"
    breaks.__name__ = f"too many {field}"
    return breaks


def _too_long(field: str, most: int) -> Invalidator:
    def breaks(spec: Spec, p: Picker) -> str:
        spec[field] = "/" + "x" * most
        return f"spec.{field}"
    breaks.__name__ = f"too long {field}"
    return breaks


def _too_long_item(field: str, most: int) -> Invalidator:
    def breaks(spec: Spec, p: Picker) -> str:
        spec.pop("mpi", None)
        spec[field] = ["ok", "x" * (most + 1)]
        return f"spec.{field}[1]"
    breaks.__name__ = f"too long {field} item"
    return breaks


def _too_big(spec: Spec, p: Picker) -> str:
    spec.pop("mpi", None)
    count = bounds.MAX_SPEC_BYTES // bounds.MAX_ARG_LENGTH + 1
    spec["args"] = ["x" * bounds.MAX_ARG_LENGTH] * count
    return "spec"


BOUND_INVALIDATORS: tuple[Invalidator, ...] = (
    _set("duration", *PAST_DURATIONS),
    _set("fallbackAfter", *PAST_DURATIONS, "-1m"),
    _set("maxInterruptions", *_far(bounds.MAX_INTERRUPTIONS)),
    _set("runAsGroup", *_far(bounds.MAX_ID)),
    _past_quantity,
    _too_many("env", bounds.MAX_ENV, lambda i: {"name": f"V{i}", "value": "x"}),
    _too_many("imagePullSecrets", bounds.MAX_IMAGE_PULL_SECRETS, lambda i: {"name": f"s{i}"}),
    _too_many("tolerations", bounds.MAX_TOLERATIONS, lambda i: {"key": f"k{i}", "operator": "Exists"}),
    _too_many("volumes", bounds.MAX_VOLUMES, lambda i: {"name": f"v{i}", "mountPath": f"/v{i}", "emptyDir": {}}),
    _too_many_keys("podLabels", bounds.MAX_POD_LABELS),
    _too_many_keys("podAnnotations", bounds.MAX_POD_ANNOTATIONS),
    _too_many_keys("nodeSelector", bounds.MAX_NODE_SELECTOR),
    _too_long("image", bounds.MAX_IMAGE_LENGTH),
    _too_long("workingDir", bounds.MAX_PATH_LENGTH),
    _too_long_item("args", bounds.MAX_ARG_LENGTH),
    _too_long_item("command", bounds.MAX_ARG_LENGTH),
    _too_big,
)
"""One bound broken, just or far past it: refused naming the field, by the CRD or the webhook."""


INVALIDATORS: tuple[Invalidator, ...] = (
    _set("image", "", "has space", "tab\there"),
    _set("parallelism", 0, -3, 1001, 100_000, "2", 2**63),
    _set("duration", "soon", "0s", "5s", "9s", "-1m", "", "30", "1d"),
    _set("priorityLevels", 0, -1, 101, "3", 2**63),
    _set("terminationGracePeriodSeconds", -1, 301, 3600, 3601, 1_000_000_000),
    _set("runAsUser", -1, "root", *_far(bounds.MAX_ID)),
    _set("maxInterruptions", -1, "many"),
    _set("serviceAccountName", "Bad_Name", "", "a..b"),
    _set("suspend", "yes", 1),
    _bad_request, _limit_below_request, _reserved_env, _env_value_and_source, _volume_sources, _relative_mount,
    _missing_checkpoint_volume, _read_only_checkpoint_volume, _mpi_without_gang, _mpi_without_command,
    _bad_label_key, _reserved_pod_label, _toleration_value_with_exists,
    *BOUND_INVALIDATORS,
)


def invalid_spec(p: Picker) -> tuple[Spec, str, str]:
    """A valid spec with one rule broken: (spec, the field broken, the invalidator's name)."""
    spec = valid_spec(p)
    breaker = p.choice(INVALIDATORS)
    broken = copy.deepcopy(spec)
    field = breaker(broken, p)
    return broken, field, breaker.__name__


# --- specs at the far ends of what the schema admits ---------------------------------------------

EDGE_DURATIONS = (format_duration(bounds.MAX_DURATION), "720h", "719h59m59.999999s", "11s", "10.000001s",
                  "1.5h", "43200m")


def _edge_int(p: Picker, low: int, high: int) -> int:
    return p.choice((low, high, p.integer(low, high)))


def edge_spec(p: Picker) -> Spec:
    """A valid spec with some fields at the ends of their bounds (the largest duration, quantity, counts)."""
    spec = valid_spec(p)
    spec["duration"] = p.choice(EDGE_DURATIONS + DURATIONS)
    spec["priorityLevels"] = _edge_int(p, 1, bounds.MAX_PRIORITY_LEVELS)
    spec["parallelism"] = _edge_int(p, 1, bounds.MAX_PARALLELISM)
    if spec["parallelism"] < 2:
        spec.pop("mpi", None)
    if p.choice((True, False)):
        spec["maxInterruptions"] = _edge_int(p, 0, bounds.MAX_INTERRUPTIONS)
    resource = p.choice(("cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"))
    amount = p.choice(EDGE_QUANTITIES)
    spec["resources"] = {"requests": {resource: amount}} if p.choice((True, False)) else \
        {"requests": {resource: "0"}, "limits": {resource: amount}}
    if p.choice((True, False)):
        spec["fallbackAfter"] = p.choice((*EDGE_DURATIONS, "0s"))
        spec["fallbacks"] = [{"parallelism": _edge_int(p, 2, bounds.MAX_PARALLELISM),
                              "resources": {"requests": {resource: p.choice(EDGE_QUANTITIES)}}}
                             for _ in range(p.integer(1, bounds.MAX_FALLBACKS))]
    if p.choice((True, False)):
        spec["runAsUser"] = _edge_int(p, 0, bounds.MAX_ID)
        spec["runAsGroup"] = _edge_int(p, 0, bounds.MAX_ID)
    if "mpi" in spec:
        spec["mpi"] = {"slotsPerWorker": _edge_int(p, 1, bounds.MAX_SLOTS_PER_WORKER)}
    if p.choice((True, False)):
        spec["tolerations"] = [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": _edge_int(p, 0, bounds.MAX_TOLERATION_SECONDS)}]
    return spec


def far_spec(p: Picker) -> Spec:
    """An edge spec with one field pushed past its bound, as far as the schema's pattern admits: refused, or
    (on a model without that bound) accepted with a value the decision pass must still handle."""
    spec = edge_spec(p)
    broken = p.choice((*BOUND_INVALIDATORS, _past_quantity, _past_quantity, _set("duration", *PAST_DURATIONS)))
    broken(spec, p)
    if "fallbacks" in spec and p.choice((True, False)):
        spec["fallbackAfter"] = p.choice(PAST_DURATIONS)
    return spec
