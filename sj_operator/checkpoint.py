"""Checkpoints for a Python app that runs as a ScavengerJob: the app's side of the contract, in one file.

The module needs nothing beyond the standard library and imports nothing from this package, so an image may
copy this single file (or install the package; importing this module loads none of the operator's
dependencies). The contract it serves is the docs' "Write a checkpointing app" page; their "Checkpoint a Python
app" page shows this app, which prints what an uninterrupted run prints however often it is preempted::

    from sj_operator.checkpoint import Checkpointer

    with Checkpointer.from_env() as ckpt:                # SJ_CHECKPOINT_DIR, SJ_CHECKPOINT_INTERVAL, SIGTERM
        last = ckpt.load()                               # the newest checkpoint that verifies, or None
        step, total = (last.step, last.state["total"]) if last else (0, 0)
        while step < 10_000_000:
            step, total = step + 1, (total + step * step) % 1_000_000_007
            ckpt.save_if_due(step, {"total": total})     # every interval; after SIGTERM: save, then exit 143
        ckpt.save(step, {"total": total}, "done")
    print(total)

What it promises:

* **The contract, read strictly.** :meth:`Contract.from_env` reads every ``SJ_*`` variable the operator sets.
  A malformed value, or a missing ``SJ_CHECKPOINT_DIR`` or ``SJ_CHECKPOINT_INTERVAL`` for which the app gave no
  default of its own, raises :class:`ContractError` naming the variable: never a silent default.
* **Atomic, durable writes.** A checkpoint is written to a temporary file in the same directory, fsynced,
  renamed over ``ckpt-<step>.json`` (twelve digits), and the directory fsynced, so a reader sees the old or the
  new file, never a mix, and a checkpoint reported written survives a crash of the node.
* **Torn files are never trusted.** A checkpoint is a JSON object: the app's state plus ``format``, ``step``,
  ``written_at`` and ``checksum``, the SHA-256 of the canonical JSON (sorted keys, no spaces) of all but the last
  two. :meth:`Checkpointer.load` returns the newest checkpoint whose name, format, step and checksum agree;
  truncated, empty, garbled or foreign files are logged and skipped, and the previous good one is used. Temp
  files a killed writer left behind are removed when the ``with`` block starts.
* **Two are kept.** After each save, the newest ``keep`` (2) valid checkpoints up to the one just written stay;
  older and broken ones are removed. The newest good one is never removed before a newer one is complete.
* **A stop is saved, then the process exits.** Inside the ``with`` block, SIGTERM (the kubelet's signal on
  preemption, eviction or cancellation) and SIGINT only set a flag: a save in progress always completes. The
  next :meth:`Checkpointer.save_if_due` (or the one running when the signal came) writes the current step,
  unless that step is already on disk, logs ``stopped by SIGTERM``, and raises :class:`Stopped`, a
  ``SystemExit`` with code 128 + the signal's number (143 for SIGTERM, 130 for SIGINT) or the app's
  ``exit_code``. The operator records an interruption whatever the code, because the run was told to stop; a
  non-zero code also says so to anyone reading the pod. The app must call :meth:`Checkpointer.save_if_due` (or
  look at :attr:`Checkpointer.stopping`) often enough to save within ``terminationGracePeriodSeconds``: a signal
  never interrupts a step of the app's own work.
* **Time is the app's to inject.** The interval is measured with ``clock`` (``time.monotonic``) and
  :meth:`Checkpointer.sleep` waits with ``sleep`` (``time.sleep``); both can be replaced.

One process writes a directory (a gang's ranks each use a folder of their own, or agree on a step and let rank
0 write), and the ``with`` block runs in the main thread (Python delivers signals there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Final, NoReturn, TypeVar

__all__ = [
    "DEFAULT_FORMAT",
    "Checkpoint",
    "CheckpointError",
    "Checkpointer",
    "Contract",
    "ContractError",
    "Stopped",
    "atomic_write",
    "decode",
    "encode",
    "env_float",
    "env_int",
]

# The pod environment the operator sets (the same names as sj_operator.names, which this module may not import).
ENV_NAME: Final = "SJ_NAME"
ENV_NAMESPACE: Final = "SJ_NAMESPACE"
ENV_RESTART_COUNT: Final = "SJ_RESTART_COUNT"
ENV_CHECKPOINT_DIR: Final = "SJ_CHECKPOINT_DIR"
ENV_CHECKPOINT_INTERVAL: Final = "SJ_CHECKPOINT_INTERVAL"
ENV_CONFIG_INDEX: Final = "SJ_CONFIG_INDEX"
ENV_RANK: Final = "SJ_RANK"
ENV_WORLD_SIZE: Final = "SJ_WORLD_SIZE"
ENV_HOSTS: Final = "SJ_HOSTS"

DEFAULT_FORMAT: Final = "scavenger.dev/checkpoint/v1"
RESERVED_KEYS: Final = frozenset({"format", "step", "written_at", "checksum"})
"""The keys the helper adds to the app's state in a checkpoint file; the state may not use them."""
CHECKPOINT_RE: Final = re.compile(r"^ckpt-(\d{12})\.json$")
MAX_STEP: Final = 10**12 - 1
TEMP_PREFIX: Final = ".tmp-"
KEEP: Final = 2
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
SLEEP_SLICE_SECONDS: Final = 0.05

