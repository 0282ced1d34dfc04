"""``batch``: build and export many captures, each into its own run directory ``OUT/<name>``.

Runs are isolated (a failed run is recorded with its error and the others go on), idempotent (a
run whose inputs and configuration match a finished run in OUT is skipped: ``batch_job``),
resumable (an interrupted batch, run again, skips what finished and redoes the rest) and atomic
(each run directory is the build's, moved into place complete). They run on local worker
processes (``batch_local``) or as Ray tasks (``batch_ray``).

Output folder::

    OUT/<name>/        one run directory per capture (see ``nurec_usd.pipeline``)
    OUT/logs/<name>.log  what each run printed, every attempt appended
    OUT/batch.json     the last invocation: options, and per run its status, time, metrics, size, error
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from nurec_usd.batch_job import RunSpec
from nurec_usd.batch_local import plan_slots, run_local
from nurec_usd.batch_ray import INSTALL_HINT, RayMissingError, ray_installed, run_ray
from nurec_usd.util.staging import atomic_file

LIST_SUFFIXES = (".txt", ".lst", ".list")  # a file of capture paths, one a line
RESERVED_NAMES = ("logs", "batch.json")


class BatchError(RuntimeError):
    """A batch that cannot start (no captures, OUT locked by another batch, ...)."""


def find_captures(items: list[str | Path], format: str | None = None,
                  log: Callable[[str], None] | None = None) -> list[Path]:
    """The captures that ``items`` name, each once, in order.

    Each item is a capture (any format ``build`` reads), a folder of captures (its entries that are
    captures, by name; other entries are noted and left out) or a text file (``.txt``, ``.lst``,
    ``.list``) listing captures one a line (blank lines and ``#`` comments skipped; relative paths
    are relative to the file). A path that does not exist is kept: its run fails, saying so.
    """
    from nurec_usd.capture import CaptureError
    from nurec_usd.capture.importers import detect_format

    say = log or (lambda _m: None)

    def is_capture(path: Path) -> bool:
        if format is not None:
            return True
        try:
            detect_format(path)
        except CaptureError:
            return False
        return True

    found: list[Path] = []
    for item in map(Path, items):
        if item.is_file() and item.suffix.lower() in LIST_SUFFIXES:
            try:
                lines = item.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as err:
                raise BatchError(f"{item}: cannot read the list of captures ({err})") from err
            for line in lines:
                line = line.split("#", 1)[0].strip()
                if line:
                    path = Path(line).expanduser()
                    found.append(path if path.is_absolute() else item.parent / path)
        elif not item.exists() or is_capture(item):
            found.append(item)
        elif item.is_dir():
            entries = sorted(item.iterdir())
            captures = [e for e in entries if not e.name.startswith(".") and is_capture(e)]
            if not captures:
                raise BatchError(f"{item}: neither a capture nor a folder holding captures (looked at its "
                                 f"{len(entries)} entries)")
            others = [e.name for e in entries if e not in captures and not e.name.startswith(".")]
            if others:
                say(f"note: {item}: left out {len(others)} entries that are not captures: "
                    + ", ".join(others[:5]) + (", ..." if len(others) > 5 else ""))
            found.extend(captures)
        else:
            found.append(item)  # a file that is no capture: its run says why
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def _base_name(path: Path) -> str:
    # a folder names its run; a capture's manifest file (capture.json, transforms.json) its folder;
    # another file (an NCore store, a DGP scene json) its own name up to the first dot
    resolved = path.resolve()
    if resolved.is_dir() or not resolved.name.split(".")[0]:
        name = resolved.name
    elif resolved.name in ("capture.json", "transforms.json"):
        name = resolved.parent.name
    else:
        name = resolved.name.split(".")[0]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "capture"


def run_names(captures: list[Path]) -> list[str]:
    """A run directory name per capture: its own name, with a short hash of its path where two
    captures (or a reserved name: logs) would share one."""
    bases = [_base_name(p) for p in captures]
    names = []
    for path, base in zip(captures, bases):
        if bases.count(base) > 1 or base in RESERVED_NAMES:
            base = f"{base}-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]}"
        names.append(base)
    return names


@dataclass
class BatchResult:
    """What ``batch`` did: a record per run (as in batch.json), in the order of the captures."""

    out: Path
    runs: list[dict[str, Any]]
    seconds: float
    batch_json: Path
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every run succeeded (built now, or skipped as up to date)."""
        return all(r.get("status") in ("built", "skipped") for r in self.runs)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r.get("status") not in ("built", "skipped")]

    def table(self) -> str:
        """The summary table: status, wall time, held-out PSNR, lidar error, output size, error."""
        return format_table(self.runs)


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return "-"


