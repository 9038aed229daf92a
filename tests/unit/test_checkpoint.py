"""The apps' checkpoint helper: the contract read strictly, atomic saves, torn files skipped, and a stop signal
that is saved and exits, also when it arrives in the middle of a save (a real process, signalled there)."""
from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sj_operator import checkpoint, names
from sj_operator.checkpoint import Checkpointer, Contract, ContractError, Stopped

REPO = Path(__file__).resolve().parents[2]


class FakeClock:
    """``clock`` and ``sleep`` for a Checkpointer: time passes only when the test (or a sleep) says so."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def logs() -> list[str]:
    return []


@pytest.fixture
def make(tmp_path: Path, clock: FakeClock, logs: list[str]) -> Callable[..., Checkpointer]:
    def make(**options: Any) -> Checkpointer:
        settings: dict[str, Any] = {"clock": clock, "sleep": clock.sleep, "log": logs.append, **options}
        return Checkpointer(tmp_path, settings.pop("interval", 10.0), **settings)
    return make


def names_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# --------------------------------------------------------------------------------------------------
# Standing alone


def test_importing_the_helper_loads_the_standard_library_only() -> None:
    """An image may copy the one file: importing it (through the package) loads no third-party module."""
    probe = textwrap.dedent("""
        import json, sys
        before = set(sys.modules)
        import sj_operator.checkpoint
        print(json.dumps({"file": sj_operator.checkpoint.__file__, "new": sorted(set(sys.modules) - before)}))
    """)
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    loaded = json.loads(out)
    assert Path(loaded["file"]) == REPO / "sj_operator/checkpoint.py"
    outside = {m for m in loaded["new"] if m.split(".")[0] not in sys.stdlib_module_names}
    assert outside == {"sj_operator", "sj_operator.checkpoint"}


def test_the_environment_names_are_the_operators() -> None:
    """The helper repeats the pod env names (it may not import them); they must stay the operator's."""
    pairs = [(checkpoint.ENV_NAME, names.ENV_NAME), (checkpoint.ENV_NAMESPACE, names.ENV_NAMESPACE),
             (checkpoint.ENV_RESTART_COUNT, names.ENV_RESTART_COUNT),
             (checkpoint.ENV_CHECKPOINT_DIR, names.ENV_CHECKPOINT_DIR),
             (checkpoint.ENV_CHECKPOINT_INTERVAL, names.ENV_CHECKPOINT_INTERVAL),
             (checkpoint.ENV_CONFIG_INDEX, names.ENV_CONFIG_INDEX), (checkpoint.ENV_RANK, names.ENV_RANK),
             (checkpoint.ENV_WORLD_SIZE, names.ENV_WORLD_SIZE), (checkpoint.ENV_HOSTS, names.ENV_HOSTS)]
    assert all(ours == theirs for ours, theirs in pairs), pairs


# --------------------------------------------------------------------------------------------------
# The contract


FULL_ENV = {"SJ_CHECKPOINT_DIR": "/checkpoints", "SJ_CHECKPOINT_INTERVAL": "200", "SJ_NAME": "heat",
            "SJ_NAMESPACE": "research", "SJ_RESTART_COUNT": "2", "SJ_CONFIG_INDEX": "1", "SJ_RANK": "1",
            "SJ_WORLD_SIZE": "3", "SJ_HOSTS": "heat-r2-0.heat-r2 heat-r2-1.heat-r2 heat-r2-2.heat-r2"}


def test_the_contract_is_read_from_the_environment() -> None:
    assert Contract.from_env(FULL_ENV) == Contract(
        checkpoint_dir=Path("/checkpoints"), checkpoint_interval=200.0, name="heat", namespace="research",
        restart_count=2, config_index=1, rank=1, world_size=3,
        hosts=("heat-r2-0.heat-r2", "heat-r2-1.heat-r2", "heat-r2-2.heat-r2"))
    minimal = Contract.from_env({"SJ_CHECKPOINT_DIR": "/c", "SJ_CHECKPOINT_INTERVAL": " 0.5 "})
    assert minimal == Contract(Path("/c"), 0.5)
    assert minimal.rank is None and minimal.restart_count is None and minimal.hosts == ()


