"""An MPI SJ's own objects: the ssh Secret (once per SJ) and the hostfile ConfigMap (rewritten at every
launch, before the run's Job). Their content comes from ``gang``; the names and ownership from here."""

from __future__ import annotations

from typing import Any

from gang.hostfile import MPIImplementation, hostfile_data
from gang.hosts import DEFAULT_CLUSTER_DOMAIN
from gang.mpi import MPIJobOptions
from gang.ssh import SECRET_TYPE, GangKeys, secret_data
from sj_operator.api import MPISpec
from sj_operator.names import CHECKPOINT_ENV, child_metadata, hostfile_configmap_name, mpi_secret_name


def mpi_job_options(*, sj_name: str, mpi: MPISpec) -> MPIJobOptions:
    """What the run's Job needs to mount the SJ's MPI objects and pass the checkpoint variables on."""
    return MPIJobOptions(ssh_secret_name=mpi_secret_name(sj_name),
                         hostfile_configmap_name=hostfile_configmap_name(sj_name),
                         implementation=mpi.implementation, forward_env=CHECKPOINT_ENV)


def build_mpi_secret(*, sj_name: str, namespace: str, sj_uid: str, keys: GangKeys,
                     cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> dict[str, Any]:
    """``<sj>-mpi-ssh``: immutable, the SJ's user and host keys for every run, the host key pinned for the
    namespace's Services in ``cluster_domain``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(name=mpi_secret_name(sj_name), namespace=namespace, sj_name=sj_name, sj_uid=sj_uid),
        "type": SECRET_TYPE,
        "immutable": True,
        "data": secret_data(keys=keys, namespace=namespace, cluster_domain=cluster_domain),
    }


def build_hostfile_configmap(*, sj_name: str, namespace: str, sj_uid: str, job_name: str, parallelism: int,
                             slots_per_worker: int, implementation: MPIImplementation | str,
                             cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> dict[str, Any]:
    """``<sj>-mpi-hostfile`` with the workers of run ``job_name``, by their fully qualified names."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(name=hostfile_configmap_name(sj_name), namespace=namespace, sj_name=sj_name,
                                   sj_uid=sj_uid),
        "data": hostfile_data(job_name=job_name, namespace=namespace, parallelism=parallelism,
                              slots_per_worker=slots_per_worker, implementation=implementation,
                              cluster_domain=cluster_domain),
    }
