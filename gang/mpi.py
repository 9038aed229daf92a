"""MPI wiring of ``spec.mpi`` gangs, as mpi-operator users know it: a launcher, workers, ssh, a hostfile.

Pod 0 of the gang's Indexed Job is the *launcher*: it runs the SJ's command (``mpirun`` /
``mpiexec``). Every other pod is a *worker*: it runs an unprivileged ``sshd`` on port 2222 through
which the launcher starts the ranks. Three objects wire them together, all owned by the SJ, labelled
``scavenger.dev/job-name: <sj>`` and named after the SJ, so they are reused by every run:

* the Secret ``<sj>-mpi-ssh`` (content: :func:`gang.ssh.secret_data`): two ed25519 key pairs made
  once per SJ (:func:`gang.ssh.generate_gang_keys`), the user key with the matching
  ``authorized_keys`` and the workers' sshd host key with a ``known_hosts`` that pins it for the
  gang's hosts, and an ssh client ``config`` that checks host keys (``StrictHostKeyChecking yes``);
  mounted at ``/etc/mpi/ssh``. It is immutable: the controller creates it when it is missing and
  never regenerates it.
* the ConfigMap ``<sj>-mpi-hostfile`` (content: :func:`gang.hostfile.hostfile_data`): the workers of one run
  in the implementation's hostfile format, and ``discover_hosts.sh`` printing them; mounted at
  ``/etc/mpi``. Hostnames are fully qualified, ``<run>-<index>.<run>.<namespace>.svc.<cluster-domain>``
  (:mod:`gang.hosts`), and contain the run's Job name (``<sj>-r<attempt>``), so **the controller
  rewrites this ConfigMap at every launch, before it creates the run's Job**. The launcher checks
  that the mounted hostfile names its own run's workers before it starts, so a stale copy is waited
  out instead of used.
* the run's Job (the operator's ``build_run_job`` with :class:`MPIJobOptions`, which calls
  :func:`wire_mpi_job`): both volumes, the MPI environment, an entrypoint wrapping the
  user's command (:func:`mpi_entrypoint`) and ``successPolicy: succeededIndexes "0"``, so that the
  run succeeds when the launcher does and the Job controller then stops the workers (on by
  default since Kubernetes 1.31; the Job gets ``SuccessCriteriaMet`` and, once the workers are gone,
  ``Complete``).

An Indexed Job has one pod template, so the role split happens at run time, in the entrypoint, the
POSIX ``sh`` script ``gang/mpi-entrypoint.sh`` (shipped with the package), which reads
``JOB_COMPLETION_INDEX`` and exports ``SJ_MPI_ROLE``:

* **launcher** (index 0): waits until the mounted hostfile lists this run's workers and every worker
  accepts TCP connections on port 2222 (``SJ_MPI_WAIT_SECONDS``, default 300; past it the pod fails
  with the reason in its termination message), then ``exec``s the user's command.
* **worker** (other indexes): writes an ``sshd_config`` in ``/run/sj-mpi`` (a memory-backed emptyDir)
  that serves the Secret's host key, then runs ``/usr/sbin/sshd -D -e -p 2222 -f
  /run/sj-mpi/sshd_config``, accepting only the gang's user key. (A Secret made before host keys were
  pinned has none: the worker then makes one in ``/run/sj-mpi``, and that Secret's client config does
  not check it.) sshd runs as a child, not ``exec``ed: on SIGTERM (preemption) the
  entrypoint keeps sshd up until the processes started through it (the MPI daemon and the ranks,
  which the launcher's ``mpirun`` tells to stop) have exited, then stops sshd and exits 143. If sshd
  went first, the ranks here would be killed before they could write the collective checkpoint; the
  pod's grace period bounds the wait. The ssh sessions get the pod's ``PATH``,
  ``LD_LIBRARY_PATH``, the SJ's checkpoint variables and the MPI variables below (sshd ``SetEnv``).

Environment of every pod (user ``env`` entries come later and may override these):

* OpenMPI: ``OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile``,
  ``OMPI_MCA_plm_rsh_args=-F /etc/mpi/ssh/config`` and ``OMPI_MCA_orte_keep_fqdn_hostnames=true``
  (Open MPI 4 would otherwise cut the hosts' names to the unresolvable ``<job>-1``), plus the
  ``PRTE_MCA_prte_default_hostfile``, ``PRTE_MCA_plm_ssh_args`` and
  ``PRTE_MCA_prte_keep_fqdn_hostnames`` equivalents for Open MPI 5.
* MPICH: ``HYDRA_HOST_FILE=/etc/mpi/hostfile``, ``HYDRA_LAUNCHER=ssh`` and
  ``HYDRA_LAUNCHER_EXTRA_ARGS=-F /etc/mpi/ssh/config``.

Image requirements:

* ``/bin/sh`` (any POSIX shell), ``date`` (``+%s``), ``sleep``, ``mkdir``, ``id``;
* workers: the OpenSSH server at ``/usr/sbin/sshd`` (>= 7.8, for ``SetEnv``);
* launcher: the OpenSSH client and, to probe the workers, ``bash`` with ``/dev/tcp`` (preferred)
  or an ``nc`` that supports ``-z``; ``timeout`` is used when present;
* the uid the container runs as must have a ``passwd`` entry with a working login shell (ssh and
  sshd refuse unknown uids, and sshd runs commands through that shell);
* the MPI launcher (``mpirun``/``orted`` or ``mpiexec``/``hydra_pmi_proxy``) on the ``PATH``;
  as root, Open MPI also needs ``--allow-run-as-root`` (or its two environment variables).

Non-root pods: the Secret's files are mode 0600 and owned by root, so when ``spec.runAsUser`` is a
non-root uid the pod also gets ``fsGroup`` (``runAsGroup``, else ``runAsUser``) with
``fsGroupChangePolicy: OnRootMismatch``, which makes them group-readable for the pod's processes.
An image whose default user is not root must therefore be run with ``spec.runAsUser`` set.

Everything here is pure and builds plain dicts. The operator checks at parse time that a spec can be
wired (``spec.command`` set, no volume on :data:`RESERVED_VOLUME_NAMES` or :data:`RESERVED_MOUNT_PATHS`).
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

from gang.hostfile import HOSTFILE_PATH, KEY_DISCOVER_HOSTS, KEY_HOSTFILE, MPI_DIR, MPIImplementation
from gang.hosts import LAUNCHER_INDEX
from gang.ssh import SSH_CONFIG_PATH, SSH_DIR, SSH_PORT

RUN_DIR: Final = "/run/sj-mpi"
"""Mount path of the emptyDir where workers keep their sshd configuration."""
SSHD_PATH: Final = "/usr/sbin/sshd"
DEFAULT_WAIT_SECONDS: Final = 300
"""How long the launcher waits for the workers' sshd unless ``SJ_MPI_WAIT_SECONDS`` says otherwise."""

