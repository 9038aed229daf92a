"""The ssh side of MPI wiring: one key pair per SJ, shared by the launcher and the workers.

The Secret that carries it is immutable and reused by every run; :func:`secret_data` is its content
(the operator adds the object's metadata). Workers accept only this key; the launcher uses it through
the client configuration :data:`SSH_CLIENT_CONFIG`.
"""

from __future__ import annotations

import base64
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SSH_PORT: Final = 2222
"""Port of the workers' unprivileged sshd."""
KEY_COMMENT: Final = "scavenger"
"""Comment of the generated public key."""
SSH_DIR: Final = "/etc/mpi/ssh"
"""Mount path of the ssh Secret."""
SSH_CONFIG_PATH: Final = f"{SSH_DIR}/config"

SECRET_TYPE: Final = "kubernetes.io/ssh-auth"
KEY_PRIVATE: Final = "ssh-privatekey"
KEY_PUBLIC: Final = "ssh-publickey"
KEY_AUTHORIZED_KEYS: Final = "authorized_keys"
KEY_SSH_CONFIG: Final = "config"

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


def generate_ssh_keypair() -> tuple[str, str]:
    """A fresh ed25519 key pair: ``(private key in OpenSSH PEM, "ssh-ed25519 AAAA... scavenger")``.

    The only impure function of the gang package. The private key is unencrypted (it lives in a Secret).
    """
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
    return private, f"{public} {KEY_COMMENT}"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


def _line(text: str) -> str:
    """``text`` ending with exactly one newline (OpenSSH wants key files to end with one)."""
    return text.rstrip("\n") + "\n"


def secret_data(*, private_key: str, public_key: str) -> dict[str, str]:
    """The base64 ``data`` of the ssh Secret (type :data:`SECRET_TYPE`).

    Keys: ``ssh-privatekey``, ``ssh-publickey``, ``authorized_keys`` (the public key) and ``config``
    (:data:`SSH_CLIENT_CONFIG`).
    """
    public = _line(public_key.strip())
    return {
        KEY_PRIVATE: _b64(_line(private_key)),
        KEY_PUBLIC: _b64(public),
        KEY_AUTHORIZED_KEYS: _b64(public),
        KEY_SSH_CONFIG: _b64(SSH_CLIENT_CONFIG),
    }
