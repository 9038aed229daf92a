#!/usr/bin/env python3
"""2-D heat diffusion with mpi4py that checkpoints collectively and resumes bit for bit.

The NX x NY grid is split into blocks of rows, one per rank; every step each rank exchanges one halo
row with each neighbour (``Sendrecv``) and applies the explicit five-point stencil

    u' = u + c * (u[i-1, j] + u[i+1, j] + u[i, j-1] + u[i, j+1] - 4 u)

to its interior points; the outer edges of the grid are fixed (Dirichlet). The initial condition is a
deterministic function of the global indices built from exact IEEE additions and multiplications.

Checkpoints (collective)
    All ranks checkpoint at the same step: every ``--checkpoint-every`` steps, every
    ``SJ_CHECKPOINT_INTERVAL`` seconds (rank 0's clock decides), on SIGTERM/SIGINT and at the end. The
    decision is agreed each step with one ``allreduce`` (MAX), so a signal seen by any rank makes all
    of them checkpoint together and then exit 143 (130 for SIGINT).

    Layout under ``SJ_CHECKPOINT_DIR`` (default ``./checkpoints``)::

        ckpt-<step>/rank-<r>.npy     each rank's block (temp file + fsync + rename)
        ckpt-<step>/MANIFEST.json    written by rank 0 after a barrier, atomically, last

    The manifest holds the step, the number of ranks, the grid and parameters, and each rank file's
    SHA-256. A checkpoint counts only when its manifest is present and valid and every rank file
    matches its hash; anything else (a run killed while writing) is skipped. The newest two complete
    checkpoints are kept.

Resume
    Every rank loads its block of the newest complete checkpoint. The decomposition must be the one
    that wrote it (same number of ranks): otherwise the program stops with exit code 2 and says so.
    Since each rank then performs exactly the floating-point operations of an uninterrupted run, the
    final grid is identical bit for bit.

Signals under mpirun
    Open MPI's mpirun, when it gets SIGTERM, waits ``odls_base_sigkill_timeout`` seconds (default 1),
    SIGTERMs the ranks, waits as long again and SIGKILLs them: raise it (e.g.
    ``OMPI_MCA_odls_base_sigkill_timeout=10``) to give the ranks time to checkpoint. Signalling the
    ranks directly takes effect at the next step.

Output
    Rank 0 prints one JSON line at the end (``"event": "done"``) with the SHA-256 of the gathered
    final grid. Log lines go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import hashlib
import io
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from mpi4py import MPI

FORMAT: Final = "scavenger.dev/mpi-heat/v1"
INITIAL_CONDITION: Final = "poly-hotspot/v1"
CHECKPOINT_RE: Final = re.compile(r"^ckpt-(\d{10})$")
MANIFEST: Final = "MANIFEST.json"
TEMP_PREFIX: Final = ".tmp-"
PROGRESS_FILE: Final = "progress.json"
KEEP_CHECKPOINTS: Final = 2
EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
EXIT_FATAL: Final = 3
DTYPE: Final = np.dtype("<f8")
SLEEP_SLICE_SECONDS: Final = 0.05

Grid = npt.NDArray[np.float64]


def log(comm: MPI.Comm, message: str) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    print(f"{stamp} heat[rank {comm.Get_rank()}/{comm.Get_size()}]: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# Decomposition and numerics


@dataclasses.dataclass(frozen=True)
class Config:
    nx: int
    ny: int
    coefficient: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "nx": self.nx,
            "ny": self.ny,
            "coefficient": self.coefficient.hex(),
            "initial_condition": INITIAL_CONDITION,
            "dtype": DTYPE.str,
        }


def row_range(nx: int, nranks: int, rank: int) -> tuple[int, int]:
    """Global rows ``[start, stop)`` owned by ``rank``: blocks as even as possible, larger ones first."""
    base, extra = divmod(nx, nranks)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def initial_block(config: Config, start: int, stop: int) -> Grid:
    """Rows ``[start, stop)`` of the initial grid, with one halo row above and below (zeros).

    Only exact-rounding IEEE operations (+, -, *, /) are used, so the values do not depend on how the
    grid is split.
    """
    nx, ny = config.nx, config.ny
    rows = np.arange(start, stop, dtype=DTYPE)
    cols = np.arange(ny, dtype=DTYPE)
    y = rows / float(nx - 1)
    x = cols / float(ny - 1)
    # A smooth dome (0 on the edges) ...
    dome = 16.0 * np.outer(y * (1.0 - y), x * (1.0 - x)) * 40.0
    # ... plus a hot rectangle off-centre ...
    hot = np.outer((y >= 0.55) & (y <= 0.75), (x >= 0.2) & (x <= 0.45)).astype(DTYPE) * 100.0
    block = np.zeros((stop - start + 2, ny), dtype=DTYPE)
    block[1:-1, :] = dome + hot
    # ... and fixed edges: a hot top edge, the others cold.
    block[1:-1, 0] = 0.0
    block[1:-1, -1] = 0.0
    if start == 0:
        block[1, :] = 100.0
    if stop == nx:
        block[-2, :] = 0.0
    return block


class HeatSolver:
    """One rank's block of the grid (with halo rows) and the stencil."""

    def __init__(self, comm: MPI.Comm, config: Config, block: Grid, step: int) -> None:
        self.comm = comm
        self.config = config
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.start, self.stop = row_range(config.nx, self.size, self.rank)
        expected = (self.stop - self.start + 2, config.ny)
        if block.shape != expected or block.dtype != DTYPE:
            raise ValueError(f"block has shape {block.shape} {block.dtype}, expected {expected} {DTYPE}")
        self.u = np.ascontiguousarray(block)
        self.scratch = self.u.copy()
        self.step = step
        self.up = self.rank - 1 if self.rank > 0 else MPI.PROC_NULL
        self.down = self.rank + 1 if self.rank < self.size - 1 else MPI.PROC_NULL

    @property
    def interior(self) -> Grid:
        return self.u[1:-1, :]

    def exchange_halos(self) -> None:
        u = self.u
        # My first row goes up, the row below me arrives into my bottom halo ...
        self.comm.Sendrecv(sendbuf=u[1], dest=self.up, sendtag=1, recvbuf=u[-1], source=self.down, recvtag=1)
        # ... my last row goes down, the row above me arrives into my top halo.
        self.comm.Sendrecv(sendbuf=u[-2], dest=self.down, sendtag=2, recvbuf=u[0], source=self.up, recvtag=2)

    def advance(self) -> None:
        self.exchange_halos()
        u, new = self.u, self.scratch
        c = self.config.coefficient
        centre = u[1:-1, 1:-1]
        laplacian = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * centre
        new[1:-1, 1:-1] = centre + c * laplacian
        new[1:-1, 0] = u[1:-1, 0]
        new[1:-1, -1] = u[1:-1, -1]
        if self.start == 0:
            new[1, :] = u[1, :]
        if self.stop == self.config.nx:
            new[-2, :] = u[-2, :]
        self.u, self.scratch = new, u
        self.step += 1

    def gather(self) -> Grid | None:
        """The full interior grid on rank 0 (None elsewhere)."""
        counts = [
            (b - a) * self.config.ny
            for a, b in (row_range(self.config.nx, self.size, r) for r in range(self.size))
        ]
        sendbuf = np.ascontiguousarray(self.interior)
        if self.rank == 0:
            grid = np.empty((self.config.nx, self.config.ny), dtype=DTYPE)
            self.comm.Gatherv(sendbuf, [grid, counts, MPI.DOUBLE], root=0)
            return grid
        self.comm.Gatherv(sendbuf, None, root=0)
        return None


