"""MPI wiring of ``spec.mpi`` gangs, as mpi-operator users know it: a launcher, workers, ssh, a hostfile.

Pod 0 of the gang's Indexed Job is the *launcher*: it runs the SJ's command (``mpirun`` /
``mpiexec``). Every other pod is a *worker*: it runs an unprivileged ``sshd`` on port 2222 through
which the launcher starts the ranks. Three objects wire them together, all owned by the SJ, labelled
``scavenger.dev/job-name: <sj>`` and named after the SJ, so they are reused by every run:

* the Secret ``<sj>-mpi-ssh`` (:func:`build_mpi_secret`): an ed25519 key pair made once per SJ
  (:func:`generate_ssh_keypair`), the matching ``authorized_keys`` and an ssh client ``config``;
  mounted at ``/etc/mpi/ssh``. It is immutable: the controller creates it when it is missing and
  never regenerates it.
* the ConfigMap ``<sj>-mpi-hostfile`` (:func:`build_hostfile_configmap`): the workers of one run
  in the implementation's hostfile format, and ``discover_hosts.sh`` printing them; mounted at
  ``/etc/mpi``. Hostnames contain the run's Job name (``<sj>-r<attempt>``), so **the controller
  rewrites this ConfigMap at every launch, before it creates the run's Job**. The launcher checks
  that the mounted hostfile names its own run's workers before it starts, so a stale copy is waited
  out instead of used.
* the run's Job (:func:`sj_operator.builders.build_run_job` with ``mpi=mpi_job_options(...)``,
  which calls :func:`wire_mpi_job`): both volumes, the MPI environment, an entrypoint wrapping the
  user's command (:func:`mpi_entrypoint`) and ``successPolicy: succeededIndexes "0"``, so that the
  run succeeds when the launcher does and the Job controller then stops the workers (needs
  Kubernetes >= 1.33; the Job gets ``SuccessCriteriaMet`` and, once the workers are gone,
  ``Complete``).

An Indexed Job has one pod template, so the role split happens at run time, in the entrypoint, a
POSIX ``sh`` script that reads ``JOB_COMPLETION_INDEX`` and exports ``SJ_MPI_ROLE``:

* **launcher** (index 0): waits until the mounted hostfile lists this run's workers and every worker
  accepts TCP connections on port 2222 (``SJ_MPI_WAIT_SECONDS``, default 300; past it the pod fails
  with the reason in its termination message), then ``exec``s the user's command.
* **worker** (other indexes): creates an ssh host key and an ``sshd_config`` in ``/run/sj-mpi`` (a
  memory-backed emptyDir), then runs ``/usr/sbin/sshd -D -e -p 2222 -f /run/sj-mpi/sshd_config``,
  accepting only the gang's key. sshd runs as a child, not ``exec``ed: on SIGTERM (preemption) the
  entrypoint keeps sshd up until the processes started through it (the MPI daemon and the ranks,
  which the launcher's ``mpirun`` tells to stop) have exited, then stops sshd and exits 143. If sshd
  went first, the ranks here would be killed before they could write the collective checkpoint; the
  pod's grace period bounds the wait. The ssh sessions get the pod's ``PATH``,
  ``LD_LIBRARY_PATH``, the SJ's checkpoint variables and the MPI variables below (sshd ``SetEnv``).

Environment of every pod (user ``env`` entries come later and may override these):

* OpenMPI: ``OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile``,
  ``OMPI_MCA_plm_rsh_args=-F /etc/mpi/ssh/config`` and ``OMPI_MCA_orte_keep_fqdn_hostnames=true``
  (Open MPI 4 would otherwise cut ``<job>-1.<job>`` to the unresolvable ``<job>-1``), plus the
  ``PRTE_MCA_prte_default_hostfile``, ``PRTE_MCA_plm_ssh_args`` and
  ``PRTE_MCA_prte_keep_fqdn_hostnames`` equivalents for Open MPI 5.
* MPICH: ``HYDRA_HOST_FILE=/etc/mpi/hostfile``, ``HYDRA_LAUNCHER=ssh`` and
  ``HYDRA_LAUNCHER_EXTRA_ARGS=-F /etc/mpi/ssh/config``.

The hostfile lists the workers only (pod 0 runs no sshd and no ranks, as in mpi-operator), each with
``slotsPerWorker`` slots, so ``mpirun`` without ``-n`` starts ``(parallelism - 1) * slotsPerWorker``
ranks.

Image requirements:

* ``/bin/sh`` (any POSIX shell), ``date`` (``+%s``), ``sleep``, ``mkdir``, ``id``;
* workers: the OpenSSH server at ``/usr/sbin/sshd`` (>= 7.8, for ``SetEnv``) and ``ssh-keygen``;
* launcher: the OpenSSH client and, to probe the workers, ``bash`` with ``/dev/tcp`` (preferred)
  or an ``nc`` that supports ``-z``; ``timeout`` is used when present;
* the uid the container runs as must have a ``passwd`` entry with a working login shell (ssh,
  sshd and ssh-keygen refuse unknown uids, and sshd runs commands through that shell);
* the MPI launcher (``mpirun``/``orted`` or ``mpiexec``/``hydra_pmi_proxy``) on the ``PATH``;
  as root, Open MPI also needs ``--allow-run-as-root`` (or its two environment variables).

Non-root pods: the Secret's files are mode 0600 and owned by root, so when ``spec.runAsUser`` is a
non-root uid the pod also gets ``fsGroup`` (``runAsGroup``, else ``runAsUser``) with
``fsGroupChangePolicy: OnRootMismatch``, which makes them group-readable for the pod's processes.
An image whose default user is not root must therefore be run with ``spec.runAsUser`` set.

Everything here is pure and builds plain dicts, except :func:`generate_ssh_keypair` (randomness).
"""

