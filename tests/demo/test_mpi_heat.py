"""The MPI demo: a 4-rank heat diffusion that checkpoints collectively and resumes bit for bit.

Runs ``mpirun -n 4`` on this machine (oversubscribed: it may have fewer cores). Interrupting means
sending SIGTERM to mpirun, which forwards it to the ranks: they agree on a step, write a collective
checkpoint and exit. Install the prerequisites with ``hack/install-mpi``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAT = REPO / "demo" / "mpi-checkpoint" / "heat.py"
MPIRUN = shutil.which("mpirun")
NRANKS = 4
GRID = ["--nx", "96", "--ny", "80"]
STEPS = 600
# mpirun's reaction to SIGTERM: it waits this long, SIGTERMs the ranks, waits as long again, SIGKILLs.
SIGKILL_TIMEOUT = 2

_missing = [
    what
    for what, ok in (
        ("mpirun (apt-get install openmpi-bin)", MPIRUN is not None),
        ("mpi4py in this Python", importlib.util.find_spec("mpi4py") is not None),
        ("numpy in this Python", importlib.util.find_spec("numpy") is not None),
    )
    if not ok
]
pytestmark = [
    pytest.mark.skipif(bool(_missing), reason=f"MPI demo needs {', '.join(_missing)}; run hack/install-mpi"),
    pytest.mark.timeout(180),
]


def mpi_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SJ_", "HEAT_"))}
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            # More ranks than cores, ranks yield when idle, all on this host without ssh.
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            "OMPI_MCA_mpi_yield_when_idle": "1",
            "OMPI_MCA_plm": "isolated",
            "OMPI_MCA_btl": "self,vader",
            "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
            # On SIGTERM mpirun waits this many seconds (default 1), SIGTERMs the ranks, waits as long
            # again and SIGKILLs them: the second wait is the time the ranks have to checkpoint.
            "OMPI_MCA_odls_base_sigkill_timeout": str(SIGKILL_TIMEOUT),
        }
    )
    if os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def heat_argv(ckpt: Path, *extra: str, nranks: int = NRANKS, steps: int = STEPS) -> list[str]:
    assert MPIRUN is not None
    launcher = [MPIRUN, "--oversubscribe", "-n", str(nranks)]
    if os.geteuid() == 0:
        launcher.insert(1, "--allow-run-as-root")
    return [
        *launcher,
        sys.executable,
        str(HEAT),
        *GRID,
        "--steps",
        str(steps),
        "--checkpoint-dir",
        str(ckpt),
        "--log-every",
        "0",
        *extra,
    ]


def start(argv: Sequence[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=mpi_env(),
        start_new_session=True,
    )


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the ranks may leave mpirun's process group)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the ranks first (so that mpirun cannot react), then mpirun."""
    for pid in reversed(descendants(proc.pid)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = proc.communicate()
        pytest.fail(f"mpirun did not finish within {timeout}s:\n{out}\n{err}")
    return proc.returncode, out, err


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    return finish(start(argv))


def summary(out: str) -> dict[str, Any]:
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"expected one JSON line from rank 0, got: {out!r}"
    document: dict[str, Any] = json.loads(lines[0])
    assert document["event"] == "done"
    return document


def run_to_end(ckpt: Path, *extra: str, nranks: int = NRANKS, steps: int = STEPS) -> dict[str, Any]:
    code, out, err = run(heat_argv(ckpt, *extra, nranks=nranks, steps=steps))
    assert code == 0, f"exit {code}\n{out}\n{err}"
    return summary(out)


def max_step(ckpt: Path) -> int:
    try:
        return int(json.loads((ckpt / "progress.json").read_text())["max_step"])
    except (OSError, ValueError, KeyError):
        return 0


def complete_checkpoints(ckpt: Path) -> list[int]:
    return sorted(int(p.parent.name.removeprefix("ckpt-")) for p in ckpt.glob("ckpt-*/MANIFEST.json"))


def interrupt_at(ckpt: Path, step: int, *extra: str) -> int:
    """Run until ``step``, SIGTERM mpirun, return the step of the checkpoint the ranks wrote."""
    proc = start(heat_argv(ckpt, "--step-seconds", "0.02", *extra))
    deadline = time.monotonic() + 60
    while max_step(ckpt) < step:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"mpirun exited with {proc.returncode} before step {step}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            kill_tree(proc)
            proc.communicate()
            pytest.fail(f"step {step} not reached within 60s")
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, timeout=60)
    assert code != 0, "an interrupted run must not report success"
    assert "stopped by SIGTERM" in err, err
    assert "checkpoint" in err and "complete (SIGTERM)" in err, err
    assert out == ""
    saved = complete_checkpoints(ckpt)[-1]
    assert saved >= step
    return saved


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted 4-rank run."""
    result = run_to_end(tmp_path_factory.mktemp("reference"))
    assert result["resumed_from"] is None
    assert result["nranks"] == NRANKS
    return result


@pytest.fixture(scope="module")
def base_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint directory holding complete checkpoints at steps 50 and 100 (a run of 100 steps)."""
    ckpt = tmp_path_factory.mktemp("base")
    result = run_to_end(ckpt, "--checkpoint-every", "50", steps=100)
    assert result["steps"] == 100
    assert complete_checkpoints(ckpt) == [50, 100]
    return ckpt


def test_decomposition_does_not_change_the_result(reference: dict[str, Any], tmp_path: Path) -> None:
    single = run_to_end(tmp_path, nranks=1)
    assert single["checksum"] == reference["checksum"], "halo exchange must reproduce the serial stencil"


