"""Real containers on the real kubelet node (hack/node): the operator in-cluster from its own image and
install recipe, the counter, the MPI gang and the LAMMPS example (its image built with hack/images
--dockerfile) preempted through the real scheduler, resumed from their checkpoints to the result of an
uninterrupted run, a leader killed mid-run, and least privilege.

These tests need root (containerd and the pod network); elsewhere they are skipped with one line. CI runs
as root and never skips them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from sj_operator.observed import pod_requests
from sj_operator.resources import to_milli
from tests.e2e.kube import CHECKS, unique, wait_for
from tests.e2e.privileges import MAY, MAY_NOT, SA, SYSTEM
from tests.e2e.sj import create_sj, event_messages, jobs_of, run_pods, sj_spec, status, wait_phase

REPO = Path(__file__).resolve().parents[2]
NODE = "scavenger-real-node"
ON_NODE = {"nodeSelector": {"scavenger.dev/node": "real"}}

pytestmark = [pytest.mark.real_node, pytest.mark.kwok_only]


def kubectl(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / ".bin/kubectl"), *args], capture_output=True, text=True, check=check,
                          env={**os.environ}, input=input)


# What Docker (the kind stage, which CI runs beside this one) makes and removes on the same host: its
# daemon's containerd and shims, its containers' mounts and its bridges with their veths. Left out of the
# comparison, or a kind cluster coming or going during this stage reads as a leftover of the node.
DOCKER_PATHS = ("/var/lib/docker/", "/run/docker/", "/var/run/docker/", f"{REPO}/.cluster/kind-e2e/")
NODE_PROCESSES = ("kubelet", "containerd", "coredns")


def _docker_link(name: str, master: str) -> bool:
    return any(n == "docker0" or n.startswith("br-") for n in (name, master))


def _host_processes() -> list[str]:
    """The kubelets, containerds, CoreDNS and containerd shims in this PID namespace that Docker did not
    start: a kind node's run in a namespace of their own, and Docker's own are named by their paths."""
    own_ns = os.readlink("/proc/self/ns/pid")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            if comm not in NODE_PROCESSES and not comm.startswith("containerd-shim"):
                continue
            if os.readlink(proc / "ns/pid") != own_ns:
                continue
            argv = (proc / "cmdline").read_bytes().rstrip(b"\0").decode(errors="replace").split("\0")
        except OSError:  # it exited while being read
            continue
        line = " ".join(argv)
        if not any(path in line for path in DOCKER_PATHS) and "-namespace moby" not in line:
            found.append(line)
    return sorted(found)


def host_state() -> dict[str, Any]:
    """What `hack/node down` must leave as `up` found it: processes, mounts, links, sysctls (less Docker's)."""
    def read(path: str) -> str:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return "absent"
    links = []
    for line in subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                               check=True).stdout.strip().splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        fields = line.split()
        master = fields[fields.index("master") + 1] if "master" in fields else ""
        if not _docker_link(name, master):
            links.append(name)
    mounts = (line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines())
    return {
        "processes": _host_processes(),
        "mounts": sorted(m for m in mounts if not any(f"{m}/".startswith(p) for p in DOCKER_PATHS)),
        "links": sorted(links),
        "ip_forward": read("/proc/sys/net/ipv4/ip_forward"),
        "bridge_nf": read("/proc/sys/net/bridge/bridge-nf-call-iptables"),
        "netns": sorted(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                       check=False).stdout.split()),
    }


BEFORE: dict[str, Any] = {}


