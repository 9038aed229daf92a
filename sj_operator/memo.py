"""What a decision pass remembers between passes, so its cost follows what changed.

A spec is parsed once per generation, a status once per resourceVersion (a version names one stored
content), and a waiting SJ's queue entry is made once per version; entries of SJs that no longer exist
are dropped once the caches have grown past the cluster's SJs.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sj_operator.api import InvalidSpec, ScavengerJobSpec, ScavengerJobStatus, SpecLimits, parse_spec, parse_status
from sj_operator.decide import queued
from sj_operator.observed import SJObject
from sj_operator.policy.snapshot import QueuedSJ


@dataclass
class PassMemo:
    limits: SpecLimits
    _specs: dict[str, tuple[int, ScavengerJobSpec | InvalidSpec]] = field(default_factory=dict)
    _statuses: dict[str, tuple[str, ScavengerJobStatus]] = field(default_factory=dict)
    _queue: dict[str, tuple[tuple[str, int], QueuedSJ]] = field(default_factory=dict)

    def spec_of(self, sj: SJObject) -> ScavengerJobSpec | InvalidSpec:
        """The parsed spec (or why it is invalid), once per generation."""
        cached = self._specs.get(sj.uid)
        if cached is not None and cached[0] == sj.generation:
            return cached[1]
        try:
            parsed: ScavengerJobSpec | InvalidSpec = parse_spec(sj.spec, self.limits)
        except InvalidSpec as exc:
            parsed = exc
        self._specs[sj.uid] = (sj.generation, parsed)
        return parsed

    def status_of(self, sj: SJObject, resource_version: str, raw: Mapping[str, Any]) -> ScavengerJobStatus:
        """The parsed status, once per version of the SJ."""
        cached = self._statuses.get(sj.uid)
        if cached is not None and cached[0] == resource_version:
            return cached[1]
        status = parse_status(raw)
        self._statuses[sj.uid] = (resource_version, status)
        return status

    def queued(self, sj: SJObject, spec: ScavengerJobSpec, status: ScavengerJobStatus, resource_version: str,
               now: datetime) -> QueuedSJ:
        """A waiting SJ as the admission policy sees it, once per version of the SJ."""
        version = (resource_version, sj.generation)
        cached = self._queue.get(sj.uid)
        if cached is not None and cached[0] == version and sj.created is not None:
            return cached[1]
        entry = queued(sj, spec, status, now)
        self._queue[sj.uid] = (version, entry)
        return entry

    def forget_gone(self, sjs: tuple[SJObject, ...]) -> None:
        if len(self._specs) + len(self._statuses) + len(self._queue) > 6 * len(sjs) + 1000:
            alive = {sj.uid for sj in sjs}
            self._specs = {uid: entry for uid, entry in self._specs.items() if uid in alive}
            self._statuses = {uid: entry for uid, entry in self._statuses.items() if uid in alive}
            self._queue = {uid: entry for uid, entry in self._queue.items() if uid in alive}
