"""The observed state of a ScavengerJob, which is also the operator's record of its state machine."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictStr
from pydantic.alias_generators import to_camel

from sj_operator.api.fields import Timestamp
from sj_operator.api.frozen import BY_CONTENT, FrozenModel


class Phase(StrEnum):
    """Lifecycle phase of a ScavengerJob."""

    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    INTERRUPTED = "Interrupted"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class _StatusModel(FrozenModel):
    """Base of the status models: immutable, camelCase aliases, unknown fields ignored."""

    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)  # frozen: FrozenModel


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


InterruptionReason = Literal["PreemptionByScheduler", "EvictionByEvictionAPI", "DeletionByTaintManager",
                             "TerminationByKubelet", "NodeLost", "Deleted"]
INTERRUPTION_REASONS: tuple[InterruptionReason, ...] = (
    "PreemptionByScheduler", "EvictionByEvictionAPI", "DeletionByTaintManager", "TerminationByKubelet", "NodeLost",
    "Deleted")


class ScavengerJobStatus(_StatusModel):
    """Observed state of a ScavengerJob, also the operator's record of its state machine."""

    phase: Phase | None = Field(default=None, description="Lifecycle phase; empty until first reconciled.")
    interrupted_count: int = Field(default=0, ge=0, description="Interruptions so far.")
    running_timestamps: tuple[Timestamp, ...] = Field(
        default=(), description="Each time a run had all its pods running."
    )
    interrupted_timestamps: tuple[Timestamp, ...] = Field(default=(), description="Each interruption.")
    last_interruption_reason: InterruptionReason | None = Field(
        default=None, description="Why the last run was interrupted: PreemptionByScheduler, EvictionByEvictionAPI, "
        "DeletionByTaintManager, TerminationByKubelet, NodeLost or Deleted.")
    finished_timestamp: Timestamp | None = Field(default=None, description="When it succeeded or failed.")
    priority_start_over_timestamp: Timestamp | None = Field(
        default=None, description="Start of the current checkpoint period."
    )
    running_priority: int | None = Field(
        default=None, ge=0, description="Progress inside the current checkpoint period, 0 .. priorityLevels-1 "
        "(written as it moves, after the protection toggles: on a busy control plane it may lag the clock)."
    )
    job_name: str | None = Field(default=None, description="The current (or last) run's Job.")
    message: str | None = Field(default=None, description="Reason for the last transition.")
    conditions: tuple[Annotated[Condition, BY_CONTENT], ...] = Field(
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
    protected: bool = Field(default=False, description="Whether the current run was protected from disruption "
                            "as of the last write of its running level: set with the level, not at each toggle (the "
                            "protection is the scavenger.dev/protected label on the run's pods).")
    priority_class_name: str | None = Field(default=None, description="PriorityClass of the current run.")
    wasted_runs: int = Field(default=0, ge=0, description="Runs in a row interrupted before they completed a "
                             "checkpoint period (each makes the next launch back off longer).")
    config_index: int = Field(default=0, ge=0, description="Configuration of the current run: 0 the preferred "
                              "one, i spec.fallbacks[i-1].")

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