from __future__ import annotations

import base64
import copy
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sj_operator.api.model import InvalidSpec, MPIImplementation, MPISpec, ScavengerJobSpec
from sj_operator.builders import (
    CONTAINER_NAME,
    LABEL_JOB_NAME,
    _owner_reference,
    _short_hash,
    gang_hosts,
    sj_label_value,
)

SSH_PORT: Final = 2222
"""Port of the workers' unprivileged sshd."""
LAUNCHER_INDEX: Final = 0
"""Completion index of the launcher pod."""
KEY_COMMENT: Final = "scavenger"
"""Comment of the generated public key."""

MPI_DIR: Final = "/etc/mpi"
"""Mount path of the hostfile ConfigMap."""
SSH_DIR: Final = f"{MPI_DIR}/ssh"
"""Mount path of the ssh Secret."""
HOSTFILE_PATH: Final = f"{MPI_DIR}/hostfile"
SSH_CONFIG_PATH: Final = f"{SSH_DIR}/config"
RUN_DIR: Final = "/run/sj-mpi"
"""Mount path of the emptyDir where workers keep their sshd host key and configuration."""
SSHD_PATH: Final = "/usr/sbin/sshd"
DEFAULT_WAIT_SECONDS: Final = 300
"""How long the launcher waits for the workers' sshd unless ``SJ_MPI_WAIT_SECONDS`` says otherwise."""

SECRET_TYPE: Final = "kubernetes.io/ssh-auth"
KEY_PRIVATE: Final = "ssh-privatekey"
KEY_PUBLIC: Final = "ssh-publickey"
KEY_AUTHORIZED_KEYS: Final = "authorized_keys"
KEY_SSH_CONFIG: Final = "config"
KEY_HOSTFILE: Final = "hostfile"
KEY_DISCOVER_HOSTS: Final = "discover_hosts.sh"

VOLUME_SSH: Final = "sj-mpi-ssh"
VOLUME_HOSTFILE: Final = "sj-mpi-hostfile"
VOLUME_RUN: Final = "sj-mpi-run"
RESERVED_VOLUME_NAMES: Final = frozenset({VOLUME_SSH, VOLUME_HOSTFILE, VOLUME_RUN})
RESERVED_MOUNT_PATHS: Final = (MPI_DIR, RUN_DIR)
"""User volumes may not be mounted at or below these paths."""