@pytest.fixture(scope="module")
def real_node(api: client.ApiClient) -> Iterator[str]:
    """The real node joined and the project's images imported into its containerd."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the real-node stage needs root, and CI never skips it")
        pytest.skip("the real-node stage needs root (containerd, the pod network): run the tests as root")
    if subprocess.run([str(REPO / "hack/node"), "status"], capture_output=True, check=False).returncode != 0:
        BEFORE.update(host_state())
    subprocess.run([str(REPO / "hack/node"), "up"], check=True)
    subprocess.run([str(REPO / "hack/images"), "--containerd", str(REPO / ".node/containerd/containerd.sock"),
                    "pause", "operator", "generic-counter", "mpi-heat"], check=True)
    CHECKS.append(_node_processes_alive)
    try:
        yield NODE
    finally:
        CHECKS.remove(_node_processes_alive)


def _node_processes_alive() -> None:
    """Fails a waiting test at once, with the log's end, when a process of the node exited: a test that
    waits on pods of a dead kubelet would otherwise time out saying only what it waited for."""
    state = REPO / ".node"
    for name in ("kubelet", "containerd"):
        pid = (state / f"{name}.pid").read_text().strip() if (state / f"{name}.pid").exists() else ""
        if not pid or not Path(f"/proc/{pid}").exists():
            log = state / f"{name}.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
            raise AssertionError(f"the real node's {name} is not running; the end of {log}:\n{tail}")


@pytest.fixture(scope="module")
def cluster_operator(api: client.ApiClient, crd: None, real_node: str) -> Iterator[None]:
    """The operator in-cluster: its image, ServiceAccount, RBAC, two replicas, one elected by a Lease."""
    subprocess.run([str(REPO / "hack/install-operator"), "up"], check=True)  # the Helm chart, for real
    apps = client.AppsV1Api(api)
    wait_for("both operator replicas ready", lambda: (d := apps.read_namespaced_deployment(
        "scavenger-operator", SYSTEM)).status.ready_replicas == 2 and d, timeout=120)
    wait_for("a leader", lambda: _leader(api), timeout=60)
    yield
    subprocess.run([str(REPO / "hack/install-operator"), "down"], check=False)


def _leader(api: client.ApiClient) -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease("scavenger", SYSTEM)
    except client.ApiException:
        return None
    return lease.spec.holder_identity or None


def _owner_class(api: client.ApiClient) -> str:
    """A PriorityClass above every SJ band: its pods preempt SJ pods for their room."""
    sched = client.SchedulingV1Api(api)
    name = "e2e-owner"
    try:
        sched.create_priority_class({"metadata": {"name": name}, "value": 1000, "preemptionPolicy":
                                     "PreemptLowerPriority", "description": "e2e: an ordinary workload"})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    return name


def _free_cpu_without(api: client.ApiClient, sj: str) -> int:
    """mCPU of the real node left for new pods once the SJ's pods are gone."""
    core = client.CoreV1Api(api)
    node = core.read_node(NODE)
    allocatable = to_milli(node.status.allocatable["cpu"])
    used = 0
    for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}").items:
        if pod.status.phase in ("Succeeded", "Failed") or (pod.metadata.labels or {}).get(
                "scavenger.dev/job-name") == sj:
            continue
        used += pod_requests(api.sanitize_for_serialization(pod.spec)).get("cpu", 0)
    return allocatable - used


def _preempt(api: client.ApiClient, namespace: str, sj: str, leave: int) -> str:
    """A default workload that needs all but ``leave`` mCPU of the room the SJ holds: the scheduler
    preempts the SJ's pods for it."""
    cpu = _free_cpu_without(api, sj) - leave
    client.CoreV1Api(api).create_namespaced_pod(namespace, {
        "metadata": {"name": "owner"},
        "spec": {"priorityClassName": _owner_class(api), **ON_NODE, "terminationGracePeriodSeconds": 0,
                 # It meets the restricted Pod Security Standard, as the counter's namespace enforces it.
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "owner", "image": "scavenger/pause:dev",
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "capabilities": {"drop": ["ALL"]}},
                                 "resources": {"requests": {"cpu": f"{cpu}m"}, "limits": {"cpu": f"{cpu}m"}}}]},
    })
    return "owner"


def _preempt_one_of_three(api: client.ApiClient, namespace: str, sj: str) -> None:
    """The 3-pod gang SJ (200m each) loses a member to a default workload that leaves room for two; the whole
    first run goes and the interruption is recorded as a preemption."""
    _preempt(api, namespace, sj, leave=450)
    wait_for("interruption recorded", lambda: status(api, namespace, sj).get("interruptedCount") == 1, timeout=120)
    reasons = event_messages(api, namespace, sj, "Interrupted")
    assert reasons and "PreemptionByScheduler" in reasons[0]
    wait_for("the whole first gang gone", lambda: not run_pods(api, namespace, f"{sj}-r1"), timeout=90)


class LogFollower:
    """Follows one container's log in a thread, so what it printed before its pod is removed is kept."""

    def __init__(self, api: client.ApiClient, namespace: str, pod: str) -> None:
        self.lines: list[str] = []
        core = client.CoreV1Api(api)

        def follow() -> None:
            try:
                for line in watch.Watch().stream(core.read_namespaced_pod_log, pod, namespace):
                    self.lines.append(line)
            except Exception as exc:  # the pod went away: what was read is kept
                self.lines.append(f"<log ended: {exc}>")

        self.thread = threading.Thread(target=follow, daemon=True)
        self.thread.start()

    def text(self) -> str:
        return "\n".join(self.lines)


