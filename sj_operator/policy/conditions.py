"""Standard Kubernetes conditions of a ScavengerJob: one per concern, derived from the phase."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

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


def set_conditions(conditions: Sequence[Condition], phase: Phase, reason: str, message: str,
                    now: datetime) -> tuple[Condition, ...]:
    """One condition per concern (Queued, Running, Complete, Failed, Suspended): the one the
    phase names is True, the others False; lastTransitionTime moves only when status flips."""
    ctype, cstatus = _CONDITION_FOR[phase]
    current = {c.type: c for c in conditions}
    out = []
    for name in ("Queued", "Running", "Complete", "Failed", "Suspended"):
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
    return tuple(out)
