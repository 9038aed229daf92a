"""Standard Kubernetes conditions of a ScavengerJob.

One condition per phase concern (Queued, Running, Complete, Failed, Suspended), derived from the
phase, and ``Admitted``: ``False`` while the SJ waits, with a reason that says why and a message with
the numbers; ``True`` once a run was launched.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from sj_operator.api import Condition, Phase

_CONDITION_FOR = {
    Phase.PENDING: ("Queued", "True"),
    Phase.INTERRUPTED: ("Queued", "True"),
    Phase.STARTING: ("Running", "False"),
    Phase.RUNNING: ("Running", "True"),
    Phase.SUCCEEDED: ("Complete", "True"),
    Phase.FAILED: ("Failed", "True"),
    Phase.SUSPENDED: ("Suspended", "True"),
}
_PHASE_CONDITIONS = ("Queued", "Running", "Complete", "Failed", "Suspended")

ADMITTED = "Admitted"
WaitReason = Literal["ThresholdReached", "NoNodeFitsGang", "QuotaExceeded", "BackingOff", "StartTimeout",
                     "Suspended", "NameTaken"]
"""Why an SJ waits: the reason of its ``Admitted=False`` condition. ``NameTaken``: an object of a name its run
needs (its Job, Service, MPI Secret or hostfile) exists and the SJ does not control it."""
WAIT_REASONS: tuple[WaitReason, ...] = ("ThresholdReached", "NoNodeFitsGang", "QuotaExceeded", "BackingOff",
                                        "StartTimeout", "Suspended", "NameTaken")
WAIT_REASON_MEANINGS: dict[WaitReason, str] = {
    "ThresholdReached": "all requests in the cluster (or the node pool it may use) plus the whole gang would pass "
                        "the threshold of allocatable for some resource (a pod the scheduler found no node for "
                        "and nominated none does not count, nor does a pending pod no counted scheduler will place: "
                        "see --schedulers); the message gives what it needs, the threshold and "
                        "what is requested",
    "NoNodeFitsGang": "the gang does not place at once on the free room of the nodes it may use (node selector, "
                      "taints, cordons), or a starving head of the queue holds backfill behind it, or the room it "
                      "would take is held for an SJ ahead of it that backs off after a wasted run (the message "
                      "names that SJ, or the starving head, only when it is of the same namespace)",
    "QuotaExceeded": "over its namespace's cap (ScavengerClusterQuota, ScavengerQuota or the operator's default), "
                     "or a ResourceQuota refused the run's pods (a server-side dry run, or a gang's sum) or one "
                     "of its objects; the message names the quota",
    "BackingOff": "the namespace refused the run for another reason (Pod Security, an admission policy), or its "
                  "last run was wasted (interrupted before its first checkpoint period ended): it keeps its "
                  "place and waits a doubling delay (after a wasted run, the room it would start in is held for "
                  "it meanwhile)",
    "StartTimeout": "its last run's pods were not all running within the start timeout; the run was deleted and "
                    "it waits a doubling delay (no interruption counted)",
    "Suspended": "`spec.suspend` is true",
    "NameTaken": "an object of a name its run needs (its Job or Service, the MPI Secret or hostfile) exists and "
                 "the SJ does not control it: it is neither used nor deleted, and the SJ retries with a doubling "
                 "delay",
}
"""What each wait reason means: the reference's table (``python -m sj_operator.docgen reasons``)."""


def set_conditions(conditions: Sequence[Condition], phase: Phase, reason: str, message: str,
                   now: datetime) -> tuple[Condition, ...]:
    """One condition per concern (Queued, Running, Complete, Failed, Suspended): the one the
    phase names is True, the others False; lastTransitionTime moves only when status flips.
    Other conditions (Admitted) are kept as they are."""
    ctype, cstatus = _CONDITION_FOR[phase]
    current = {c.type: c for c in conditions}
    out = []
    for name in _PHASE_CONDITIONS:
        want = cstatus if name == ctype else "False"
        old = current.get(name)
        if old is None and want == "False" and name != ctype:
            continue
        since = old.last_transition_time if old is not None and old.status == want else now
        if name == ctype:
            out.append(Condition(type=name, status=want, reason=reason, message=message, last_transition_time=since))
        else:
            out.append(Condition(type=name, status=want, reason=old.reason if old and old.status == want else reason,
                                 message=old.message if old and old.status == want else "",
                                 last_transition_time=since))
    out.extend(c for c in conditions if c.type not in _PHASE_CONDITIONS)
    return tuple(out)


def admitted_condition(conditions: Sequence[Condition]) -> Condition | None:
    return next((c for c in conditions if c.type == ADMITTED), None)


def set_admitted(conditions: Sequence[Condition], admitted: bool, reason: str, message: str,
                 now: datetime) -> tuple[Condition, ...]:
    """The ``Admitted`` condition set to ``admitted`` with ``reason`` and ``message``; lastTransitionTime
    moves only when its status flips. The other conditions are kept in their order."""
    status = "True" if admitted else "False"
    old = admitted_condition(conditions)
    since = old.last_transition_time if old is not None and old.status == status else now
    new = Condition(type=ADMITTED, status=status, reason=reason, message=message, last_transition_time=since)
    if old is None:
        return (*conditions, new)
    return tuple(new if c.type == ADMITTED else c for c in conditions)


def wait_changed(conditions: Sequence[Condition], reason: WaitReason, message: str, *,
                 since_written: float | None, refresh: float) -> bool:
    """Whether a waiting SJ's ``Admitted`` condition must be written: at once when it is missing, True, or
    gives another reason; when only the numbers in the message moved, at most once per ``refresh``
    seconds (``since_written``: seconds since this process last wrote it, None when unknown). So a queue
    of thousands whose free room shifts at every pass costs no write storm."""
    old = admitted_condition(conditions)
    if old is None or old.status != "False" or old.reason != reason:
        return True
    if old.message == message:
        return False
    return since_written is None or since_written >= refresh