VOLUME_SSH: Final = "sj-mpi-ssh"
VOLUME_HOSTFILE: Final = "sj-mpi-hostfile"
VOLUME_RUN: Final = "sj-mpi-run"
RESERVED_VOLUME_NAMES: Final = frozenset({VOLUME_SSH, VOLUME_HOSTFILE, VOLUME_RUN})
RESERVED_MOUNT_PATHS: Final = (MPI_DIR, RUN_DIR)
"""User volumes may not be mounted at or below these paths."""

ENTRYPOINT_NAME: Final = "sj-mpi-entrypoint"
"""``$0`` of the entrypoint script, shown in its messages and in ``ps``."""
ENTRYPOINT_FILE: Final = "mpi-entrypoint.sh"

_SSH_ARGS: Final = f"-F {SSH_CONFIG_PATH}"
_MPI_ENV: Final[Mapping[MPIImplementation, tuple[tuple[str, str], ...]]] = {
    MPIImplementation.OPENMPI: (
        ("OMPI_MCA_orte_default_hostfile", HOSTFILE_PATH),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_plm_rsh_args", _SSH_ARGS),
        ("PRTE_MCA_prte_default_hostfile", HOSTFILE_PATH),
        ("PRTE_MCA_prte_keep_fqdn_hostnames", "true"),
        ("PRTE_MCA_plm_ssh_args", _SSH_ARGS),
    ),
    MPIImplementation.MPICH: (
        ("HYDRA_HOST_FILE", HOSTFILE_PATH),
        ("HYDRA_LAUNCHER", "ssh"),
        ("HYDRA_LAUNCHER_EXTRA_ARGS", _SSH_ARGS),
    ),
}