OPTION_SSH_SECRET: Final = "sshSecretName"
OPTION_HOSTFILE_CONFIGMAP: Final = "hostfileConfigMapName"
OPTION_IMPLEMENTATION: Final = "implementation"
_OPTION_KEYS: Final = (OPTION_SSH_SECRET, OPTION_HOSTFILE_CONFIGMAP, OPTION_IMPLEMENTATION)

ENTRYPOINT_NAME: Final = "sj-mpi-entrypoint"
"""``$0`` of the entrypoint script, shown in its messages and in ``ps``."""

_MAX_OBJECT_NAME_LENGTH: Final = 253
_SECRET_SUFFIX: Final = "-mpi-ssh"
_CONFIGMAP_SUFFIX: Final = "-mpi-hostfile"

SSH_CLIENT_CONFIG: Final = f"""\
Host *
    Port {SSH_PORT}
    IdentityFile {SSH_DIR}/{KEY_PRIVATE}
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    BatchMode yes
    ConnectTimeout 10
"""
"""ssh client configuration (``-F /etc/mpi/ssh/config``): workers are new hosts on every run."""

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

FORWARDED_ENV: Final = (
    "PATH",
    "LD_LIBRARY_PATH",
    "SJ_NAME",
    "SJ_NAMESPACE",
    "SJ_RESTART_COUNT",
    "SJ_CHECKPOINT_DIR",
    "SJ_CHECKPOINT_INTERVAL",
    *(name for implementation in MPIImplementation for name, _ in _MPI_ENV[implementation]),
)
"""Variables the workers' sshd passes on to ssh sessions (when set and representable in sshd_config).

Rank processes on workers are started through ssh and would otherwise not see the pod's environment.
"""


# --------------------------------------------------------------------------------------------
# Keys and the Secret
# --------------------------------------------------------------------------------------------


def generate_ssh_keypair() -> tuple[str, str]:
    """A fresh ed25519 key pair: ``(private key in OpenSSH PEM, "ssh-ed25519 AAAA... scavenger")``.

    The only impure function of this module. The private key is unencrypted (it lives in a Secret).
    """
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.OpenSSH,
        encryption_algorithm=serialization.NoEncryption(),
    ).decode("ascii")
    public = (
        key.public_key()
        .public_bytes(
            encoding=serialization.Encoding.OpenSSH,
            format=serialization.PublicFormat.OpenSSH,
        )
        .decode("ascii")
    )
    return private, f"{public} {KEY_COMMENT}"


def _child_name(sj_name: str, suffix: str) -> str:
    """``<sj><suffix>``, shortened with a hash of the SJ name when it would exceed 253 characters."""
    plain = f"{sj_name}{suffix}"
    if len(plain) <= _MAX_OBJECT_NAME_LENGTH:
        return plain
    hashed = _short_hash(sj_name)
    head = sj_name[: _MAX_OBJECT_NAME_LENGTH - len(suffix) - len(hashed) - 1].rstrip("-.")
    return f"{head}-{hashed}{suffix}"


def mpi_secret_name(sj_name: str) -> str:
    """Name of an SJ's ssh Secret: ``<sj>-mpi-ssh``."""
    return _child_name(sj_name, _SECRET_SUFFIX)


def hostfile_configmap_name(sj_name: str) -> str:
    """Name of an SJ's hostfile ConfigMap: ``<sj>-mpi-hostfile``."""
    return _child_name(sj_name, _CONFIGMAP_SUFFIX)


def _metadata(*, name: str, namespace: str, sj_name: str, sj_uid: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {LABEL_JOB_NAME: sj_label_value(sj_name)},
        "ownerReferences": [_owner_reference(sj_name, sj_uid)],
    }


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


def _line(text: str) -> str:
    """``text`` ending with exactly one newline (OpenSSH wants key files to end with one)."""
    return text.rstrip("\n") + "\n"


