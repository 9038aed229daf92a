"""The desired state of a ScavengerJob: pydantic models with defaults and every rule a spec must meet.

Models are immutable, use the camelCase names of the API contract (``SPEC.md``) as aliases, and reject
unknown fields. A rule that spans fields (a checkpoint volume that must exist and be writable, MPI
needing a gang and a command, reserved names and paths) is checked here, so an SJ that can never run
is refused when it is parsed, not when it is launched.
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gang.hostfile import MPIImplementation
from gang.mpi import RESERVED_VOLUME_NAMES, reserved_mount_path
from sj_operator.api.bounds import (
    MAX_ARG_LENGTH,
    MAX_ARGS,
    MAX_DURATION,
    MAX_ENV,
    MAX_ENV_NAME_LENGTH,
    MAX_ENV_VALUE_LENGTH,
    MAX_FALLBACK_AFTER,
    MAX_FALLBACKS,
    MAX_ID,
    MAX_IMAGE_LENGTH,
    MAX_IMAGE_PULL_SECRETS,
    MAX_INTERRUPTIONS,
    MAX_NODE_SELECTOR,
    MAX_PARALLELISM,
    MAX_PATH_LENGTH,
    MAX_POD_ANNOTATIONS,
    MAX_POD_ANNOTATIONS_BYTES,
    MAX_POD_LABELS,
    MAX_PRIORITY_LEVELS,
    MAX_QUALIFIED_NAME_LENGTH,
    MAX_RESOURCES,
    MAX_SLOTS_PER_WORKER,
    MAX_TERMINATION_GRACE_SECONDS,
    MAX_TOLERATION_SECONDS,
    MAX_TOLERATIONS,
    MAX_VOLUMES,
)
from sj_operator.api.fields import (
    DNSLabel,
    DNSSubdomain,
    Duration,
    DurationRange,
    LabelValue,
    QualifiedKey,
    Quantity,
    check_label_map,
    check_qualified_keys,
    format_duration,
    invalid,
    qualified_name_error,
)
from sj_operator.api.frozen import BY_CONTENT, FrozenModel, shared
from sj_operator.names import RESERVED_ENV_NAMES, RESERVED_LABEL_PREFIX
from sj_operator.resources import parse_quantity

DEFAULT_DURATION = "30m"
MIN_DURATION = timedelta(seconds=1)
DURATION_FLOOR_MESSAGE = f"must be longer than {format_duration(MIN_DURATION)}"
DEFAULT_FALLBACK_AFTER = "10m"
VOLUME_SOURCES = ("persistentVolumeClaim", "configMap", "secret", "emptyDir")
ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")

Image = Annotated[StrictStr, Field(min_length=1, max_length=MAX_IMAGE_LENGTH)]
Arg = Annotated[StrictStr, Field(max_length=MAX_ARG_LENGTH)]
Path = Annotated[StrictStr, Field(min_length=1, max_length=MAX_PATH_LENGTH)]
KeyedLabels = dict[QualifiedKey, LabelValue]
"""Labels (and a node selector): the form of each key and value is checked by ``check_label_map``."""


def _cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry: a CEL rule the API server checks at the door."""
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def _cel_rules(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def _cel_list(values: frozenset[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in sorted(values)) + "]"


class _SpecModel(FrozenModel):
    """Base of the spec models: immutable, camelCase aliases, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel)  # frozen: FrozenModel


class ObjectFieldSelector(_SpecModel):
    """A field of the pod (``metadata.name``, ``status.podIP``, ...), as in a Kubernetes ObjectFieldSelector."""

    api_version: Annotated[StrictStr, Field(max_length=MAX_QUALIFIED_NAME_LENGTH)] | None = Field(
        default=None, description="Version of the schema fieldPath is written in (v1).")
    field_path: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUALIFIED_NAME_LENGTH)] = Field(
        description="Path of the field.")


class ResourceFieldSelector(_SpecModel):
    """A resource of the container (``limits.cpu``, ``requests.memory``, ...)."""

    container_name: DNSLabel | None = Field(default=None, description="The container; the SJ's own when unset.")
    resource: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUALIFIED_NAME_LENGTH)] = Field(
        description="The resource.")
    divisor: Quantity | None = Field(default=None, description="The unit the value is given in (1 when unset).")


class KeySelector(_SpecModel):
    """A key of a ConfigMap or Secret in the SJ's namespace."""

    name: DNSSubdomain = Field(description="Name of the ConfigMap or Secret.")
    key: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUALIFIED_NAME_LENGTH)] = Field(
        description="The key.")
    optional: StrictBool | None = Field(default=None, description="Start the pod without it when it is missing.")