_POD_ENV: Final = ("PATH", "LD_LIBRARY_PATH")
_MPI_VARS: Final = tuple(name for implementation in MPIImplementation for name, _ in _MPI_ENV[implementation])
BASE_FORWARDED_ENV: Final = (*_POD_ENV, *_MPI_VARS)
"""Variables the workers' sshd always passes on to ssh sessions (when set and representable in
sshd_config); the caller adds its own (the SJ's checkpoint variables). Rank processes on workers are
started through ssh and would otherwise not see the pod's environment."""


# --------------------------------------------------------------------------------------------
# The entrypoint
# --------------------------------------------------------------------------------------------


@cache
def _entrypoint_body() -> str:
    """The shipped script without its shebang and header comment (the settings come before it)."""
    text = resources.files("gang").joinpath(ENTRYPOINT_FILE).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    return "".join(lines[start:])


def entrypoint_script(
    *,
    forward_env: Sequence[str] = (),
    port: int = SSH_PORT,
    mpi_dir: str = MPI_DIR,
    ssh_dir: str = SSH_DIR,
    run_dir: str = RUN_DIR,
    sshd: str = SSHD_PATH,
    default_wait_seconds: int = DEFAULT_WAIT_SECONDS,
) -> str:
    """The entrypoint script as the shell sees it: its settings, then ``gang/mpi-entrypoint.sh``.

    ``forward_env`` adds to :data:`BASE_FORWARDED_ENV`; the other parameters exist for the tests."""
    settings = (
        ("port", str(port)),
        ("mpi_dir", mpi_dir),
        ("ssh_dir", ssh_dir),
        ("run_dir", run_dir),
        ("sshd", sshd),
        ("default_wait_seconds", str(default_wait_seconds)),
        ("launcher_index", str(LAUNCHER_INDEX)),
        ("forward_env", " ".join((*_POD_ENV, *forward_env, *_MPI_VARS))),
    )
    header = "".join(f"{name}={shlex.quote(value)}\n" for name, value in settings)
    title = f"# {ENTRYPOINT_NAME}: the launcher (pod 0) runs the command, workers run sshd.\n"
    return f"{title}{header}{_entrypoint_body()}"


def escape_kubernetes_expansion(text: str) -> str:
    """``text`` with every ``$`` doubled, so that Kubernetes' ``$(VAR)`` expansion leaves it as is."""
    return text.replace("$", "$$")


def mpi_entrypoint(user_command: Sequence[str], *, forward_env: Sequence[str] = ()) -> list[str]:
    """The container ``command`` of MPI pods: :func:`entrypoint_script` wrapping ``user_command``.

    ``["/bin/sh", "-c", <script>, "sj-mpi-entrypoint", *user_command]``: the launcher ``exec``s
    ``user_command`` (the SJ's ``command`` followed by its ``args``). The script is escaped for
    Kubernetes' ``$(VAR)`` expansion; ``user_command`` is not, so its ``$(SJ_...)`` references
    still expand as in any container.
    """
    if not user_command:
        raise ValueError("the MPI launcher needs a command")
    script = escape_kubernetes_expansion(entrypoint_script(forward_env=forward_env))
    return ["/bin/sh", "-c", script, ENTRYPOINT_NAME, *user_command]


