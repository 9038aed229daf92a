#!/usr/bin/env python3
"""A long, deterministic computation that checkpoints and resumes: the ScavengerJob demo app.

The work is a SHA-256 hash chain: ``state[0] = sha256(seed)``, ``state[k] = sha256(state[k-1] || k)``,
computed up to ``--target`` steps with ``--step-seconds`` of (simulated) extra work per step. The
result after any number of interruptions equals the result of an uninterrupted run.

Checkpoints
    Written every ``SJ_CHECKPOINT_INTERVAL`` seconds, on SIGTERM/SIGINT and at the end, into
    ``SJ_CHECKPOINT_DIR`` (default ``./checkpoints``) as ``ckpt-<step>.json``. Each write is atomic:
    a temp file in the same directory, fsync, ``os.replace``, fsync of the directory. Every
    checkpoint carries a SHA-256 checksum over its content; on start the newest checkpoint that
    parses and verifies is used, so a corrupt or partial file is never trusted, and the previous
    good one is used instead. The newest two good checkpoints are kept.

Lost work
    A small progress marker (``progress.json``) records, best-effort at every step, the highest step
    ever reached and the number of steps ever executed. On resume the steps between the checkpoint
    and that highest step are the work that was lost and must be redone (``redone_steps``).

Output
    Log lines go to stderr; at the end one JSON line goes to stdout (``"event": "done"``) with the
    final value and result, where the run resumed from and how much work was redone. Exit codes:
    0 done, 143 stopped by SIGTERM after checkpointing (130 for SIGINT), 2 bad usage or a checkpoint
    directory that belongs to another computation.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Final

FORMAT: Final = "scavenger.dev/generic-counter/v1"
CHECKPOINT_RE: Final = re.compile(r"^ckpt-(\d{12})\.json$")
TEMP_PREFIX: Final = ".tmp-"
PROGRESS_FILE: Final = "progress.json"
KEEP_CHECKPOINTS: Final = 2
EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
SLEEP_SLICE_SECONDS: Final = 0.05


class CheckpointError(Exception):
    """A checkpoint file that cannot be trusted (unreadable, malformed or failing its checksum)."""


class ForeignCheckpointError(Exception):
    """The checkpoint directory holds the state of a different computation."""


def log(message: str) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    print(f"{stamp} counter[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# The computation


def initial_state(seed: str) -> bytes:
    return hashlib.sha256(seed.encode("utf-8")).digest()


def advance(state: bytes, step: int) -> bytes:
    """Compute ``state[step]`` from ``state[step - 1]``."""
    return hashlib.sha256(state + step.to_bytes(8, "big")).digest()


# --------------------------------------------------------------------------------------------------
# Durable file writes


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see either the old or the new content.

    With ``durable`` the data and the rename are also on stable storage when this returns.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(path.parent)


def canonical_json(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")


# --------------------------------------------------------------------------------------------------
# Checkpoints


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    seed: str
    step: int
    state: bytes
    executed_total: int
    path: Path | None = None

    @property
    def value(self) -> int:
        return self.step

    def payload(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "seed": self.seed,
            "step": self.step,
            "value": self.value,
            "state": self.state.hex(),
            "executed_total": self.executed_total,
        }

    def encode(self) -> bytes:
        body = self.payload()
        document = dict(body)
        document["written_at"] = dt.datetime.now(dt.UTC).isoformat()
        document["checksum"] = hashlib.sha256(canonical_json(body)).hexdigest()
        return json.dumps(document, sort_keys=True, indent=1).encode("utf-8") + b"\n"

    @classmethod
    def decode(cls, raw: bytes, path: Path | None = None) -> Checkpoint:
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"not valid JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise CheckpointError("not a JSON object")
        if document.get("format") != FORMAT:
            raise CheckpointError(f"unknown format {document.get('format')!r}")
        seed, step, state_hex, executed, checksum = _checked_fields(document)
        checkpoint = cls(
            seed=seed, step=step, state=bytes.fromhex(state_hex), executed_total=executed, path=path
        )
        expected = hashlib.sha256(canonical_json(checkpoint.payload())).hexdigest()
        if checksum != expected:
            raise CheckpointError("checksum mismatch")
        return checkpoint


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _checked_fields(document: dict[str, Any]) -> tuple[str, int, str, int, str]:
    """(seed, step, state, executed_total, checksum) of a checkpoint document, each checked."""
    seed, step, value = document.get("seed"), document.get("step"), document.get("value")
    state_hex, executed, checksum = document.get("state"), document.get("executed_total"), document.get("checksum")
    if not isinstance(seed, str):
        raise CheckpointError("seed missing or not a string")
    if not _is_count(step):
        raise CheckpointError("step missing or not a non-negative integer")
    if value != step:
        raise CheckpointError("value does not match step")
    if not _is_count(executed):
        raise CheckpointError("executed_total missing or not a non-negative integer")
    if not isinstance(state_hex, str) or not re.fullmatch(r"[0-9a-f]{64}", state_hex):
        raise CheckpointError("state missing or not a SHA-256 hex digest")
    if not isinstance(checksum, str):
        raise CheckpointError("checksum missing")
    assert isinstance(step, int) and isinstance(executed, int)
    return seed, step, state_hex, executed, checksum


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"ckpt-{step:012d}.json"


def list_checkpoint_files(directory: Path) -> list[tuple[int, Path]]:
    """All checkpoint files in the directory, newest (highest step) first."""
    found: list[tuple[int, Path]] = []
    for entry in directory.iterdir():
        match = CHECKPOINT_RE.match(entry.name)
        if match and entry.is_file():
            found.append((int(match.group(1)), entry))
    found.sort(reverse=True)
    return found


def read_checkpoint(path: Path, step_from_name: int) -> Checkpoint:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"unreadable: {exc}") from exc
    checkpoint = Checkpoint.decode(raw, path)
    if checkpoint.step != step_from_name:
        raise CheckpointError(f"holds step {checkpoint.step}, its name says {step_from_name}")
    return checkpoint


def iter_valid_checkpoints(directory: Path) -> Iterator[Checkpoint]:
    """Valid checkpoints, newest first; invalid ones are reported and skipped."""
    for step, path in list_checkpoint_files(directory):
        try:
            yield read_checkpoint(path, step)
        except CheckpointError as exc:
            log(f"ignoring checkpoint {path.name}: {exc}")


class CheckpointStore:
    """The checkpoint directory of one computation (one seed)."""

    def __init__(self, directory: Path, seed: str, keep: int = KEEP_CHECKPOINTS) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = directory
        self.seed = seed
        self.keep = keep

    def prepare(self) -> None:
        """Create the directory and remove temp files a crashed writer left behind."""
        self.directory.mkdir(parents=True, exist_ok=True)
        removed = False
        for entry in self.directory.iterdir():
            if entry.name.startswith(TEMP_PREFIX) and entry.is_file():
                log(f"removing leftover temp file {entry.name}")
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                removed = True
        if removed:
            fsync_dir(self.directory)

    def latest(self) -> Checkpoint | None:
        for checkpoint in iter_valid_checkpoints(self.directory):
            if checkpoint.seed != self.seed:
                raise ForeignCheckpointError(
                    f"{checkpoint.path} belongs to seed {checkpoint.seed!r}, not {self.seed!r}; "
                    "use another checkpoint directory or the same seed"
                )
            return checkpoint
        return None

    def save(self, checkpoint: Checkpoint) -> Path:
        path = checkpoint_path(self.directory, checkpoint.step)
        atomic_write(path, checkpoint.encode())
        self.prune(newest=checkpoint.step)
        return path

    def prune(self, newest: int) -> None:
        """Keep the newest ``keep`` valid checkpoints up to ``newest``; drop older and broken ones.

        Files above ``newest`` (only possible as broken leftovers) are left alone: a later save of
        that step replaces them.
        """
        kept = 0
        removed = False
        for step, path in list_checkpoint_files(self.directory):
            if step > newest:
                continue
            if kept < self.keep:
                try:
                    read_checkpoint(path, step)
                except CheckpointError as exc:
                    log(f"removing broken checkpoint {path.name}: {exc}")
                else:
                    kept += 1
                    continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            removed = True
        if removed:
            fsync_dir(self.directory)


# --------------------------------------------------------------------------------------------------
# Progress marker (best-effort, not fsynced: it measures lost work, it is not needed for correctness)


@dataclasses.dataclass
class Progress:
    seed: str
    max_step: int = 0
    executed_total: int = 0
    runs: int = 0

    @classmethod
    def load(cls, directory: Path, seed: str) -> Progress:
        path = directory / PROGRESS_FILE
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            if document.get("seed") != seed:
                return cls(seed=seed)
            max_step, executed, runs = (
                document["max_step"],
                document["executed_total"],
                document["runs"],
            )
            counters = (max_step, executed, runs)
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counters):
                raise ValueError("negative or non-integer counter")
            return cls(seed=seed, max_step=max_step, executed_total=executed, runs=runs)
        except FileNotFoundError:
            return cls(seed=seed)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log(f"ignoring unreadable progress marker: {exc}")
            return cls(seed=seed)

    def save(self, directory: Path) -> None:
        try:
            atomic_write(directory / PROGRESS_FILE, canonical_json(dataclasses.asdict(self)), durable=False)
        except OSError as exc:
            log(f"could not write progress marker: {exc}")


# --------------------------------------------------------------------------------------------------
# Signals


class StopFlag:
    """Set by SIGTERM/SIGINT; the main loop checks it between steps."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.handler)
        signal.signal(signal.SIGINT, self.handler)

    def sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``, returning early once a stop was requested."""
        deadline = time.monotonic() + seconds
        while not self:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(remaining, SLEEP_SLICE_SECONDS))

    def exit_code(self) -> int:
        assert self.signum is not None
        return 128 + self.signum


# --------------------------------------------------------------------------------------------------
# Command line


def env_number(name: str, kind: type[int] | type[float], default: int | float) -> int | float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(
            f"counter: environment variable {name}={raw!r} is not a valid {kind.__name__}"
        ) from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Deterministic hash-chain counter that checkpoints and resumes (ScavengerJob demo).",
    )
    parser.add_argument(
        "--target",
        type=int,
        default=env_number("COUNTER_TARGET", int, 600),
        help="steps to compute (env COUNTER_TARGET, default 600)",
    )
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=env_number("COUNTER_STEP_SECONDS", float, 1.0),
        help="simulated work per step in seconds (env COUNTER_STEP_SECONDS, default 1.0)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=Path(os.environ.get("SJ_CHECKPOINT_DIR") or "checkpoints"),
        help="checkpoint directory (env SJ_CHECKPOINT_DIR, default ./checkpoints)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=float,
        default=env_number("SJ_CHECKPOINT_INTERVAL", float, 60.0),
        help="seconds between periodic checkpoints (env SJ_CHECKPOINT_INTERVAL, default 60)",
    )
    parser.add_argument(
        "--seed",
        default=os.environ.get("COUNTER_SEED", "scavenger"),
        help="seed of the hash chain (env COUNTER_SEED, default 'scavenger')",
    )
    parser.add_argument(
        "--log-every",
        type=int,
        default=env_number("COUNTER_LOG_EVERY", int, 100),
        help="log progress every N steps, 0 for never (env COUNTER_LOG_EVERY, default 100)",
    )
    parser.add_argument(
        "--exit-zero-on-signal",
        action="store_true",
        default=os.environ.get("COUNTER_EXIT_ZERO_ON_SIGNAL", "") not in ("", "0", "false"),
        help="exit 0 after the checkpoint a signal asked for, as many real apps do, instead of 128+signal "
        "(env COUNTER_EXIT_ZERO_ON_SIGNAL)",
    )
    args = parser.parse_args(argv)
    if args.target < 0:
        parser.error("--target must be >= 0")
    if args.step_seconds < 0:
        parser.error("--step-seconds must be >= 0")
    if args.checkpoint_interval <= 0:
        parser.error("--checkpoint-interval must be > 0")
    if args.log_every < 0:
        parser.error("--log-every must be >= 0")
    return args


# --------------------------------------------------------------------------------------------------
# Main loop


class Run:
    """One run of the counter: resume, count, checkpoint on the interval and on SIGTERM, report."""

    def __init__(self, args: argparse.Namespace, stop: StopFlag) -> None:
        self.args, self.stop = args, stop
        self.started = time.monotonic()
        self.store = CheckpointStore(args.checkpoint_dir, args.seed)
        self.progress = Progress.load(args.checkpoint_dir, args.seed)
        self.step, self.state = 0, initial_state(args.seed)
        self.resumed_from: int | None = None
        self.redone_steps = 0
        self.checkpoints_written = 0
        self.last_checkpoint_time = time.monotonic()

    def resume(self, resumed: Checkpoint | None) -> None:
        progress = self.progress
        progress.runs += 1
        if resumed is None:
            # Without a checkpoint everything reached before is lost (a marker from an earlier run whose
            # checkpoints are gone still tells how far it got).
            self.redone_steps = progress.max_step
            log(f"starting fresh (target {self.args.target}, checkpoint dir {self.args.checkpoint_dir})")
        else:
            self.step, self.state, self.resumed_from = resumed.step, resumed.state, resumed.step
            self.redone_steps = max(0, progress.max_step - resumed.step)
            progress.executed_total = max(progress.executed_total, resumed.executed_total)
            log(
                f"resuming from {resumed.path.name if resumed.path else 'checkpoint'} at step {self.step}; "
                f"{self.redone_steps} step(s) lost since then will be redone"
            )
        progress.max_step = max(progress.max_step, self.step)
        self.last_saved_step = self.resumed_from

    def checkpoint(self, reason: str) -> None:
        if self.last_saved_step == self.step:
            self.last_checkpoint_time = time.monotonic()
            return
        path = self.store.save(Checkpoint(seed=self.args.seed, step=self.step, state=self.state,
                                          executed_total=self.progress.executed_total))
        self.last_saved_step = self.step
        self.checkpoints_written += 1
        self.last_checkpoint_time = time.monotonic()
        log(f"checkpoint {path.name} written ({reason})")

    def advance(self) -> None:
        args, progress = self.args, self.progress
        self.step += 1
        self.state = advance(self.state, self.step)
        progress.executed_total += 1
        progress.max_step = max(progress.max_step, self.step)
        progress.save(args.checkpoint_dir)
        if args.log_every and self.step % args.log_every == 0:
            log(f"step {self.step}/{args.target}")
        if time.monotonic() - self.last_checkpoint_time >= args.checkpoint_interval and self.step < args.target:
            try:
                self.checkpoint("interval")
            except OSError as exc:
                # The previous checkpoint is intact; try again after the next interval. (A failure of
                # the final or the SIGTERM checkpoint is fatal: there is no later chance.)
                self.last_checkpoint_time = time.monotonic()
                log(f"warning: periodic checkpoint at step {self.step} failed: {exc}")

    def count(self) -> None:
        """Counts to the target, unless a signal stops it first."""
        while self.step < self.args.target:
            if self.stop:
                return
            self.stop.sleep(self.args.step_seconds)
            if self.stop:
                return
            self.advance()

    def summary(self) -> dict[str, Any]:
        args, progress = self.args, self.progress
        return {
            "event": "done",
            "seed": args.seed,
            "target": args.target,
            "value": self.step,
            "result": self.state.hex(),
            "resumed_from": self.resumed_from,
            "redone_steps": self.redone_steps,
            "redone_steps_total": max(0, progress.executed_total - args.target),
            "executed_steps_total": progress.executed_total,
            "runs": progress.runs,
            "checkpoints_written": self.checkpoints_written,
            "elapsed_seconds": round(time.monotonic() - self.started, 3),
        }


def run(args: argparse.Namespace, stop: StopFlag) -> int:
    counter = Run(args, stop)
    counter.store.prepare()
    try:
        resumed = counter.store.latest()
    except ForeignCheckpointError as exc:
        log(f"error: {exc}")
        return EXIT_USAGE
    counter.resume(resumed)
    if counter.step > args.target:
        log(f"error: the checkpoint is at step {counter.step}, past the target {args.target}")
        return EXIT_USAGE
    counter.progress.save(args.checkpoint_dir)
    counter.last_checkpoint_time = time.monotonic()
    counter.count()
    if counter.step < args.target:
        assert stop.signum is not None
        name = signal.Signals(stop.signum).name
        counter.checkpoint(name)
        log(f"stopped by {name} at step {counter.step}/{args.target}")
        return EXIT_OK if args.exit_zero_on_signal else stop.exit_code()
    counter.checkpoint("done")
    print(json.dumps(counter.summary(), sort_keys=True), flush=True)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    stop = StopFlag()
    stop.install()
    args = parse_args(argv)
    return run(args, stop)


if __name__ == "__main__":
    sys.exit(main())
