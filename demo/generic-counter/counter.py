#!/usr/bin/env python3
"""A long, deterministic computation that checkpoints and resumes: the ScavengerJob demo app.

The work is a SHA-256 hash chain: ``state[0] = sha256(seed)``, ``state[k] = sha256(state[k-1] || k)``,
computed up to ``--target`` steps with ``--step-seconds`` of (simulated) extra work per step. The
result after any number of interruptions equals the result of an uninterrupted run.

Checkpoints
    By the package's checkpoint helper (``sj_operator/checkpoint.py``, copied beside this file in the image):
    every ``SJ_CHECKPOINT_INTERVAL`` seconds, on SIGTERM/SIGINT and at the end, into ``SJ_CHECKPOINT_DIR``
    (default ``./checkpoints``) as ``ckpt-<step>.json``, atomically and with a checksum; on start the newest
    one that verifies is used, a corrupt or partial one never; the newest two are kept. Each holds the seed,
    the value (the step), the chain's state and the steps executed so far.

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
import dataclasses
import datetime as dt
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

# The checkpoint helper: beside this file in the image (/app/sj_operator/), at the root of a checkout.
HERE: Final = Path(__file__).resolve().parent
sys.path[:0] = [str(root) for root in (HERE, HERE.parent.parent) if (root / "sj_operator/checkpoint.py").is_file()]
from sj_operator import checkpoint  # noqa: E402  (after the path is known)

FORMAT: Final = "scavenger.dev/generic-counter/v1"
PROGRESS_FILE: Final = "progress.json"
EXIT_OK: Final = 0
EXIT_USAGE: Final = 2


def log(message: str) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    print(f"{stamp} counter[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


def initial_state(seed: str) -> bytes:
    return hashlib.sha256(seed.encode("utf-8")).digest()


def advance(state: bytes, step: int) -> bytes:
    """Compute ``state[step]`` from ``state[step - 1]``."""
    return hashlib.sha256(state + step.to_bytes(8, "big")).digest()


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
            counters = (document["max_step"], document["executed_total"], document["runs"])
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counters):
                raise ValueError("negative or non-integer counter")
            return cls(seed, *counters)
        except FileNotFoundError:
            return cls(seed=seed)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log(f"ignoring unreadable progress marker: {exc}")
            return cls(seed=seed)

    def save(self, directory: Path) -> None:
        data = json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":")).encode()
        try:
            checkpoint.atomic_write(directory / PROGRESS_FILE, data, durable=False)
        except OSError as exc:
            log(f"could not write progress marker: {exc}")


# --------------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Deterministic hash-chain counter that checkpoints and resumes (ScavengerJob demo).",
    )
    try:
        contract = checkpoint.Contract.from_env(checkpoint_dir="checkpoints", checkpoint_interval=60.0)
        target = checkpoint.env_int("COUNTER_TARGET", 600)
        step_seconds = checkpoint.env_float("COUNTER_STEP_SECONDS", 1.0)
        log_every = checkpoint.env_int("COUNTER_LOG_EVERY", 100)
    except checkpoint.ContractError as exc:
        raise SystemExit(f"counter: {exc}") from None
    parser.add_argument("--target", type=int, default=target, help="steps to compute (env COUNTER_TARGET, default 600)")
    parser.add_argument("--step-seconds", type=float, default=step_seconds,
                        help="simulated work per step in seconds (env COUNTER_STEP_SECONDS, default 1.0)")
    parser.add_argument("--checkpoint-dir", type=Path, default=contract.checkpoint_dir,
                        help="checkpoint directory (env SJ_CHECKPOINT_DIR, default ./checkpoints)")
    parser.add_argument("--checkpoint-interval", type=float, default=contract.checkpoint_interval,
                        help="seconds between periodic checkpoints (env SJ_CHECKPOINT_INTERVAL, default 60)")
    parser.add_argument("--seed", default=os.environ.get("COUNTER_SEED", "scavenger"),
                        help="seed of the hash chain (env COUNTER_SEED, default 'scavenger')")
    parser.add_argument("--log-every", type=int, default=log_every,
                        help="log progress every N steps, 0 for never (env COUNTER_LOG_EVERY, default 100)")
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

    def __init__(self, args: argparse.Namespace, ckpt: checkpoint.Checkpointer) -> None:
        self.args, self.ckpt = args, ckpt
        self.started = time.monotonic()
        self.progress = Progress.load(args.checkpoint_dir, args.seed)
        self.step, self.state = 0, initial_state(args.seed)
        self.resumed_from: int | None = None
        self.redone_steps = 0

    def resume(self, resumed: checkpoint.Checkpoint | None) -> str | None:
        """Carry on from ``resumed``; the reason it cannot, if so."""
        progress = self.progress
        progress.runs += 1
        if resumed is None:
            # Without a checkpoint everything reached before is lost (a marker from an earlier run whose
            # checkpoints are gone still tells how far it got).
            self.redone_steps = progress.max_step
            log(f"starting fresh (target {self.args.target}, checkpoint dir {self.args.checkpoint_dir})")
        elif resumed.state.get("seed") != self.args.seed:
            return (f"{resumed.path} belongs to seed {resumed.state.get('seed')!r}, not {self.args.seed!r}; "
                    "use another checkpoint directory or the same seed")
        else:
            self.step, self.state, self.resumed_from = resumed.step, bytes.fromhex(resumed.state["state"]), resumed.step
            self.redone_steps = max(0, progress.max_step - resumed.step)
            progress.executed_total = max(progress.executed_total, resumed.state["executed_total"])
            log(f"resuming from {resumed.path.name} at step {self.step}; "
                f"{self.redone_steps} step(s) lost since then will be redone")
        if self.step > self.args.target:
            return f"the checkpoint is at step {self.step}, past the target {self.args.target}"
        progress.max_step = max(progress.max_step, self.step)
        progress.save(self.args.checkpoint_dir)
        return None

    def saved(self) -> dict[str, Any]:
        """What a checkpoint holds besides its step (the helper adds format, step and checksum)."""
        return {"seed": self.args.seed, "value": self.step, "state": self.state.hex(),
                "executed_total": self.progress.executed_total}

    def advance(self) -> None:
        args, progress = self.args, self.progress
        self.step += 1
        self.state = advance(self.state, self.step)
        progress.executed_total += 1
        progress.max_step = max(progress.max_step, self.step)
        progress.save(args.checkpoint_dir)
        if args.log_every and self.step % args.log_every == 0:
            log(f"step {self.step}/{args.target}")

    def count(self) -> None:
        """Counts to the target; a stop signal ends it with a checkpoint and :class:`checkpoint.Stopped`."""
        while self.step < self.args.target:
            if self.ckpt.sleep(self.args.step_seconds):
                self.advance()
            if self.step < self.args.target:
                self.ckpt.save_if_due(self.step, self.saved())

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
            "checkpoints_written": self.ckpt.written,
            "elapsed_seconds": round(time.monotonic() - self.started, 3),
        }


def run(args: argparse.Namespace, ckpt: checkpoint.Checkpointer) -> int:
    counter = Run(args, ckpt)
    problem = counter.resume(ckpt.load())
    if problem is not None:
        log(f"error: {problem}")
        return EXIT_USAGE
    counter.count()
    ckpt.save(counter.step, counter.saved(), "done")
    print(json.dumps(counter.summary(), sort_keys=True), flush=True)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with checkpoint.Checkpointer(args.checkpoint_dir, args.checkpoint_interval, format=FORMAT, log=log,
                                 exit_code=EXIT_OK if args.exit_zero_on_signal else None) as ckpt:
        return run(args, ckpt)


if __name__ == "__main__":
    sys.exit(main())