def build_mpi_secret(*, sj_name: str, namespace: str, sj_uid: str, private_key: str, public_key: str) -> dict[str, Any]:
    """The ssh Secret of an MPI SJ, ``<sj>-mpi-ssh`` (type ``kubernetes.io/ssh-auth``, base64 ``data``).

    Keys: ``ssh-privatekey``, ``ssh-publickey``, ``authorized_keys`` (the public key) and ``config``
    (:data:`SSH_CLIENT_CONFIG`). The Secret is immutable: one key pair serves every run of the SJ.
    """
    public = _line(public_key.strip())
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(name=mpi_secret_name(sj_name), namespace=namespace, sj_name=sj_name, sj_uid=sj_uid),
        "type": SECRET_TYPE,
        "immutable": True,
        "data": {
            KEY_PRIVATE: _b64(_line(private_key)),
            KEY_PUBLIC: _b64(public),
            KEY_AUTHORIZED_KEYS: _b64(public),
            KEY_SSH_CONFIG: _b64(SSH_CLIENT_CONFIG),
        },
    }


# --------------------------------------------------------------------------------------------
# Hosts and the ConfigMap
# --------------------------------------------------------------------------------------------


def _check_gang(parallelism: int) -> None:
    if parallelism < 2:
        raise ValueError(f"an MPI gang needs at least 2 pods (a launcher and a worker), got {parallelism}")


def hostnames(job_name: str, parallelism: int) -> list[str]:
    """Stable hostnames of every pod of an MPI run, ``<job>-<index>.<job>``, launcher (index 0) first."""
    return gang_hosts(job_name, parallelism)


def worker_hostnames(job_name: str, parallelism: int) -> list[str]:
    """Hostnames of the workers of an MPI run: every pod but the launcher, in index order."""
    _check_gang(parallelism)
    return hostnames(job_name, parallelism)[LAUNCHER_INDEX + 1 :]


def hostfile(*, job_name: str, parallelism: int, slots_per_worker: int, implementation: MPIImplementation | str) -> str:
    """The hostfile of a run: one worker per line, ``host slots=N`` (OpenMPI) or ``host:N`` (MPICH)."""
    if slots_per_worker < 1:
        raise ValueError(f"slots_per_worker must be at least 1, got {slots_per_worker}")
    openmpi = MPIImplementation(implementation) is MPIImplementation.OPENMPI
    template = "{host} slots={slots}\n" if openmpi else "{host}:{slots}\n"
    hosts = worker_hostnames(job_name, parallelism)
    return "".join(template.format(host=host, slots=slots_per_worker) for host in hosts)


def discover_hosts_script(*, job_name: str, parallelism: int, slots_per_worker: int) -> str:
    """``discover_hosts.sh``: prints the run's workers, one per line as ``host:slots``.

    That is the format of Horovod's ``--host-discovery-script``; the workers never change during a run.
    """
    if slots_per_worker < 1:
        raise ValueError(f"slots_per_worker must be at least 1, got {slots_per_worker}")
    lines = " ".join(shlex.quote(f"{host}:{slots_per_worker}") for host in worker_hostnames(job_name, parallelism))
    return f"#!/bin/sh\n# The MPI workers of run {job_name}, one per line as host:slots.\nprintf '%s\\n' {lines}\n"


def build_hostfile_configmap(
    *,
    sj_name: str,
    namespace: str,
    sj_uid: str,
    job_name: str,
    parallelism: int,
    slots_per_worker: int,
    implementation: MPIImplementation | str,
) -> dict[str, Any]:
    """The hostfile ConfigMap of an MPI SJ, ``<sj>-mpi-hostfile``, with the workers of run ``job_name``.

    Keys ``hostfile`` (:func:`hostfile`) and ``discover_hosts.sh`` (:func:`discover_hosts_script`).
    The name is the SJ's but the content is the run's: the controller creates or replaces it at
    every launch, before it creates the run's Job.
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(
            name=hostfile_configmap_name(sj_name), namespace=namespace, sj_name=sj_name, sj_uid=sj_uid
        ),
        "data": {
            KEY_HOSTFILE: hostfile(
                job_name=job_name,
                parallelism=parallelism,
                slots_per_worker=slots_per_worker,
                implementation=implementation,
            ),
            KEY_DISCOVER_HOSTS: discover_hosts_script(
                job_name=job_name, parallelism=parallelism, slots_per_worker=slots_per_worker
            ),
        },
    }


# --------------------------------------------------------------------------------------------
# The entrypoint
# --------------------------------------------------------------------------------------------

_ENTRYPOINT_BODY: Final = r"""
set -u
newline='
'
hostfile=$mpi_dir/hostfile

