"""Typed API of the ScavengerJob custom resource.

The custom resource is parsed once, at the boundary, into immutable pydantic models:
:func:`parse_spec` applies defaults and validation and raises :class:`InvalidSpec` naming the first
offending field; :func:`parse_status` is tolerant and never raises. Field aliases are the camelCase
names of the API contract (``SPEC.md``); Python code reads the snake_case attributes.

The CRD in ``crds/`` is generated from these models by :mod:`sj_operator.api.crd`, so constraints
declared with ``Field(...)`` here also end up enforced by the API server.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from kubernetes.utils.quantity import parse_quantity
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

GROUP = "scavenger.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ScavengerJob"
LIST_KIND = "ScavengerJobList"
PLURAL = "scavengerjobs"
SINGULAR = "scavengerjob"
SHORT_NAME = "sj"
CRD_NAME = f"{PLURAL}.{GROUP}"

RESERVED_LABEL_PREFIX = f"{GROUP}/"
"""Label prefix owned by the operator; user ``podLabels`` may not use it."""

RESERVED_ENV_NAMES = frozenset(
    {
        "SJ_NAME",
        "SJ_NAMESPACE",
        "SJ_RESTART_COUNT",
        "SJ_CHECKPOINT_DIR",
        "SJ_CHECKPOINT_INTERVAL",
        "SJ_RANK",
        "SJ_WORLD_SIZE",
        "SJ_HOSTS",
    }
)
"""Environment variables the operator sets on every pod; user ``env`` may not define them."""

MAX_PARALLELISM = 1000
MAX_PRIORITY_LEVELS = 100
DEFAULT_DURATION = "30m"
MIN_DURATION = timedelta(seconds=1)

# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class InvalidSpec(ValueError):
    """A ScavengerJob spec that can never run; ``field`` is the path of the first offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _invalid(message: str, suffix: str = "") -> PydanticCustomError:
    """A validation error whose message is ``message``; ``suffix`` extends the error's location."""
    return PydanticCustomError("sj_invalid", "{reason}", {"reason": message, "suffix": suffix})


# --------------------------------------------------------------------------------------------
# Durations (Go / Kubernetes style) and timestamps
# --------------------------------------------------------------------------------------------

_DURATION_UNITS_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign, accepted by Go
    "\u03bcs": 1_000,  # Greek mu, accepted by Go
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_UNIT_ALTERNATION = "ns|us|\u00b5s|\u03bcs|ms|s|m|h"
_DURATION_PART = f"([0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)({_DURATION_UNIT_ALTERNATION})"
_DURATION_RE = re.compile(f"(?:{_DURATION_PART})+")
_DURATION_PART_RE = re.compile(_DURATION_PART)
DURATION_PATTERN = f"^(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)({_DURATION_UNIT_ALTERNATION}))+$"
"""Regular expression (valid in Python and ECMA-262) for the positive durations the CRD accepts."""


def parse_duration(text: str) -> timedelta:
    """Parse a Go ``time.ParseDuration`` string such as ``90s``, ``1h30m`` or ``500ms``.

    An optional sign and the bare ``0`` are accepted as in Go. Precision below a microsecond is
    truncated. Raises ``ValueError`` on anything else.
    """
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string, not {type(text).__name__}")
    body = text
    negative = body[:1] == "-"
    if body[:1] in ("-", "+"):
        body = body[1:]
    if body == "0":
        return timedelta(0)
    if not _DURATION_RE.fullmatch(body):
        raise ValueError(f"invalid duration {text!r}: expected a sequence like 90s, 30m, 2h or 1h30m")
    total_ns = sum(
        (Fraction(number) * _DURATION_UNITS_NS[unit] for number, unit in _DURATION_PART_RE.findall(body)),
        Fraction(0),
    )
    microseconds = math.trunc(total_ns / 1000)
    try:
        result = timedelta(microseconds=microseconds)
    except OverflowError as exc:
        raise ValueError(f"invalid duration {text!r}: out of range") from exc
    return -result if negative else result


