"""The ScavengerJob API: typed models, parsing at the boundary, and the generated CRD.

- ``fields``: field types (durations, timestamps, names, quantities) and :class:`InvalidSpec`;
- ``spec``: the desired state and every rule it must meet;
- ``status``: the observed state and the phases;
- ``parse``: raw API dicts to typed models (strict for specs, tolerant for statuses);
- ``crd``: the CustomResourceDefinition generated from the models.
"""

from sj_operator.api.fields import InvalidSpec, format_duration, format_timestamp, parse_duration
from sj_operator.api.parse import DEFAULT_LIMITS, SpecLimits, parse_spec, parse_status
from sj_operator.api.spec import (
    EnvVar,
    LocalObjectReference,
    MPISpec,
    ResourceRequirements,
    ScavengerJobSpec,
    Toleration,
    Volume,
    checkpoint_interval_seconds,
)
from sj_operator.api.status import Condition, Phase, ScavengerJobStatus

__all__ = [
    "DEFAULT_LIMITS",
    "Condition",
    "EnvVar",
    "InvalidSpec",
    "LocalObjectReference",
    "MPISpec",
    "Phase",
    "ResourceRequirements",
    "ScavengerJobSpec",
    "ScavengerJobStatus",
    "SpecLimits",
    "Toleration",
    "Volume",
    "checkpoint_interval_seconds",
    "format_duration",
    "format_timestamp",
    "parse_duration",
    "parse_spec",
    "parse_status",
]
