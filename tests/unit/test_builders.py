"""Exact child objects built for a ScavengerJob."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sj_operator.api import parse_spec
from sj_operator.api.fields import is_label_value, qualified_name_error
from sj_operator.builders.budget import protection_budget
from sj_operator.builders.job import admission_shape, build_run_job
from sj_operator.builders.mpi import mpi_job_options
from sj_operator.builders.service import build_gang_endpoints, build_gang_service, gang_members
from sj_operator.names import run_job_name, sj_label_value
from sj_operator.observed import PodView, pod_view
from tests.unit.helpers import POD_FAILURE_POLICY

UID = "0b6c2d1e-5f7a-4c3b-9d8e-112233445566"
OWNER = {
    "apiVersion": "scavenger.dev/v1alpha1",
    "kind": "ScavengerJob",
    "name": "counter",
    "uid": UID,
    "controller": True,
    "blockOwnerDeletion": True,
}

SINGLE_POD_SPEC: dict[str, Any] = {
    "image": "registry.example/counter:1.2",
    "command": ["python", "-m", "counter"],
    "args": ["--steps", "1000"],
    "env": [
        {"name": "MODE", "value": "fast"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ],
    "workingDir": "/work",
    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 1}},
    "volumes": [
        {
            "name": "ckpt",
            "mountPath": "/ckpt",
            "subPath": "counter",
            "persistentVolumeClaim": {"claimName": "ckpt-pvc"},
        },
        {"name": "config", "mountPath": "/etc/counter", "readOnly": True, "configMap": {"name": "counter-config"}},
        {"name": "creds", "mountPath": "/var/run/creds", "readOnly": False, "secret": {"secretName": "counter-creds"}},
        {"name": "scratch", "mountPath": "/scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}},
        {"name": "tmp", "mountPath": "/tmp", "emptyDir": {}},
    ],
    "checkpointVolume": "ckpt",
    "duration": "1h",
    "priorityLevels": 4,
    "runAsUser": 1000,
    "runAsGroup": 3000,
    "terminationGracePeriodSeconds": 45,
    "nodeSelector": {"kubernetes.io/arch": "amd64"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
    ],
    "serviceAccountName": "counter",
    "imagePullSecrets": [{"name": "regcred"}],
    "podLabels": {"team": "ml", "scavenger.dev.example/x": "y"},
    "podAnnotations": {"sim.scavenger.dev/run-for": "20s", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
    "maxInterruptions": 10,
    "suspend": False,
}

EXPECTED_SINGLE_POD_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "counter-r3",
        "namespace": "research",
        "labels": {"scavenger.dev/job-name": "counter", "scavenger.dev/run": "counter-r3"},
        "ownerReferences": [OWNER],
    },
    "spec": {
        "completionMode": "NonIndexed",
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": POD_FAILURE_POLICY,
        "template": {
            "metadata": {
                "labels": {
                    "team": "ml",
                    "scavenger.dev.example/x": "y",
                    "scavenger.dev/protected": "false",
                    "scavenger.dev/job-name": "counter",
                    "scavenger.dev/run": "counter-r3",
                },
                "annotations": {
                    "sim.scavenger.dev/run-for": "20s",
                    "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
                },
            },
            "spec": {
                "restartPolicy": "Never",
                "enableServiceLinks": False,
                "priorityClassName": "scavenger-1",
                "terminationGracePeriodSeconds": 45,
                "serviceAccountName": "counter",
                "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "runAsNonRoot": True,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "nodeSelector": {"kubernetes.io/arch": "amd64"},
                "tolerations": [
                    {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
                    {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
                ],
                "imagePullSecrets": [{"name": "regcred"}],
                "volumes": [
                    {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-pvc"}},
                    {"name": "config", "configMap": {"name": "counter-config"}},
                    {"name": "creds", "secret": {"secretName": "counter-creds"}},
                    {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}},
                    {"name": "tmp", "emptyDir": {}},
                ],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/counter:1.2",
                        "command": ["python", "-m", "counter"],
                        "args": ["--steps", "1000"],
                        "workingDir": "/work",
                        "env": [
                            {"name": "SJ_NAME", "value": "counter"},
                            {"name": "SJ_NAMESPACE", "value": "research"},
                            {"name": "SJ_RESTART_COUNT", "value": "2"},
                            {"name": "SJ_CHECKPOINT_DIR", "value": "/ckpt"},
                            {"name": "SJ_CHECKPOINT_INTERVAL", "value": "900"},
                            {"name": "MODE", "value": "fast"},
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        ],
                        "resources": {
                            "requests": {"cpu": "500m", "memory": "1Gi"},
                            "limits": {"cpu": "1", "memory": "1Gi"},
                        },
                        "volumeMounts": [
                            {"name": "ckpt", "mountPath": "/ckpt", "subPath": "counter"},
                            {"name": "config", "mountPath": "/etc/counter", "readOnly": True},
                            {"name": "creds", "mountPath": "/var/run/creds", "readOnly": False},
                            {"name": "scratch", "mountPath": "/scratch"},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    }
                ],
            },
        },
    },
}


def test_single_pod_job_with_every_field() -> None:
    job = build_run_job(
        sj_name="counter",
        namespace="research",
        sj_uid=UID,
        spec=parse_spec(SINGLE_POD_SPEC),
        status_interrupted_count=2,
        attempt=3,
        priority_class_name="scavenger-1",
        extra_pod_labels={"scavenger.dev/protected": "false"},
    )
    assert job == EXPECTED_SINGLE_POD_JOB


GANG_SPEC: dict[str, Any] = {
    "image": "mpi:latest",
    "parallelism": 3,
    "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
}

EXPECTED_GANG_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "train-r1",
        "namespace": "default",
        "labels": {"scavenger.dev/job-name": "train", "scavenger.dev/run": "train-r1"},
        "ownerReferences": [{**OWNER, "name": "train"}],
    },
    "spec": {
        "completionMode": "Indexed",
        "completions": 3,
        "parallelism": 3,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": POD_FAILURE_POLICY,
        "template": {
            "metadata": {
                "labels": {"scavenger.dev/job-name": "train", "scavenger.dev/run": "train-r1"},
                "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
            },
            "spec": {
                "restartPolicy": "Never",
                "enableServiceLinks": False,
                "priorityClassName": "scavenger-0",
                "terminationGracePeriodSeconds": 30,
                "subdomain": "train-r1",
                "containers": [
                    {
                        "name": "main",
                        "image": "mpi:latest",
                        "env": [
                            {"name": "SJ_NAME", "value": "train"},
                            {"name": "SJ_NAMESPACE", "value": "default"},
                            {"name": "SJ_RESTART_COUNT", "value": "0"},
                            {"name": "SJ_CHECKPOINT_INTERVAL", "value": "600"},
                            {
                                "name": "SJ_RANK",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                                    }
                                },
                            },
                            {"name": "SJ_WORLD_SIZE", "value": "3"},
                            {
                                "name": "SJ_HOSTS",
                                "value": "train-r1-0.train-r1.default.svc.cluster.local,"
                                         "train-r1-1.train-r1.default.svc.cluster.local,"
                                         "train-r1-2.train-r1.default.svc.cluster.local",
                            },
                        ],
                        "resources": {
                            "requests": {"cpu": "2", "memory": "4Gi"},
                            "limits": {"cpu": "2", "memory": "4Gi"},
                        },
                    }
                ],
            },
        },
    },
}


def test_three_pod_gang_job() -> None:
    job = build_run_job(
        sj_name="train",
        namespace="default",
        sj_uid=UID,
        spec=parse_spec(GANG_SPEC),
        status_interrupted_count=0,
        attempt=1,
        priority_class_name="scavenger-0",
        extra_pod_labels={},
    )
    assert job == EXPECTED_GANG_JOB


@pytest.mark.parametrize(("cluster_domain", "hosts"), [
    ("cluster.local", "train-r1-0.train-r1.default.svc.cluster.local,train-r1-1.train-r1.default.svc.cluster.local"),
    ("corp.example", "train-r1-0.train-r1.default.svc.corp.example,train-r1-1.train-r1.default.svc.corp.example"),
])  # fmt: skip
def test_gang_members_are_named_in_the_cluster_domain(cluster_domain: str, hosts: str) -> None:
    job = build_run_job(sj_name="train", namespace="default", sj_uid=UID,
                        spec=parse_spec({**GANG_SPEC, "parallelism": 2}), status_interrupted_count=0, attempt=1,
                        priority_class_name="scavenger-0", extra_pod_labels={}, cluster_domain=cluster_domain)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "SJ_HOSTS"] == [hosts]


def test_gang_service_is_headless_without_a_selector() -> None:
    """No selector: the controller manager's endpoints controllers leave it alone, its slice is the operator's."""
    assert build_gang_service(job_name="train-r1", namespace="default", sj_name="train", sj_uid=UID) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "train-r1",
            "namespace": "default",
            "labels": {"scavenger.dev/job-name": "train", "scavenger.dev/run": "train-r1"},
            "ownerReferences": [{**OWNER, "name": "train"}],
        },
        "spec": {"clusterIP": "None"},
    }


def _member_pod(index: int, *, ip: str | None = "10.0.0.1", phase: str = "Running", deleting: bool = False,
                subdomain: str | None = "train-r1", node: str | None = "n1") -> PodView:
    spec: dict[str, Any] = {"hostname": f"train-r1-{index}", "nodeName": node}
    if subdomain is not None:
        spec["subdomain"] = subdomain
    return pod_view({"metadata": {"name": f"train-r1-{index}-x", "namespace": "default", "uid": f"p{index}",
                                  "labels": {"scavenger.dev/run": "train-r1"},
                                  **({"deletionTimestamp": "2026-11-22T12:00:00Z"} if deleting else {})},
                     "spec": spec, "status": {"phase": phase, **({"podIP": ip} if ip else {})}})


@pytest.mark.parametrize(("pods", "published"), [
    ([_member_pod(1), _member_pod(0, ip="10.0.0.2")], [("train-r1-0", "10.0.0.2"), ("train-r1-1", "10.0.0.1")]),
    ([_member_pod(0, ip=None), _member_pod(1)], [("train-r1-1", "10.0.0.1")]),  # no address yet
    ([_member_pod(0, phase="Succeeded"), _member_pod(1, phase="Failed"), _member_pod(2)], [("train-r1-2", "10.0.0.1")]),
    ([_member_pod(0, subdomain=None), _member_pod(1, subdomain="other")], []),  # not named under its run's Service
    ([_member_pod(0, deleting=True)], [("train-r1-0", "10.0.0.1")]),  # terminating: still published
])  # fmt: skip
def test_gang_members_are_the_named_pods_with_an_address_that_have_not_ended(
        pods: list[PodView], published: list[tuple[str, str]]) -> None:
    assert [(m.hostname, m.ip) for m in gang_members(pods)] == published


def test_gang_endpoints_publish_every_member_ready_under_its_hostname() -> None:
    members = gang_members([_member_pod(0), _member_pod(1, ip="10.0.0.7", deleting=True, node=None)])
    assert build_gang_endpoints(job_name="train-r1", namespace="default", sj_name="train", sj_uid=UID,
                                members=members) == {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "train-r1",
            "namespace": "default",
            "labels": {"scavenger.dev/job-name": "train", "scavenger.dev/run": "train-r1",
                       "kubernetes.io/service-name": "train-r1",
                       "endpointslice.kubernetes.io/managed-by": "scavenger.dev"},
            "ownerReferences": [{**OWNER, "name": "train"}],
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.0.0.1"], "hostname": "train-r1-0", "nodeName": "n1",
             "conditions": {"ready": True, "serving": True, "terminating": False},
             "targetRef": {"kind": "Pod", "namespace": "default", "name": "train-r1-0-x", "uid": "p0"}},
            {"addresses": ["10.0.0.7"], "hostname": "train-r1-1",
             "conditions": {"ready": True, "serving": True, "terminating": True},
             "targetRef": {"kind": "Pod", "namespace": "default", "name": "train-r1-1-x", "uid": "p1"}},
        ],
    }


def test_the_gangs_objects_carry_labels_the_api_server_takes() -> None:
    for body in (build_gang_service(job_name="train-r1", namespace="default", sj_name="train", sj_uid=UID),
                 build_gang_endpoints(job_name="train-r1", namespace="default", sj_name="train", sj_uid=UID,
                                      members=gang_members([_member_pod(0)]))):
        for key, value in body["metadata"]["labels"].items():
            assert qualified_name_error(key) is None and is_label_value(value), (key, value)


@pytest.mark.parametrize(("ips", "family", "listed"), [
    (["fd00::1", "fd00::2"], "IPv6", ["fd00::1", "fd00::2"]),
    (["10.0.0.1", "fd00::2"], "IPv4", ["10.0.0.1"]),  # one family per slice: the first member's
    ([], "IPv4", []),
])  # fmt: skip
def test_gang_endpoints_are_of_one_address_family(ips: list[str], family: str, listed: list[str]) -> None:
    members = gang_members([_member_pod(i, ip=ip) for i, ip in enumerate(ips)])
    body = build_gang_endpoints(job_name="train-r1", namespace="default", sj_name="train", sj_uid=UID, members=members)
    assert body["addressType"] == family
    assert [e["addresses"][0] for e in body["endpoints"]] == listed


@pytest.mark.parametrize("pods", [1, 4, 1000])
def test_protection_budget_keeps_every_pod_of_the_run(pods: int) -> None:
    """A number of pods to keep: the disruption controller cannot work out ``maxUnavailable`` (or a percentage)
    for pods a Job owns, which has no scale subresource; the e2e steering test reads the synced budget."""
    budget = protection_budget("default", "train", UID, pods)
    assert budget["metadata"]["name"] == "train-protect"
    assert budget["metadata"]["ownerReferences"] == [{**OWNER, "name": "train"}]
    assert budget["spec"] == {
        "minAvailable": pods,
        "maxUnavailable": None,
        "selector": {"matchLabels": {"scavenger.dev/job-name": "train", "scavenger.dev/protected": "true"}},
    }


def test_protection_budget_of_no_pods_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one pod"):
        protection_budget("default", "train", UID, 0)


def test_the_gangs_pods_are_its_services_endpoints() -> None:
    """A pod of the run's template (given its hostname and address, as the Job controller and the kubelet do)
    is published in the slice of the Service its subdomain names."""
    spec = parse_spec(GANG_SPEC)
    job = build_run_job(
        sj_name="train", namespace="default", sj_uid=UID, spec=spec, status_interrupted_count=0,
        attempt=1, priority_class_name="p", extra_pod_labels={},
    )  # fmt: skip
    name = job["metadata"]["name"]
    service = build_gang_service(job_name=name, namespace="default", sj_name="train", sj_uid=UID)
    template = job["spec"]["template"]
    pod = pod_view({"metadata": {**template["metadata"], "name": f"{name}-0-abc", "namespace": "default", "uid": "p"},
                    "spec": {**template["spec"], "hostname": f"{name}-0"},
                    "status": {"phase": "Pending", "podIP": "10.1.2.3"}})
    assert template["spec"]["subdomain"] == service["metadata"]["name"]
    body = build_gang_endpoints(job_name=name, namespace="default", sj_name="train", sj_uid=UID,
                                members=gang_members([pod]))
    assert body["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
    assert [(e["hostname"], e["addresses"]) for e in body["endpoints"]] == [(f"{name}-0", ["10.1.2.3"])]


def test_minimal_spec_has_no_optional_keys() -> None:
    job = build_run_job(
        sj_name="tiny", namespace="ns", sj_uid=UID, spec=parse_spec({"image": "busybox"}),
        status_interrupted_count=5, attempt=0, priority_class_name="p", extra_pod_labels={},
    )  # fmt: skip
    pod = job["spec"]["template"]["spec"]
    assert set(pod) == {
        "restartPolicy", "enableServiceLinks", "priorityClassName", "terminationGracePeriodSeconds", "containers",
    }  # fmt: skip
    assert pod["containers"][0] == {
        "name": "main",
        "image": "busybox",
        "env": [
            {"name": "SJ_NAME", "value": "tiny"},
            {"name": "SJ_NAMESPACE", "value": "ns"},
            {"name": "SJ_RESTART_COUNT", "value": "5"},
            {"name": "SJ_CHECKPOINT_INTERVAL", "value": "600"},
        ],
        "resources": {},
    }
    assert job["spec"]["podFailurePolicy"] == POD_FAILURE_POLICY


def test_builders_do_not_share_state_with_the_spec() -> None:
    spec = parse_spec(SINGLE_POD_SPEC)
    kwargs: dict[str, Any] = dict(
        sj_name="counter", namespace="research", sj_uid=UID, spec=spec, status_interrupted_count=2,
        attempt=3, priority_class_name="scavenger-1", extra_pod_labels={"scavenger.dev/protected": "false"},
    )  # fmt: skip
    first = build_run_job(**kwargs)
    first["spec"]["template"]["spec"]["nodeSelector"]["zone"] = "mutated"
    first["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "99"
    assert build_run_job(**kwargs) == EXPECTED_SINGLE_POD_JOB


# ----------------------------------------------------------------------------- names

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")

RUN_NAMES = [
    ("counter", 0, "counter-r0"),
    ("counter", 7, "counter-r7"),
    ("a" * 49, 1, "a" * 49 + "-r1"),  # exactly 52: kept
    ("a" * 49, 10, "a" * 42 + "-8f9be-r10"),  # longer attempt pushes it over
    ("a" * 50, 1, "a" * 43 + "-160b4-r1"),
    ("x" * 253, 12345, "x" * 39 + "-1329e-r12345"),
    ("a" * 40 + "." + "b" * 30, 3, "a" * 40 + "-bb-28422-r3"),
    ("my.job", 2, "my-job-bc373-r2"),  # dots are not allowed in DNS-1035 labels
    ("1st", 1, "sj-1st-e01dd-r1"),  # DNS-1035 labels start with a letter
]


@pytest.mark.parametrize(("sj_name", "attempt", "expected"), RUN_NAMES)
def test_run_job_name(sj_name: str, attempt: int, expected: str) -> None:
    name = run_job_name(sj_name, attempt)
    assert name == expected
    assert len(name) <= 52
    assert DNS_1035.fullmatch(name)
    assert name.endswith(f"-r{attempt}")


def test_run_job_names_are_distinct() -> None:
    names = {run_job_name(sj, attempt) for sj in ("a" * 60, "a" * 61, "a.b", "a-b") for attempt in range(3)}
    assert len(names) == 12


def test_run_job_name_rejects_negative_attempt() -> None:
    with pytest.raises(ValueError):
        run_job_name("counter", -1)


@pytest.mark.parametrize(
    ("sj_name", "expected"),
    [
        ("counter", "counter"),
        ("my.job", "my.job"),
        ("a" * 63, "a" * 63),
        ("a" * 64, "a" * 57 + "-ffe05"),
    ],
)
def test_sj_label_value(sj_name: str, expected: str) -> None:
    assert sj_label_value(sj_name) == expected
    assert len(sj_label_value(sj_name)) <= 63


# ----------------------------------------------------------------------------- privileges


@pytest.mark.parametrize(("run_as_user", "hardened"), [(None, False), (0, False), (1, True), (65534, True)])
def test_a_non_root_sj_meets_the_restricted_pod_security_standard(run_as_user: int | None, hardened: bool) -> None:
    extra = {} if run_as_user is None else {"runAsUser": run_as_user}
    pod = build_run_job(sj_name="x", namespace="ns", sj_uid="u", spec=parse_spec({"image": "i", **extra}),
                        status_interrupted_count=0, attempt=1, priority_class_name="scavenger-band-0",
                        extra_pod_labels={})["spec"]["template"]["spec"]
    container = pod["containers"][0]
    if hardened:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    else:
        assert "runAsNonRoot" not in pod.get("securityContext", {}) and "securityContext" not in container


_PRIVILEGED_POD_FIELDS = ("hostNetwork", "hostPID", "hostIPC", "hostUsers", "shareProcessNamespace")


def test_the_operator_never_adds_privileges_or_reaches_outside_the_namespace() -> None:
    """Whatever the spec, the run's pods get no host access, no added capability, no privileged mode, no
    host path, and refer only to objects of the SJ's own namespace (by name, never namespace-qualified)."""
    from tests.specgen import RandomPicker, valid_spec
    for seed in range(300):
        spec = parse_spec(valid_spec(RandomPicker(seed)))
        mpi = mpi_job_options(sj_name="x", mpi=spec.mpi) if spec.mpi else None
        job = build_run_job(sj_name="x", namespace="ns", sj_uid="u", spec=spec, status_interrupted_count=0,
                            attempt=1, priority_class_name="scavenger-band-0", extra_pod_labels={}, mpi=mpi)
        assert job["metadata"]["namespace"] == "ns"
        pod = job["spec"]["template"]["spec"]
        assert not any(pod.get(name) for name in _PRIVILEGED_POD_FIELDS), seed
        assert all("hostPath" not in volume for volume in pod.get("volumes", [])), seed
        for container in pod["containers"]:
            context = container.get("securityContext", {})
            assert not context.get("privileged") and not context.get("capabilities", {}).get("add"), seed
            assert context.get("allowPrivilegeEscalation") is not True, seed
            assert "ports" not in container or all("hostPort" not in p for p in container["ports"]), seed
        assert "namespace" not in repr(pod.get("volumes", [])), seed