def _pod_log(api: client.ApiClient, namespace: str, pod: str) -> str:
    return client.CoreV1Api(api).read_namespaced_pod_log(pod, namespace)


def _summary(log: str) -> dict[str, Any]:
    done = [json.loads(line) for line in log.splitlines() if line.startswith("{") and '"done"' in line]
    assert done, f"no summary line in the log:\n{log[-2000:]}"
    return done[-1]


def _pvc(api: client.ApiClient, namespace: str, name: str, mode: str) -> None:
    client.CoreV1Api(api).create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": name},
        "spec": {"accessModes": [mode], "storageClassName": "scavenger-local",
                 "resources": {"requests": {"storage": "64Mi"}}},
    })


def _running_pod(api: client.ApiClient, namespace: str, run: str, index: int = 0) -> str:
    def probe() -> str | None:
        for pod in run_pods(api, namespace, run):
            labels = pod.metadata.annotations or {}
            if pod.status.phase == "Running" and int(labels.get(
                    "batch.kubernetes.io/job-completion-index", "0")) == index:
                return str(pod.metadata.name)
        return None
    return wait_for(f"pod {index} of {run} running", probe, timeout=120)


# ---------------------------------------------------------------------------------------------------


def test_counter_preempted_for_real_checkpoints_on_sigterm_and_resumes_to_the_same_result(
        api: client.ApiClient, namespace: str, cluster_operator: None) -> None:
    """The counter exits 0 after its SIGTERM checkpoint, as many real apps do: still an interruption. Its
    namespace enforces the restricted Pod Security Standard, which a non-root SJ's pods meet for real."""
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    seed, target = unique("seed"), 160
    _pvc(api, namespace, "counter-ckpt", "ReadWriteOnce")
    create_sj(api, namespace, "counter", {
        "image": "scavenger/generic-counter:dev", "args": ["--log-every", "10", "--exit-zero-on-signal"],
        "env": [{"name": "COUNTER_TARGET", "value": str(target)}, {"name": "COUNTER_STEP_SECONDS", "value": "0.2"},
                {"name": "COUNTER_SEED", "value": seed}],
        "volumes": [{"name": "ckpt", "mountPath": "/checkpoints",
                     "persistentVolumeClaim": {"claimName": "counter-ckpt"}}],
        "checkpointVolume": "ckpt", "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}},
        "duration": "10m", "terminationGracePeriodSeconds": 15, "runAsUser": 10001, "runAsGroup": 10001,
        **ON_NODE,
    })
    first = _running_pod(api, namespace, "counter-r1")
    log = LogFollower(api, namespace, first)
    wait_for("the counter past step 30", lambda: "step 30/" in log.text(), timeout=120)

    _preempt(api, namespace, "counter", leave=100)
    st = wait_for("interruption recorded", lambda: (s := status(api, namespace, "counter")).get(
        "interruptedCount") == 1 and s, timeout=90)
    assert st.get("finishedTimestamp") is None, "an app that exits 0 after SIGTERM has not finished"
    reasons = event_messages(api, namespace, "counter", "Interrupted")
    assert reasons and "PreemptionByScheduler" in reasons[0]
    wait_for("the first run's log ended", lambda: "<log ended" in log.text() or not log.thread.is_alive(),
             timeout=60)
    stopped = [line for line in log.lines if "stopped by SIGTERM" in line]
    assert stopped, f"the container got no SIGTERM:\n{log.text()[-2000:]}"
    saved = [line for line in log.lines if "written (SIGTERM)" in line]
    assert saved, "it checkpointed on SIGTERM"

    client.CoreV1Api(api).delete_namespaced_pod("owner", namespace, grace_period_seconds=0)
    st = wait_phase(api, namespace, "counter", "Succeeded", timeout=240)
    assert st["interruptedCount"] == 1 and st["jobName"] == "counter-r2"
    second = next(p.metadata.name for p in run_pods(api, namespace, "counter-r2"))
    result = _summary(_pod_log(api, namespace, second))
    checkpoint_step = int(saved[-1].split("ckpt-")[1].split(".json")[0])
    assert result["resumed_from"] == checkpoint_step >= 30, "resumed from the SIGTERM checkpoint, not from zero"

    with_no_interruption = subprocess.run(
        [sys.executable, str(REPO / "demo/generic-counter/counter.py"), "--target", str(target), "--step-seconds",
         "0", "--seed", seed, "--checkpoint-dir", str(Path(os.environ.get("TMPDIR", "/tmp")) / unique("ref"))],
        capture_output=True, text=True, check=True)
    assert result["result"] == _summary(with_no_interruption.stdout)["result"], "bit for bit"