class EnvVarSource(_SpecModel):
    """Where an environment variable's value comes from, as in a Kubernetes EnvVarSource: exactly one source.
    Typed, not free-form: the API server keeps a free-form object nested 10,000 deep, deeper than Python's
    JSON decoder goes, and the operator decodes every SJ it watches."""

    model_config = ConfigDict(json_schema_extra=_cel_rules(
        _cel("[" + ", ".join(f"has(self.{source})" for source in ENV_SOURCES) + "].filter(x, x).size() == 1",
             "must set exactly one of " + ", ".join(ENV_SOURCES)),
    ))

    field_ref: ObjectFieldSelector | None = Field(default=None, description="A field of the pod.")
    resource_field_ref: ResourceFieldSelector | None = Field(default=None, description="A resource of the container.")
    config_map_key_ref: KeySelector | None = Field(default=None, description="A key of a ConfigMap.")
    secret_key_ref: KeySelector | None = Field(default=None, description="A key of a Secret.")

    @model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        sources = (self.field_ref, self.resource_field_ref, self.config_map_key_ref, self.secret_key_ref)
        chosen = [alias for alias, source in zip(ENV_SOURCES, sources, strict=True) if source is not None]
        if len(chosen) != 1:
            raise invalid(f"must set exactly one of {', '.join(ENV_SOURCES)} (found: {', '.join(chosen) or 'none'})")
        return self