N = TypeVar("N", int, float)


class ContractError(ValueError):
    """A pod environment variable that is missing or malformed; the message names it."""


class CheckpointError(Exception):
    """A checkpoint file that cannot be trusted: unreadable, torn, of another format, or failing its checksum."""


class Stopped(SystemExit):
    """Raised once the checkpoint a stop signal asked for is on disk; uncaught, it exits with ``code``."""

    def __init__(self, signum: int, code: int) -> None:
        super().__init__(code)
        self.signum = signum


# --------------------------------------------------------------------------------------------------
# The contract: the pod's environment


def _env_text(name: str, environ: Mapping[str, str] | None) -> str | None:
    """The variable's value without surrounding blanks; None when unset; an error when set but blank."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None:
        return None
    if not raw.strip():
        raise ContractError(f"{name} is set but empty")
    return raw.strip()


def _env_number(name: str, default: N | None, convert: Callable[[str], N], wanted: str, fits: Callable[[N], bool],
                environ: Mapping[str, str] | None) -> N:
    """The number in variable ``name``; ``default`` when unset, an error without one or unless it ``fits``."""
    raw = _env_text(name, environ)
    if raw is None:
        if default is None:
            raise ContractError(f"{name} is not set")
        return default
    try:
        value: N | None = convert(raw)
    except ValueError:
        value = None
    if value is None or not fits(value):
        raise ContractError(f"{name}={raw!r} is not {wanted}")
    return value


def env_int(name: str, default: int | None = None, *, minimum: int = 0,
            environ: Mapping[str, str] | None = None) -> int:
    """The integer in variable ``name``, at least ``minimum``; ``default`` when unset, an error without one."""
    return _env_number(name, default, int, f"an integer of at least {minimum}", lambda v: v >= minimum, environ)


def env_float(name: str, default: float | None = None, *, positive: bool = False,
              environ: Mapping[str, str] | None = None) -> float:
    """The finite, non-negative number in variable ``name`` (above zero with ``positive``); ``default`` when
    unset, an error without one."""
    return _env_number(name, default, float, f"a finite number {'above' if positive else 'of at least'} 0",
                       lambda v: math.isfinite(v) and (v > 0 if positive else v >= 0), environ)


def _optional_int(name: str, environ: Mapping[str, str] | None, minimum: int = 0) -> int | None:
    return None if _env_text(name, environ) is None else env_int(name, minimum=minimum, environ=environ)


@dataclasses.dataclass(frozen=True)
class Contract:
    """What the operator tells every pod. The optional fields are None (``hosts`` empty) when the variable is
    unset: outside the operator, or not a gang."""

    checkpoint_dir: Path
    checkpoint_interval: float
    name: str | None = None
    namespace: str | None = None
    restart_count: int | None = None
    config_index: int | None = None
    rank: int | None = None
    world_size: int | None = None
    hosts: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, checkpoint_dir: str | Path | None = None,
                 checkpoint_interval: float | None = None) -> Contract:
        """The contract in ``environ`` (``os.environ``). ``checkpoint_dir`` and ``checkpoint_interval`` are the
        app's own defaults for a run outside the operator; without them those variables must be set."""
        directory = _env_text(ENV_CHECKPOINT_DIR, environ)
        if directory is None and checkpoint_dir is None:
            raise ContractError(f"{ENV_CHECKPOINT_DIR} is not set (the SJ needs a checkpointVolume)")
        interval = env_float(ENV_CHECKPOINT_INTERVAL, checkpoint_interval, positive=True, environ=environ)
        rank, world_size = _optional_int(ENV_RANK, environ), _optional_int(ENV_WORLD_SIZE, environ, minimum=1)
        if rank is not None and world_size is not None and rank >= world_size:
            raise ContractError(f"{ENV_RANK}={rank} is not below {ENV_WORLD_SIZE}={world_size}")
        return cls(
            checkpoint_dir=Path(directory if directory is not None else str(checkpoint_dir)),
            checkpoint_interval=interval,
            name=_env_text(ENV_NAME, environ),
            namespace=_env_text(ENV_NAMESPACE, environ),
            restart_count=_optional_int(ENV_RESTART_COUNT, environ),
            config_index=_optional_int(ENV_CONFIG_INDEX, environ),
            rank=rank,
            world_size=world_size,
            hosts=tuple((_env_text(ENV_HOSTS, environ) or "").split()),
        )