# --------------------------------------------------------------------------------------------
# The Job
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MPIJobOptions:
    """What the run's Job needs to know about an SJ's MPI objects and its pods."""

    ssh_secret_name: str
    hostfile_configmap_name: str
    implementation: MPIImplementation
    forward_env: tuple[str, ...] = ()
    """The caller's variables the workers' sshd passes on to the ranks (beyond :data:`BASE_FORWARDED_ENV`)."""


def mpi_env(implementation: MPIImplementation | str) -> list[dict[str, str]]:
    """Environment variables pointing the MPI implementation at the hostfile and the ssh config."""
    return [{"name": name, "value": value} for name, value in _MPI_ENV[MPIImplementation(implementation)]]


def _mpi_volumes(options: MPIJobOptions) -> list[dict[str, Any]]:
    return [
        {"name": VOLUME_SSH, "secret": {"secretName": options.ssh_secret_name, "defaultMode": 0o600}},
        {
            "name": VOLUME_HOSTFILE,
            "configMap": {
                "name": options.hostfile_configmap_name,
                "items": [
                    {"key": KEY_HOSTFILE, "path": KEY_HOSTFILE, "mode": 0o644},
                    {"key": KEY_DISCOVER_HOSTS, "path": KEY_DISCOVER_HOSTS, "mode": 0o755},
                ],
            },
        },
        {"name": VOLUME_RUN, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]


_MPI_MOUNTS: Final = (
    {"name": VOLUME_HOSTFILE, "mountPath": MPI_DIR, "readOnly": True},
    {"name": VOLUME_SSH, "mountPath": SSH_DIR, "readOnly": True},
    {"name": VOLUME_RUN, "mountPath": RUN_DIR},
)


def reserved_mount_path(mount_path: str) -> str | None:
    """The reserved path that ``mount_path`` is at or below, or None."""
    path = mount_path.rstrip("/") or "/"
    return next((r for r in RESERVED_MOUNT_PATHS if path == r or path.startswith(f"{r}/")), None)


def wire_mpi_job(
    job: Mapping[str, Any],
    *,
    options: MPIJobOptions,
    container: str,
    user_command: Sequence[str],
    user_env: int,
    run_as_user: int | None = None,
    run_as_group: int | None = None,
) -> dict[str, Any]:
    """A copy of a run's Indexed Job wired for MPI as the module docstring describes.

    ``container`` names the container to wire; ``user_command`` is what the launcher runs (the SJ's
    command and args); the last ``user_env`` entries of the container's env are the user's, which the
    MPI variables go before so the user may override them. A non-root ``run_as_user`` gets ``fsGroup``
    so the Secret's files are readable. Raises ValueError for a Job it cannot wire."""
    if not user_command:
        raise ValueError("the MPI launcher needs a command")
    wired: dict[str, Any] = copy.deepcopy(dict(job))
    wired["spec"]["successPolicy"] = {"rules": [{"succeededIndexes": str(LAUNCHER_INDEX)}]}
    pod: dict[str, Any] = wired["spec"]["template"]["spec"]
    if run_as_user:  # neither None nor root: the Secret's files must become group-readable
        fs_group = run_as_group if run_as_group is not None else run_as_user
        pod["securityContext"] = {
            **pod.get("securityContext", {}),
            "fsGroup": fs_group,
            "fsGroupChangePolicy": "OnRootMismatch",
        }
    pod["volumes"] = [*pod.get("volumes", []), *_mpi_volumes(options)]
    main = next((c for c in pod["containers"] if c["name"] == container), None)
    if main is None:
        raise ValueError(f"the Job has no container {container!r}")
    main["command"] = mpi_entrypoint(user_command, forward_env=options.forward_env)
    main.pop("args", None)
    env: list[dict[str, Any]] = main.get("env", [])
    operator_vars = len(env) - user_env
    main["env"] = [*env[:operator_vars], *mpi_env(options.implementation), *env[operator_vars:]]
    main["volumeMounts"] = [*main.get("volumeMounts", []), *(dict(mount) for mount in _MPI_MOUNTS)]
    return wired
