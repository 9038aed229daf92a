"""Every bound of the API, once: the pydantic models check them (so the webhook and the loop refuse what
is past them, naming the field) and the generated CRD carries them to the API server (``maximum``,
``maxLength``, ``maxItems``, ``maxProperties``, CEL rules), so ``kubectl apply`` refuses too.

The bounds are generous for real workloads and finite, so that nothing a tenant writes can make the
decision pass raise or slow down: a duration or a quantity at the far end of what is accepted still
adds, compares and prints. ``docs/reference/api.md`` lists them per field (``python -m
sj_operator.api.reference``).

Two bounds only the webhook and the loop check, because the API server's schema cannot say them: the
whole spec's size (:data:`MAX_SPEC_BYTES`) and the total size of the pod annotations
(:data:`MAX_POD_ANNOTATIONS_BYTES`). A quantity's value (:data:`MAX_QUANTITY`) is checked there too; the
CRD bounds its length.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

# --- the whole object -----------------------------------------------------------------------------

MAX_NAME_LENGTH: Final = 63
"""An SJ's name is a DNS label, so its runs, pods, Services and label values derive from it readably."""
MAX_SPEC_BYTES: Final = 256 * 1024
"""The whole spec, serialized as compact JSON (UTF-8): far above any real spec, far below etcd's object
limit (1.5 MiB), so one object can neither fill the store nor the operator's memory."""

# --- numbers --------------------------------------------------------------------------------------

MAX_PARALLELISM: Final = 1000
MAX_PRIORITY_LEVELS: Final = 100
MAX_TERMINATION_GRACE_SECONDS: Final = 3600
"""The model's own ceiling; the cluster's is lower (the operator's ``--max-termination-grace``, at most
this)."""
MAX_INTERRUPTIONS: Final = 1_000_000
MAX_ID: Final = 2**31 - 1
"""``runAsUser`` and ``runAsGroup``, as Kubernetes validates a pod's."""
MAX_SLOTS_PER_WORKER: Final = 1024
MAX_TOLERATION_SECONDS: Final = 365 * 24 * 3600
MAX_FALLBACKS: Final = 8

# --- durations ------------------------------------------------------------------------------------

MAX_DURATION: Final = timedelta(days=30)
"""``spec.duration``: a checkpoint period of a month is already longer than any scavenged run lasts."""
MAX_FALLBACK_AFTER: Final = timedelta(days=30)
MAX_DURATION_LENGTH: Final = 64
"""Characters of a duration string (``1h30m``)."""

# --- quantities -----------------------------------------------------------------------------------

MAX_QUANTITY: Final = "1E"
"""The largest resource quantity (10^18 of the resource's unit): an exabyte of memory, 10^18 CPUs."""
MAX_QUANTITY_LENGTH: Final = 64
"""Characters of a quantity string (``500m``, ``1.5Gi``)."""
MAX_RESOURCES: Final = 32
"""Resources named in one ``requests``, ``limits`` or ScavengerQuota ``hard``."""

# --- strings --------------------------------------------------------------------------------------

MAX_IMAGE_LENGTH: Final = 1024
MAX_ARG_LENGTH: Final = 32 * 1024
"""One item of ``command`` or ``args`` (an inline script fits)."""
MAX_PATH_LENGTH: Final = 4096
"""``workingDir``, a volume's ``mountPath`` and ``subPath`` (Linux's PATH_MAX)."""
MAX_ENV_NAME_LENGTH: Final = 1024
MAX_ENV_VALUE_LENGTH: Final = 32 * 1024
MAX_QUALIFIED_NAME_LENGTH: Final = 253 + 1 + 63
"""A label, annotation, taint or resource key: ``prefix/name``, a DNS subdomain and a 63-character name."""
MAX_LABEL_VALUE_LENGTH: Final = 63
MAX_POD_ANNOTATIONS_BYTES: Final = 128 * 1024
"""The keys and values of ``podAnnotations`` together (Kubernetes allows 256 KiB per object, and the
operator adds its own)."""

# --- lists and maps -------------------------------------------------------------------------------

MAX_ARGS: Final = 1024
"""Items of ``command`` or ``args``."""
MAX_ENV: Final = 512
MAX_VOLUMES: Final = 64
MAX_TOLERATIONS: Final = 64
MAX_IMAGE_PULL_SECRETS: Final = 32
MAX_NODE_SELECTOR: Final = 64
MAX_POD_LABELS: Final = 64
MAX_POD_ANNOTATIONS: Final = 64
