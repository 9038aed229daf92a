"""The SJs a pass could not handle: which, why, and which of them to leave out until their spec changes.

The controller tells `Quarantine.fault` of every SJ a step raised for; the SJ is left out of the rest of
that pass and the others go on. A fault is reported once (its metric, log line, Event and condition) until
it changes or the SJ is handled again. An SJ whose admission or launch raised is left out of the queue
while its generation stays the same: finding it in a queue that raises costs a few admission passes
(`faults.culprits`), paid once per spec rather than at every pass. Pure state: the controller does the
writes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sj_operator.faults import Fault, Stage, culprits, describe
from sj_operator.names import KIND
from sj_operator.observed import SJObject

__all__ = ["Quarantine"]

T = TypeVar("T")
_HELD_STAGES: frozenset[Stage] = frozenset({"admission", "launch"})


@dataclass
class Quarantine:
    report: Callable[[SJObject, Fault, BaseException], None] = lambda sj, fault, exc: None
    """Reports a new fault (its metric, log line, Event and condition)."""
    faults: dict[str, Fault] = field(default_factory=dict)
    """This pass's faults, by SJ uid."""
    reported: dict[str, tuple[str, str]] = field(default_factory=dict)
    """By SJ uid: the fault (reason, error) last reported on it."""
    held: dict[str, tuple[int, Fault]] = field(default_factory=dict)
    """By SJ uid: the generation whose admission or launch raised, and the fault."""

    def begin_pass(self) -> None:
        self.faults = {}

    def fault(self, sj: SJObject, stage: Stage, exc: BaseException) -> None:
        """Records that ``stage`` raised ``exc`` for ``sj``, and reports it unless it was reported already."""
        fault = Fault(KIND, sj.namespace, sj.name, stage, describe(exc))
        self.faults[sj.uid] = fault
        if stage in _HELD_STAGES:
            self.held[sj.uid] = (sj.generation, fault)
        if self.reported.get(sj.uid) != (fault.reason, fault.error):
            self.reported[sj.uid] = (fault.reason, fault.error)
            self.report(sj, fault, exc)

    def holds(self, sj: SJObject) -> bool:
        """Whether ``sj`` stays out of the queue (its admission or launch raised for this generation); then it
        counts as faulted in this pass too."""
        held = self.held.get(sj.uid)
        if held is None:
            return False
        if held[0] != sj.generation:
            del self.held[sj.uid]
            return False
        self.faults[sj.uid] = held[1]
        return True

    def forget_report(self, uid: str) -> None:
        """The SJ was handled again, or the report of its fault did not go out: a fault found for it later is
        reported anew."""
        self.reported.pop(uid, None)

    def isolated(self, stage: Stage, items: Sequence[T], run: Callable[[Sequence[T]], object],
                 sj_of: Callable[[T], SJObject]) -> list[T]:
        """For a ``run(items)`` that raised: the items left once those that raise on their own are recorded
        as faults of their SJs. Raises what ``run`` raises when no single item does."""
        errors: dict[int, BaseException] = {}

        def fails(part: Sequence[T]) -> bool:
            try:
                run(part)
            except Exception as exc:
                if len(part) == 1:
                    errors[id(part[0])] = exc
                return True
            return False

        bad = culprits(items, fails)
        if not bad:
            run(items)  # raises again, or the failure was not the items' (then nothing is left out)
            return list(items)
        for item in bad:
            self.fault(sj_of(item), stage, errors[id(item)])
        ids = {id(item) for item in bad}
        return [item for item in items if id(item) not in ids]

    def forget(self, alive: set[str]) -> None:
        for table in (self.reported, self.held):
            for uid in table.keys() - alive:
                del table[uid]