class EnvVar(_SpecModel):
    """An environment variable of the container, as in a Kubernetes EnvVar."""

    model_config = ConfigDict(json_schema_extra=_cel_rules(
        _cel(f"!(self.name in {_cel_list(RESERVED_ENV_NAMES)})", "is set by the operator", ".name"),
        _cel("!has(self.value) || !has(self.valueFrom)", "cannot be set together with value", ".valueFrom"),
    ))

    name: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ENV_NAME_LENGTH)] = Field(
        description="Name of the variable.")
    value: Annotated[StrictStr, Field(max_length=MAX_ENV_VALUE_LENGTH)] | None = Field(
        default=None, description="Literal value.")
    value_from: EnvVarSource | None = Field(
        default=None, description="Source of the value: fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef.")

    @field_validator("name")
    @classmethod
    def _name_allowed(cls, name: str) -> str:
        if "=" in name:
            raise invalid("must not contain '='")
        if name in RESERVED_ENV_NAMES:
            raise invalid(f"{name} is set by the operator")
        return name

    @model_validator(mode="after")
    def _one_value(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise invalid("cannot be set together with value", ".valueFrom")
        return self


class ResourceRequirements(_SpecModel):
    """Per-pod compute resources; after parsing, a side missing for a resource is copied from the other."""

    requests: dict[QualifiedKey, Quantity] = Field(default_factory=dict, max_length=MAX_RESOURCES,
                                                   description="Requested resources.")
    limits: dict[QualifiedKey, Quantity] = Field(default_factory=dict, max_length=MAX_RESOURCES,
                                                 description="Resource limits.")

    @field_validator("requests", "limits")
    @classmethod
    def _resource_names(cls, value: dict[str, str]) -> dict[str, str]:
        return check_qualified_keys(value, "invalid resource name")

    def parsed_requests(self) -> dict[str, Decimal]:
        """Requests as numbers (CPU in cores, memory in bytes)."""
        return {name: parse_quantity(value) for name, value in self.requests.items()}

    def parsed_limits(self) -> dict[str, Decimal]:
        """Limits as numbers (CPU in cores, memory in bytes)."""
        return {name: parse_quantity(value) for name, value in self.limits.items()}


NO_RESOURCES = ResourceRequirements()
"""A spec's resources when it gives none (one instance for all: a model is immutable)."""


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

    model_config = ConfigDict(json_schema_extra=_cel_rules(
        _cel("[" + ", ".join(f"has(self.{source})" for source in VOLUME_SOURCES) + "].filter(x, x).size() == 1",
             "must set exactly one of " + ", ".join(VOLUME_SOURCES)),
        _cel("self.mountPath.startsWith('/')", "must be an absolute path", ".mountPath"),
    ))

    name: DNSLabel = Field(description="Name of the volume, unique within the SJ.")
    mount_path: Path = Field(description="Absolute path of the mount in the container.")
    read_only: StrictBool | None = Field(default=None, description="Mount read-only.")
    sub_path: Path | None = Field(default=None, description="Sub-path inside the volume to mount.")
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
            raise invalid("must be an absolute path")
        return mount_path

    @field_validator("sub_path")
    @classmethod
    def _relative(cls, sub_path: str | None) -> str | None:
        if sub_path is not None:
            if sub_path.startswith("/"):
                raise invalid("must be a relative path")
            if ".." in sub_path.split("/"):
                raise invalid("must not contain '..'")
        return sub_path

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        chosen = [alias for alias, source in self._sources().items() if source is not None]
        if len(chosen) != 1:
            found = ", ".join(chosen) if chosen else "none"
            raise invalid(
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

    key: QualifiedKey | None = Field(default=None, description="Taint key; empty matches every key (with Exists).")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal (default).")
    value: LabelValue | None = Field(default=None, description="Taint value to match with Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches every effect."
    )
    toleration_seconds: StrictInt | None = Field(
        default=None, ge=0, le=MAX_TOLERATION_SECONDS,
        description="How long a NoExecute taint is tolerated before eviction."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.key:
            problem = qualified_name_error(self.key)
            if problem:
                raise invalid(f"invalid key: {problem}", ".key")
        elif self.operator != "Exists":
            raise invalid("must be Exists when key is empty", ".operator")
        if self.operator == "Exists" and self.value:
            raise invalid("must be empty when operator is Exists", ".value")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise invalid("must be NoExecute when tolerationSeconds is set", ".effect")
        return self


def complete_resources(resources: ResourceRequirements) -> ResourceRequirements:
    """Checks limits >= requests and copies a side missing for a resource from the other."""
    requests, limits = resources.parsed_requests(), resources.parsed_limits()
    for name in requests.keys() & limits.keys():
        if limits[name] < requests[name]:
            raise invalid(f"must be at least the request ({resources.requests[name]})", f".limits[{name}]")
    return resources.model_copy(update={"requests": {**resources.limits, **resources.requests},
                                        "limits": {**resources.requests, **resources.limits}})


def completed_resources(raw: object, validate: ValidatorFunctionWrapHandler,
                        info: ValidationInfo) -> ResourceRequirements | None:
    """``raw`` validated (``validate``) and completed (`complete_resources`): the one instance for equal content
    when parsed with ``SHARING`` (`frozen.shared`), as every SJ of a template asks the same resources."""
    def make(raw: object) -> ResourceRequirements | None:
        resources: ResourceRequirements | None = validate(raw)
        return None if resources is None else complete_resources(resources)

    return shared(ResourceRequirements, raw, info, make)


class Fallback(_SpecModel):
    """A smaller configuration, tried when the preferred one has not been admitted within
    ``spec.fallbackAfter``; the fields it leaves out are the preferred one's."""

    parallelism: StrictInt | None = Field(default=None, ge=1, le=MAX_PARALLELISM, description="Pods in the gang.")
    resources: ResourceRequirements | None = Field(default=None, description="Per-pod requests and limits.")
    args: tuple[Arg, ...] | None = Field(default=None, max_length=MAX_ARGS,
                                         description="Arguments to the entrypoint.")
    node_selector: KeyedLabels | None = Field(
        default=None, max_length=MAX_NODE_SELECTOR, description="Node selector of the pods (an overflow pool).")
    tolerations: tuple[Annotated[Toleration, BY_CONTENT], ...] | None = Field(
        default=None, max_length=MAX_TOLERATIONS, description="Tolerations of the pods (an overflow pool).")

    @field_validator("resources", mode="wrap")
    @classmethod
    def _complete(cls, raw: object, handler: ValidatorFunctionWrapHandler,
                  info: ValidationInfo) -> ResourceRequirements | None:
        return completed_resources(raw, handler, info)

    @field_validator("node_selector")
    @classmethod
    def _node_selector_labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            check_label_map(value)
        return value


class LocalObjectReference(_SpecModel):
    """A reference to an object in the SJ's namespace."""

    name: DNSSubdomain = Field(description="Name of the object.")


class MPISpec(_SpecModel):
    """MPI wiring of a gang: pod 0 is the launcher, connected to the others by ssh keys and a hostfile."""

    slots_per_worker: StrictInt = Field(default=1, ge=1, le=MAX_SLOTS_PER_WORKER, description="MPI slots per pod.")
    implementation: MPIImplementation = Field(
        default=MPIImplementation.OPENMPI, description="OpenMPI or MPICH."
    )


class ScavengerJobSpec(_SpecModel):
    """Desired state of a ScavengerJob: a checkpointing workload run on idle capacity."""

    model_config = ConfigDict(json_schema_extra=_cel_rules(
        _cel("!has(self.checkpointVolume) || (has(self.volumes) && "
             "self.volumes.exists(v, v.name == self.checkpointVolume))",
             "must be the name of one of spec.volumes", ".checkpointVolume"),
        _cel("!has(self.mpi) || (has(self.parallelism) && self.parallelism >= 2)",
             "requires parallelism of at least 2 (pod 0 is the launcher)", ".mpi"),
        _cel("!has(self.mpi) || has(self.command)",
             "is required with spec.mpi (pod 0 runs it; the image's entrypoint is not known)", ".command"),
    ))

    image: Image = Field(description="Container image.")
    command: tuple[Arg, ...] | None = Field(
        default=None, max_length=MAX_ARGS, description="Entrypoint; the image's by default."
    )
    args: tuple[Arg, ...] | None = Field(
        default=None, max_length=MAX_ARGS, description="Arguments to the entrypoint."
    )
    env: tuple[Annotated[EnvVar, BY_CONTENT], ...] = Field(
        default=(), max_length=MAX_ENV, description="Environment variables of the container."
    )
    working_dir: Path | None = Field(default=None, description="Working directory of the container.")
    resources: ResourceRequirements = Field(
        default_factory=lambda: NO_RESOURCES,
        description="Per-pod requests and limits; a missing side is copied from the other.",
    )
    parallelism: StrictInt = Field(
        default=1, ge=1, le=MAX_PARALLELISM, description="Pods in the gang; every pod gets the same resources."
    )
    volumes: tuple[Annotated[Volume, BY_CONTENT], ...] = Field(
        default=(), max_length=MAX_VOLUMES, description="Volumes mounted into the container; names are unique.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    checkpoint_volume: DNSLabel | None = Field(
        default=None, description="Name of the volume holding checkpoints; exported as SJ_CHECKPOINT_DIR."
    )
    duration: Annotated[Duration, DurationRange(MAX_DURATION)] = Field(
        default=DEFAULT_DURATION,
        validate_default=True,
        description="How long the work must run to be worth it; it has surely checkpointed within it.",
    )
    priority_levels: StrictInt = Field(
        default=3, ge=1, le=MAX_PRIORITY_LEVELS, description="Running-priority steps one duration is cut into."
    )
    run_as_user: StrictInt | None = Field(default=None, ge=0, le=MAX_ID, description="UID the container runs as.")
    run_as_group: StrictInt | None = Field(default=None, ge=0, le=MAX_ID, description="GID the container runs as.")
    termination_grace_period_seconds: StrictInt = Field(
        default=30, ge=0, le=MAX_TERMINATION_GRACE_SECONDS,
        description="Seconds the app gets after SIGTERM to checkpoint (the cluster may allow fewer: the "
        "operator's --max-termination-grace)."
    )
    node_selector: KeyedLabels = Field(default_factory=dict, max_length=MAX_NODE_SELECTOR,
                                       description="Node selector of the pods.")
    tolerations: tuple[Annotated[Toleration, BY_CONTENT], ...] = Field(
        default=(), max_length=MAX_TOLERATIONS, description="Tolerations of the pods."
    )
    service_account_name: DNSSubdomain | None = Field(default=None, description="Service account of the pods.")
    image_pull_secrets: tuple[Annotated[LocalObjectReference, BY_CONTENT], ...] = Field(
        default=(), max_length=MAX_IMAGE_PULL_SECRETS, description="Secrets used to pull the image."
    )
    pod_labels: KeyedLabels = Field(default_factory=dict, max_length=MAX_POD_LABELS,
                                    description="Labels copied onto every pod.")
    pod_annotations: dict[QualifiedKey, Annotated[StrictStr, Field(max_length=MAX_POD_ANNOTATIONS_BYTES)]] = Field(
        default_factory=dict, max_length=MAX_POD_ANNOTATIONS,
        description=f"Annotations copied onto every pod; keys and values at most {MAX_POD_ANNOTATIONS_BYTES} "
        "bytes together."
    )
    max_interruptions: StrictInt | None = Field(
        default=None, ge=0, le=MAX_INTERRUPTIONS, description="The SJ fails once interrupted more often than this."
    )
    suspend: StrictBool = Field(default=False, description="Cancel the current run and hold the SJ.")
    mpi: Annotated[MPISpec, BY_CONTENT] | None = Field(default=None, description="Run the gang as an MPI job.")
    fallbacks: tuple[Annotated[Fallback, BY_CONTENT], ...] = Field(
        default=(), max_length=MAX_FALLBACKS,
        description="Smaller configurations, tried in order when the preferred one has not been admitted "
        "within fallbackAfter; status.configIndex and SJ_CONFIG_INDEX say which runs (0: the preferred).")
    fallback_after: Annotated[Duration, DurationRange(MAX_FALLBACK_AFTER, minimum=timedelta(0))] = Field(
        default=DEFAULT_FALLBACK_AFTER, validate_default=True,
        description="How long the preferred configuration waits before the fallbacks are tried too.")

    @field_validator("image")
    @classmethod
    def _image_has_no_whitespace(cls, image: str) -> str:
        if any(char.isspace() for char in image):
            raise invalid("must not contain whitespace")
        return image

    @field_validator("duration")
    @classmethod
    def _duration_long_enough(cls, duration: timedelta) -> timedelta:
        if duration <= MIN_DURATION:
            raise invalid(DURATION_FLOOR_MESSAGE)
        return duration

    @field_validator("resources", mode="wrap")
    @classmethod
    def _complete_resources(cls, raw: object, handler: ValidatorFunctionWrapHandler,
                            info: ValidationInfo) -> ResourceRequirements:
        return cast(ResourceRequirements, completed_resources(raw, handler, info))  # None does not validate here

    @field_validator("node_selector")
    @classmethod
    def _node_selector_labels(cls, value: dict[str, str]) -> dict[str, str]:
        check_label_map(value)
        return value

    @field_validator("pod_labels")
    @classmethod
    def _pod_labels(cls, value: dict[str, str]) -> dict[str, str]:
        check_label_map(value, reserved_prefix=RESERVED_LABEL_PREFIX)
        return value

    @field_validator("pod_annotations")
    @classmethod
    def _pod_annotation_keys(cls, value: dict[str, str]) -> dict[str, str]:
        size = sum(len(key.encode()) + len(text.encode()) for key, text in value.items())
        if size > MAX_POD_ANNOTATIONS_BYTES:
            raise invalid(f"keys and values must be at most {MAX_POD_ANNOTATIONS_BYTES} bytes together (are {size})")
        return check_qualified_keys(value, "invalid key")

    @model_validator(mode="after")
    def _cross_field(self) -> ScavengerJobSpec:
        names: dict[str, int] = {}
        mount_paths: dict[str, int] = {}
        for index, volume in enumerate(self.volumes):
            if volume.name in names:
                raise invalid(f"duplicates spec.volumes[{names[volume.name]}].name", f".volumes[{index}].name")
            names[volume.name] = index
            if volume.mount_path in mount_paths:
                raise invalid(
                    f"duplicates spec.volumes[{mount_paths[volume.mount_path]}].mountPath",
                    f".volumes[{index}].mountPath",
                )
            mount_paths[volume.mount_path] = index
        if self.checkpoint_volume is not None:
            checkpoint = self.checkpoint_of()
            if checkpoint is None:
                raise invalid(
                    f"{self.checkpoint_volume!r} is not the name of one of spec.volumes", ".checkpointVolume"
                )
            if not checkpoint.writable:
                raise invalid(
                    "must name a writable volume (a persistentVolumeClaim or emptyDir, not readOnly)",
                    ".checkpointVolume",
                )
        if self.mpi is not None:
            self._check_mpi()
            for index, fallback in enumerate(self.fallbacks):
                if fallback.parallelism is not None and fallback.parallelism < 2:
                    raise invalid("requires parallelism of at least 2 with spec.mpi (pod 0 is the launcher)",
                                  f".fallbacks[{index}].parallelism")
        return self

    def config(self, index: int) -> ScavengerJobSpec:
        """Configuration ``index``: 0 is the preferred one, ``i`` the preferred one with
        ``fallbacks[i - 1]``'s fields over it (validated already, so no check runs again)."""
        if index == 0:
            return self
        if not 0 < index <= len(self.fallbacks):
            raise ValueError(f"no configuration {index}: the SJ has {len(self.fallbacks)} fallback(s)")
        fallback = self.fallbacks[index - 1]
        return self.model_copy(update={name: getattr(fallback, name) for name in type(fallback).model_fields
                                       if getattr(fallback, name) is not None})

    def launched_config(self, index: int) -> ScavengerJobSpec:
        """The configuration a run was launched in: ``config(index)``, or the preferred one if that fallback
        is gone from the spec since."""
        return self.config(index) if index <= len(self.fallbacks) else self

    def _check_mpi(self) -> None:
        """What MPI wiring needs: a gang, a command for the launcher, its volume names and paths free."""
        if self.parallelism < 2:
            raise invalid("requires parallelism of at least 2 (pod 0 is the launcher)", ".mpi")
        if self.command is None:
            raise invalid("is required with spec.mpi (pod 0 runs it; the image's entrypoint is not known)",
                          ".command")
        for index, volume in enumerate(self.volumes):
            if volume.name in RESERVED_VOLUME_NAMES:
                raise invalid(f"{volume.name!r} is reserved for the MPI wiring", f".volumes[{index}].name")
            reserved = reserved_mount_path(volume.mount_path)
            if reserved is not None:
                raise invalid(f"{reserved} is reserved for the MPI wiring", f".volumes[{index}].mountPath")

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