def _pod_spec(name: str = "a", attempt: int = 1, namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    body = {"image": "busybox", "duration": "1m", "resources": {"requests": {"cpu": "1"}}, **spec}
    job = build_run_job(sj_name=name, namespace=namespace, sj_uid=f"u-{name}", spec=parse_spec(body),
                        status_interrupted_count=0, attempt=attempt, priority_class_name="pc", extra_pod_labels={})
    return job["spec"]["template"]["spec"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("other", "same"), [
    ({"name": "b"}, True),                          # another SJ: its name in the environment
    ({"name": "b", "parallelism": 3}, False),       # a gang of another size (not the same as a single pod)
    ({"attempt": 2}, True),                         # another run of it
    ({"namespace": "other"}, True),                 # the controller keys its verdicts by namespace too
    ({"resources": {"requests": {"cpu": "2"}}}, False),
    ({"image": "busybox:1.36"}, False),
    ({"runAsUser": 1000}, False),                   # security context: what Pod Security admission reads
])
def test_the_admission_shape_is_the_pod_but_for_the_names_of_its_sj_and_run(other: dict[str, Any],
                                                                           same: bool) -> None:
    assert (admission_shape(_pod_spec(**other)) == admission_shape(_pod_spec())) is same


def test_gangs_of_one_size_have_one_shape_whatever_their_names() -> None:
    assert admission_shape(_pod_spec("a", parallelism=3)) == admission_shape(_pod_spec("b", parallelism=3))
