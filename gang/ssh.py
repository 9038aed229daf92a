"""The ssh side of MPI wiring: two key pairs per SJ, shared by the launcher and the workers.

* the *user* key: the launcher (and any worker that starts ranks further on) logs in with it; the
  workers' sshd accepts only it (``authorized_keys``);
* the *host* key: every worker's sshd serves it, and the client trusts no other (``known_hosts`` pins
  it for the gang's host names, with ``StrictHostKeyChecking yes``), so a pod that is not one of the
  gang's cannot pass for a worker and receive the ranks, their environment and the user key's logins.

The Secret that carries them is immutable and reused by every run; :func:`secret_data` is its content
(the operator adds the object's metadata). The client uses them through :data:`SSH_CLIENT_CONFIG`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gang.hosts import DEFAULT_CLUSTER_DOMAIN, namespace_domain

SSH_PORT: Final = 2222
"""Port of the workers' unprivileged sshd."""
KEY_COMMENT: Final = "scavenger"
"""Comment of the generated user public key."""
HOST_KEY_COMMENT: Final = "scavenger host key"
"""Comment of the generated host public key."""
SSH_DIR: Final = "/etc/mpi/ssh"
"""Mount path of the ssh Secret."""

SECRET_TYPE: Final = "kubernetes.io/ssh-auth"
KEY_PRIVATE: Final = "ssh-privatekey"
KEY_PUBLIC: Final = "ssh-publickey"
KEY_AUTHORIZED_KEYS: Final = "authorized_keys"
KEY_SSH_CONFIG: Final = "config"
KEY_HOST_PRIVATE: Final = "ssh_host_ed25519_key"
KEY_HOST_PUBLIC: Final = "ssh_host_ed25519_key.pub"
KEY_KNOWN_HOSTS: Final = "known_hosts"

SSH_CONFIG_PATH: Final = f"{SSH_DIR}/{KEY_SSH_CONFIG}"
KNOWN_HOSTS_PATH: Final = f"{SSH_DIR}/{KEY_KNOWN_HOSTS}"

SSH_CLIENT_CONFIG: Final = f"""\
Host *
    Port {SSH_PORT}
    IdentityFile {SSH_DIR}/{KEY_PRIVATE}
    IdentitiesOnly yes
    StrictHostKeyChecking yes
    UserKnownHostsFile {KNOWN_HOSTS_PATH}
    GlobalKnownHostsFile {KNOWN_HOSTS_PATH}
    HostKeyAlgorithms ssh-ed25519
    CheckHostIP no
    UpdateHostKeys no
    LogLevel ERROR
    BatchMode yes
    ConnectTimeout 10
"""
"""ssh client configuration (``-F /etc/mpi/ssh/config``): only the gang's pinned host key is trusted.

Both known_hosts files are the Secret's (a host key the image brings is not trusted); pod addresses
change with every run, so they are not checked (``CheckHostIP no``), and the mounted file is read-only
(``UpdateHostKeys no``)."""


@dataclass(frozen=True)
class SSHKeyPair:
    """An ed25519 key pair in OpenSSH's formats."""

    private: str
    """The private key, OpenSSH PEM, unencrypted (it lives in a Secret)."""
    public: str
    """``ssh-ed25519 AAAA... <comment>``."""


@dataclass(frozen=True)
class GangKeys:
    """The key pairs of an MPI SJ, made together when its Secret is."""

    user: SSHKeyPair
    """The launcher's login key; the workers' ``authorized_keys``."""
    host: SSHKeyPair
    """The workers' sshd host key; pinned in ``known_hosts``."""


def generate_ssh_keypair(comment: str = KEY_COMMENT) -> SSHKeyPair:
    """A fresh ed25519 key pair whose public key ends with ``comment``.

    With :func:`generate_gang_keys`, the only impure functions of the gang package."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.OpenSSH,
        encryption_algorithm=serialization.NoEncryption(),
    ).decode("ascii")
    public = (
        key.public_key()
        .public_bytes(encoding=serialization.Encoding.OpenSSH, format=serialization.PublicFormat.OpenSSH)
        .decode("ascii")
    )
    return SSHKeyPair(private=private, public=f"{public} {comment}")


def generate_gang_keys() -> GangKeys:
    """A fresh user key pair and a fresh host key pair for one SJ."""
    return GangKeys(user=generate_ssh_keypair(KEY_COMMENT), host=generate_ssh_keypair(HOST_KEY_COMMENT))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


def _line(text: str) -> str:
    """``text`` ending with exactly one newline (OpenSSH wants key files to end with one)."""
    return text.rstrip("\n") + "\n"


def known_hosts(*, host_public_key: str, namespace: str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> str:
    """``*.<namespace>.svc.<cluster-domain> <host public key>``: the gang's host key, pinned for its hosts.

    The hosts are ``<run>-<index>.<run>.<namespace>.svc.<cluster-domain>`` (:mod:`gang.hosts`); the run's
    name changes with every run and the Secret does not, so the pattern names the namespace's Services.
    What is checked is the key, which only this SJ's pods (and whoever may read its Secret) hold: a host
    with any other key is refused.
    """
    return _line(f"*.{namespace_domain(namespace, cluster_domain)} {host_public_key.strip()}")


def secret_data(*, keys: GangKeys, namespace: str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> dict[str, str]:
    """The base64 ``data`` of the ssh Secret (type :data:`SECRET_TYPE`).

    Keys: ``ssh-privatekey``, ``ssh-publickey``, ``authorized_keys`` (the user key),
    ``ssh_host_ed25519_key`` and ``ssh_host_ed25519_key.pub`` (the host key), ``known_hosts``
    (:func:`known_hosts`) and ``config`` (:data:`SSH_CLIENT_CONFIG`).
    """
    public = _line(keys.user.public.strip())
    return {
        KEY_PRIVATE: _b64(_line(keys.user.private)),
        KEY_PUBLIC: _b64(public),
        KEY_AUTHORIZED_KEYS: _b64(public),
        KEY_HOST_PRIVATE: _b64(_line(keys.host.private)),
        KEY_HOST_PUBLIC: _b64(_line(keys.host.public.strip())),
        KEY_KNOWN_HOSTS: _b64(known_hosts(host_public_key=keys.host.public, namespace=namespace,
                                          cluster_domain=cluster_domain)),
        KEY_SSH_CONFIG: _b64(SSH_CLIENT_CONFIG),
    }
