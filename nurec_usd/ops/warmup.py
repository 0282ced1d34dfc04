"""Compile a build's GPU kernels in the background while the capture loads.

Warp compiles a kernel module at the first launch of one of its kernels, one module after
another. With a cold kernel cache (a fresh machine or container) that would hold up a build's
first training steps for many seconds (``benchmarks/RESULTS.md``, cold build). :class:`KernelWarmup`
compiles every float32 module a build launches, several at a time, in a background thread
started before the capture loads. Loading is host work (decoding images, reading sweeps) and
Warp's compiler releases the GIL, so the two overlap. :meth:`KernelWarmup.wait` joins before
the first kernel runs.

A failure here is not fatal: the kernels then compile at their first launch, as without it.
"""

from __future__ import annotations

import importlib
import os
import threading
import time

import torch
import warp as wp

from nurec_usd.ops.warp_torch import init_warp

__all__ = ["KernelWarmup", "BUILD_MODULES", "BUILD_VARIANTS"]

# The modules a build launches on its device, largest compile first (float64 variants live in
# their own modules, which a build never launches: warp_kernels.modules).
BUILD_MODULES = ("camera_project", "interpolate", "lidar_project", "camera_raster", "lidar_raster",
                 "tile_binning", "point_neighbors", "lidar_binning", "ssim", "sky", "adam", "perturb")
# Float32 kernels that compile in Warp modules of their own, defined by the modules above: the
# lidar projection's backward (static Gaussians, and the variant for moving actors'), the lidar's
# ray masks (fast_math), the pinhole projection (batches of pinhole cameras with a global
# shutter) with its backward, and the camera projection's backward (every other batch).
# (camera_project_poses serves the graphed renderer only.)
BUILD_VARIANTS = ("lidar_project_backward", "lidar_project_backward_moving", "lidar_binning_masks",
                  "camera_project_pinhole", "camera_project_backward")


class KernelWarmup:
    """Compile ``BUILD_MODULES`` and ``BUILD_VARIANTS`` for a CUDA ``device`` in a background thread
    (no-op on the CPU)."""

    def __init__(self, device: torch.device | str, workers: int | None = None):
        self.device = torch.device(device)
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._thread: threading.Thread | None = None
        if self.device.type != "cuda":
            return
        init_warp()  # here, not in the thread: Warp initialises once
        modules = [wp.get_module(importlib.import_module(f"warp_kernels.{name}").__name__) for name in BUILD_MODULES]
        modules += [wp.get_module(f"warp_kernels.{name}") for name in BUILD_VARIANTS]  # defined by the imports above
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
        workers = workers or min(len(modules), max(1, cores // 2))
        self._thread = threading.Thread(target=self._compile, args=(modules, f"cuda:{index}", workers),
                                        name="kernel-warmup", daemon=True)
        self._thread.start()

    def _compile(self, modules: list, device: str, workers: int) -> None:
        t0 = time.monotonic()
        try:
            wp.force_load(device=device, modules=modules, max_workers=workers)
        except BaseException as err:  # noqa: BLE001 - reported by wait(); the kernels compile on first launch
            self.error = err
        self.seconds = time.monotonic() - t0

    def wait(self) -> float:
        """Block until the compiling is done. Returns the seconds spent waiting."""
        if self._thread is None:
            return 0.0
        t0 = time.monotonic()
        self._thread.join()
        self._thread = None
        return time.monotonic() - t0