def test_mpi_gang_across_pods_loses_a_member_and_resumes_to_the_same_result(
        api: client.ApiClient, namespace: str, cluster_operator: None) -> None:
    heat = ["--nx", "96", "--ny", "64", "--steps", "600", "--step-seconds", "0.05", "--checkpoint-every", "50",
            "--log-every", "50"]
    _pvc(api, namespace, "heat-ckpt", "ReadWriteMany")
    create_sj(api, namespace, "heat", {
        "image": "scavenger/mpi-heat:dev", "parallelism": 3, "mpi": {"slotsPerWorker": 1},
        "command": ["mpirun"],
        "args": ["--hostfile", "/etc/mpi/hostfile", "--bind-to", "none", "python3", "/app/heat.py", *heat],
        "volumes": [{"name": "ckpt", "mountPath": "/checkpoints", "persistentVolumeClaim": {"claimName": "heat-ckpt"}}],
        "checkpointVolume": "ckpt", "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
        "duration": "10m", "terminationGracePeriodSeconds": 30, "runAsUser": 1000, "runAsGroup": 1000, **ON_NODE,
    })
    launcher = _running_pod(api, namespace, "heat-r1", 0)
    log = LogFollower(api, namespace, launcher)
    wait_for("the gang past step 150", lambda: "step 150/" in log.text(), timeout=240)
    assert "2 ranks" in log.text(), "two ranks on two worker pods, started over ssh"

    _preempt_one_of_three(api, namespace, "heat")

    client.CoreV1Api(api).delete_namespaced_pod("owner", namespace, grace_period_seconds=0)
    # The operator removes a finished gang's run: its launcher's log is followed while it runs.
    resumed = LogFollower(api, namespace, _running_pod(api, namespace, "heat-r2", 0))
    st = wait_phase(api, namespace, "heat", "Succeeded", timeout=300)
    assert st["jobName"] == "heat-r2"
    result = wait_for("the launcher's summary", lambda: '"done"' in resumed.text() and _summary(resumed.text()),
                      timeout=30)
    assert result["resumed_from"] and result["resumed_from"] >= 150
    reference = subprocess.run([sys.executable, str(REPO / "demo/mpi-checkpoint/heat.py"),
                                *[a for a in heat if a not in ("--step-seconds", "0.05")],
                                "--checkpoint-dir", str(Path("/tmp") / unique("heat-ref"))],
                               capture_output=True, text=True, check=True)
    assert result["checksum"] == _summary(reference.stdout)["checksum"], "bit for bit"


LAMMPS = REPO / "examples/lammps"
# What docs/examples/lammps.md states and justifies: the final step equal, and each value within this
# relative difference of an uninterrupted run's.
LAMMPS_TOLERANCE = {"etotal": 2e-3, "pe": 0.05, "temp": 0.10, "press": 0.15}


@pytest.fixture(scope="module")
def lammps_image(real_node: str) -> str:
    """The LAMMPS example's image, built from its Dockerfile as a user builds their own (--dockerfile) and
    imported into the real node's containerd."""
    subprocess.run([str(REPO / "hack/images"), "--dockerfile", str(LAMMPS / "Dockerfile"),
                    "--tag", "scavenger/lammps:dev", "--containerd", str(REPO / ".node/containerd/containerd.sock")],
                   check=True)
    return "scavenger/lammps:dev"


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _final_thermo(log: str) -> dict[str, float]:
    """The deck's last line, ``FINAL step N temp T pe E etotal E press P``, as numbers."""
    final = [line.split()[1:] for line in log.splitlines() if line.startswith("FINAL ")]
    assert final, f"no FINAL line in the log:\n{log[-2000:]}"
    words = final[-1]
    return {key: float(value) for key, value in zip(words[::2], words[1::2], strict=True)}


MELT_STEPS_IN_TEST = 24_000
"""Steps of the LAMMPS deck in its e2e test: 24 s on two idle cores, and far longer beside the rest of CI, so that
the run is far from its end when its preemption lands (the test preempts it between a restart written and half the
run). docs/examples/lammps.md states the tolerance for this length."""


