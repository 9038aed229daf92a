"""What the operator's ServiceAccount may and may not do, as `kubectl auth can-i` asks it: the e2e stage asks
the API server (test_real_node.py), and tests/unit/test_rbac.py answers the same questions from the rendered
chart, so that a row that contradicts the chart fails without a cluster."""
from __future__ import annotations

SYSTEM = "scavenger-system"
SA = f"system:serviceaccount:{SYSTEM}:scavenger-operator"

# What the operator's ServiceAccount may and may not do (kubectl auth can-i): (verb, resource, namespace),
# the resource as TYPE[:NAME][/SUBRESOURCE]; "" asks across all namespaces (or of a cluster-scoped type).
# MAY is the chart's grants (tests/unit/test_rbac.py proves they are exactly what the calls need); MAY_NOT
# what an operator's token must never do. RBAC cannot tell a dry run from a create, nor an owned object
# from another: `create pods` is allowed but only as a dry run (the operator guard, tested in test_real_node.py), and
# `delete services` and `delete jobs` anywhere (the code deletes only what its SJ owns).
MAY = [
    ("patch", "scavengerjobs.scavenger.dev/status", "team-a"), ("watch", "scavengerjobs.scavenger.dev", ""),
    ("watch", "scavengerquotas.scavenger.dev", ""), ("watch", "scavengerclusterquotas.scavenger.dev", ""),
    ("create", "jobs.batch", "team-a"), ("delete", "jobs.batch", "team-a"), ("watch", "jobs.batch", ""),
    ("get", "jobs.batch", "team-a"), ("get", "services", "team-a"), ("get", "poddisruptionbudgets.policy", "team-a"),
    ("watch", "pods", ""), ("patch", "pods", "team-a"), ("create", "pods", "team-a"),
    ("create", "services", "team-a"), ("delete", "services", "team-a"),
    ("get", "endpointslices.discovery.k8s.io", "team-a"), ("create", "endpointslices.discovery.k8s.io", "team-a"),
    ("patch", "endpointslices.discovery.k8s.io", "team-a"), ("delete", "endpointslices.discovery.k8s.io", "team-a"),
    ("create", "secrets", "team-a"), ("get", "secrets", "team-a"),
    ("get", "configmaps", "team-a"), ("create", "configmaps", "team-a"), ("patch", "configmaps", "team-a"),
    ("get", "persistentvolumeclaims", "team-a"),
    ("create", "poddisruptionbudgets.policy", "team-a"), ("patch", "poddisruptionbudgets.policy", "team-a"),
    ("create", "events", "team-a"), ("patch", "events", "team-a"), ("create", "priorityclasses.scheduling.k8s.io", ""),
    ("watch", "nodes", ""), ("watch", "namespaces", ""), ("watch", "resourcequotas", ""),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", ""),
    # Its own namespace: its Lease and its webhook's Secret, by name.
    ("create", "leases.coordination.k8s.io", SYSTEM), ("get", "leases.coordination.k8s.io:scavenger", SYSTEM),
    ("update", "leases.coordination.k8s.io:scavenger", SYSTEM),
    ("create", "secrets", SYSTEM), ("update", "secrets:scavenger-webhook-tls", SYSTEM),
    # Its webhook configurations (the chart's): their caBundle, by name.
    ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io:scavengerjobs.scavenger.dev", ""),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io:jobs.scavenger.dev", ""),
    # Adoption: the SJ of a labelled Job, and that Job's final status.
    ("create", "scavengerjobs.scavenger.dev", "team-a"), ("patch", "jobs.batch/status", "team-a"),
]
MAY_NOT = [
    # The admin's quotas: read, never written.
    ("update", "scavengerclusterquotas.scavenger.dev", ""), ("update", "scavengerquotas.scavenger.dev", "team-a"),
    # Secrets: no listing or watching anywhere, no change to anyone's.
    ("list", "secrets", "team-a"), ("list", "secrets", ""), ("watch", "secrets", ""),
    ("update", "secrets", "team-a"), ("patch", "secrets", "team-a"), ("delete", "secrets", "team-a"),
    ("update", "secrets:other", SYSTEM), ("delete", "secrets:scavenger-webhook-tls", SYSTEM),
    # Pods: no delete, no update, none of their subresources (exec, status, ephemeral containers).
    ("delete", "pods", "team-a"), ("update", "pods", "team-a"), ("create", "pods/exec", "team-a"),
    ("patch", "pods/status", "team-a"), ("patch", "pods/ephemeralcontainers", "team-a"),
    ("create", "pods/eviction", "team-a"),
    # Webhook configurations and admission policies: none made, deleted, or changed but its own caBundle.
    ("create", "validatingwebhookconfigurations.admissionregistration.k8s.io", ""),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ""),
    ("delete", "validatingwebhookconfigurations.admissionregistration.k8s.io:scavengerjobs.scavenger.dev", ""),
    ("delete", "mutatingwebhookconfigurations.admissionregistration.k8s.io:jobs.scavenger.dev", ""),
    ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io:other", ""),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ""),
    ("update", "validatingadmissionpolicies.admissionregistration.k8s.io:scavenger-operator-guard", ""),
    ("delete", "validatingadmissionpolicybindings.admissionregistration.k8s.io:scavenger-operator-guard", ""),
    ("create", "validatingadmissionpolicies.admissionregistration.k8s.io", ""),
    # Leases: only its own, in its own namespace.
    ("create", "leases.coordination.k8s.io", "team-a"), ("create", "leases.coordination.k8s.io", "kube-system"),
    ("update", "leases.coordination.k8s.io:kube-scheduler", "kube-system"),
    ("update", "leases.coordination.k8s.io:other", SYSTEM), ("delete", "leases.coordination.k8s.io:scavenger", SYSTEM),
    # What it never writes.
    ("delete", "configmaps", "team-a"), ("update", "configmaps", "kube-system"),
    ("update", "nodes", ""), ("patch", "nodes", ""), ("delete", "nodes", ""), ("get", "nodes/proxy", ""),
    ("update", "scavengerjobs.scavenger.dev", "team-a"), ("patch", "scavengerjobs.scavenger.dev", "team-a"),
    ("delete", "scavengerjobs.scavenger.dev", "team-a"), ("update", "jobs.batch", "team-a"),
    ("patch", "jobs.batch", "team-a"), ("delete", "poddisruptionbudgets.policy", "team-a"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("update", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("delete", "namespaces", ""), ("patch", "priorityclasses.scheduling.k8s.io", ""),
    ("delete", "priorityclasses.scheduling.k8s.io", ""), ("delete", "events", "team-a"),
    # No way to more rights: escalate, bind, impersonate, tokens of other ServiceAccounts.
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ""),
    ("create", "rolebindings.rbac.authorization.k8s.io", "team-a"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", ""), ("bind", "clusterroles.rbac.authorization.k8s.io", ""),
    ("escalate", "roles.rbac.authorization.k8s.io", SYSTEM), ("bind", "roles.rbac.authorization.k8s.io", SYSTEM),
    ("update", "clusterroles.rbac.authorization.k8s.io:scavenger-operator", ""),
    ("impersonate", "serviceaccounts", ""), ("impersonate", "users", ""), ("impersonate", "groups", ""),
    ("create", "serviceaccounts/token", "team-a"), ("create", "certificatesigningrequests.certificates.k8s.io", ""),
]
