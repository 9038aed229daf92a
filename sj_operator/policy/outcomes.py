"""What the state machine reads of a run and what it decides: the actions, Events and new status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sj_operator.api import ScavengerJobStatus
from sj_operator.observed import JobView, PodView


@dataclass(frozen=True, slots=True)
class Run:
    """What the cluster shows of one run: its Job (None if not seen) and its pods."""
    job: JobView | None
    pods: tuple[PodView, ...] = ()

    @property
    def holds_resources(self) -> bool:
        return any(p.holds_resources for p in self.pods)

    def carries(self, protected: bool) -> bool:
        """Whether the run's pods carry that protection: every pod not ended has the label saying so (pods that
        disagree among themselves carry neither). The label is the protection (the budget selects by it), so it is
        what victim steering compares with what it wants; a run with no pod left to label carries either."""
        return all(p.protected == protected for p in self.pods if not p.terminal)


NO_RUN = Run(job=None)
"""A run of which nothing is seen (a waiting SJ's next run, most often): one, shared."""


@dataclass(frozen=True, slots=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    routine: bool = False
    """One of victim steering's routine toggles (a run's ``Protected``, a period's ``Unprotected``): the recorder
    counts it into the SJ's one Event of that reason rather than recording it anew (`write.events`)."""


EVENT_REASONS: dict[str, tuple[Literal["Normal", "Warning"], str, str]] = {
    # reason: (type, object, when)
    "Queued": ("Normal", "ScavengerJob", "a new SJ joins the queue (phase Pending)"),
    "Launched": ("Normal", "ScavengerJob", "a run's Job was made: the run, its pod count and priority class"),
    "Starting": ("Normal", "ScavengerJob", "a run is recorded whose pods are not all running yet (phase Starting)"),
    "Running": ("Normal", "ScavengerJob", "all of a run's pods run (phase Running)"),
    "Protected": ("Normal", "ScavengerJob", "a run reached the protecting level: a PodDisruptionBudget covers it "
                  "(one Event per SJ, its count updated at most once a minute)"),
    "Unprotected": ("Normal", "ScavengerJob", "a run lost its protection: a new checkpoint period (one Event per SJ, "
                    "its count updated at most once a minute), its node is drained, it held protection for "
                    "--max-protection, or it has the least unsaved work on its node(s) when every run there is "
                    "protected"),
    "Interrupting": ("Warning", "ScavengerJob", "a run member was disrupted or deleted: the whole run is "
                     "cancelled"),
    "Interrupted": ("Warning", "ScavengerJob", "the interrupted run's pods have stopped: the interruption is "
                    "counted and the SJ queues again (phase Interrupted)"),
    "TooManyInterruptions": ("Warning", "ScavengerJob", "an interruption past spec.maxInterruptions (phase "
                             "Failed)"),
    "Succeeded": ("Normal", "ScavengerJob", "every pod of the run exited 0 and none was told to stop"),
    "Failed": ("Warning", "ScavengerJob", "a container exited non-zero before any member of the run was "
               "disrupted; the message names pod, container and exit code"),
    "StartTimeout": ("Warning", "ScavengerJob", "a run's pods were not all running within the start timeout: "
                     "the run is deleted and the SJ waits"),
    "Suspended": ("Normal", "ScavengerJob", "spec.suspend became true: the current run is cancelled"),
    "Resumed": ("Normal", "ScavengerJob", "spec.suspend became false: the SJ waits for room again"),
    "InvalidSpec": ("Warning", "ScavengerJob", "a stored spec breaks a rule (stored while no webhook answered), "
                    "or a run built from it was refused (phase Failed)"),
    "MissingReference": ("Warning", "ScavengerJob", "a PVC, ConfigMap or Secret the spec names does not exist; "
                         "no run is made (phase Failed)"),
    "InvalidRun": ("Warning", "ScavengerJob", "the API server rejected the run's Job as invalid (phase Failed)"),
    "QuotaExceeded": ("Warning", "ScavengerJob", "a ResourceQuota refused the run's pods or one of its objects; "
                      "the SJ waits (Admitted=False)"),
    "BackingOff": ("Warning", "ScavengerJob", "the namespace refused the run for another reason; the SJ waits "
                   "(Admitted=False)"),
    "NameTaken": ("Warning", "ScavengerJob", "an object of a name the run needs is not the SJ's: it is left "
                  "alone and the SJ waits, or a running run cannot be protected"),
    "ProtectionFailed": ("Warning", "ScavengerJob", "the API server forbade or rejected a protection toggle's "
                         "write (its budget, or a pod's label): the run is left unprotected for a minute, then it "
                         "is tried again"),
    "Adopted": ("Normal", "Job", "a Job labelled scavenger.dev/scavenge=true is suspended and run by its SJ"),
    "Completed": ("Normal", "Job", "an adopted Job's SJ succeeded: the Job is Complete"),
    "AdoptionRefused": ("Warning", "Job", "the API server forbade the SJ of a Job labelled for adoption (a "
                        "ResourceQuota, a policy), with its message: the Job stays suspended and is tried again "
                        "after a wait that doubles each time; told again only when the message changes"),
}
"""Every Event reason the state machine, the launches and the adopter record (the adopted Job's ``Failed`` is
the SJ's own reason); the faults' Warnings (``faults.REASONS``) come on top. The reference's table."""


@dataclass(frozen=True)
class DeleteRun:
    job_name: str
    reason: str


@dataclass(frozen=True)
class SetProtection:
    """The run's protection toggled: the label its PodDisruptionBudget selects, on each of its pods."""
    job_name: str
    protected: bool
    due: datetime | None = None
    """When the run's clock asked for it (the level crossed the protecting one, or a period began), for a routine
    toggle; None for the others (a drain, the protection's bound, steering's exemption). How late the label was
    written after it is measured (``scavenger_protection_toggle_lateness_seconds``)."""


Action = DeleteRun | SetProtection


StepKind = Literal["queues", "records-run", "steers"]
"""What a step is, when it is one of the kinds whose writes the decision loop carries out apart (`Step.kind`):

- ``queues``: a new SJ joins the queue (phase Pending, its ``Queued`` Event), and nothing else;
- ``records-run``: a waiting SJ's new run is written into its status (Starting or Running, with its Event),
  and nothing else: no interruption, no end, no action;
- ``steers``: a running SJ stays running and only its running level or its protection changes (victim
  steering's bookkeeping): either a protection toggle (`SetProtection`, the label on its pods, and its Event,
  with no status write: the pods' label is the record), or the level and period written into the status
  (no action, no Event: a write that may wait, `write.steering`)."""


@dataclass(frozen=True, slots=True)
class Step:
    status: ScavengerJobStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    waiting: bool = False
    """The SJ waits for admission (and its backoff, if any, has passed)."""
    kind: StepKind | None = None
    """What the state machine decided, in the cases the decision loop writes apart; None for any other step
    (and for a step that changes nothing)."""
    backing_off: bool = False
    """The SJ waits out its anti-thrash backoff (its last run was wasted): not admitted yet, but in the queue,
    where the admission holds the room it would start in (`policy.admission`)."""

    @property
    def in_queue(self) -> bool:
        """The SJ is in the admission's queue: waiting for admission, or backing off with its room held."""
        return self.waiting or self.backing_off