# Its own waits (a restart written, then the resumed run to its end) may take longer than the suite's 300 s on
# a CI machine that runs the kind stage beside it.
@pytest.mark.timeout(900)
def test_lammps_gang_preempted_mid_run_resumes_from_its_restart_file_to_an_uninterrupted_runs_result(
        api: client.ApiClient, namespace: str, cluster_operator: None, lammps_image: str) -> None:
    """examples/lammps as it is: Debian's LAMMPS over a 3-pod gang (two ranks), preempted once after it wrote
    a restart file, resumed by its wrapper from LAMMPS's own restart, and its final thermodynamic output
    compared with an uninterrupted run of the same deck (a plain Job, two ranks in one pod, alongside). The deck
    runs `MELT_STEPS_IN_TEST` steps here, both runs alike: the example's 6,000 take 7 s on two idle cores, less
    than a preemption may take on a loaded machine (a run was seen to finish before its preemption came)."""
    docs = [d for d in yaml.safe_load_all((LAMMPS / "scavengerjob.yaml").read_text()) if d]
    claim = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    spec = next(d for d in docs if d["kind"] == "ScavengerJob")["spec"]
    spec["env"] = [{**e, "value": str(MELT_STEPS_IN_TEST)} if e["name"] == "MELT_STEPS" else e for e in spec["env"]]
    env = {e["name"]: e["value"] for e in spec["env"]}
    steps, every = int(env["MELT_STEPS"]), int(env["MELT_EVERY"])
    _pvc(api, namespace, claim["metadata"]["name"], "ReadWriteMany")
    client.BatchV1Api(api).create_namespaced_job(namespace, {
        "metadata": {"name": "melt-reference"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", **ON_NODE, "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [{"name": "lammps", "image": lammps_image, "env": spec["env"],
                            "command": ["/app/lammps-run", "-n", "2", "--oversubscribe", "--bind-to", "none"],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/checkpoints"}],
                            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]}}}})
    # Small requests so the gang fits beside the operator, and limits that let each rank use a core: without
    # them the limits are the requests, and a rank throttled to 200m ran 500 steps in 105 s (the whole deck takes
    # 7 s on two idle cores).
    spec = {**spec, **ON_NODE, "resources": {"requests": {"cpu": "200m", "memory": "256Mi"},
                                             "limits": {"cpu": "1", "memory": "512Mi"}}}
    spec.pop("podAnnotations")
    create_sj(api, namespace, "melt", spec)
    launcher = _running_pod(api, namespace, "melt-r1", 0)
    log = LogFollower(api, namespace, launcher)

    def thermo_step() -> int:
        """The last step of the first run's thermo output (a line of six numbers: step temp pe ke etotal press)."""
        rows = [line.split() for line in log.lines]
        return max((int(row[0]) for row in rows if len(row) == 6 and all(_number(w) for w in row)), default=0)

    # Thermo output at step 2 * every comes after the restart file of step every is whole.
    wait_for("a restart file written, the run far from its end", lambda: 2 * every <= thermo_step() <= steps // 2,
             timeout=420)
    assert "starting afresh" in log.text(), log.text()[-2000:]
    _preempt_one_of_three(api, namespace, "melt")
    reached = thermo_step()
    assert reached < steps, "preempted mid-run"

    client.CoreV1Api(api).delete_namespaced_pod("owner", namespace, grace_period_seconds=0)
    resumed = LogFollower(api, namespace, _running_pod(api, namespace, "melt-r2", 0))
    st = wait_phase(api, namespace, "melt", "Succeeded", timeout=600)
    assert st["jobName"] == "melt-r2" and st["interruptedCount"] == 1
    result = wait_for("the launcher's final thermo", lambda: "FINAL " in resumed.text() and _final_thermo(
        resumed.text()), timeout=30)
    assert "lammps-run: resuming from /checkpoints/melt.restart" in resumed.text(), resumed.text()[-2000:]
    [resumed_at] = [int(line.rsplit(" ", 1)[1]) for line in resumed.lines if line.startswith("resumed from ")]
    # A restart file is written right after its step's thermo line, which the stopped mpirun may not have
    # passed on: the first run reached at most one segment past the last line seen.
    assert every <= resumed_at <= reached + every and resumed_at % every == 0, "from a restart of the first run"

    pod = wait_for("the uninterrupted run finished", lambda: next(
        (p for p in client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="job-name=melt-reference").items
         if p.status.phase in ("Succeeded", "Failed")), None), timeout=600)
    reference_log = _pod_log(api, namespace, pod.metadata.name)
    assert pod.status.phase == "Succeeded", reference_log[-2000:]
    assert "starting afresh" in reference_log
    reference = _final_thermo(reference_log)
    assert result["step"] == reference["step"] == steps
    for key, tolerance in LAMMPS_TOLERANCE.items():
        difference = abs(result[key] - reference[key]) / abs(reference[key])
        assert difference <= tolerance, f"{key}: {result[key]} resumed, {reference[key]} uninterrupted"


