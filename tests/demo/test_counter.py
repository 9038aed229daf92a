"""The generic-counter demo: checkpoints on SIGTERM and on a timer, resumes exactly, survives crashes.

The counter runs as a real subprocess, as it would in a pod: it is stopped with SIGTERM (what the
kubelet sends on preemption) or killed with SIGKILL (a crash, an OOM kill, a lost node), restarted
with the same checkpoint directory, and must end with exactly the result of an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
COUNTER = REPO / "demo" / "generic-counter" / "counter.py"
SEED = "test-seed"
pytestmark = pytest.mark.timeout(120)


def reference_result(seed: str, target: int) -> str:
    """The hash chain the counter computes, written out independently."""
    state = hashlib.sha256(seed.encode()).digest()
    for step in range(1, target + 1):
        state = hashlib.sha256(state + step.to_bytes(8, "big")).digest()
    return state.hex()


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SJ_", "COUNTER_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def counter_argv(ckpt: Path, target: int, step_seconds: float, interval: float) -> list[str]:
    return [
        sys.executable,
        str(COUNTER),
        "--target",
        str(target),
        "--step-seconds",
        str(step_seconds),
        "--checkpoint-dir",
        str(ckpt),
        "--checkpoint-interval",
        str(interval),
        "--seed",
        SEED,
        "--log-every",
        "0",
    ]


def start(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or clean_env()
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def summary(out: str) -> dict[str, Any]:
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"expected one JSON summary line, got: {out!r}"
    document: dict[str, Any] = json.loads(lines[0])
    assert document["event"] == "done"
    return document


def max_step(ckpt: Path) -> int:
    try:
        return int(json.loads((ckpt / "progress.json").read_text())["max_step"])
    except (OSError, ValueError, KeyError):
        return 0


def wait_for_step(proc: subprocess.Popen[str], ckpt: Path, step: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reached = max_step(ckpt)
        if reached >= step:
            return reached
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"counter exited with {proc.returncode} before step {step}:\n{out}\n{err}")
        time.sleep(0.01)
    proc.kill()
    pytest.fail(f"counter did not reach step {step} within {timeout}s")


def checkpoints(ckpt: Path) -> list[Path]:
    return sorted(ckpt.glob("ckpt-*.json"))


def checkpoint_step(path: Path) -> int:
    return int(json.loads(path.read_text())["step"])


def run_to_end(ckpt: Path, target: int, interval: float = 0.2) -> dict[str, Any]:
    code, out, err = finish(start(counter_argv(ckpt, target, 0.0, interval)))
    assert code == 0, err
    return summary(out)


def sigterm_at(ckpt: Path, target: int, step: int, step_seconds: float = 0.004) -> int:
    """Run until ``step`` is reached, SIGTERM, and return the step it checkpointed.

    The periodic interval is far longer than the run, so however slow the machine, the only
    checkpoint this run writes is the one SIGTERM asks for."""
    proc = start(counter_argv(ckpt, target, step_seconds, interval=3600))
    wait_for_step(proc, ckpt, step)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, timeout=10)
    assert code == 143, f"exit {code}\n{err}"
    assert out == "", "no summary is printed when stopped"
    assert "stopped by SIGTERM" in err
    newest = checkpoints(ckpt)[-1]
    return checkpoint_step(newest)


# --------------------------------------------------------------------------------------------------


def test_uninterrupted_run_is_exact_and_rerun_is_idempotent(tmp_path: Path) -> None:
    target = 300
    first = run_to_end(tmp_path, target)
    assert first["value"] == target
    assert first["result"] == reference_result(SEED, target)
    assert first["resumed_from"] is None
    assert first["redone_steps"] == 0
    assert first["redone_steps_total"] == 0
    assert first["executed_steps_total"] == target

    # A pod restarted after the work was done finishes at once with the same answer.
    again = run_to_end(tmp_path, target)
    assert again["result"] == first["result"]
    assert again["resumed_from"] == target
    assert again["executed_steps_total"] == target
    assert len(checkpoints(tmp_path)) <= 2


def test_settings_come_from_the_sj_environment(tmp_path: Path) -> None:
    ckpt = tmp_path / "from-env"
    env = clean_env(
        {
            "SJ_CHECKPOINT_DIR": str(ckpt),
            "SJ_CHECKPOINT_INTERVAL": "0.05",
            "COUNTER_TARGET": "60",
            "COUNTER_STEP_SECONDS": "0.005",
            "COUNTER_SEED": SEED,
        }
    )
    code, out, err = finish(start([sys.executable, str(COUNTER)], env=env))
    assert code == 0, err
    result = summary(out)
    assert result["value"] == 60
    assert result["result"] == reference_result(SEED, 60)
    assert result["checkpoints_written"] >= 2, "periodic checkpoints should have been written"
    assert [p.name for p in checkpoints(ckpt)][-1] == "ckpt-000000000060.json"


@pytest.mark.parametrize(("flag", "env", "code"), [
    ([], {}, 143),
    (["--exit-zero-on-signal"], {}, 0),
    ([], {"COUNTER_EXIT_ZERO_ON_SIGNAL": "1"}, 0),
    ([], {"COUNTER_EXIT_ZERO_ON_SIGNAL": "0"}, 143),
], ids=["default-143", "flag-exit-0", "env-exit-0", "env-off"])
def test_exit_code_after_a_signal_checkpoint(tmp_path: Path, flag: list[str], env: dict[str, str],
                                             code: int) -> None:
    """Many real apps exit 0 once they saved their work on SIGTERM; the counter can do either."""
    proc = start([*counter_argv(tmp_path, 10_000, 0.004, interval=3600), *flag], env=clean_env(env))
    wait_for_step(proc, tmp_path, 5)
    proc.send_signal(signal.SIGTERM)
    exit_code, out, err = finish(proc, timeout=10)
    assert exit_code == code, err
    assert out == "" and "stopped by SIGTERM" in err
    assert checkpoint_step(checkpoints(tmp_path)[-1]) >= 5


def test_sigterm_checkpoints_and_repeated_restarts_give_the_exact_result(tmp_path: Path) -> None:
    target = 600
    reached = 0
    for _ in range(3):
        saved = sigterm_at(tmp_path, target, reached + 40)
        # SIGTERM checkpoints everything done so far: nothing is lost.
        assert saved >= reached + 40
        assert saved == max_step(tmp_path)
        reached = saved
        assert len(checkpoints(tmp_path)) <= 2

    result = run_to_end(tmp_path, target)
    assert result["resumed_from"] == reached
    assert result["redone_steps"] == 0
    assert result["redone_steps_total"] == 0
    assert result["runs"] == 4
    assert result["result"] == reference_result(SEED, target)


def test_sigkill_loses_work_since_the_checkpoint_and_reports_it(tmp_path: Path) -> None:
    target = 500
    saved = sigterm_at(tmp_path, target, 50)

    # No periodic checkpoint in this run: everything after `saved` is lost by the SIGKILL.
    proc = start(counter_argv(tmp_path, target, 0.004, interval=1000))
    wait_for_step(proc, tmp_path, saved + 60)
    proc.kill()
    proc.wait(timeout=10)
    lost_at = max_step(tmp_path)
    assert lost_at >= saved + 60
    assert checkpoint_step(checkpoints(tmp_path)[-1]) == saved

    result = run_to_end(tmp_path, target)
    assert result["resumed_from"] == saved
    assert result["redone_steps"] == lost_at - saved
    assert result["redone_steps_total"] == lost_at - saved
    assert result["result"] == reference_result(SEED, target)


def test_random_sigkills_never_change_the_result(tmp_path: Path) -> None:
    target = 400
    for delay in (0.15, 0.3, 0.2, 0.35, 0.25):
        proc = start(counter_argv(tmp_path, target, 0.002, interval=0.03))
        time.sleep(delay)
        proc.kill()
        proc.wait(timeout=10)
    result = run_to_end(tmp_path, target)
    assert result["result"] == reference_result(SEED, target)
    assert result["executed_steps_total"] == target + result["redone_steps_total"]


def corrupt_truncated(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def corrupt_empty(path: Path) -> None:
    path.write_bytes(b"")


def corrupt_garbage(path: Path) -> None:
    path.write_bytes(os.urandom(200))


def corrupt_state_keeps_old_checksum(path: Path) -> None:
    document = json.loads(path.read_text())
    document["state"] = "0" * 64
    path.write_text(json.dumps(document))


def corrupt_step_without_checksum_update(path: Path) -> None:
    document = json.loads(path.read_text())
    document["step"] += 1
    document["value"] += 1
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    "corrupt",
    [
        corrupt_truncated,
        corrupt_empty,
        corrupt_garbage,
        corrupt_state_keeps_old_checksum,
        corrupt_step_without_checksum_update,
    ],
)
def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_good_one(
    tmp_path: Path, corrupt: Any
) -> None:
    target = 400
    first = sigterm_at(tmp_path, target, 30)
    second = sigterm_at(tmp_path, target, first + 30)
    older, newest = checkpoints(tmp_path)
    assert (checkpoint_step(older), checkpoint_step(newest)) == (first, second)
    corrupt(newest)
    proc = start(counter_argv(tmp_path, target, 0.0, interval=0.2))
    code, out, err = finish(proc)
    assert code == 0, err
    result = summary(out)
    assert result["resumed_from"] == first
    assert f"ignoring checkpoint {newest.name}" in err
    assert result["redone_steps"] == second - first, "the steps after the good checkpoint were redone"
    assert result["result"] == reference_result(SEED, target)
    # The broken file was replaced on the way; only valid checkpoints remain.
    remaining = checkpoints(tmp_path)
    assert len(remaining) == 2
    assert all(json.loads(path.read_text())["format"] for path in remaining)


def test_a_corrupt_newest_checkpoint_leaves_the_good_one_untouched_until_superseded(tmp_path: Path) -> None:
    target = 400
    first = sigterm_at(tmp_path, target, 30)
    second = sigterm_at(tmp_path, target, first + 30)
    older, newest = checkpoints(tmp_path)
    good_bytes = older.read_bytes()
    corrupt_truncated(newest)

    # Start again but stop before the next checkpoint could be written: the good file is unchanged.
    proc = start(counter_argv(tmp_path, target, 0.05, interval=1000))
    wait_for_step(proc, tmp_path, second + 1)
    proc.kill()
    proc.wait(timeout=10)
    assert older.read_bytes() == good_bytes
    result = run_to_end(tmp_path, target)
    assert result["resumed_from"] == first
    assert result["result"] == reference_result(SEED, target)


# A wrapper that runs the counter in-process and SIGKILLs itself in the middle of its first checkpoint
# write past a given step: right after the temp file is written and fsynced (before the rename), or
# right after the rename (before the directory fsync and the pruning of old checkpoints).
CRASH_WRAPPER = textwrap.dedent(
    """
    import importlib.util, os, re, signal, sys
    spec = importlib.util.spec_from_file_location("counter", sys.argv[1])
    counter = importlib.util.module_from_spec(spec)
    sys.modules["counter"] = counter
    spec.loader.exec_module(counter)
    helper = sys.modules["sj_operator.checkpoint"]  # the counter's checkpoint helper writes the files
    when, after_step = sys.argv[2], int(sys.argv[3])
    real_replace, real_fsync_dir = os.replace, helper._fsync_dir
    armed = []

    def replace(src, dst, *args, **kwargs):
        match = re.fullmatch(r"ckpt-(\\d+)\\.json", os.path.basename(str(dst)))
        if match and int(match.group(1)) > after_step:
            if when == "before-rename":
                os.kill(os.getpid(), signal.SIGKILL)
            armed.append(True)
        return real_replace(src, dst, *args, **kwargs)

    def fsync_dir(directory):
        if armed:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_fsync_dir(directory)

    os.replace = replace
    helper._fsync_dir = fsync_dir
    sys.exit(counter.main(sys.argv[4:]))
    """
)


@pytest.mark.parametrize("when", ["before-rename", "after-rename"])
def test_kill9_in_the_middle_of_a_checkpoint_write(tmp_path: Path, when: str) -> None:
    target = 300
    first = sigterm_at(tmp_path, target, 20)
    second = sigterm_at(tmp_path, target, first + 20)
    good = {p.name: p.read_bytes() for p in checkpoints(tmp_path)}

    # Periodic checkpoints every 0.1 s: the first one after `second` dies half-way.
    argv = counter_argv(tmp_path, target, 0.005, interval=0.1)[2:]
    proc = start([sys.executable, "-c", CRASH_WRAPPER, str(COUNTER), when, str(second), *argv])
    code, _, err = finish(proc, timeout=30)
    assert code == -signal.SIGKILL, err

    # The earlier checkpoints are intact whatever happened to the new one.
    for name, raw in good.items():
        assert (tmp_path / name).read_bytes() == raw
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-ckpt-")]
    names = [p.name for p in checkpoints(tmp_path)]
    if when == "before-rename":
        assert leftovers, "the temp file of the interrupted write should still be there"
        assert names == sorted(good)
        expected_resume = second
    else:
        assert len(names) == 3 and names[:2] == sorted(good)
        expected_resume = checkpoint_step(checkpoints(tmp_path)[-1])
        assert expected_resume > second
    reached = max_step(tmp_path)

    proc = start(counter_argv(tmp_path, target, 0.0, interval=0.2))
    code, out, err = finish(proc)
    assert code == 0, err
    result = summary(out)
    assert result["resumed_from"] == expected_resume
    assert result["redone_steps"] == reached - expected_resume
    assert result["result"] == reference_result(SEED, target)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")], "temp files are cleaned up"
    assert len(checkpoints(tmp_path)) == 2


def test_stray_temp_files_are_ignored_and_removed(tmp_path: Path) -> None:
    target = 150
    saved = sigterm_at(tmp_path, target, 40)
    newest = checkpoints(tmp_path)[-1]
    stray = tmp_path / f".tmp-ckpt-{saved + 50:012d}.json.abc123"
    stray.write_bytes(newest.read_bytes()[:50])
    result = run_to_end(tmp_path, target)
    assert result["resumed_from"] == saved
    assert result["result"] == reference_result(SEED, target)
    assert not stray.exists()


def test_a_checkpoint_dir_of_another_computation_is_refused(tmp_path: Path) -> None:
    run_to_end(tmp_path, 50)
    argv = counter_argv(tmp_path, 50, 0.0, 1.0)
    argv[argv.index("--seed") + 1] = "another-seed"
    code, out, err = finish(start(argv))
    assert code == 2
    assert out == ""
    assert "belongs to seed" in err