log() {
	printf '%s: %s\n' "$0" "$*" >&2
}

# fail MESSAGE [STATUS]: log, leave MESSAGE as the container's termination message, exit.
fail() {
	log "$1"
	if [ -e /dev/termination-log ]; then
		printf '%s\n' "$1" 2>/dev/null >/dev/termination-log || :
	fi
	exit "${2:-1}"
}

uid() {
	id -u 2>/dev/null || echo '?'
}

# ---------------------------------------------------------------------------- launcher

# Sets $listed to the hosts of the mounted hostfile, space-separated ("host slots=N" or "host:N").
read_hostfile() {
	listed=
	[ -r "$hostfile" ] || return 0
	while read -r entry rest || [ -n "$entry" ]; do
		case $entry in '' | '#'*) continue ;; esac
		listed="$listed ${entry%%:*}"
	done <"$hostfile"
	listed=${listed# }
}

# reachable HOST: whether HOST accepts TCP connections on $port.
reachable() {
	if [ "$probe" = bash ]; then
		if [ "$has_timeout" = 1 ]; then
			timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$1" "$port" </dev/null >/dev/null 2>&1
		else
			bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$1" "$port" </dev/null >/dev/null 2>&1
		fi
	else
		nc -z -w 5 "$1" "$port" </dev/null >/dev/null 2>&1
	fi
}

launcher() {
	export SJ_MPI_ROLE=launcher
	trap 'exit 143' TERM
	trap 'exit 130' INT
	[ "$#" -gt 0 ] || fail "no command to run on the launcher"
	[ -r "$ssh_dir/ssh-privatekey" ] ||
		fail "cannot read $ssh_dir/ssh-privatekey as uid $(uid): a non-root image needs spec.runAsUser"
	wait_seconds=${SJ_MPI_WAIT_SECONDS:-$default_wait_seconds}
	case $wait_seconds in
	'' | *[!0-9]*) fail "SJ_MPI_WAIT_SECONDS must be a whole number of seconds, not '$wait_seconds'" ;;
	esac
	if command -v bash >/dev/null 2>&1; then
		probe=bash
	elif command -v nc >/dev/null 2>&1; then
		probe=nc
	else
		fail "the image has neither bash nor nc: cannot tell when the workers' sshd is up"
	fi
	has_timeout=0
	if command -v timeout >/dev/null 2>&1; then
		has_timeout=1
	fi
	[ -n "${SJ_HOSTS:-}" ] || fail "SJ_HOSTS is not set"
	# SJ_HOSTS lists every pod of this run, the launcher first.
	workers=
	seen=0
	set -f
	saved_ifs=$IFS
	IFS=,
	for host in $SJ_HOSTS; do
		if [ "$seen" -gt 0 ]; then
			workers="$workers $host"
		fi
		seen=$((seen + 1))
	done
	IFS=$saved_ifs
	workers=${workers# }
	[ -n "$workers" ] || fail "SJ_HOSTS names no worker: '$SJ_HOSTS'"
	deadline=$(($(date +%s) + wait_seconds))
	while :; do
		read_hostfile
		if [ "$listed" = "$workers" ]; then
			pending=
			for host in $workers; do
				reachable "$host" || pending="$pending $host"
			done
			[ -n "$pending" ] || break
			why="not accepting connections on port $port:$pending"
		else
			why="$hostfile lists '$listed' instead of this run's workers '$workers'"
		fi
		[ "$(date +%s)" -lt "$deadline" ] || fail "MPI workers not ready after ${wait_seconds}s: $why"
		sleep 1
	done
	set +f
	log "workers ready: $workers"
	exec "$@"
}

# ---------------------------------------------------------------------------- worker