def test_killing_the_active_operator_hands_over_without_losing_or_doubling_an_sj(
        api: client.ApiClient, namespace: str, cluster_operator: None) -> None:
    names = [f"sim-{i}" for i in range(4)]
    for name in names[:2]:
        create_sj(api, namespace, name, sj_spec(run_for="20s"))
    wait_for("first SJs running", lambda: all(status(api, namespace, n).get("phase") == "Running"
                                              for n in names[:2]), timeout=60)
    leader = _leader(api)
    assert leader is not None
    started = time.monotonic()
    client.CoreV1Api(api).delete_namespaced_pod(leader, SYSTEM, grace_period_seconds=0)
    for name in names[2:]:
        create_sj(api, namespace, name, sj_spec(run_for="5s"))
    lease = client.CoordinationV1Api(api).read_namespaced_lease("scavenger", SYSTEM)
    new = wait_for("another replica leads", lambda: (h := _leader(api)) not in (None, leader) and h,
                   timeout=(lease.spec.lease_duration_seconds or 15) + 15)
    took = time.monotonic() - started
    assert took <= (lease.spec.lease_duration_seconds or 15) + 10, f"take-over took {took:.0f}s"
    assert new != leader
    for name in names:
        wait_phase(api, namespace, name, "Succeeded", timeout=120)
        assert [j.metadata.name for j in jobs_of(api, namespace, name)] == [f"{name}-r1"], "launched once"


def _can_i(verb: str, resource: str, ns: str, *, as_: str = SA) -> str:
    # `can-i VERB TYPE/NAME` reads "pods/exec" as the pod named exec: a subresource is a flag of its own.
    kind, _, subresource = resource.partition("/")
    kind, _, name = kind.partition(":")
    args = ["auth", "can-i", verb, f"{kind}/{name}" if name else kind, f"--as={as_}",
            *([f"--subresource={subresource}"] if subresource else [])]
    args += ["-n", ns] if ns else ["--all-namespaces"]
    return kubectl(*args, check=False).stdout.strip()


@pytest.mark.parametrize(("verb", "resource", "ns", "allowed"),
                         [(*row, True) for row in MAY] + [(*row, False) for row in MAY_NOT],
                         ids=[f"may-{v}-{r.split('.')[0]}-{ns or 'all'}" for v, r, ns in MAY]
                         + [f"may-not-{v}-{r.split('.')[0]}-{ns or 'all'}" for v, r, ns in MAY_NOT])
def test_least_privilege(cluster_operator: None, verb: str, resource: str, ns: str, allowed: bool) -> None:
    answer = _can_i(verb, resource, ns)
    assert answer == ("yes" if allowed else "no"), f"{verb} {resource} in {ns or 'all namespaces'}: {answer}"


