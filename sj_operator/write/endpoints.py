"""The gangs' EndpointSlices, written by the operator from the pods it watches.

A gang's headless Service has no selector (`builders.service`): each run's one slice lists its members
(hostname, address, pod) as the pod watch shows them. A pass hands over its decisions (`Slices.publish`);
a run whose members differ from what this process last wrote for it is queued, and the background lane
writes the latest members of each queued run once (the changes of a run's pods while its write waits make
one write). A slice is created, or patched when the SJ controls the one of its name (as read: a change since
is a Conflict, and the run is queued again); someone else's object of its name is never touched. A slice
this process wrote is patched at the version it wrote, without a create or a read first. A run's
slice is deleted with its Service (`Writer.delete_run`).

After a restart nothing is known as written: the first pass queues every gang run, and each finds its slice
as stored (created before) and patches it only when its members differ.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from sj_operator.builders.service import Member, build_gang_endpoints, gang_members
from sj_operator.decide import Decided
from sj_operator.kube import Conflict, Forbidden, Invalid, Kube, KubeError, NameTaken, NotFound, in_background
from sj_operator.observed import RunKey
from sj_operator.write.pool import Pool

__all__ = ["SLICE_WORKERS", "Slices"]

log = logging.getLogger(__name__)

SLICE_WORKERS = 4
"""Slices written at once (in the background lane)."""
_DELETED_KEPT = 4096
"""Runs deleted lately that a write still queued or under way must not bring back."""


class _Want(NamedTuple):
    """A run's members to write, and its SJ (which controls the slice)."""
    sj_name: str
    sj_uid: str
    members: tuple[Member, ...]


class Slices:
    def __init__(self, kube: Kube, handles: Callable[[str], bool]) -> None:
        self.kube, self.handles = kube, handles
        self.written: dict[RunKey, tuple[Member, ...]] = {}
        """By run: the members this process last wrote (or found stored, or gave up writing: its name is
        someone else's, or the API server refused it as it is), so that a pass does not queue it again; a
        failure that may pass (after `kube`'s retries) leaves it out, and a later pass that looks at the SJ
        queues it again."""
        self.wanted: dict[RunKey, _Want] = {}
        """The runs queued, with their latest members."""
        self.versions: dict[RunKey, tuple[str, str]] = {}
        """By run: the SJ (uid) and the version of the slice as this process last wrote it, at which the next write
        for that SJ patches it without creating or reading it first."""
        self._deleted: OrderedDict[RunKey, None] = OrderedDict()
        self.pool: Pool[RunKey] = Pool("endpoints", SLICE_WORKERS, self._write, describe="/".join)

    def publish(self, decided: Iterable[Decided]) -> int:
        """Queues the gang runs among ``decided`` whose members differ from what was last written: a run the SJ
        controls, not being deleted, with at least one member named under its Service and given an address.
        How many it queued."""
        queued = 0
        for d in decided:
            o = d.observed
            job = o.run.job
            if job is None or job.deleting or job.owner != o.sj.uid or not o.run.pods:
                continue
            key = (job.namespace, job.name)
            if key in self._deleted or not self.handles(job.namespace):
                continue
            members = gang_members(o.run.pods)
            if not members:
                continue
            want = self.wanted.get(key)
            if (self.written.get(key) if want is None else want.members) == members:
                continue
            self.wanted[key] = _Want(o.sj.name, o.sj.uid, members)
            if want is None:
                self.pool.submit((key,))
                queued += 1
        return queued

    def deleted(self, key: RunKey) -> bool:
        """A run is being deleted: forgotten, and no queued write brings its slice back. Whether this process
        wrote or queued one for it."""
        self._deleted[key] = None
        while len(self._deleted) > _DELETED_KEPT:
            self._deleted.popitem(last=False)
        written, wanted = self.written.pop(key, None), self.wanted.pop(key, None)
        self.versions.pop(key, None)
        return written is not None or wanted is not None

    def forget(self, runs: Mapping[RunKey, object]) -> None:
        """Forgets the runs that are gone (``runs``: the Jobs the watch shows), once many more are known."""
        if len(self.written) + len(self.versions) > 2 * len(runs) + 1000:
            for key in [key for key in self.written if key not in runs]:
                del self.written[key]
            for key in [key for key in self.versions if key not in runs]:
                del self.versions[key]

    async def _write(self, key: RunKey) -> None:
        in_background()
        want = self.wanted.pop(key, None)
        if want is None or key in self._deleted:
            return
        namespace, name = key
        body = build_gang_endpoints(job_name=name, namespace=namespace, sj_name=want.sj_name, sj_uid=want.sj_uid,
                                    members=want.members)
        kept = self.versions.pop(key, None)
        version = kept[1] if kept is not None and kept[0] == want.sj_uid else None  # another SJ's of the same name
        stored: str | None = None
        try:
            stored = await self.kube.apply_child(body, want.sj_uid, _patch(body), version=version,
                                                 same=lambda found: _content(found) == _content(body))
        except NameTaken as exc:
            log.warning("the gang of run %s/%s has no DNS names: %s", namespace, name, exc.message)
        except (Conflict, NotFound) as exc:
            # Changed since it was read, or changed or gone since this process wrote it (at ``version``): read
            # or made again, unless newer members are queued already. Not found when made: its namespace is gone.
            if (version is not None or isinstance(exc, Conflict)) and key not in self.wanted \
                    and key not in self._deleted:
                self.wanted[key] = want
                self.pool.submit((key,))
            return
        except (Forbidden, Invalid) as exc:  # refused as it is: not tried again until its members change
            log.warning("the API server refused the EndpointSlice of run %s/%s: %s", namespace, name, exc)
        except KubeError as exc:
            log.error("could not write the EndpointSlice of run %s/%s: %s", namespace, name, exc)
            return
        if key not in self._deleted:
            self.written[key] = want.members
            if stored is not None:
                self.versions[key] = (want.sj_uid, stored)


def _content(body: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """What a slice says: its address type, its endpoints and its labels (ours among them)."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    return body.get("addressType"), body.get("endpoints") or [], labels


def _patch(body: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes a stored slice say what ``body`` does (a list is replaced whole)."""
    return {"metadata": {"labels": body["metadata"]["labels"]}, "endpoints": body["endpoints"]}