def test_interrupted_twice_equals_uninterrupted_bit_for_bit(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    first = interrupt_at(tmp_path, 50, "--checkpoint-every", "25")
    second = interrupt_at(tmp_path, first + 50, "--checkpoint-every", "25")
    assert first < second < STEPS
    assert len(complete_checkpoints(tmp_path)) <= 2

    result = run_to_end(tmp_path, "--checkpoint-every", "25")
    assert result["resumed_from"] == second
    assert result["redone_steps"] == 0, "a SIGTERM checkpoint loses nothing"
    assert result["checksum"] == reference["checksum"]
    assert complete_checkpoints(tmp_path)[-1] == STEPS
    assert len(complete_checkpoints(tmp_path)) == 2


def rank_pids(proc: subprocess.Popen[str]) -> list[int]:
    pids = []
    for pid in descendants(proc.pid):
        with contextlib.suppress(OSError):
            if str(HEAT).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
    return pids


def test_a_signal_to_one_rank_stops_the_whole_gang_at_one_step(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    """As on a preempted worker pod: only the ranks there get SIGTERM, the others follow."""
    proc = start(heat_argv(tmp_path, "--step-seconds", "0.02"))
    deadline = time.monotonic() + 60
    while max_step(tmp_path) < 40 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    ranks = rank_pids(proc)
    assert len(ranks) == NRANKS, f"expected {NRANKS} rank processes, found {ranks}"
    os.kill(ranks[-1], signal.SIGTERM)
    code, _out, err = finish(proc, timeout=60)
    assert code != 0
    assert "complete (SIGTERM)" in err, err
    saved = complete_checkpoints(tmp_path)[-1]
    assert 40 <= saved < STEPS

    result = run_to_end(tmp_path)
    assert result["resumed_from"] == saved
    assert result["checksum"] == reference["checksum"]


def test_sigkill_resumes_from_the_last_complete_checkpoint(reference: dict[str, Any], tmp_path: Path) -> None:
    proc = start(heat_argv(tmp_path, "--step-seconds", "0.01", "--checkpoint-every", "40"))
    deadline = time.monotonic() + 60
    while max_step(tmp_path) < 130 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    kill_tree(proc)  # every rank and mpirun: no chance to checkpoint
    proc.communicate()
    lost_at = max_step(tmp_path)
    saved = complete_checkpoints(tmp_path)[-1]
    assert 120 <= saved <= lost_at

    result = run_to_end(tmp_path)
    assert result["resumed_from"] == saved
    assert result["redone_steps"] == lost_at - saved
    assert result["checksum"] == reference["checksum"]


def break_manifest_missing(directory: Path) -> None:
    (directory / "MANIFEST.json").unlink()


def break_manifest_truncated(directory: Path) -> None:
    manifest = directory / "MANIFEST.json"
    manifest.write_bytes(manifest.read_bytes()[:40])


def break_rank_file_truncated(directory: Path) -> None:
    rank_file = directory / "rank-2.npy"
    rank_file.write_bytes(rank_file.read_bytes()[:100])


def break_rank_file_missing(directory: Path) -> None:
    (directory / "rank-3.npy").unlink()


def break_rank_file_flipped_bit(directory: Path) -> None:
    rank_file = directory / "rank-1.npy"
    raw = bytearray(rank_file.read_bytes())
    raw[-8] ^= 0x01
    rank_file.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "breaker",
    [
        break_manifest_missing,
        break_manifest_truncated,
        break_rank_file_truncated,
        break_rank_file_missing,
        break_rank_file_flipped_bit,
    ],
)
def test_a_half_written_checkpoint_is_skipped(
    reference: dict[str, Any], base_checkpoints: Path, tmp_path: Path, breaker: Any
) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(base_checkpoints, ckpt)
    breaker(ckpt / "ckpt-0000000100")

    code, out, err = run(heat_argv(ckpt))
    assert code == 0, err
    result = summary(out)
    assert result["resumed_from"] == 50
    assert "ckpt-0000000100" in err  # said why it was skipped
    assert result["checksum"] == reference["checksum"]


def test_an_unfinished_newer_checkpoint_directory_is_ignored(
    reference: dict[str, Any], base_checkpoints: Path, tmp_path: Path
) -> None:
    """A crash while writing ckpt-150: some rank files and temp files, no manifest."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(base_checkpoints, ckpt)
    partial = ckpt / "ckpt-0000000150"
    partial.mkdir()
    shutil.copy(ckpt / "ckpt-0000000100" / "rank-0.npy", partial / "rank-0.npy")
    (partial / ".tmp-rank-1.npy.x1y2z3").write_bytes(b"\x93NUMPY partial")

    result = run_to_end(ckpt, "--checkpoint-every", "50")
    assert result["resumed_from"] == 100
    assert result["checksum"] == reference["checksum"]
    # Rewritten when step 150 came round again, now complete.
    assert complete_checkpoints(ckpt) == [STEPS - 50, STEPS]


def test_resuming_with_another_number_of_ranks_fails_clearly(base_checkpoints: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(base_checkpoints, ckpt)
    code, out, err = run(heat_argv(ckpt, nranks=2))
    assert code != 0
    assert "written by 4 ranks but this run has 2" in err, err
    assert out == ""
    assert complete_checkpoints(ckpt) == [50, 100], "the checkpoints are left as they were"
