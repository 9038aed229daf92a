"""Stable names of a gang's members: ``<run>-<index>.<run>``, through the run's headless Service.

An Indexed Job names its pods' hostnames ``<job>-<index>``; with the pod's ``subdomain`` set to a
headless Service of the same name, ``<job>-<index>.<job>`` resolves to that pod inside the namespace.
"""

from __future__ import annotations

from typing import Final

LAUNCHER_INDEX: Final = 0
"""Completion index of the MPI launcher pod (and of rank 0 of any gang)."""


def gang_hosts(job_name: str, parallelism: int) -> list[str]:
    """Stable hostnames of a gang's pods, ``<job>-<index>.<job>``, in index (rank) order."""
    return [f"{job_name}-{index}.{job_name}" for index in range(parallelism)]


def worker_hosts(job_name: str, parallelism: int) -> list[str]:
    """Hostnames of an MPI run's workers: every pod but the launcher, in index order."""
    if parallelism < 2:
        raise ValueError(f"an MPI gang needs at least 2 pods (a launcher and a worker), got {parallelism}")
    return gang_hosts(job_name, parallelism)[LAUNCHER_INDEX + 1 :]
