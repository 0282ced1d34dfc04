"""``python -m nurec_usd bench``: the headline figure in one command.

Builds a synthetic capture (``synth`` preset, generated once into a cache folder) with
``python -m nurec_usd build`` in a child process and reports what a user waits for: the time
from the process's start to ``usd/root.usda`` in place, each stage's share (the manifest's
stage table, with the interpreter's start-up before it), and the held-out quality. Several
``--budget-s`` values give one build per value: the time-quality curve.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from nurec_usd.synth import generate, get_preset

__all__ = ["BenchRun", "bench_capture", "run_build", "format_run", "default_cache"]

# steps for a budget-bound build: the budget ends it (the schedule follows the time spent)
BUDGET_STEPS = 1_000_000


def default_cache() -> Path:
    """Where generated benchmark captures are kept: ``$XDG_CACHE_HOME/nurec_usd/bench``."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "nurec_usd" / "bench"


def bench_capture(preset: str, cache: Path, device: str | None = None,
                  say: Callable[[str], None] = print) -> Path:
    """The ``synth`` capture of ``preset`` (seed 0, no ground truth) in ``cache``, generated when missing."""
    out = cache / f"{preset}-seed0"
    if (out / "capture.json").is_file():
        return out
    say(f"generating the {preset} capture into {out} (once)")
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    generate(get_preset(preset), out, seed=0, groundtruth_dir=None, device=device, overwrite=True)
    say(f"generated in {time.perf_counter() - t0:.1f} s")
    return out


@dataclass
class BenchRun:
    """One build, timed from outside its process."""

    command: list[str]
    returncode: int
    wall_s: float  # the process, start to exit
    to_usd_s: float | None  # the process's start to usd/root.usda in place (None: never written)
    startup_s: float | None  # the process's start to the build's start (interpreter, imports)
    manifest: dict[str, Any] | None
    metrics: dict[str, Any] | None
    profile: str | None  # profile.txt, when built with --profile
    output: str  # the build's stdout and stderr


def run_build(capture: Path, out: Path, options: Sequence[str] = (), python: str = sys.executable) -> BenchRun:
    """``python -m nurec_usd build CAPTURE -o OUT --overwrite --no-progress OPTIONS`` in a child
    process, polled every 20 ms for ``OUT/usd/root.usda``."""
    command = [python, "-m", "nurec_usd", "build", str(capture), "-o", str(out), "--overwrite", "--no-progress",
               *options]
    root = out / "usd" / "root.usda"
    if out.exists():
        shutil.rmtree(out)  # a file left from an earlier run must not count as this one's
    spawned = time.time()
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    to_usd = None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    while proc.poll() is None:
        if to_usd is None and root.is_file():
            to_usd = time.perf_counter() - t0
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    reader.join()
    if to_usd is None and root.is_file():
        to_usd = wall
    manifest = _read_json(out / "manifest.json")
    metrics = _read_json(out / "metrics.json")
    startup = None
    if manifest and manifest.get("started_at"):
        startup = max(0.0, float(manifest["started_at"]) - spawned)
    profile = (out / "profile.txt").read_text() if (out / "profile.txt").is_file() else None
    return BenchRun(command, proc.returncode, wall, to_usd, startup, manifest, metrics, profile, "".join(lines))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _f(value: Any, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{format(value, spec)}{unit}"


def run_label(run: BenchRun, label: str) -> str:
    """``label``, with the kernel options the build ran under (its manifest's ``render``) where
    they are not the defaults: a row timed with ``NUREC_CAMERA_TILE_ORDER=index`` says so."""
    order = ((run.manifest or {}).get("render") or {}).get("tile_order")
    return label if order in (None, "list") else f"{label} tile_order={order}"


def format_run(run: BenchRun, label: str) -> str:
    """The stage table and the quality of one build, as plain text."""
    if run.manifest is None or run.metrics is None:
        return f"{label}: the build failed (exit {run.returncode}):\n{run.output[-4000:]}"
    stages = run.manifest.get("stage_seconds", {})
    m = run.metrics
    lines = [f"{label}: {m.get('status')} after {m.get('steps')} steps "
             f"({_f(m.get('steps_per_second'), '.1f', ' steps/s')}), {m.get('gaussians', 0):,} Gaussians, "
             f"peak GPU memory {_f(m.get('peak_gpu_memory_gib'), '.1f', ' GiB')}",
             f"  {'start-up (interpreter, imports)':<34} {_f(run.startup_s, '7.2f', ' s')}"]
    for name, seconds in stages.items():
        lines.append(f"  {name:<34} {seconds:7.2f} s")
    if run.to_usd_s is not None and run.startup_s is not None:  # so that the rows add up to the wall
        other = run.to_usd_s - run.startup_s - sum(stages.values())
        lines.append(f"  {'other (between stages, the exit)':<34} {other:7.2f} s")
    lines += [f"  {'process start -> usd/root.usda':<34} {_f(run.to_usd_s, '7.2f', ' s')}",
              f"  {'process wall':<34} {run.wall_s:7.2f} s",
              f"  held-out PSNR {_f(m.get('psnr'), '.2f', ' dB')}, SSIM {_f(m.get('ssim'), '.3f')} over "
              f"{m.get('held_out_frames')} frames; lidar median range error "
              f"{_f(m.get('lidar_median_range_error_m'), '.3f', ' m')}, hit accuracy "
              f"{_f(m.get('lidar_hit_accuracy'), '.3f')} over {m.get('held_out_sweeps')} sweeps"]
    return "\n".join(lines)


def results_row(run: BenchRun, label: str) -> str:
    """A ``benchmarks/RESULTS.md`` table row: date, GPU, commit, what, wall, stages, quality."""
    man, m = run.manifest or {}, run.metrics or {}
    s = man.get("stage_seconds", {})
    git = man.get("git") or {}
    commit = (git.get("commit") or "?")[:7] + ("-dirty" if git.get("dirty") else "")
    return (f"| {datetime.date.today()} | {man.get('device', '?')} | {commit} | {label} | "
            f"{_f(run.to_usd_s, '.1f')} | {_f(run.startup_s, '.1f')} | {s.get('load', 0):.1f} | {s.get('init', 0):.1f} | "
            f"{s.get('train', 0):.1f} | {s.get('eval', 0):.1f} | {s.get('export', 0):.1f} | "
            f"{_f(m.get('steps_per_second'), '.1f')} | {_f(m.get('psnr'), '.2f')} | {_f(m.get('ssim'), '.3f')} | "
            f"{_f(m.get('lidar_median_range_error_m'), '.3f')} | {_f(m.get('peak_gpu_memory_gib'), '.1f')} |")


RESULTS_HEADER = ("| date | GPU | commit | build | start -> root.usda s | start-up | load | init | train | eval | "
                  "export | steps/s | PSNR dB | SSIM | lidar error m | peak GiB |")