# --------------------------------------------------------------------------------------------------
# Durable files


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content, never a mix; with
    ``durable`` both the data and the rename are on stable storage when this returns. The temp file is
    ``.tmp-<name>.<random>`` in the same directory, removed if the write fails."""
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
        _fsync_dir(path.parent)


# --------------------------------------------------------------------------------------------------
# The checkpoint file


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint: its step, the app's state as saved, and its file."""

    step: int
    state: dict[str, Any]
    path: Path


def _canonical(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode(format_name: str, step: int, state: Mapping[str, Any]) -> bytes:
    """The bytes of checkpoint ``step``; ValueError when the state uses a reserved key, TypeError when it is not
    JSON."""
    clash = sorted(RESERVED_KEYS & set(state))
    if clash:
        raise ValueError(f"the state may not use the keys {', '.join(clash)}: the checkpoint file keeps its own")
    body = {**state, "format": format_name, "step": step}
    document = {**body, "written_at": dt.datetime.now(dt.UTC).isoformat(),
                "checksum": hashlib.sha256(_canonical(body)).hexdigest()}
    return json.dumps(document, sort_keys=True, indent=1).encode("utf-8") + b"\n"


def decode(raw: bytes, format_name: str) -> tuple[int, dict[str, Any]]:
    """(step, state) of a checkpoint file's bytes; CheckpointError unless it is whole and of ``format_name``."""
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise CheckpointError("not a JSON object")
    if document.get("format") != format_name:
        raise CheckpointError(f"format {document.get('format')!r}, not {format_name!r}")
    step, checksum = document.get("step"), document.pop("checksum", None)
    document.pop("written_at", None)
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP:
        raise CheckpointError(f"step {step!r} is not a whole number of at most twelve digits")
    if checksum != hashlib.sha256(_canonical(document)).hexdigest():
        raise CheckpointError("checksum mismatch")
    return step, {key: value for key, value in document.items() if key not in RESERVED_KEYS}


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _stderr_log(message: str) -> None:
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    print(f"{program}[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# The checkpointer


class Checkpointer:
    """The checkpoints of one computation in one directory: load, save on the interval, save and exit on a stop.

    ``format`` names the app's state: files of another format are skipped like torn ones. ``signals`` are the
    stop signals (pass the image's ``STOPSIGNAL`` if it sets one); ``exit_code`` replaces 128 + the signal's
    number as the code :class:`Stopped` exits with. ``log`` receives one line per event (stderr by default).
    """

    def __init__(self, directory: str | Path, interval: float, *, format: str = DEFAULT_FORMAT,
                 keep: int = KEEP, signals: Iterable[int] = STOP_SIGNALS, exit_code: int | None = None,
                 log: Callable[[str], None] = _stderr_log, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not (math.isfinite(interval) and interval > 0):
            raise ValueError(f"the checkpoint interval must be a finite number of seconds above 0, not {interval}")
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = Path(directory)
        self.interval = interval
        self.format = format
        self.keep = keep
        self.signals: Sequence[int] = tuple(signals)
        self.exit_code = exit_code
        self.log = log
        self.clock = clock
        self._sleep = sleep
        self.signum: int | None = None
        """The first stop signal received, or None."""
        self.saved_step: int | None = None
        """The step of the checkpoint last loaded or written: a save of it again writes nothing."""
        self.written = 0
        """How many checkpoints this process wrote."""
        self._last_save = clock()
        self._previous: dict[int, Any] = {}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, checkpoint_dir: str | Path | None = None,
                 checkpoint_interval: float | None = None, **options: Any) -> Checkpointer:
        """A checkpointer of the directory and interval of :meth:`Contract.from_env`; ``options`` as the
        constructor's."""
        contract = Contract.from_env(environ, checkpoint_dir=checkpoint_dir, checkpoint_interval=checkpoint_interval)
        return cls(contract.checkpoint_dir, contract.checkpoint_interval, **options)

    # -- the with block: the directory prepared, the stop signals caught

    def __enter__(self) -> Checkpointer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_temp_files()
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        self._last_save = self.clock()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        while self._previous:
            signum, handler = self._previous.popitem()
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is None:  # the first one counts; a save in progress carries on
            self.signum = signum

    def _remove_temp_files(self) -> None:
        removed = False
        for entry in self.directory.iterdir():
            if entry.name.startswith(TEMP_PREFIX) and entry.is_file():
                self.log(f"removing leftover temp file {entry.name}")
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                removed = True
        if removed:
            _fsync_dir(self.directory)

    # -- what the app calls

    @property
    def stopping(self) -> bool:
        """A stop signal came: save and exit soon (:meth:`save_if_due` does both)."""
        return self.signum is not None

    def due(self) -> bool:
        """A stop signal came, or ``interval`` seconds have passed since the last save (or the start)."""
        return self.signum is not None or self.clock() - self._last_save >= self.interval

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds``; False as soon as a stop signal came, True after the whole wait."""
        deadline = self.clock() + seconds
        while self.signum is None:
            remaining = deadline - self.clock()
            if remaining <= 0:
                return True
            self._sleep(min(remaining, SLEEP_SLICE_SECONDS))
        return False

    def load(self) -> Checkpoint | None:
        """The newest checkpoint that verifies, or None; the ones skipped on the way are logged."""
        for step, path in self._files():
            try:
                checkpoint = self._read(path, step)
            except CheckpointError as exc:
                self.log(f"ignoring checkpoint {path.name}: {exc}")
                continue
            self.saved_step = checkpoint.step
            return checkpoint
        return None

    def save(self, step: int, state: Mapping[str, Any], reason: str = "requested") -> Path:
        """Write checkpoint ``step`` of ``state`` (a JSON object) atomically, then prune; nothing is written when
        ``step`` is the checkpoint last loaded or written. An OSError leaves the previous checkpoints intact."""
        if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP:
            raise ValueError(f"step must be a whole number from 0 to {MAX_STEP}, not {step!r}")
        path = self.directory / f"ckpt-{step:012d}.json"
        self._last_save = self.clock()  # a failed save is tried again an interval later, not at once
        if step == self.saved_step:
            self.log(f"checkpoint {path.name} already written ({reason})")
            return path
        atomic_write(path, encode(self.format, step, state))
        self.saved_step = step
        self.written += 1
        self.log(f"checkpoint {path.name} written ({reason})")
        self._prune(newest=step)
        return path

    def save_if_due(self, step: int, state: Mapping[str, Any]) -> Path | None:
        """The app's call at every step: cheap unless due. Past the interval, save (a failed save is logged,
        the previous checkpoint stays and it is tried again an interval later). After a stop signal, received
        before or during this call: save, unless that step is on disk, and raise :class:`Stopped`."""
        path = None
        if self.signum is None:
            if self.clock() - self._last_save < self.interval:
                return None
            try:
                path = self.save(step, state, "interval")
            except OSError as exc:
                self.log(f"warning: checkpoint of step {step} failed, the previous one stays: {exc}")
        if self.signum is not None:
            self.stop(step, state)
        return path

    def stop(self, step: int, state: Mapping[str, Any]) -> NoReturn:
        """Save ``step`` for the stop signal received, and raise :class:`Stopped` (an OSError propagates: there
        is no later chance to save)."""
        signum = self.signum if self.signum is not None else signal.SIGTERM
        name = _signal_name(signum)
        self.save(step, state, name)
        self.log(f"stopped by {name} at step {step}")
        raise Stopped(signum, 128 + signum if self.exit_code is None else self.exit_code)

    # -- the directory

    def _files(self) -> list[tuple[int, Path]]:
        """Every checkpoint file by its name, newest (highest step) first."""
        try:
            entries = list(self.directory.iterdir())
        except FileNotFoundError:
            return []
        found = [(int(match.group(1)), entry) for entry in entries
                 if (match := CHECKPOINT_RE.match(entry.name)) and entry.is_file()]
        return sorted(found, reverse=True)

    def _read(self, path: Path, step_from_name: int) -> Checkpoint:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"unreadable: {exc}") from exc
        step, state = decode(raw, self.format)
        if step != step_from_name:
            raise CheckpointError(f"holds step {step}, its name says {step_from_name}")
        return Checkpoint(step, state, path)

    def _prune(self, newest: int) -> None:
        """Keep the newest ``keep`` valid checkpoints up to ``newest``; remove older and broken ones. Files
        above ``newest`` (broken leftovers, or a step the app went back from) stay."""
        kept, removed = 0, False
        for step, path in self._files():
            if step > newest:
                continue
            if kept < self.keep:
                try:
                    self._read(path, step)
                except CheckpointError as exc:
                    self.log(f"removing broken checkpoint {path.name}: {exc}")
                else:
                    kept += 1
                    continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            removed = True
        if removed:
            _fsync_dir(self.directory)