# Sets $apps to the live processes below this shell other than sshd's own (the MPI daemon and the
# ranks started through ssh, and whatever they started).
scan_apps() {
	table=
	for stat in /proc/[0-9]*/stat; do
		line=
		{ read -r line <"$stat"; } 2>/dev/null || continue
		pid=${line%% *}
		name=${line#*\(}
		name=${name%\)*}
		rest=${line##*\) }
		state=${rest%% *}
		rest=${rest#* }
		ppid=${rest%% *}
		table="$table$pid $ppid $state $name$newline"
	done
	tree=" $$ "
	grown=1
	while [ "$grown" = 1 ]; do
		grown=0
		while read -r pid ppid state name; do
			[ -n "$pid" ] || continue
			case $tree in *" $pid "*) continue ;; esac
			case $tree in *" $ppid "*)
				tree="$tree$pid "
				grown=1
				;;
			esac
		done <<EOF
$table
EOF
	done
	apps=
	while read -r pid ppid state name; do
		[ -n "$pid" ] || continue
		case $tree in *" $pid "*) ;; *) continue ;; esac
		[ "$pid" != "$$" ] && [ "$pid" != "$sshd_pid" ] || continue
		case $state in Z | X | x) continue ;; esac
		case $name in sshd | sshd-* | sshd:*) continue ;; esac
		apps="$apps $pid"
	done <<EOF
$table
EOF
}

drain() {
	trap '' TERM INT
	log "stopping: sshd stays up until the processes started through it have exited"
	while scan_apps && [ -n "$apps" ]; do
		sleep 1
	done
	if [ -n "$sshd_pid" ]; then
		kill -TERM "$sshd_pid" 2>/dev/null || :
		wait "$sshd_pid" 2>/dev/null || :
	fi
	exit 143
}

write_sshd_config() {
	setenv=
	for name in $forward_env; do
		eval "is_set=\${$name+set}"
		[ -n "$is_set" ] || continue
		eval "value=\$$name"
		case $value in
		*'"'* | *'\'* | *"$newline"*)
			log "not passing $name to ssh sessions: its value has a quote, backslash or newline"
			continue
			;;
		esac
		setenv="$setenv \"$name=$value\""
	done
	{
		echo "HostKey $run_dir/ssh_host_ed25519_key"
		echo "PidFile $run_dir/sshd.pid"
		echo "AuthorizedKeysFile $ssh_dir/authorized_keys"
		echo 'PubkeyAuthentication yes'
		echo 'PasswordAuthentication no'
		echo 'KbdInteractiveAuthentication no'
		echo 'PermitEmptyPasswords no'
		echo 'UsePAM no'
		# Mounted Secrets have owners and modes that sshd's strict checks reject.
		echo 'StrictModes no'
		echo 'PermitUserEnvironment no'
		echo 'X11Forwarding no'
		echo 'AllowAgentForwarding no'
		echo 'AllowTcpForwarding no'
		echo 'PermitTunnel no'
		echo 'PrintMotd no'
		echo 'PrintLastLog no'
		if [ -n "$setenv" ]; then
			echo "SetEnv$setenv"
		fi
	} >"$run_dir/sshd_config"
}

worker() {
	export SJ_MPI_ROLE=worker
	sshd_pid=
	trap drain TERM INT
	[ -x "$sshd" ] || fail "$sshd not found: MPI worker images need the OpenSSH server"
	[ -r "$ssh_dir/authorized_keys" ] ||
		fail "cannot read $ssh_dir/authorized_keys as uid $(uid): a non-root image needs spec.runAsUser"
	umask 077
	mkdir -p "$run_dir" || fail "cannot create $run_dir"
	if [ ! -f "$run_dir/ssh_host_ed25519_key" ]; then
		ssh-keygen -q -t ed25519 -N '' -C "$0 host key" -f "$run_dir/ssh_host_ed25519_key" </dev/null >/dev/null ||
			fail "ssh-keygen could not create a host key in $run_dir"
	fi
	if [ "$(uid)" = 0 ]; then
		# sshd started as root wants its privilege separation directory (Debian's path).
		mkdir -p -m 0755 /run/sshd 2>/dev/null || :
	fi
	write_sshd_config || fail "cannot write $run_dir/sshd_config"
	"$sshd" -D -e -p "$port" -f "$run_dir/sshd_config" &
	sshd_pid=$!
	log "sshd started on port $port"
	wait "$sshd_pid"
	status=$?
	[ "$status" -ne 0 ] || status=1
	fail "sshd exited with status $status" "$status"
}