def test_the_operator_guard_lets_its_service_account_create_pods_only_as_dry_runs_and_change_only_the_label(
        api: client.ApiClient, namespace: str, cluster_operator: None) -> None:
    """What RBAC cannot say, the chart's operator guard (a ValidatingAdmissionPolicy) does: a pod created with
    the operator's token for real is refused, as a dry run accepted; a pod's labels other than the
    protection label, its spec, and pods that are no run's, are not the operator's to change."""
    def pod(name: str, labels: dict[str, str]) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                           "spec": {"nodeSelector": {"scavenger.dev/nowhere": "true"},  # never scheduled
                                    "containers": [{"name": "c", "image": "scavenger/pause:dev"}]}})

    as_operator = (f"--as={SA}", "-n", namespace)
    real = kubectl("create", "-f", "-", *as_operator, input=pod("real", {}), check=False)
    assert real.returncode != 0 and "only as server-side dry runs" in real.stderr, real.stderr
    dry = kubectl("create", "--dry-run=server", "-f", "-", *as_operator, input=pod("dry", {}), check=False)
    assert dry.returncode == 0, dry.stderr
    # Pods made by someone else (here the test's administrator): a run's and another.
    kubectl("create", "-n", namespace, "-f", "-", input=pod("member", {"scavenger.dev/job-name": "sj"}))
    kubectl("create", "-n", namespace, "-f", "-", input=pod("other", {"app": "x"}))

    # As the operator patches (one PATCH, no read first: it may not get pods), not as `kubectl patch`, which
    # reads the pod before it patches.
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", SA)
    as_operator_api = client.CoreV1Api(impersonated)

    def patch(name: str, body: dict[str, Any], kind: str = "merge") -> subprocess.CompletedProcess[str]:
        content_type = {"merge": "application/merge-patch+json",
                        "strategic": "application/strategic-merge-patch+json"}[kind]
        try:
            as_operator_api.patch_namespaced_pod(name, namespace, body, _content_type=content_type)
        except client.ApiException as exc:
            return subprocess.CompletedProcess([], 1, "", str(exc.body))
        return subprocess.CompletedProcess([], 0, "", "")

    assert patch("member", {"metadata": {"labels": {"scavenger.dev/protected": "true"}}}).returncode == 0
    refused = [patch("member", {"metadata": {"labels": {"scavenger.dev/job-name": "else"}}}),
               patch("member", {"metadata": {"annotations": {"a": "b"}}}),
               patch("member", {"spec": {"containers": [{"name": "c", "image": "scavenger/generic-counter:dev"}]}},
                     "strategic"),
               patch("other", {"metadata": {"labels": {"scavenger.dev/protected": "true"}}})]
    for answer in refused:
        assert answer.returncode != 0 and "only the scavenger.dev/protected label" in answer.stderr, answer.stderr
    member = client.CoreV1Api(api).read_namespaced_pod("member", namespace)
    assert member.metadata.labels == {"scavenger.dev/job-name": "sj", "scavenger.dev/protected": "true"}
    assert member.spec.containers[0].image == "scavenger/pause:dev"


def test_the_operator_guard_lets_its_service_account_write_only_its_own_gangs_slices(
        api: client.ApiClient, namespace: str, cluster_operator: None) -> None:
    """RBAC's endpointslices rights would let the operator's token add addresses to any Service; the guard lets
    it write only a slice labelled as its own (an SJ's, managed by the operator) for the Service of the slice's
    name, and never take over a slice it did not make."""
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", SA)
    as_operator, as_admin = client.DiscoveryV1Api(impersonated), client.DiscoveryV1Api(api)
    own = {"scavenger.dev/job-name": "sj", "endpointslice.kubernetes.io/managed-by": "scavenger.dev"}

    def body(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "labels": labels}, "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}]}

    def refused(call: Any) -> str:
        with pytest.raises(client.ApiException) as raised:
            call()
        assert raised.value.status == 403, raised.value.body
        return str(raised.value.body)

    as_operator.create_namespaced_endpoint_slice(namespace,
                                                 body("sj-r1", {**own, "kubernetes.io/service-name": "sj-r1"}))
    as_operator.patch_namespaced_endpoint_slice("sj-r1", namespace, {"endpoints": [{"addresses": ["10.0.0.2"]}]})
    for name, labels in (("sj-r2", {**own, "kubernetes.io/service-name": "web"}),  # another Service's addresses
                         ("web", {"scavenger.dev/job-name": "sj", "kubernetes.io/service-name": "web"}),
                         ("sj-r3", {"endpointslice.kubernetes.io/managed-by": "scavenger.dev",
                                    "kubernetes.io/service-name": "sj-r3"})):
        made = body(name, labels)
        message = refused(lambda made=made: as_operator.create_namespaced_endpoint_slice(namespace, made))
        assert "only its own gangs' EndpointSlices" in message
    as_admin.create_namespaced_endpoint_slice(namespace, body("web-abcde", {
        "kubernetes.io/service-name": "web-abcde",
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}))
    refused(lambda: as_operator.patch_namespaced_endpoint_slice("web-abcde", namespace, {"metadata": {"labels": own}}))
    stored = as_admin.read_namespaced_endpoint_slice("web-abcde", namespace)
    assert stored.metadata.labels["endpointslice.kubernetes.io/managed-by"] == "endpointslice-controller.k8s.io"


def test_operator_pods_meet_the_restricted_pod_security_standard(api: client.ApiClient,
                                                                 cluster_operator: None) -> None:
    ns = client.CoreV1Api(api).read_namespace(SYSTEM)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    pods = client.CoreV1Api(api).list_namespaced_pod(SYSTEM, label_selector="app.kubernetes.io/name=scavenger-operator")
    assert len([p for p in pods.items if p.status.phase == "Running"]) == 2
    assert all(p.spec.node_name == NODE for p in pods.items)
    # A pod that breaks the standard is refused in that namespace.
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(api).create_namespaced_pod(SYSTEM, {
            "metadata": {"name": "root-pod"},
            "spec": {"containers": [{"name": "c", "image": "scavenger/pause:dev"}]}})
    assert refused.value.status == 403 and "restricted" in refused.value.body