# --------------------------------------------------------------------------------------------------
# Durable files


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
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


def encode_block(block: Grid) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(block, dtype=DTYPE), allow_pickle=False)
    return buffer.getvalue()


def decode_block(raw: bytes) -> Grid:
    array = np.load(io.BytesIO(raw), allow_pickle=False)
    if array.dtype != DTYPE or array.ndim != 2:
        raise ValueError(f"unexpected array {array.dtype} with {array.ndim} dimensions")
    return np.ascontiguousarray(array)


# --------------------------------------------------------------------------------------------------
# Checkpoints


class CheckpointInvalid(Exception):
    """A checkpoint that must not be used (incomplete, corrupt, or for another grid)."""


class CheckpointIncompatible(Exception):
    """The newest complete checkpoint cannot be resumed by this run (other decomposition or grid)."""


def step_dir(root: Path, step: int) -> Path:
    return root / f"ckpt-{step:010d}"


def list_step_dirs(root: Path) -> list[tuple[int, Path]]:
    """Checkpoint directories, newest first."""
    found = []
    for entry in root.iterdir():
        match = CHECKPOINT_RE.match(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    found.sort(reverse=True)
    return found


def make_manifest(step: int, nranks: int, config: Config, files: list[dict[str, Any]]) -> bytes:
    body = {
        "format": FORMAT,
        "step": step,
        "nranks": nranks,
        "grid": config.as_dict(),
        "ranks": files,
    }
    document = dict(body)
    document["written_at"] = dt.datetime.now(dt.UTC).isoformat()
    document["checksum"] = hashlib.sha256(canonical_json(body)).hexdigest()
    return json.dumps(document, sort_keys=True, indent=1).encode("utf-8") + b"\n"


def read_manifest(directory: Path, step: int) -> dict[str, Any]:
    """The verified manifest of a checkpoint directory (the rank files are checked separately)."""
    path = directory / MANIFEST
    try:
        document = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointInvalid("no manifest (incomplete checkpoint)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointInvalid(f"unreadable manifest: {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointInvalid("manifest of an unknown format")
    body = {key: document.get(key) for key in ("format", "step", "nranks", "grid", "ranks")}
    if document.get("checksum") != hashlib.sha256(canonical_json(body)).hexdigest():
        raise CheckpointInvalid("manifest checksum mismatch")
    if body["step"] != step:
        raise CheckpointInvalid(f"manifest is for step {body['step']}, directory for step {step}")
    nranks, ranks = body["nranks"], body["ranks"]
    if not isinstance(nranks, int) or nranks < 1 or not isinstance(ranks, list) or len(ranks) != nranks:
        raise CheckpointInvalid("manifest lists the wrong number of rank files")
    for rank, entry in enumerate(ranks):
        if (
            not isinstance(entry, dict)
            or entry.get("rank") != rank
            or entry.get("file") != f"rank-{rank}.npy"
        ):
            raise CheckpointInvalid(f"manifest entry {rank} is malformed")
        if not isinstance(entry.get("sha256"), str) or not isinstance(entry.get("rows"), list):
            raise CheckpointInvalid(f"manifest entry {rank} is malformed")
    return document


class CheckpointStore:
    """Collective checkpoints of one run; every method is called by all ranks together."""

    def __init__(self, comm: MPI.Comm, root: Path, config: Config, keep: int = KEEP_CHECKPOINTS) -> None:
        self.comm = comm
        self.root = root
        self.config = config
        self.keep = keep
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def prepare(self) -> None:
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            for entry in self.root.iterdir():
                if entry.name.startswith(TEMP_PREFIX) and entry.is_file():
                    entry.unlink(missing_ok=True)
        self.comm.Barrier()

    # -- resume ------------------------------------------------------------------------------------

    def _candidates(self) -> list[tuple[int, dict[str, Any]]] | str:
        """On rank 0: complete-looking checkpoints, newest first, or an error message."""
        candidates: list[tuple[int, dict[str, Any]]] = []
        for step, directory in list_step_dirs(self.root):
            try:
                manifest = read_manifest(directory, step)
            except CheckpointInvalid as exc:
                log(self.comm, f"skipping checkpoint {directory.name}: {exc}")
                continue
            if manifest["grid"] != self.config.as_dict():
                return (
                    f"checkpoint {directory.name} is for grid {manifest['grid']}, this run is for "
                    f"{self.config.as_dict()}; use the same parameters or another checkpoint directory"
                )
            if manifest["nranks"] != self.size:
                return (
                    f"checkpoint {directory.name} was written by {manifest['nranks']} ranks but this run "
                    f"has {self.size}; resuming needs the same decomposition (mpirun -n {manifest['nranks']})"
                )
            candidates.append((step, manifest))
        return candidates

    def load_latest(self) -> tuple[int, Grid] | None:
        """Load this rank's block of the newest complete checkpoint, or None if there is none.

        Raises CheckpointIncompatible on every rank when the newest complete one cannot be used.
        """
        found = self.comm.bcast(self._candidates() if self.rank == 0 else None, root=0)
        if isinstance(found, str):
            raise CheckpointIncompatible(found)
        start, stop = row_range(self.config.nx, self.size, self.rank)
        for step, manifest in found:
            directory = step_dir(self.root, step)
            entry = manifest["ranks"][self.rank]
            block: Grid | None = None
            problem = ""
            try:
                raw = (directory / entry["file"]).read_bytes()
                if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
                    raise CheckpointInvalid(f"{entry['file']} does not match its hash")
                if entry["rows"] != [start, stop]:
                    raise CheckpointInvalid(
                        f"{entry['file']} holds rows {entry['rows']}, expected {[start, stop]}"
                    )
                block = decode_block(raw)
                if block.shape != (stop - start, self.config.ny):
                    raise CheckpointInvalid(f"{entry['file']} has shape {block.shape}")
            except (OSError, ValueError, CheckpointInvalid) as exc:
                problem = str(exc)
                block = None
            all_ok = self.comm.allreduce(0 if block is None else 1, op=MPI.MIN)
            if block is None:
                log(self.comm, f"checkpoint {directory.name} unusable here: {problem}")
            if all_ok:
                padded = np.zeros((stop - start + 2, self.config.ny), dtype=DTYPE)
                padded[1:-1, :] = block
                return step, padded
            if self.rank == 0:
                log(self.comm, f"skipping checkpoint {directory.name}: a rank file failed verification")
        return None

    # -- save --------------------------------------------------------------------------------------

    def save(self, step: int, interior: Grid) -> Path:
        directory = step_dir(self.root, step)
        if self.rank == 0:
            # A directory for this step can only be a leftover of an interrupted attempt: make sure it
            # is not taken as complete while its files are being replaced.
            if directory.exists():
                (directory / MANIFEST).unlink(missing_ok=True)
                fsync_dir(directory)
            directory.mkdir(exist_ok=True)
            fsync_dir(self.root)
        self.comm.Barrier()

        raw = encode_block(interior)
        name = f"rank-{self.rank}.npy"
        atomic_write(directory / name, raw)
        start, stop = row_range(self.config.nx, self.size, self.rank)
        entry = {
            "rank": self.rank,
            "file": name,
            "rows": [start, stop],
            "bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
        entries = self.comm.gather(entry, root=0)
        # Every rank file is durable before the manifest is written.
        if self.rank == 0:
            assert entries is not None
            atomic_write(directory / MANIFEST, make_manifest(step, self.size, self.config, entries))
            self._prune(step)
        self.comm.Barrier()
        return directory

    def _prune(self, newest: int) -> None:
        """Keep the newest ``keep`` complete checkpoints up to ``newest``; delete the rest below it."""
        kept = 0
        for step, directory in list_step_dirs(self.root):
            if step > newest:
                continue
            if kept < self.keep:
                try:
                    read_manifest(directory, step)
                except CheckpointInvalid:
                    pass
                else:
                    kept += 1
                    continue
            shutil.rmtree(directory, ignore_errors=True)
        fsync_dir(self.root)


# --------------------------------------------------------------------------------------------------
# Progress marker (rank 0, best-effort): how far any run got, to report redone work


def load_max_step(root: Path) -> int:
    try:
        document = json.loads((root / PROGRESS_FILE).read_text(encoding="utf-8"))
        value = document["max_step"]
        return value if isinstance(value, int) and value >= 0 else 0
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def save_max_step(root: Path, step: int) -> None:
    with contextlib.suppress(OSError):
        atomic_write(root / PROGRESS_FILE, canonical_json({"max_step": step}), durable=False)


# --------------------------------------------------------------------------------------------------
# Signals


class StopFlag:
    def __init__(self) -> None:
        self.signum = 0

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        if not self.signum:
            self.signum = signum

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.handler)
        signal.signal(signal.SIGINT, self.handler)

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.signum:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(remaining, SLEEP_SLICE_SECONDS))


# --------------------------------------------------------------------------------------------------
# Command line


def env_value(name: str, kind: type[int] | type[float], default: int | float) -> int | float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(
            f"heat: environment variable {name}={raw!r} is not a valid {kind.__name__}"
        ) from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="2-D heat diffusion with collective checkpoints (mpi4py).")
    parser.add_argument(
        "--nx", type=int, default=env_value("HEAT_NX", int, 512), help="grid rows (env HEAT_NX)"
    )
    parser.add_argument(
        "--ny", type=int, default=env_value("HEAT_NY", int, 512), help="grid columns (env HEAT_NY)"
    )
    parser.add_argument(
        "--steps", type=int, default=env_value("HEAT_STEPS", int, 2000), help="time steps (env HEAT_STEPS)"
    )
    parser.add_argument(
        "--coefficient",
        type=float,
        default=env_value("HEAT_COEFFICIENT", float, 0.2),
        help="alpha*dt/h^2, in (0, 0.25] for stability (env HEAT_COEFFICIENT, default 0.2)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=Path(os.environ.get("SJ_CHECKPOINT_DIR") or "checkpoints"),
        help="shared checkpoint directory (env SJ_CHECKPOINT_DIR, default ./checkpoints)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=float,
        default=env_value("SJ_CHECKPOINT_INTERVAL", float, 60.0),
        help="seconds between checkpoints, by rank 0's clock (env SJ_CHECKPOINT_INTERVAL, default 60)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=env_value("HEAT_CHECKPOINT_EVERY", int, 0),
        help="also checkpoint every K steps, 0 for never (env HEAT_CHECKPOINT_EVERY)",
    )
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=env_value("HEAT_STEP_SECONDS", float, 0.0),
        help="extra sleep per step, to make a small demo last (env HEAT_STEP_SECONDS)",
    )
    parser.add_argument(
        "--log-every", type=int, default=env_value("HEAT_LOG_EVERY", int, 500), help="0 for never"
    )
    args = parser.parse_args(argv)
    if args.nx < 3 or args.ny < 3:
        parser.error("--nx and --ny must be at least 3")
    if args.steps < 0:
        parser.error("--steps must be >= 0")
    if not 0.0 < args.coefficient <= 0.25:
        parser.error("--coefficient must be in (0, 0.25]")
    if args.checkpoint_interval <= 0:
        parser.error("--checkpoint-interval must be > 0")
    if args.checkpoint_every < 0 or args.step_seconds < 0 or args.log_every < 0:
        parser.error("--checkpoint-every, --step-seconds and --log-every must be >= 0")
    return args


