"""Compile a build's GPU kernels in the background while the capture loads.

Warp compiles a kernel module at the first launch of one of its kernels, one module after
another. With a cold kernel cache (a fresh machine or container) that was about 18 s of a
build's training stage on an H200 (``benchmarks/RESULTS.md``). :class:`KernelWarmup`
compiles every float32 module a build launches, several at a time, in a child process started
before the capture loads, into Warp's kernel cache; :meth:`KernelWarmup.wait` joins it and
loads the modules from the cache (a fraction of a second) before the first kernel runs.

A process rather than a thread: Warp's code generation is Python and holds the GIL, and in a
thread it slowed the loading (decoding, the lidar's range images) by about as much as it
overlapped it (benchmarks/RESULTS.md, build drive30).

A failure here is not fatal: the kernels then compile at their first launch, as before.

    python -m nurec_usd.render.warmup cuda:0 [--cache DIR] [--modules camera_raster ...]
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
import warp as wp

from nurec_usd.render.warp_torch import init_warp

__all__ = ["KernelWarmup", "BUILD_MODULES", "BUILD_VARIANTS"]

# The modules a build launches on its device, largest compile first (float64 variants live in
# their own modules, which a build never launches: warp_kernels.modules).
BUILD_MODULES = ("camera_project", "interpolate", "lidar_project", "camera_raster", "lidar_raster",
                 "tile_binning", "point_neighbors", "lidar_binning", "ssim", "sky", "adam", "perturb")
# Float32 kernels that compile in Warp modules of their own, defined by the modules above: the
# lidar projection's backward, and the pinhole projection (batches of pinhole cameras with a
# global shutter) with its backward. (camera_project_poses serves the graphed renderer only.)
BUILD_VARIANTS = ("lidar_project_backward", "camera_project_pinhole")
_VARIANT_OF = {"lidar_project_backward": "lidar_project", "camera_project_pinhole": "camera_project"}


def _modules(names: tuple[str, ...] | list[str]) -> list:
    """Warp modules by ``warp_kernels`` name; the variants are defined by importing the others."""
    for name in names:
        if name not in BUILD_VARIANTS:
            importlib.import_module(f"warp_kernels.{name}")
    for name in set(names) & set(BUILD_VARIANTS):
        importlib.import_module(f"warp_kernels.{_VARIANT_OF[name]}")
    return [wp.get_module(f"warp_kernels.{name}") for name in names]


class KernelWarmup:
    """Compile ``BUILD_MODULES`` and ``BUILD_VARIANTS`` for a CUDA ``device`` in a child process
    (no-op on the CPU). ``modules``: other ``warp_kernels`` names instead (tests)."""

    def __init__(self, device: torch.device | str, workers: int | None = None,
                 modules: tuple[str, ...] | None = None):
        self.device = torch.device(device)
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._process: tuple[subprocess.Popen, Any] | None = None  # and its stderr file
        self._names = tuple(modules or BUILD_MODULES + BUILD_VARIANTS)
        if self.device.type != "cuda":
            return
        init_warp()
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self._device = f"cuda:{index}"
        workers = workers or min(len(self._names), max(1, (os.cpu_count() or 2) // 2))
        self._t0 = time.monotonic()
        try:
            self._process = spawn_compile(self._device, self._names, workers)
        except OSError as exc:  # reported by the caller; the kernels compile on first launch
            self.error = exc

    def wait(self) -> float:
        """Block until the compiling is done and load the modules. Returns the seconds spent waiting."""
        if self._process is None:
            return 0.0
        t0 = time.monotonic()
        process, log = self._process
        process.wait()
        self.seconds = time.monotonic() - self._t0
        if process.returncode != 0:
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-3:]
            self.error = RuntimeError(f"the compiling process exited with {process.returncode}: " + " / ".join(tail))
        log.close()
        self._process = None
        if self.error is None:
            try:  # from the cache the child filled: hashing and loading only
                wp.force_load(device=self._device, modules=_modules(self._names))
            except Exception as exc:  # noqa: BLE001 - reported; the kernels compile on first launch
                self.error = exc
        return time.monotonic() - t0


def spawn_compile(device: str, names: tuple[str, ...], workers: int) -> tuple[subprocess.Popen, Any]:
    """Start ``python -m nurec_usd.render.warmup`` compiling ``names`` for ``device`` into this
    process's kernel cache, with this process's import path. Returns the process and the file its
    stderr goes to (a file, not a pipe: a full pipe would stall it)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = [sys.executable, "-m", "nurec_usd.render.warmup", device, "--cache", str(wp.config.kernel_cache_dir),
           "--workers", str(workers), "--modules", *names]
    log = tempfile.TemporaryFile()
    return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log), log


def main(argv: list[str] | None = None) -> int:
    """Compile modules into the kernel cache (the child process of :class:`KernelWarmup`)."""
    parser = argparse.ArgumentParser(description="Compile nurec_usd's Warp modules into Warp's kernel cache.")
    parser.add_argument("device", help="Warp device, e.g. cuda:0 (cpu works too)")
    parser.add_argument("--cache", default=None, help="kernel cache directory, as wp.config.kernel_cache_dir "
                        "reads after wp.init() (default: Warp's)")
    parser.add_argument("--workers", type=int, default=1, help="modules compiled at a time")
    parser.add_argument("--modules", nargs="+", default=list(BUILD_MODULES + BUILD_VARIANTS),
                        help="warp_kernels module names (default: every module a build launches)")
    args = parser.parse_args(argv)
    init_warp()
    if args.cache:  # the parent's resolved directory: set after init, which would add a version folder
        wp.config.kernel_cache_dir = args.cache
    wp.force_load(device=args.device, modules=_modules(args.modules), max_workers=args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