def format_duration(value: timedelta) -> str:
    """Format a duration in the compact Go style accepted by :func:`parse_duration`.

    Zero components are left out (``1h30m``, ``1m30s``, ``1s500ms``); zero is ``0s``.
    """
    micros = value // timedelta(microseconds=1)
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    remainder = abs(micros)
    parts: list[str] = []
    for unit, size in (("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("ms", 1_000), ("us", 1)):
        count, remainder = divmod(remainder, size)
        if count:
            parts.append(f"{count}{unit}")
    return sign + "".join(parts)


def format_timestamp(value: datetime) -> str:
    """Format a timestamp as Kubernetes does: RFC 3339, UTC, whole seconds, ``Z`` suffix."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _normalize_timestamp(value: datetime) -> datetime:
    """Make a timestamp timezone-aware UTC with whole seconds (naive values are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0)


def _coerce_duration(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError:
            pass
    raise _invalid("must be a duration such as 90s, 30m, 2h or 1h30m")


Duration = Annotated[
    timedelta,
    BeforeValidator(_coerce_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
"""A Go style duration string in the API, a ``timedelta`` in Python."""

Timestamp = Annotated[
    datetime,
    AfterValidator(_normalize_timestamp),
    PlainSerializer(format_timestamp, return_type=str),
]
"""An RFC 3339 timestamp in the API, a timezone-aware UTC ``datetime`` in Python."""

# --------------------------------------------------------------------------------------------
# Names, labels and quantities
# --------------------------------------------------------------------------------------------

_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
_QUANTITY_SUFFIX = rf"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_QUANTITY_NUMBER}))?"
_SIGNED_QUANTITY_RE = re.compile(rf"(\+|-)?{_QUANTITY_NUMBER}{_QUANTITY_SUFFIX}")
QUANTITY_PATTERN = rf"^\+?{_QUANTITY_NUMBER}{_QUANTITY_SUFFIX}$"
"""Regular expression for the non-negative resource quantities the CRD accepts."""


def is_dns_label(value: str) -> bool:
    """Whether ``value`` is an RFC 1123 label (lowercase alphanumerics and '-', at most 63)."""
    return len(value) <= 63 and _DNS_LABEL_RE.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    """Whether ``value`` is an RFC 1123 subdomain, the rule for most Kubernetes object names."""
    return len(value) <= 253 and _DNS_SUBDOMAIN_RE.fullmatch(value) is not None


def qualified_name_error(key: str) -> str | None:
    """Why ``key`` is not a valid label/annotation key (``[prefix/]name``), or None if it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and is_dns_subdomain(prefix)):
        return "prefix must be a DNS subdomain"
    if not name or len(name) > 63 or _QUALIFIED_NAME_PART_RE.fullmatch(name) is None:
        return (
            "name part must be at most 63 characters, alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid label value (empty, or a qualified name part)."""
    return value == "" or (len(value) <= 63 and _QUALIFIED_NAME_PART_RE.fullmatch(value) is not None)


def _check_dns_label(value: str) -> str:
    if not is_dns_label(value):
        raise _invalid("must be a DNS-1123 label (lowercase alphanumerics and '-', at most 63 characters)")
    return value


def _check_dns_subdomain(value: str) -> str:
    if not is_dns_subdomain(value):
        raise _invalid("must be a DNS-1123 subdomain (lowercase alphanumerics, '-' and '.')")
    return value


def _coerce_quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _invalid("must be a quantity such as 500m, 2 or 1Gi")
    text = str(value)
    if _SIGNED_QUANTITY_RE.fullmatch(text) is None:
        raise _invalid(f"{text!r} is not a valid quantity")
    try:
        quantity = parse_quantity(text)
    except ValueError:
        raise _invalid(f"{text!r} is not a valid quantity") from None
    if quantity < 0:
        raise _invalid("must not be negative")
    return text


NonEmptyStr = Annotated[StrictStr, Field(min_length=1)]
DNSLabel = Annotated[StrictStr, Field(min_length=1, max_length=63), AfterValidator(_check_dns_label)]
DNSSubdomain = Annotated[StrictStr, Field(min_length=1, max_length=253), AfterValidator(_check_dns_subdomain)]
Quantity = Annotated[
    str,
    BeforeValidator(_coerce_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A Kubernetes resource quantity (``500m``, ``2``, ``1Gi``), kept as the string the user wrote."""


def _check_qualified_keys(value: dict[str, str], what: str) -> dict[str, str]:
    """Every key must be a qualified name (``[prefix/]name``); the error names the offending key."""
    for key in value:
        problem = qualified_name_error(key)
        if problem:
            raise _invalid(f"{what}: {problem}", f"[{key}]")
    return value


def _check_label_map(value: Mapping[str, str], *, reserved_prefix: str | None = None) -> None:
    for key, label_value in value.items():
        problem = qualified_name_error(key)
        if problem:
            raise _invalid(f"invalid key: {problem}", f"[{key}]")
        if reserved_prefix and key.startswith(reserved_prefix):
            raise _invalid(f"the prefix {reserved_prefix} is reserved for the operator", f"[{key}]")
        if not is_label_value(label_value):
            raise _invalid(
                "invalid label value: at most 63 characters, alphanumerics, '-', '_' or '.', "
                "starting and ending with an alphanumeric",
                f"[{key}]",
            )


# --------------------------------------------------------------------------------------------
# Spec
# --------------------------------------------------------------------------------------------


class _SpecModel(BaseModel):
    """Base of the spec models: immutable, camelCase aliases, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)


class MPIImplementation(StrEnum):
    """MPI implementation the gang is wired for."""

    OPENMPI = "OpenMPI"
    MPICH = "MPICH"


class EnvVar(_SpecModel):
    """An environment variable of the container, as in a Kubernetes EnvVar."""

    name: NonEmptyStr = Field(description="Name of the variable.")
    value: StrictStr | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None, description="Source of the value (fieldRef, configMapKeyRef, secretKeyRef, ...)."
    )

    @field_validator("name")
    @classmethod
    def _name_allowed(cls, name: str) -> str:
        if "=" in name:
            raise _invalid("must not contain '='")
        if name in RESERVED_ENV_NAMES:
            raise _invalid(f"{name} is set by the operator")
        return name

    @field_validator("value_from")
    @classmethod
    def _value_from_not_empty(cls, value_from: dict[str, Any] | None) -> dict[str, Any] | None:
        if value_from is not None and not value_from:
            raise _invalid("must name a source")
        return value_from

    @model_validator(mode="after")
    def _one_value(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise _invalid("cannot be set together with value", ".valueFrom")
        return self


class ResourceRequirements(_SpecModel):
    """Per-pod compute resources; after parsing, a side missing for a resource is copied from the other."""

    requests: dict[str, Quantity] = Field(default_factory=dict, description="Requested resources.")
    limits: dict[str, Quantity] = Field(default_factory=dict, description="Resource limits.")

    @field_validator("requests", "limits")
    @classmethod
    def _resource_names(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_qualified_keys(value, "invalid resource name")

    def parsed_requests(self) -> dict[str, Decimal]:
        """Requests as numbers (CPU in cores, memory in bytes)."""
        return {name: parse_quantity(value) for name, value in self.requests.items()}

    def parsed_limits(self) -> dict[str, Decimal]:
        """Limits as numbers (CPU in cores, memory in bytes)."""
        return {name: parse_quantity(value) for name, value in self.limits.items()}


class PersistentVolumeClaimSource(_SpecModel):
    """A PersistentVolumeClaim in the SJ's namespace."""

    claim_name: DNSSubdomain = Field(description="Name of the PersistentVolumeClaim.")


class ConfigMapSource(_SpecModel):
    """A ConfigMap in the SJ's namespace, mounted read-only."""

    name: DNSSubdomain = Field(description="Name of the ConfigMap.")


class SecretSource(_SpecModel):
    """A Secret in the SJ's namespace, mounted read-only."""

    secret_name: DNSSubdomain = Field(description="Name of the Secret.")


class EmptyDirSource(_SpecModel):
    """A scratch directory that lives as long as the pod."""

    medium: Literal["", "Memory"] | None = Field(default=None, description='"" (node disk) or "Memory".')
    size_limit: Quantity | None = Field(default=None, description="Maximum size of the directory.")


class Volume(_SpecModel):
    """A volume mounted into the container; exactly one source must be set."""

    name: DNSLabel = Field(description="Name of the volume, unique within the SJ.")
    mount_path: NonEmptyStr = Field(description="Absolute path of the mount in the container.")
    read_only: StrictBool | None = Field(default=None, description="Mount read-only.")
    sub_path: NonEmptyStr | None = Field(default=None, description="Sub-path inside the volume to mount.")
    persistent_volume_claim: PersistentVolumeClaimSource | None = Field(
        default=None, description="Mount a PersistentVolumeClaim."
    )
    config_map: ConfigMapSource | None = Field(default=None, description="Mount a ConfigMap.")
    secret: SecretSource | None = Field(default=None, description="Mount a Secret.")
    empty_dir: EmptyDirSource | None = Field(default=None, description="Mount an empty scratch directory.")

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, mount_path: str) -> str:
        if not mount_path.startswith("/"):
            raise _invalid("must be an absolute path")
        return mount_path

    @field_validator("sub_path")
    @classmethod
    def _relative(cls, sub_path: str | None) -> str | None:
        if sub_path is not None:
            if sub_path.startswith("/"):
                raise _invalid("must be a relative path")
            if ".." in sub_path.split("/"):
                raise _invalid("must not contain '..'")
        return sub_path

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        chosen = [alias for alias, source in self._sources().items() if source is not None]
        if len(chosen) != 1:
            found = ", ".join(chosen) if chosen else "none"
            raise _invalid(
                f"must set exactly one of persistentVolumeClaim, configMap, secret, emptyDir (found: {found})"
            )
        return self

    def _sources(self) -> dict[str, BaseModel | None]:
        return {
            "persistentVolumeClaim": self.persistent_volume_claim,
            "configMap": self.config_map,
            "secret": self.secret,
            "emptyDir": self.empty_dir,
        }

    @property
    def writable(self) -> bool:
        """Whether the app can write to this volume (ConfigMaps and Secrets are always read-only)."""
        return not self.read_only and self.config_map is None and self.secret is None


class Toleration(_SpecModel):
    """A pod toleration, as in a Kubernetes Toleration."""

    key: StrictStr | None = Field(default=None, description="Taint key; empty matches every key (with Exists).")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal (default).")
    value: StrictStr | None = Field(default=None, description="Taint value to match with Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches every effect."
    )
    toleration_seconds: StrictInt | None = Field(
        default=None, description="How long a NoExecute taint is tolerated before eviction."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.key:
            problem = qualified_name_error(self.key)
            if problem:
                raise _invalid(f"invalid key: {problem}", ".key")
        elif self.operator != "Exists":
            raise _invalid("must be Exists when key is empty", ".operator")
        if self.operator == "Exists" and self.value:
            raise _invalid("must be empty when operator is Exists", ".value")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise _invalid("must be NoExecute when tolerationSeconds is set", ".effect")
        return self


class LocalObjectReference(_SpecModel):
    """A reference to an object in the SJ's namespace."""

    name: DNSSubdomain = Field(description="Name of the object.")


class MPISpec(_SpecModel):
    """MPI wiring of a gang: pod 0 is the launcher, connected to the others by ssh keys and a hostfile."""

    slots_per_worker: StrictInt = Field(default=1, ge=1, description="MPI slots per pod.")
    implementation: MPIImplementation = Field(
        default=MPIImplementation.OPENMPI, description="OpenMPI or MPICH."
    )


class ScavengerJobSpec(_SpecModel):
    """Desired state of a ScavengerJob: a checkpointing workload run on idle capacity."""

    image: NonEmptyStr = Field(description="Container image.")
    command: tuple[StrictStr, ...] | None = Field(default=None, description="Entrypoint; the image's by default.")
    args: tuple[StrictStr, ...] | None = Field(default=None, description="Arguments to the entrypoint.")
    env: tuple[EnvVar, ...] = Field(default=(), description="Environment variables of the container.")
    working_dir: NonEmptyStr | None = Field(default=None, description="Working directory of the container.")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Per-pod requests and limits; a missing side is copied from the other.",
    )
    parallelism: StrictInt = Field(
        default=1, ge=1, le=MAX_PARALLELISM, description="Pods in the gang; every pod gets the same resources."
    )
    volumes: tuple[Volume, ...] = Field(default=(), description="Volumes mounted into the container.")
    checkpoint_volume: NonEmptyStr | None = Field(
        default=None, description="Name of the volume holding checkpoints; exported as SJ_CHECKPOINT_DIR."
    )
    duration: Duration = Field(
        default=DEFAULT_DURATION,
        validate_default=True,
        description="How long the work must run to be worth it; it has surely checkpointed within it.",
    )
    priority_levels: StrictInt = Field(
        default=3, ge=1, le=MAX_PRIORITY_LEVELS, description="Running-priority steps one duration is cut into."
    )
    run_as_user: StrictInt | None = Field(default=None, ge=0, description="UID the container runs as.")
    run_as_group: StrictInt | None = Field(default=None, ge=0, description="GID the container runs as.")
    termination_grace_period_seconds: StrictInt = Field(
        default=30, ge=0, description="Seconds the app gets after SIGTERM to checkpoint."
    )
    node_selector: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="Node selector of the pods.")
    tolerations: tuple[Toleration, ...] = Field(default=(), description="Tolerations of the pods.")
    service_account_name: DNSSubdomain | None = Field(default=None, description="Service account of the pods.")
    image_pull_secrets: tuple[LocalObjectReference, ...] = Field(
        default=(), description="Secrets used to pull the image."
    )
    pod_labels: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="Labels copied onto every pod.")
    pod_annotations: dict[StrictStr, StrictStr] = Field(
        default_factory=dict, description="Annotations copied onto every pod."
    )
    max_interruptions: StrictInt | None = Field(
        default=None, ge=0, description="The SJ fails once interrupted more often than this."
    )
    suspend: StrictBool = Field(default=False, description="Cancel the current run and hold the SJ.")
    mpi: MPISpec | None = Field(default=None, description="Run the gang as an MPI job.")

    @field_validator("image")
    @classmethod
    def _image_has_no_whitespace(cls, image: str) -> str:
        if any(char.isspace() for char in image):
            raise _invalid("must not contain whitespace")
        return image

    @field_validator("duration")
    @classmethod
    def _duration_long_enough(cls, duration: timedelta) -> timedelta:
        if duration <= MIN_DURATION:
            raise _invalid(f"must be longer than {format_duration(MIN_DURATION)}")
        return duration

    @field_validator("resources")
    @classmethod
    def _complete_resources(cls, resources: ResourceRequirements) -> ResourceRequirements:
        """Check limits >= requests and copy a side missing for a resource from the other."""
        requests, limits = resources.parsed_requests(), resources.parsed_limits()
        for name in requests.keys() & limits.keys():
            if limits[name] < requests[name]:
                raise _invalid(
                    f"must be at least the request ({resources.requests[name]})", f".limits[{name}]"
                )
        return resources.model_copy(
            update={
                "requests": {**resources.limits, **resources.requests},
                "limits": {**resources.requests, **resources.limits},
            }
        )

    @field_validator("node_selector")
    @classmethod
    def _node_selector_labels(cls, value: dict[str, str]) -> dict[str, str]:
        _check_label_map(value)
        return value

    @field_validator("pod_labels")
    @classmethod
    def _pod_labels(cls, value: dict[str, str]) -> dict[str, str]:
        _check_label_map(value, reserved_prefix=RESERVED_LABEL_PREFIX)
        return value

    @field_validator("pod_annotations")
    @classmethod
    def _pod_annotation_keys(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_qualified_keys(value, "invalid key")

    @model_validator(mode="after")
    def _cross_field(self) -> ScavengerJobSpec:
        names: dict[str, int] = {}
        mount_paths: dict[str, int] = {}
        for index, volume in enumerate(self.volumes):
            if volume.name in names:
                raise _invalid(f"duplicates spec.volumes[{names[volume.name]}].name", f".volumes[{index}].name")
            names[volume.name] = index
            if volume.mount_path in mount_paths:
                raise _invalid(
                    f"duplicates spec.volumes[{mount_paths[volume.mount_path]}].mountPath",
                    f".volumes[{index}].mountPath",
                )
            mount_paths[volume.mount_path] = index
        if self.checkpoint_volume is not None:
            volume = self.checkpoint_of()
            if volume is None:
                raise _invalid(
                    f"{self.checkpoint_volume!r} is not the name of one of spec.volumes", ".checkpointVolume"
                )
            if not volume.writable:
                raise _invalid(
                    "must name a writable volume (a persistentVolumeClaim or emptyDir, not readOnly)",
                    ".checkpointVolume",
                )
        if self.mpi is not None and self.parallelism < 2:
            raise _invalid("requires parallelism of at least 2 (pod 0 is the launcher)", ".mpi")
        return self

    def checkpoint_of(self) -> Volume | None:
        """The volume named by ``checkpointVolume``, if any."""
        return next((v for v in self.volumes if v.name == self.checkpoint_volume), None)

    @property
    def checkpoint_dir(self) -> str | None:
        """Mount path of the checkpoint volume (``SJ_CHECKPOINT_DIR``), or None without one."""
        volume = self.checkpoint_of()
        return volume.mount_path if volume else None

    @property
    def effective_resources(self) -> ResourceRequirements:
        """Per-pod resources with both sides complete (parsing already copied missing sides)."""
        return self.resources

    @property
    def is_gang(self) -> bool:
        """Whether the SJ runs more than one pod."""
        return self.parallelism > 1


def checkpoint_interval_seconds(spec: ScavengerJobSpec) -> int:
    """The ``SJ_CHECKPOINT_INTERVAL`` for ``spec``, in whole seconds.

    Rule: one running-priority step (``duration / priorityLevels``) rounded down, at least 1s, and
    always strictly below ``duration`` (so ``priorityLevels: 1`` gives ``duration`` minus 1s). An app
    checkpointing this often has checkpointed at least once in every step and in every ``duration``.
    Validation guarantees ``duration > 1s``, so the result always exists.
    """
    total = spec.duration.total_seconds()
    step = math.floor(total / spec.priority_levels)
    return min(max(1, step), math.ceil(total) - 1)


# --------------------------------------------------------------------------------------------
# Status
# --------------------------------------------------------------------------------------------


class Phase(StrEnum):
    """Lifecycle phase of a ScavengerJob."""

    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    INTERRUPTED = "Interrupted"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class _StatusModel(BaseModel):
    """Base of the status models: immutable, camelCase aliases, unknown fields ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)


class Condition(_StatusModel):
    """A standard Kubernetes condition."""

    type: StrictStr = Field(min_length=1, description="Type of the condition.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, description="Machine-readable reason of the last transition.")
    message: str | None = Field(default=None, description="Human-readable details.")
    last_transition_time: Timestamp | None = Field(default=None, description="When the status last changed.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was set for."
    )


class ScavengerJobStatus(_StatusModel):
    """Observed state of a ScavengerJob, also the operator's record of its state machine."""

    phase: Phase | None = Field(default=None, description="Lifecycle phase; empty until first reconciled.")
    interrupted_count: int = Field(default=0, ge=0, description="Interruptions so far.")
    running_timestamps: tuple[Timestamp, ...] = Field(
        default=(), description="Each time a run had all its pods running."
    )
    interrupted_timestamps: tuple[Timestamp, ...] = Field(default=(), description="Each interruption.")
    finished_timestamp: Timestamp | None = Field(default=None, description="When it succeeded or failed.")
    priority_start_over_timestamp: Timestamp | None = Field(
        default=None, description="Start of the current checkpoint period."
    )
    running_priority: int | None = Field(
        default=None, ge=0, description="Progress inside the current checkpoint period, 0 .. priorityLevels-1."
    )
    job_name: str | None = Field(default=None, description="The current (or last) run's Job.")
    message: str | None = Field(default=None, description="Reason for the last transition.")
    conditions: tuple[Condition, ...] = Field(
        default=(),
        description="Standard Kubernetes conditions.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    attempt: int = Field(default=0, ge=0, description="Runs created so far.")
    launched_timestamp: Timestamp | None = Field(
        default=None, description="When the current run was launched (its start timeout counts from here)."
    )
    start_timeouts: int = Field(default=0, ge=0, description="Runs cancelled because they did not start in time.")
    not_before: Timestamp | None = Field(default=None, description="Earliest time of the next launch (backoff).")
    protected: bool = Field(default=False, description="Whether the current run is protected from disruption.")
    priority_class_name: str | None = Field(default=None, description="PriorityClass of the current run.")

    def to_patch(self, *, nulls: bool = False) -> dict[str, Any]:
        """The status as a camelCase dict for a merge patch, timestamps as strings.

        Fields that are None are left out; with ``nulls=True`` they are sent as null instead, so
        the patch clears them on the server.
        """
        patch = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if nulls:
            for name, info in type(self).model_fields.items():
                if getattr(self, name) is None:
                    patch[info.alias or name] = None
        return patch


# --------------------------------------------------------------------------------------------
# Parsing at the boundary
# --------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Deep copy into plain dicts and lists, dropping null map values as the API server does."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def parse_spec(raw: Mapping[str, Any] | None) -> ScavengerJobSpec:
    """Default and validate a raw ``spec``; raise :class:`InvalidSpec` naming the first bad field."""
    if raw is not None and not isinstance(raw, Mapping):
        raise InvalidSpec("spec", "must be an object")
    try:
        return ScavengerJobSpec.model_validate(_plain(raw or {}))
    except ValidationError as exc:
        raise _as_invalid_spec(exc) from None


def parse_status(raw: Mapping[str, Any] | None) -> ScavengerJobStatus:
    """Read a raw ``status`` tolerantly: missing or unreadable fields take their defaults."""
    data: dict[str, Any] = _plain(raw) if isinstance(raw, Mapping) else {}
    while True:
        try:
            return ScavengerJobStatus.model_validate(data)
        except ValidationError as exc:
            pruned = _prune_invalid(data, exc)
            if pruned == data:
                return ScavengerJobStatus()
            data = pruned


def _prune_invalid(data: dict[str, Any], exc: ValidationError) -> dict[str, Any]:
    """Drop the entries named by a status validation error (a bad list item, else the field)."""
    pruned = dict(data)
    bad_items: dict[str, set[int]] = {}
    for error in exc.errors():
        loc = error["loc"]
        if not loc or not isinstance(loc[0], str) or loc[0] not in pruned:
            continue
        field = loc[0]
        if len(loc) > 1 and isinstance(loc[1], int) and isinstance(pruned[field], list):
            bad_items.setdefault(field, set()).add(loc[1])
        else:
            pruned.pop(field)
    for field, indexes in bad_items.items():
        if field in pruned:
            pruned[field] = [item for i, item in enumerate(pruned[field]) if i not in indexes]
    return pruned


_SIMPLE_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "unknown field",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be a boolean",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "string_too_short": "must not be empty",
}


def _error_message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "sj_invalid":
        return str(ctx["reason"])
    if kind in _SIMPLE_MESSAGES:
        return _SIMPLE_MESSAGES[kind]
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']}"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx['expected']}"
    return str(error["msg"])


def _as_invalid_spec(exc: ValidationError) -> InvalidSpec:
    """Turn the first pydantic error into an :class:`InvalidSpec` with a camelCase field path."""
    error = exc.errors()[0]
    ctx = error.get("ctx") or {}
    path = _format_loc(ScavengerJobSpec, error["loc"]) + str(ctx.get("suffix", ""))
    return InvalidSpec(path, _error_message(error))


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` and ``Optional`` from a type annotation."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _format_loc(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as ``spec.volumes[1].mountPath`` / ``spec.nodeSelector[key]``."""
    path = "spec"
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        origin = get_origin(current)
        if isinstance(part, int):
            path += f"[{part}]"
            current = get_args(current)[0] if origin in (tuple, list) and get_args(current) else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            path += f".{part}"
            field = next(
                (info for name, info in current.model_fields.items() if (info.alias or name) == part), None
            )
            current = field.annotation if field else None
        elif origin is dict:
            path += f"[{part}]"
            current = get_args(current)[1]
        elif part != "[key]":
            path += f".{part}"
            current = None
    return path