index=${JOB_COMPLETION_INDEX:-}
case $index in
'' | *[!0-9]*) fail "JOB_COMPLETION_INDEX is '$index': the MPI entrypoint needs an Indexed Job" ;;
"$launcher_index") launcher "$@" ;;
*) worker ;;
esac
"""


def _entrypoint_script(
    *,
    port: int = SSH_PORT,
    mpi_dir: str = MPI_DIR,
    ssh_dir: str = SSH_DIR,
    run_dir: str = RUN_DIR,
    sshd: str = SSHD_PATH,
    default_wait_seconds: int = DEFAULT_WAIT_SECONDS,
) -> str:
    """The entrypoint script with its settings; the parameters exist for the tests."""
    settings = (
        ("port", str(port)),
        ("mpi_dir", mpi_dir),
        ("ssh_dir", ssh_dir),
        ("run_dir", run_dir),
        ("sshd", sshd),
        ("default_wait_seconds", str(default_wait_seconds)),
        ("launcher_index", str(LAUNCHER_INDEX)),
        ("forward_env", " ".join(FORWARDED_ENV)),
    )
    header = "".join(f"{name}={shlex.quote(value)}\n" for name, value in settings)
    return f"# {ENTRYPOINT_NAME}: the launcher (pod 0) runs the command, workers run sshd.\n{header}{_ENTRYPOINT_BODY}"


MPI_ENTRYPOINT_SCRIPT: Final = _entrypoint_script()
"""The POSIX ``sh`` entrypoint of MPI pods, as the shell sees it (see the module docstring)."""


def escape_kubernetes_expansion(text: str) -> str:
    """``text`` with every ``$`` doubled, so that Kubernetes' ``$(VAR)`` expansion leaves it as is."""
    return text.replace("$", "$$")


def mpi_entrypoint(user_command: Sequence[str]) -> list[str]:
    """The container ``command`` of MPI pods: :data:`MPI_ENTRYPOINT_SCRIPT` wrapping ``user_command``.

    ``["/bin/sh", "-c", <script>, "sj-mpi-entrypoint", *user_command]``: the launcher ``exec``s
    ``user_command`` (the SJ's ``command`` followed by its ``args``). The script is escaped for
    Kubernetes' ``$(VAR)`` expansion; ``user_command`` is not, so its ``$(SJ_...)`` references
    still expand as in any container.
    """
    if not user_command:
        raise ValueError("the MPI launcher needs a command")
    return ["/bin/sh", "-c", escape_kubernetes_expansion(MPI_ENTRYPOINT_SCRIPT), ENTRYPOINT_NAME, *user_command]


# --------------------------------------------------------------------------------------------
# The Job
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MPIJobOptions:
    """What the run's Job needs to know about an SJ's MPI objects (the ``mpi`` of ``build_run_job``)."""

    ssh_secret_name: str
    hostfile_configmap_name: str
    implementation: MPIImplementation

    def to_mapping(self) -> dict[str, str]:
        return {
            OPTION_SSH_SECRET: self.ssh_secret_name,
            OPTION_HOSTFILE_CONFIGMAP: self.hostfile_configmap_name,
            OPTION_IMPLEMENTATION: self.implementation.value,
        }


def mpi_job_options(*, sj_name: str, mpi: MPISpec) -> dict[str, str]:
    """The ``mpi`` argument of ``build_run_job`` for an SJ with ``spec.mpi``."""
    return MPIJobOptions(
        ssh_secret_name=mpi_secret_name(sj_name),
        hostfile_configmap_name=hostfile_configmap_name(sj_name),
        implementation=mpi.implementation,
    ).to_mapping()