@pytest.mark.parametrize(("environ", "defaults", "expected"), [
    ({}, {"checkpoint_dir": "local", "checkpoint_interval": 60.0}, (Path("local"), 60.0)),
    ({"SJ_CHECKPOINT_DIR": "/c"}, {"checkpoint_dir": "local", "checkpoint_interval": 60.0}, (Path("/c"), 60.0)),
    ({"SJ_CHECKPOINT_INTERVAL": "7"}, {"checkpoint_dir": "local", "checkpoint_interval": 60.0}, (Path("local"), 7.0)),
], ids=["both-defaults", "dir-from-env", "interval-from-env"])
def test_the_apps_own_defaults_serve_only_where_a_variable_is_unset(
        environ: dict[str, str], defaults: dict[str, Any], expected: tuple[Path, float]) -> None:
    contract = Contract.from_env(environ, **defaults)
    assert (contract.checkpoint_dir, contract.checkpoint_interval) == expected


@pytest.mark.parametrize(("environ", "message"), [
    ({"SJ_CHECKPOINT_INTERVAL": "60"}, "SJ_CHECKPOINT_DIR is not set"),
    ({"SJ_CHECKPOINT_DIR": "/c"}, "SJ_CHECKPOINT_INTERVAL is not set"),
    ({"SJ_CHECKPOINT_DIR": "  ", "SJ_CHECKPOINT_INTERVAL": "60"}, "SJ_CHECKPOINT_DIR is set but empty"),
    ({"SJ_CHECKPOINT_DIR": "/c", "SJ_CHECKPOINT_INTERVAL": ""}, "SJ_CHECKPOINT_INTERVAL is set but empty"),
    *[({"SJ_CHECKPOINT_DIR": "/c", "SJ_CHECKPOINT_INTERVAL": bad},
       f"SJ_CHECKPOINT_INTERVAL={bad!r} is not a finite number above 0") for bad in ("ten", "0", "-5", "nan", "inf")],
    ({**FULL_ENV, "SJ_RESTART_COUNT": "two"}, "SJ_RESTART_COUNT='two' is not an integer of at least 0"),
    ({**FULL_ENV, "SJ_RESTART_COUNT": "-1"}, "SJ_RESTART_COUNT='-1' is not an integer of at least 0"),
    ({**FULL_ENV, "SJ_CONFIG_INDEX": "1.5"}, "SJ_CONFIG_INDEX='1.5' is not an integer of at least 0"),
    ({**FULL_ENV, "SJ_WORLD_SIZE": "0"}, "SJ_WORLD_SIZE='0' is not an integer of at least 1"),
    ({**FULL_ENV, "SJ_RANK": "3"}, "SJ_RANK=3 is not below SJ_WORLD_SIZE=3"),
])
def test_a_missing_or_malformed_variable_is_an_error_naming_it(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ContractError, match=f"^{message.replace('.', '[.]')}"):
        Contract.from_env(environ)


def test_the_env_readers_of_the_apps_own_settings() -> None:
    env = {"STEPS": "12", "PAUSE": "0.25", "BAD": "x"}
    assert checkpoint.env_int("STEPS", environ=env) == 12
    assert checkpoint.env_int("UNSET", 5, environ=env) == 5
    assert checkpoint.env_float("PAUSE", environ=env) == 0.25
    assert checkpoint.env_float("UNSET", 1.5, environ=env) == 1.5
    with pytest.raises(ContractError, match=r"^UNSET is not set$"):
        checkpoint.env_int("UNSET", environ=env)
    with pytest.raises(ContractError, match=r"^BAD='x' is not a finite number of at least 0$"):
        checkpoint.env_float("BAD", 1.0, environ=env)
    with pytest.raises(ContractError, match=r"^STEPS='12' is not an integer of at least 20$"):
        checkpoint.env_int("STEPS", minimum=20, environ=env)


def test_from_env_makes_a_checkpointer_of_the_contract(tmp_path: Path) -> None:
    env = {"SJ_CHECKPOINT_DIR": str(tmp_path), "SJ_CHECKPOINT_INTERVAL": "30"}
    ckpt = Checkpointer.from_env(env, format="app/v2", keep=3)
    assert (ckpt.directory, ckpt.interval, ckpt.format, ckpt.keep) == (tmp_path, 30.0, "app/v2", 3)