def test_the_in_cluster_webhook_refuses_an_invalid_sj_naming_the_field(api: client.ApiClient, namespace: str,
                                                                       cluster_operator: None) -> None:
    """The replicas serve the webhook behind their Service, with the certificates they made themselves."""
    hook = client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration(
        "scavengerjobs.scavenger.dev").webhooks[0]
    assert hook.client_config.service.namespace == SYSTEM and hook.client_config.service.name == "scavenger-webhook"
    assert hook.client_config.ca_bundle, "the operator set the chart's configuration's caBundle"
    secret = client.CoreV1Api(api).read_namespaced_secret("scavenger-webhook-tls", SYSTEM)
    assert secret.type == "kubernetes.io/tls" and set(secret.data) == {"ca.crt", "tls.crt", "tls.key"}, \
        "no CA private key is kept"
    manifest = json.dumps({"apiVersion": "scavenger.dev/v1alpha1", "kind": "ScavengerJob",
                           "metadata": {"name": "too-short", "namespace": namespace},
                           "spec": {"image": "scavenger/generic-counter:dev", "duration": "5s"}})
    proc = kubectl("apply", "-f", "-", input=manifest, check=False)
    assert proc.returncode != 0
    assert ('admission webhook "validate.scavengerjobs.scavenger.dev" denied the request: spec.duration: '
            "must be at least 10s") in proc.stderr


def test_the_in_cluster_operator_adopts_a_labelled_job_which_ends_complete(api: client.ApiClient, namespace: str,
                                                                          cluster_operator: None) -> None:
    """kubectl apply of a plain Job labelled for adoption: the replicas' mutating webhook suspends it, the
    leader runs it as an SJ in the band, and the Job ends Complete; all with the chart's RBAC."""
    manifest = json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "counted", "namespace": namespace, "labels": {"scavenger.dev/scavenge": "true"},
                     "annotations": {"scavenger.dev/duration": "2m", "scavenger.dev/checkpoint-volume": "ckpt"}},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never", **ON_NODE, "volumes": [{"name": "ckpt", "emptyDir": {}}],
            "containers": [{"name": "counter", "image": "scavenger/generic-counter:dev",
                            "env": [{"name": "COUNTER_TARGET", "value": "20"},
                                    {"name": "COUNTER_STEP_SECONDS", "value": "0.1"}],
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                            "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}]}}}})
    kubectl("apply", "-f", "-", input=manifest)
    batch = client.BatchV1Api(api)
    job = batch.read_namespaced_job("counted", namespace)
    assert job.spec.suspend is True and job.spec.managed_by == "scavenger.dev/operator"
    st = wait_phase(api, namespace, "counted", "Succeeded", timeout=180)
    pod = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"scavenger.dev/run={st['jobName']}")
    assert pod.items and pod.items[0].spec.priority_class_name.startswith("scavenger-band-")
    complete = wait_for("the Job Complete", lambda: next((c for c in batch.read_namespaced_job(
        "counted", namespace).status.conditions or [] if c.type == "Complete" and c.status == "True"), None),
        timeout=60)
    assert complete.message.startswith("ScavengerJob counted succeeded")
    hook = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration("jobs.scavenger.dev").webhooks[0]
    assert hook.client_config.service.name == "scavenger-webhook" and hook.failure_policy == "Fail"


def test_node_down_leaves_the_host_as_up_found_it_and_both_are_idempotent(real_node: str) -> None:
    """Last of the stage: the node goes, and with it every process, mount, link and sysctl it made."""
    if not BEFORE:
        pytest.skip("the node was already up when this stage started: there is no 'before' to compare with")
    node = str(REPO / "hack/node")
    subprocess.run([node, "up"], check=True, capture_output=True)  # a second up changes nothing
    assert subprocess.run([node, "status"], check=False, capture_output=True).returncode == 0
    subprocess.run([node, "down"], check=True, capture_output=True)
    after = host_state()
    for key, value in BEFORE.items():
        assert after[key] == value, f"{key} differs after hack/node down"
    assert not (REPO / ".node").exists()
    subprocess.run([node, "down"], check=True, capture_output=True)  # and a second down too
    assert subprocess.run([node, "status"], check=False, capture_output=True).returncode == 1