def parse_mpi_job_options(options: Mapping[str, Any]) -> MPIJobOptions | None:
    """Read a mapping made by :func:`mpi_job_options`.

    A mapping with none of its keys is not MPI wiring and gives None (the hook's contract before the
    wiring existed: such a mapping leaves the Job unchanged). One with some but not all of them, or
    with bad values, raises ValueError.
    """
    present = [key for key in _OPTION_KEYS if key in options]
    if not present:
        return None
    missing = [key for key in _OPTION_KEYS if key not in options]
    if missing:
        raise ValueError(f"MPI job options lack {', '.join(missing)}")
    names = {key: options[key] for key in (OPTION_SSH_SECRET, OPTION_HOSTFILE_CONFIGMAP)}
    for key, value in names.items():
        if not isinstance(value, str) or not value:
            raise ValueError(f"MPI job option {key} must be a non-empty string, got {value!r}")
    try:
        implementation = MPIImplementation(options[OPTION_IMPLEMENTATION])
    except ValueError:
        raise ValueError(
            f"MPI job option {OPTION_IMPLEMENTATION} must be one of "
            f"{', '.join(item.value for item in MPIImplementation)}, got {options[OPTION_IMPLEMENTATION]!r}"
        ) from None
    return MPIJobOptions(
        ssh_secret_name=names[OPTION_SSH_SECRET],
        hostfile_configmap_name=names[OPTION_HOSTFILE_CONFIGMAP],
        implementation=implementation,
    )


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


def _check_spec(spec: ScavengerJobSpec) -> tuple[str, ...]:
    """The launcher's command line; raises InvalidSpec for specs the wiring cannot serve."""
    if spec.mpi is None or not spec.is_gang:
        raise InvalidSpec("spec.mpi", "MPI wiring needs spec.mpi and parallelism of at least 2")
    if spec.command is None:
        raise InvalidSpec(
            "spec.command", "is required with spec.mpi (pod 0 runs it; the image's entrypoint is not known)"
        )
    for index, volume in enumerate(spec.volumes):
        if volume.name in RESERVED_VOLUME_NAMES:
            raise InvalidSpec(f"spec.volumes[{index}].name", f"{volume.name!r} is reserved for the MPI wiring")
        path = volume.mount_path.rstrip("/") or "/"
        for reserved in RESERVED_MOUNT_PATHS:
            if path == reserved or path.startswith(f"{reserved}/"):
                raise InvalidSpec(f"spec.volumes[{index}].mountPath", f"{reserved} is reserved for the MPI wiring")
    return (*spec.command, *(spec.args or ()))


def wire_mpi_job(job: Mapping[str, Any], *, spec: ScavengerJobSpec, options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a run's Job (from ``build_run_job``) wired for MPI as the module docstring describes.

    ``options`` is what :func:`mpi_job_options` returns; a mapping with none of its keys leaves the
    Job unchanged (see :func:`parse_mpi_job_options`). Raises InvalidSpec when the SJ cannot be
    wired (no ``spec.mpi``, no ``spec.command``, a volume on a reserved name or path) and ValueError
    for malformed options.
    """
    wired: dict[str, Any] = copy.deepcopy(dict(job))
    parsed = parse_mpi_job_options(options)
    if parsed is None:
        return wired
    user_command = _check_spec(spec)
    wired["spec"]["successPolicy"] = {"rules": [{"succeededIndexes": str(LAUNCHER_INDEX)}]}
    pod: dict[str, Any] = wired["spec"]["template"]["spec"]
    if spec.run_as_user:  # neither None nor root: the Secret's files must become group-readable
        fs_group = spec.run_as_group if spec.run_as_group is not None else spec.run_as_user
        pod["securityContext"] = {
            **pod.get("securityContext", {}),
            "fsGroup": fs_group,
            "fsGroupChangePolicy": "OnRootMismatch",
        }
    pod["volumes"] = [*pod.get("volumes", []), *_mpi_volumes(parsed)]
    container: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == CONTAINER_NAME)
    container["command"] = mpi_entrypoint(user_command)
    container.pop("args", None)
    env: list[dict[str, Any]] = container["env"]
    operator_vars = len(env) - len(spec.env)  # build_run_job puts the user's variables last
    container["env"] = [*env[:operator_vars], *mpi_env(parsed.implementation), *env[operator_vars:]]
    container["volumeMounts"] = [*container.get("volumeMounts", []), *(dict(mount) for mount in _MPI_MOUNTS)]
    return wired