def short_error(text: str | None, limit: int = 140) -> str:
    """An error on one line: its lines (a capture's problems) joined, cut at ``limit`` characters."""
    if not text:
        return ""
    line = "; ".join(part.strip().removeprefix("- ") for part in text.splitlines() if part.strip())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(runs: list[dict[str, Any]]) -> str:
    """Runs as a text table, one line each (a failure's error on its first line)."""
    header = ("run", "status", "wall s", "PSNR dB", "lidar err m", "size", "")
    rows = [header]
    for r in runs:
        m = r.get("metrics") or {}
        note = short_error(r.get("error"))
        if r.get("attempts", 1) > 1:
            note = (note + " " if note else "") + f"({r['attempts']} attempts)"
        rows.append((r["name"], r.get("status", "pending"), _num(r.get("seconds"), ".1f"), _num(m.get("psnr"), ".2f"),
                     _num(m.get("lidar_median_range_error_m"), ".3f"), _size(r.get("bytes")), note))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(row[2:6], widths[2:6])]
        lines.append("  ".join(cells + [row[6]]).rstrip())
    return "\n".join(lines)


def _write_json_atomic(path: Path, value: Any) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(value, indent=2, default=str) + "\n")


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    """Only one batch writes into ``out`` at a time (an flock, released by the kernel even when the
    process is killed)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return

    with open(out / ".batch.lock", "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES):  # a file system without locks: go on unlocked
                yield
                return
            f.seek(0)
            holder = f.read().strip()
            raise BatchError(f"{out}: another batch is writing into this folder ({holder or '.batch.lock is held'})"
                             ) from err
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        f.flush()
        yield


def _remove_leftovers(out: Path, names: list[str]) -> list[Path]:
    """Staging folders of these runs left by a batch that was killed (nothing else writes them while
    the lock is held). Returns what was removed."""
    removed = []
    for name in names:
        pattern = str(out / f".{glob.escape(name)}.*.partial*")
        for path in map(Path, glob.glob(pattern)):
            if re.fullmatch(rf"\.{re.escape(name)}\.[0-9a-f]{{12}}\.partial(\.old)?", path.name):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def batch(captures: list[str | Path] | str | Path, out: str | Path, *, workers: int | None = None,
          ray: bool | str | None = None, force: bool = False, retries: int = 2, preset: str = "fast",
          budget_s: float | None = None, device: str = "auto", format: str | None = None,
          collision: bool = False, usdz: bool = False, progress: bool = True,
          log: Callable[[str], None] | None = None, **options: Any) -> BatchResult:
    """Build and export every capture into its own run directory ``out/<name>`` (see the module docstring).

    Args:
        captures: captures, folders of captures and list files (``find_captures``).
        out: the output folder (on a file system every worker sees, for Ray on several machines).
        workers: runs at once. Local: worker processes (default one per visible GPU, each given its own
            ``CUDA_VISIBLE_DEVICES``, round-robin when there are more workers than GPUs; one on a CPU).
            Ray: at most this many tasks at once (default: as the cluster's resources allow).
        ray: False/None: local workers; True: a local Ray (or the cluster ``RAY_ADDRESS`` names); a string:
            the address of a Ray cluster to join.
        force: rebuild runs that are up to date.
        retries: how many more times a run whose worker process died is tried (Ray's ``max_retries``).
        preset, budget_s, device, format, collision, usdz, **options: the build's options (``nurec_usd.build``);
            ``device`` is "auto", "cuda" or "cpu".
        progress: one progress bar across runs, with a line per finished run (stderr).
        log: where one-line messages go (default: stderr, above the progress bar).

    Returns:
        The result: a record per run; ``result.ok`` says whether all succeeded.

    Raises:
        ValueError: an unknown build option, or a value of the wrong type.
        BatchError: nothing to do, or ``out`` is being written by another batch.
        RayMissingError: ``ray`` asked for and Ray is not installed.
        BatchSetupError: ``device`` or ``workers`` cannot be used here.

    Local workers are spawned processes: a script calling this needs the usual
    ``if __name__ == "__main__":`` guard.
    """
    from tqdm import tqdm

    from nurec_usd.train.config import make_config

    say = log or (lambda msg: tqdm.write(msg, file=sys.stderr))
    use_ray = ray is not None and ray is not False
    if use_ray and not ray_installed():
        raise RayMissingError(INSTALL_HINT)
    config = make_config(preset, device=device, budget_s=budget_s, **options)  # bad options fail here
    if isinstance(captures, (str, Path)):
        captures = [captures]
    paths = find_captures(list(captures), format=format, log=say)
    if not paths:
        raise BatchError("no captures given")
    slots = None
    if not use_ray:
        slots = plan_slots(workers, device)[:len(paths)]  # no idle workers
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = run_names(paths)
    specs = [RunSpec(name=name, capture=str(path.resolve()), run_dir=str((out / name).resolve()),
                     log_path=str((out / "logs" / f"{name}.log").resolve()), preset=preset, budget_s=budget_s,
                     device="cpu" if device == "cpu" else "auto", format=format, usdz=usdz, collision=collision,
                     force=force, options={k: v for k, v in options.items() if v is not None},
                     config=config.to_dict())
             for name, path in zip(names, paths)]
    records: list[dict[str, Any]] = [{"name": s.name, "capture": s.capture, "run_dir": s.run_dir,
                                      "status": "pending"} for s in specs]
    t0 = time.monotonic()
    summary = {"format": "nurec_usd.batch", "version": 1, "out": str(out.resolve()),
               "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "finished": None, "state": "running",
               "mode": "ray" if use_ray else "local",
               "ray_address": (ray if isinstance(ray, str) else None) if use_ray else None,
               "workers": workers if use_ray else [s.label for s in slots],
               "build": {"preset": preset, "budget_s": budget_s, "device": device, "format": format,
                         "usdz": usdz, "collision": collision, "force": force, "options": specs[0].options,
                         "config": config.to_dict()},
               "counts": {}, "seconds": 0.0, "runs": records}
    batch_json = out / "batch.json"

    def save(state: str) -> None:
        summary["state"] = state
        summary["seconds"] = round(time.monotonic() - t0, 3)
        summary["counts"] = {k: sum(r["status"] == k for r in records) for k in ("built", "skipped", "failed",
                                                                                  "pending")}
        if state != "running":
            summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        _write_json_atomic(batch_json, summary)

    with _lock(out):
        for path in _remove_leftovers(out, names):
            say(f"removed {path.name}: a staging folder left by an interrupted batch")
        save("running")
        where = "on Ray" if use_ray else f"on {len(slots)} worker{'s' if len(slots) > 1 else ''} (" + \
            ", ".join(s.label for s in slots) + ")"
        say(f"batch: {len(specs)} run{'s' if len(specs) != 1 else ''} into {out} {where}")
        with tqdm(total=len(specs), desc="batch", unit="run", disable=not progress or None, file=sys.stderr,
                  dynamic_ncols=True) as bar:

            def on_done(index: int, record: dict[str, Any]) -> None:
                records[index] = record
                save("running")
                m = record.get("metrics") or {}
                detail = short_error(record.get("error")) if record["status"] == "failed" else \
                    f"PSNR {_num(m.get('psnr'), '.2f')} dB"
                say(f"{record['status']:<8} {record['name']} ({record['seconds']:.1f} s): {detail}")
                bar.update(1)
                bar.set_postfix({k: v for k, v in summary["counts"].items() if k != "pending" and v})

            try:
                if use_ray:
                    run_ray(specs, on_done, address=ray if isinstance(ray, str) else None, workers=workers,
                            retries=retries, device=device, log=say)
                else:
                    run_local(specs, slots, on_done, retries=retries)
            except BaseException:
                save("interrupted")
                raise
        _remove_leftovers(out, names)  # those of workers lost during this batch: every run has ended
        save("finished")
    counts = dict(summary["counts"])
    return BatchResult(out, records, time.monotonic() - t0, batch_json, counts)