@pytest.mark.parametrize(("interval", "keep", "message"), [
    (0.0, 2, "interval must be a finite number"), (math.nan, 2, "interval must be a finite number"),
    (math.inf, 2, "interval must be a finite number"), (10.0, 0, "keep must be at least 1"),
])
def test_a_checkpointer_refuses_a_bad_interval_or_keep(tmp_path: Path, interval: float, keep: int,
                                                       message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Checkpointer(tmp_path, interval, keep=keep)


# --------------------------------------------------------------------------------------------------
# Saving and loading


def test_a_save_is_loaded_back_with_its_step_and_state(make: Callable[..., Checkpointer], tmp_path: Path) -> None:
    ckpt = make(format="demo/v1")
    assert ckpt.load() is None
    path = ckpt.save(7, {"total": 21, "nested": {"xs": [1, 2.5, None]}}, "test")
    assert path == tmp_path / "ckpt-000000000007.json"
    document = json.loads(path.read_text())
    assert document["format"] == "demo/v1" and document["step"] == 7 and len(document["checksum"]) == 64
    loaded = make(format="demo/v1").load()
    assert loaded == checkpoint.Checkpoint(7, {"total": 21, "nested": {"xs": [1, 2.5, None]}}, path)
    assert names_in(tmp_path) == ["ckpt-000000000007.json"], "no temp file is left"


def test_the_checksum_covers_everything_but_itself_and_the_time() -> None:
    """The counter's checkpoints written before the helper carry the same checksum: they still load."""
    raw = checkpoint.encode("f", 3, {"a": 1})
    document = json.loads(raw)
    body = {"a": 1, "format": "f", "step": 3}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert document["checksum"] == hashlib.sha256(canonical).hexdigest()
    assert checkpoint.decode(raw, "f") == (3, {"a": 1})


def test_the_newest_two_valid_checkpoints_are_kept(make: Callable[..., Checkpointer], tmp_path: Path) -> None:
    ckpt = make()
    for step in (1, 2, 3, 4):
        ckpt.save(step, {"n": step})
    assert names_in(tmp_path) == ["ckpt-000000000003.json", "ckpt-000000000004.json"]
    assert ckpt.written == 4
    three = make(keep=3)
    for step in (5, 6):
        three.save(step, {"n": step})
    assert names_in(tmp_path) == [f"ckpt-00000000000{s}.json" for s in (4, 5, 6)]


def test_a_step_already_on_disk_is_not_written_again(make: Callable[..., Checkpointer], tmp_path: Path,
                                                      logs: list[str]) -> None:
    make().save(5, {"n": 5})
    before = (tmp_path / "ckpt-000000000005.json").read_bytes()
    resumed = make()
    assert resumed.load() is not None and resumed.saved_step == 5
    resumed.save(5, {"n": "changed"}, "done")
    assert resumed.written == 0
    assert (tmp_path / "ckpt-000000000005.json").read_bytes() == before
    assert logs[-1] == "checkpoint ckpt-000000000005.json already written (done)"


@pytest.mark.parametrize(("step", "state", "error", "message"), [
    (-1, {}, ValueError, "step must be a whole number"),
    (10**12, {}, ValueError, "step must be a whole number"),
    (True, {}, ValueError, "step must be a whole number"),
    (1, {"step": 2}, ValueError, "may not use the keys step"),
    (1, {"checksum": "x", "format": "y"}, ValueError, "may not use the keys checksum, format"),
    (1, {"when": object()}, TypeError, "not JSON serializable"),
])
def test_a_state_or_step_that_cannot_be_saved_is_refused_before_anything_is_written(
        make: Callable[..., Checkpointer], tmp_path: Path, step: Any, state: dict[str, Any],
        error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make().save(step, state)
    assert names_in(tmp_path) == []


def test_a_failed_write_leaves_the_previous_file_and_no_temp_file(
        make: Callable[..., Checkpointer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = make()
    ckpt.save(1, {"n": 1})

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        ckpt.save(2, {"n": 2})
    assert names_in(tmp_path) == ["ckpt-000000000001.json"]
    assert ckpt.saved_step == 1


# --------------------------------------------------------------------------------------------------
# Torn and foreign files


def truncate(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        document = json.loads(path.read_text())
        change(document)
        path.write_text(json.dumps(document))
    return corrupt


def renamed_to_a_later_step(path: Path) -> None:
    path.rename(path.with_name("ckpt-000000000003.json"))


TORN: dict[str, Callable[[Path], None]] = {
    "truncated": truncate,
    "empty": lambda path: path.write_bytes(b""),
    "garbage": lambda path: path.write_bytes(bytes(range(256)) * 3),
    "not-utf8-json": lambda path: path.write_bytes(b'{"step": 2, "\xff": 1}'),
    "not-an-object": lambda path: path.write_text("[1, 2]"),
    "state-edited-checksum-kept": edit(lambda d: d.update(n=99)),
    "step-edited-checksum-kept": edit(lambda d: d.update(step=d["step"] + 1)),
    "checksum-missing": edit(lambda d: d.pop("checksum")),
    "step-not-a-number": edit(lambda d: d.update(step="2")),
    "another-format": edit(lambda d: d.update(format="someone-else/v1")),
    "name-and-step-disagree": renamed_to_a_later_step,
}


@pytest.mark.parametrize("corrupt", TORN.values(), ids=TORN.keys())
def test_a_torn_newest_checkpoint_is_skipped_and_the_previous_good_one_resumes(
        make: Callable[..., Checkpointer], tmp_path: Path, logs: list[str], corrupt: Callable[[Path], None]) -> None:
    ckpt = make()
    ckpt.save(1, {"n": 1})
    newest = ckpt.save(2, {"n": 2})
    corrupt(newest)
    broken = max(p for p in tmp_path.iterdir())
    loaded = make().load()
    assert loaded is not None and (loaded.step, loaded.state) == (1, {"n": 1})
    assert any(line.startswith(f"ignoring checkpoint {broken.name}: ") for line in logs), logs


def test_nothing_valid_means_a_fresh_start(make: Callable[..., Checkpointer], tmp_path: Path) -> None:
    ckpt = make()
    for step in (1, 2):
        truncate(ckpt.save(step, {"n": step}))
    (tmp_path / "ckpt-12.json").write_text("not a checkpoint name: never read")
    assert make().load() is None


def test_broken_files_are_removed_by_the_next_save_and_later_ones_left(make: Callable[..., Checkpointer],
                                                                       tmp_path: Path) -> None:
    ckpt = make(keep=3)
    for step in (1, 2, 5):
        ckpt.save(step, {"n": step})
    truncate(tmp_path / "ckpt-000000000002.json")
    truncate(tmp_path / "ckpt-000000000005.json")
    resumed = make()
    assert resumed.load() is not None and resumed.saved_step == 1
    assert len(names_in(tmp_path)) == 3, "loading removes nothing: the good one stays until it is superseded"
    resumed.save(3, {"n": 3})
    assert names_in(tmp_path) == [f"ckpt-00000000000{s}.json" for s in (1, 3, 5)], \
        "the broken step 2 went; step 5 is above the save and stays until a save of it replaces it"


def test_a_temp_file_left_behind_is_ignored_and_removed(make: Callable[..., Checkpointer], tmp_path: Path,
                                                        logs: list[str]) -> None:
    ckpt = make()
    good = ckpt.save(1, {"n": 1})
    stray = tmp_path / ".tmp-ckpt-000000000002.json.k3j5x"
    stray.write_bytes(good.read_bytes()[:40])
    other = tmp_path / "notes.txt"
    other.write_text("the app's own file")
    with make() as resumed:
        loaded = resumed.load()
    assert loaded is not None and loaded.step == 1
    assert not stray.exists() and other.exists()
    assert f"removing leftover temp file {stray.name}" in logs


# --------------------------------------------------------------------------------------------------
# The interval


def test_the_interval_decides_when_a_save_is_due(make: Callable[..., Checkpointer], clock: FakeClock,
                                                 tmp_path: Path) -> None:
    with make(interval=10.0) as ckpt:
        timeline = []
        for advance in (0.0, 9.5, 0.5, 3.0, 7.0):
            clock.now += advance
            due = ckpt.due()
            saved = ckpt.save_if_due(int(clock.now), {"t": clock.now})
            timeline.append((due, saved is not None))
    assert timeline == [(False, False), (False, False), (True, True), (False, False), (True, True)]
    assert names_in(tmp_path) == ["ckpt-000000001010.json", "ckpt-000000001020.json"]


def test_an_explicit_save_restarts_the_interval(make: Callable[..., Checkpointer], clock: FakeClock) -> None:
    with make(interval=10.0) as ckpt:
        clock.now += 8
        ckpt.save(1, {})
        clock.now += 8
        assert not ckpt.due()
        clock.now += 2
        assert ckpt.due()


def test_a_failed_periodic_save_is_logged_and_tried_again_an_interval_later(
        make: Callable[..., Checkpointer], clock: FakeClock, logs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    failures = [OSError(5, "Input/output error")]

    def flaky(path: Path, data: bytes, *, durable: bool = True) -> None:
        if failures:
            raise failures.pop()
        real(path, data, durable=durable)

    real = checkpoint.atomic_write
    monkeypatch.setattr(checkpoint, "atomic_write", flaky)
    with make(interval=10.0) as ckpt:
        clock.now += 10
        assert ckpt.save_if_due(1, {}) is None
        assert logs[-1].startswith("warning: checkpoint of step 1 failed, the previous one stays")
        clock.now += 5
        assert not ckpt.due(), "not at every step while the disk fails"
        clock.now += 5
        assert ckpt.save_if_due(2, {}) is not None


def test_sleep_waits_on_the_injected_clock_and_ends_early_on_a_stop(make: Callable[..., Checkpointer],
                                                                    clock: FakeClock) -> None:
    with make() as ckpt:
        assert ckpt.sleep(0.12) is True
        assert sum(clock.slept) == pytest.approx(0.12) and max(clock.slept) <= checkpoint.SLEEP_SLICE_SECONDS
        assert ckpt.sleep(0) is True
        clock.slept.clear()
        ckpt._sleep = lambda seconds: signal.raise_signal(signal.SIGTERM)
        assert ckpt.sleep(30) is False
        assert ckpt.stopping


# --------------------------------------------------------------------------------------------------
# Stop signals (in this process: the handler only sets a flag)


@pytest.fixture
def restored_handlers() -> Iterator[None]:
    """Whatever a test does, this process's handlers are as before afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.parametrize(("options", "sent", "code"), [
    ({}, signal.SIGTERM, 143),
    ({}, signal.SIGINT, 130),
    ({"exit_code": 0}, signal.SIGTERM, 0),
    ({"signals": [signal.SIGUSR1]}, signal.SIGUSR1, 128 + signal.SIGUSR1),
], ids=["sigterm-143", "sigint-130", "exit-code-0", "image-stopsignal"])
def test_a_stop_signal_is_saved_then_exits_with_the_interruption_code(
        make: Callable[..., Checkpointer], tmp_path: Path, logs: list[str], restored_handlers: None,
        options: dict[str, Any], sent: signal.Signals, code: int) -> None:
    before = signal.getsignal(sent)
    with pytest.raises(Stopped) as stopped, make(interval=3600.0, **options) as ckpt:
        ckpt.save_if_due(1, {"n": 1})
        assert not ckpt.stopping
        signal.raise_signal(sent)
        assert ckpt.stopping and ckpt.due()
        ckpt.save_if_due(2, {"n": 2})
        pytest.fail("save_if_due returned after a stop signal")
    assert stopped.value.code == code and stopped.value.signum == sent
    assert isinstance(stopped.value, SystemExit)
    assert names_in(tmp_path) == ["ckpt-000000000002.json"]
    assert logs[-2:] == [f"checkpoint ckpt-000000000002.json written ({sent.name})",
                         f"stopped by {sent.name} at step 2"]
    assert signal.getsignal(sent) == before, "the with block restores the handler it replaced"


def test_a_stop_with_the_step_already_saved_writes_nothing_more(make: Callable[..., Checkpointer],
                                                                logs: list[str], restored_handlers: None) -> None:
    with pytest.raises(Stopped), make(interval=3600.0) as ckpt:
        ckpt.save(4, {"n": 4})
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)  # a second signal changes nothing: the first one counts
        ckpt.save_if_due(4, {"n": 4})
    assert ckpt.written == 1 and ckpt.signum == signal.SIGTERM
    assert logs[-2:] == ["checkpoint ckpt-000000000004.json already written (SIGTERM)", "stopped by SIGTERM at step 4"]


def test_a_final_save_after_a_late_stop_does_not_exit(make: Callable[..., Checkpointer],
                                                      restored_handlers: None) -> None:
    """The work is done: the app reports it and exits 0, whatever came in meanwhile."""
    with make() as ckpt:
        signal.raise_signal(signal.SIGTERM)
        ckpt.save(9, {"n": 9}, "done")
    assert ckpt.stopping and ckpt.saved_step == 9


# --------------------------------------------------------------------------------------------------
# A real process, signalled in the middle of a save

SAVER = textwrap.dedent("""
    import itertools, os, sys
    from sj_operator import checkpoint

    pause_at, directory = sys.argv[1], sys.argv[2]
    NEW = "ckpt-000000000002.json"
    paused = []

    def pause():
        # Tell the test where this process is, then wait for its go (the signal arrives meanwhile).
        paused.append(True)
        print("in the save", flush=True)
        sys.stdin.readline()

    real_replace, real_fsync_dir = os.replace, checkpoint._fsync_dir

    def replace(src, dst):  # the temp file is written and fsynced; the rename is next
        if pause_at == "before-rename" and os.path.basename(dst) == NEW:
            pause()
        return real_replace(src, dst)

    def fsync_dir(path):  # the rename is done; the directory's fsync and the pruning are next
        if pause_at == "after-rename" and not paused and os.path.exists(os.path.join(directory, NEW)):
            pause()
        return real_fsync_dir(path)

    os.replace, checkpoint._fsync_dir = replace, fsync_dir
    ticks = itertools.count(0, 60)  # each look at the clock is a minute later: every save_if_due is due
    with checkpoint.Checkpointer(directory, 30, clock=lambda: next(ticks)) as ckpt:
        ckpt.save(1, {"n": 1, "blob": ""})
        ckpt.save_if_due(2, {"n": 2, "blob": "x" * 1_000_000})
        print("save_if_due returned", flush=True)
""")


@pytest.mark.parametrize(("pause_at", "sent", "code", "newest"), [
    ("before-rename", signal.SIGTERM, 143, 2),
    ("after-rename", signal.SIGTERM, 143, 2),
    ("before-rename", signal.SIGKILL, -signal.SIGKILL, 1),
    ("after-rename", signal.SIGKILL, -signal.SIGKILL, 2),
], ids=["sigterm-before-rename", "sigterm-after-rename", "sigkill-before-rename", "sigkill-after-rename"])
def test_a_signal_in_the_middle_of_a_save(tmp_path: Path, pause_at: str, sent: signal.Signals, code: int,
                                          newest: int) -> None:
    """SIGTERM: the save in progress completes, then the process exits 143 without a second write. SIGKILL
    (no chance to finish): the newest checkpoint that verifies is the previous one or the whole new one,
    never a torn one."""
    proc = subprocess.Popen([sys.executable, "-c", SAVER, pause_at, str(tmp_path)], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == "in the save\n"
    proc.send_signal(sent)
    if sent != signal.SIGKILL:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert "save_if_due returned" not in out
    loaded = Checkpointer(tmp_path, 30).load()
    assert loaded is not None and loaded.step == newest
    if sent == signal.SIGTERM:
        assert "checkpoint ckpt-000000000002.json written (interval)" in err
        assert "checkpoint ckpt-000000000002.json already written (SIGTERM)" in err
        assert "stopped by SIGTERM at step 2" in err
        assert names_in(tmp_path) == ["ckpt-000000000001.json", "ckpt-000000000002.json"], "no temp file left"
    elif pause_at == "before-rename":
        assert [n for n in names_in(tmp_path) if n.startswith(".tmp-ckpt-000000000002.json.")], \
            "the killed write left its temp file, which the next start removes"


# --------------------------------------------------------------------------------------------------
# The docs' ten-line app

DOCS_PAGE = REPO / "docs/tasks/python-checkpoints.md"


def docs_app() -> str:
    return DOCS_PAGE.read_text().split("```python\n", 1)[1].split("```", 1)[0]


def test_the_docs_app_is_ten_lines_and_the_modules_own_example() -> None:
    app = docs_app()
    assert len([line for line in app.splitlines() if line.strip()]) <= 10
    assert textwrap.indent(app, "    ") in (checkpoint.__doc__ or ""), "the module's docstring shows the same app"


def test_the_docs_app_resumes_from_the_newest_valid_checkpoint_to_the_uninterrupted_result(tmp_path: Path) -> None:
    """The page's app, with fewer steps: run, then with its last checkpoint torn and an earlier good one."""
    steps, modulus = 100_000, 1_000_000_007
    app = tmp_path / "app.py"
    app.write_text(docs_app().replace("10_000_000", str(steps)))
    env = {**os.environ, "PYTHONPATH": str(REPO), "SJ_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
           "SJ_CHECKPOINT_INTERVAL": "3600"}

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(app)], cwd=tmp_path, env=env, capture_output=True, text=True,
                              check=True)

    def total(upto: int) -> int:
        return sum(k * k for k in range(upto)) % modulus

    assert run().stdout == f"{total(steps)}\n"
    truncate(tmp_path / f"ckpt/ckpt-{steps:012d}.json")
    Checkpointer(tmp_path / "ckpt", 3600).save(steps // 2, {"total": total(steps // 2)})
    resumed = run()
    assert resumed.stdout == f"{total(steps)}\n"
    assert f"ignoring checkpoint ckpt-{steps:012d}.json: " in resumed.stderr