# --------------------------------------------------------------------------------------------------
# Main


class Run:
    """One run of the solver on this rank: resume, step, checkpoint collectively, report."""

    def __init__(self, comm: MPI.Comm, args: argparse.Namespace, stop: StopFlag) -> None:
        self.comm, self.args, self.stop = comm, args, stop
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.config = Config(nx=args.nx, ny=args.ny, coefficient=args.coefficient)
        self.store = CheckpointStore(comm, args.checkpoint_dir, self.config)
        self.resumed_from: int | None = None
        self.last_saved: int | None = None
        self.checkpoints_written = 0
        self.last_checkpoint_time = time.monotonic()
        self.started = time.monotonic()
        self.redone_steps = 0
        self.max_step = 0

    def log0(self, message: str) -> None:
        """Logs once for the gang (on rank 0)."""
        if self.rank == 0:
            log(self.comm, message)

    def prepare(self) -> HeatSolver | None:
        """The solver, fresh or resumed from the newest complete checkpoint; None on a usage error."""
        args, config = self.args, self.config
        if args.nx < self.size:
            self.log0(f"error: {self.size} ranks need at least {self.size} grid rows, got --nx {args.nx}")
            return None
        self.store.prepare()
        try:
            loaded = self.store.load_latest()
        except CheckpointIncompatible as exc:
            self.log0(f"error: {exc}")
            return None
        start, stop_row = row_range(config.nx, self.size, self.rank)
        if loaded is None:
            solver = HeatSolver(self.comm, config, initial_block(config, start, stop_row), step=0)
        else:
            self.resumed_from, block = loaded
            solver = HeatSolver(self.comm, config, block, step=self.resumed_from)
        if solver.step > args.steps:
            self.log0(f"error: the checkpoint is at step {solver.step}, past --steps {args.steps}")
            return None
        self.last_saved = self.resumed_from
        if self.rank == 0:
            self.max_step = load_max_step(args.checkpoint_dir)
            self.redone_steps = max(0, self.max_step - solver.step)
        if self.resumed_from is None:
            self.log0(f"starting fresh: {config.nx}x{config.ny} grid, {args.steps} steps, {self.size} ranks")
        else:
            self.log0(f"resuming from step {self.resumed_from}; {self.redone_steps} step(s) lost since then "
                      "will be redone")
        return solver

    def checkpoint(self, solver: HeatSolver, reason: str) -> None:
        self.last_checkpoint_time = time.monotonic()
        if self.last_saved == solver.step:
            return
        directory = self.store.save(solver.step, solver.interior)
        self.last_saved = solver.step
        self.checkpoints_written += 1
        self.log0(f"checkpoint {directory.name} complete ({reason})")

    def agree(self, solver: HeatSolver) -> tuple[int, int]:
        """(signal, checkpoint due) agreed by every rank before a step, so all checkpoint at the same one:
        due is 1 every --checkpoint-every steps, 2 when rank 0's --checkpoint-interval has passed."""
        args = self.args
        flags = np.zeros(2, dtype=np.int64)
        agreed = np.zeros(2, dtype=np.int64)
        flags[0] = self.stop.signum
        if args.checkpoint_every > 0 and solver.step > 0 and solver.step % args.checkpoint_every == 0:
            flags[1] = 1
        if self.rank == 0 and time.monotonic() - self.last_checkpoint_time >= args.checkpoint_interval:
            flags[1] = 2
        self.comm.Allreduce(flags, agreed, op=MPI.MAX)
        return int(agreed[0]), int(agreed[1])

    def advance(self, solver: HeatSolver) -> None:
        if self.args.step_seconds:
            self.stop.sleep(self.args.step_seconds)
        solver.advance()
        if self.rank != 0:
            return
        if solver.step > self.max_step:
            self.max_step = solver.step
            save_max_step(self.args.checkpoint_dir, self.max_step)
        if self.args.log_every and solver.step % self.args.log_every == 0:
            log(self.comm, f"step {solver.step}/{self.args.steps}")

    def loop(self, solver: HeatSolver) -> int | None:
        """Steps to the end; the exit code when a signal stopped it first (after a checkpoint)."""
        args = self.args
        while True:
            signum, due = self.agree(solver)
            if signum and solver.step < args.steps:
                name = signal.Signals(signum).name
                self.checkpoint(solver, name)
                self.log0(f"stopped by {name} at step {solver.step}/{args.steps}")
                return 128 + signum
            if solver.step >= args.steps:
                return None
            if due:
                self.checkpoint(solver, "interval" if due == 2 else f"every {args.checkpoint_every} steps")
            self.advance(solver)

    def finish(self, solver: HeatSolver) -> None:
        self.checkpoint(solver, "done")
        grid = solver.gather()
        if self.rank != 0:
            return
        assert grid is not None
        summary = {
            "event": "done",
            "nx": self.config.nx,
            "ny": self.config.ny,
            "steps": self.args.steps,
            "nranks": self.size,
            "checksum": hashlib.sha256(grid.tobytes()).hexdigest(),
            "sum": float(grid.sum()),
            "max": float(grid.max()),
            "resumed_from": self.resumed_from,
            "redone_steps": self.redone_steps,
            "checkpoints_written": self.checkpoints_written,
            "elapsed_seconds": round(time.monotonic() - self.started, 3),
        }
        print(json.dumps(summary, sort_keys=True), flush=True)


def run(comm: MPI.Comm, args: argparse.Namespace, stop: StopFlag) -> int:
    state = Run(comm, args, stop)
    solver = state.prepare()
    if solver is None:
        return EXIT_USAGE
    stopped = state.loop(solver)
    if stopped is not None:
        return stopped
    state.finish(solver)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    stop = StopFlag()
    stop.install()
    comm = MPI.COMM_WORLD
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        # Every rank parses the same arguments, so every rank leaves the same way.
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return run(comm, args, stop)
    except Exception as exc:
        log(comm, f"fatal: {type(exc).__name__}: {exc}")
        sys.stderr.flush()
        comm.Abort(EXIT_FATAL)
        return EXIT_FATAL


if __name__ == "__main__":
    sys.exit(main())
