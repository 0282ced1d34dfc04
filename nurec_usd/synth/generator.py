"""End to end: preset + seed -> capture directory (native format) + ground-truth folder.

    from nurec_usd.synth import generate
    result = generate("tiny", "out/tiny", seed=0)          # ground truth in out/tiny_groundtruth
    result.timings                                         # seconds per stage

Stages (``result.timings``): ``scene`` (traffic, street and meshes on the host), ``compile`` (Warp
module load, a compile on first use), ``bvh`` (upload and BVH builds), ``rays`` (per-camera ray
set-up), ``cameras`` (camera kernels and device-to-host copies), ``lidar`` (lidar kernels, copies and
point compaction), ``writing`` (waiting for the encoders/writers once everything is rendered, the
capture's validation and move into place), ``total``. Encoding and writing run in worker threads
while rendering continues; ``writer_wait`` is the time rendering was held up by them.

Determinism: one seeded ``numpy.random.Generator`` drives every choice (the lidar noise uses Warp's
counter-based RNG keyed by that seed and each ray's index); kernels have no atomics; files are
written in a fixed order with fixed metadata. The same seed on the same device gives
byte-identical files.
"""

from __future__ import annotations

import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from nurec_usd.ops.warp_init import init_warp
from nurec_usd.synth.groundtruth import CONVENTIONS, GT_FORMAT, GT_VERSION, GroundTruthWriter, default_groundtruth_dir
from nurec_usd.synth.presets import T0_US, WORLD_OFFSET_M, Preset, get_preset
from nurec_usd.synth.scene import build_scene, describe
from nurec_usd.util.staging import OutputExistsError

AUTO = "auto"


@dataclass
class SynthResult:
    """Where a generated capture went, and how long each stage took."""

    capture_dir: Path
    groundtruth_dir: Path | None
    timings: dict[str, float] = field(default_factory=dict)
    summary: str = ""


class StageTimer:
    """Wall-clock seconds per named stage; the device is synchronised before a stage is closed."""

    def __init__(self, device: str):
        self.device = device
        self.seconds: dict[str, float] = {}

    def sync(self) -> None:
        import warp as wp

        wp.synchronize_device(self.device)

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds


def resolve_device(device: str | None) -> str:
    """"cuda:0" when a CUDA device is available and none was asked for, else the asked one (checked)."""
    import warp as wp

    init_warp()  # quietly: no banner, no "no CUDA driver" line on a CPU-only machine
    if device in (None, "", "auto"):
        return "cuda:0" if wp.is_cuda_available() else "cpu"
    try:
        return str(wp.get_device(device))
    except (RuntimeError, ValueError) as exc:
        known = ", ".join(str(d) for d in wp.get_devices())
        raise ValueError(f"unknown or unavailable device {device!r} ({exc}); available: {known}") from None


def _chunks(n: int, size: int) -> list[np.ndarray]:
    return [np.arange(i, min(i + size, n)) for i in range(0, n, size)]


class _Writers:
    """Thread pools that encode and write while the device renders; bounded so memory stays bounded."""

    def __init__(self, sensor_ids: list[str], workers: int, max_pending: int):
        # One single-thread pool per sensor: CaptureWriter appends each sensor's frames in call order.
        self.serial = {sid: ThreadPoolExecutor(1, thread_name_prefix=f"write-{sid}") for sid in sensor_ids}
        self.pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="groundtruth")
        self.pending: deque[Future] = deque()
        self.max_pending = max_pending
        self.wait_s = 0.0

    def submit(self, sensor_id: str | None, fn: Callable, *args) -> None:
        pool = self.pool if sensor_id is None else self.serial[sensor_id]
        self.pending.append(pool.submit(fn, *args))
        while len(self.pending) > self.max_pending:
            start = time.perf_counter()
            self.pending.popleft().result()
            self.wait_s += time.perf_counter() - start

    def drain(self) -> None:
        while self.pending:
            self.pending.popleft().result()

    def close(self) -> None:
        for p in [*self.serial.values(), self.pool]:
            p.shutdown(wait=True, cancel_futures=True)


def generate(preset: str | Preset, out_dir: str | Path, *, seed: int = 0, groundtruth_dir: str | Path | None = AUTO,
             device: str | None = None, overwrite: bool = False, spp: int | None = None, threads: int | None = None,
             progress: Callable[[int], None] | None = None) -> SynthResult:
    """Generate a synthetic capture (and its ground truth) into ``out_dir``.

    Args:
        preset: a preset name (``tiny``, ``small``, ``drive30``) or a ``Preset``.
        out_dir: the capture directory to create.
        seed: drives every random choice; the same seed gives byte-identical files on one device.
        groundtruth_dir: where the ground truth goes; "auto" = ``<out_dir>_groundtruth`` beside the
            capture, None = no ground truth.
        device: Warp device ("cpu", "cuda:0", ...); None = CUDA when available, else the CPU.
        overwrite: replace existing output folders.
        spp: samples per pixel (1 or 5), overriding the preset's.
        threads: CPU render threads (CPU device only) and writer threads; default: the CPU count.
        progress: called with the number of frames/sweeps just finished.

    Raises:
        FileExistsError: an output folder exists and ``overwrite`` is False.
        ValueError: unknown preset or device, bad ``spp``.
    """
    import warp as wp

    from nurec_usd.capture.writer import CaptureWriter
    from nurec_usd.synth.raycast import (
        DeviceScene,
        camera_extrinsics,
        lidar_column_times_us,
        lidar_extrinsics,
        lidar_model,
    )
    from warp_kernels import synth_raycast

    total_start = time.perf_counter()
    preset = get_preset(preset) if isinstance(preset, str) else preset
    spp = preset.spp if spp is None else int(spp)
    if spp not in (1, 5):
        raise ValueError(f"spp must be 1 or 5, got {spp}")
    device = resolve_device(device)
    out_dir = Path(out_dir)
    gt_dir = default_groundtruth_dir(out_dir) if groundtruth_dir == AUTO else (
        None if groundtruth_dir is None else Path(groundtruth_dir))
    for path in (out_dir, gt_dir):
        if path is not None and path.exists() and not overwrite:
            raise OutputExistsError(path)
    threads = threads or os.cpu_count() or 2
    on_cpu = device == "cpu"
    timer = StageTimer(device)
    tick = progress or (lambda n: None)

    with timer("scene"):
        scene = build_scene(preset, seed)
    with timer("compile"):
        wp.load_module(synth_raycast, device=device)
    with timer("bvh"):
        dscene = DeviceScene(scene, device)

    rate = preset.rate_hz
    frame_us = T0_US + np.round(np.arange(preset.frames) * 1e6 / rate).astype(np.int64)
    frame_s = np.arange(preset.frames) / rate
    key_us = T0_US + np.round(scene.key_times_s * 1e6).astype(np.int64)
    offset = np.asarray(WORLD_OFFSET_M)

    def to_capture_world(T: np.ndarray) -> np.ndarray:  # [..., 4, 4]
        T = T.copy()
        T[..., :3, 3] += offset
        return T

    name = f"synth_{preset.name}_seed{seed}"
    writer = CaptureWriter(out_dir, name=name, overwrite=overwrite, image_format=preset.image_format,
                           metadata={"source": "nurec_usd.synth: procedural street, Warp ray casting",
                                     "preset": preset.name, "seed": int(seed), "samples_per_pixel": spp,
                                     "world_offset_m": list(WORLD_OFFSET_M)})
    try:
        gtw = GroundTruthWriter(gt_dir, overwrite=overwrite) if gt_dir is not None else None
    except BaseException:
        writer.abort()
        raise
    sensor_ids = [c.id for c in preset.cameras] + [preset.lidar.id]
    writers = _Writers(sensor_ids, workers=threads, max_pending=8 * threads + 16)
    try:
        writer.set_rig(key_us, to_capture_world(scene.rig_poses))
        for spec in preset.cameras:
            writer.add_camera(spec.id, spec.model, spec.width, spec.height, spec.intrinsics, camera_extrinsics(spec),
                              spec.shutter, spec.readout_us)
        lid = preset.lidar
        lm = lidar_model(lid)
        writer.add_lidar(lid.id, lidar_extrinsics(lid), np.asarray(lid.elevations_deg()), lid.columns,
                         lid.scan_rate_hz, lid.min_range_m, lid.max_range_m, rotation=lid.rotation,
                         azimuth_offset_deg=np.asarray(lid.azimuth_offsets_deg()),
                         start_azimuth_deg=lid.start_azimuth_deg)

        # -- cameras ------------------------------------------------------------------
        with timer("rays"):
            setups = [dscene.camera(spec, spp) for spec in preset.cameras]
        batch = max(1, min(preset.frame_batch, (preset.frames + 1) // 2)) if on_cpu else preset.frame_batch
        # Batches of all cameras interleaved: every camera's (serial, in-order) writer works in parallel.
        jobs = [(cam, ks) for ks in _chunks(preset.frames, batch) for cam in setups]

        def render_job(job):
            cam, ks = job
            rgb, depth, actor = dscene.render(cam, frame_s[ks])
            # .numpy() of a CPU array is a view of memory the next launch may reuse: copy it
            return (cam, ks, rgb.numpy().copy() if on_cpu else rgb.numpy(),
                    depth.numpy().copy() if on_cpu else depth.numpy(),
                    actor.numpy().copy() if on_cpu else actor.numpy())

        def emit_frames(result) -> None:
            cam, ks, rgb, depth, actor = result
            cid = cam.spec.id
            for j, k in enumerate(ks):
                writers.submit(cid, writer.add_frame, cid, int(frame_us[k]), rgb[j])
                if gtw is not None:
                    writers.submit(None, gtw.camera_frame, cid, int(frame_us[k]), depth[j], actor[j])
            tick(len(ks))

        with timer("cameras"):
            if on_cpu and threads > 1:
                # Warp runs a CPU launch on one thread; independent launches in parallel use the cores.
                with ThreadPoolExecutor(threads, thread_name_prefix="render") as pool:
                    for result in pool.map(render_job, jobs):
                        emit_frames(result)
            else:
                for job in jobs:
                    emit_frames(render_job(job))

        # -- lidar ---------------------------------------------------------------------
        lsetup = dscene.lidar(lid)
        rays_host = lm.ray_directions().permute(1, 0, 2).contiguous().numpy()  # [W, C, 3] float64
        col_us = lidar_column_times_us(lid)
        sweep_batch = preset.frames if on_cpu else max(1, min(preset.frames, 20))
        lidar_seed = int(np.random.Generator(np.random.PCG64([seed, 1])).integers(1, 2**31 - 1))

        def compact(t_us: int, clean, noisy, inten, actor) -> tuple:
            """A sweep's returned points in firing order (and its ground truth, written here)."""
            mask = noisy > 0.0
            w_idx, c_idx = np.nonzero(mask)  # [W, C] row-major = firing order
            dirs = rays_host[w_idx, c_idx]
            r = noisy[mask].astype(np.float64)
            if gtw is not None:
                rc = clean[mask].astype(np.float64)
                gtw.sweep(lid.id, t_us, {
                    "range_clean": rc.astype(np.float32), "points_clean": (dirs * rc[:, None]).astype(np.float32),
                    "actor": actor[mask], "column": w_idx.astype(np.uint16), "range_grid": clean, "actor_grid": actor})
            return (dirs * r[:, None]).astype(np.float32), inten[mask], t_us + col_us[w_idx], c_idx

        def write_sweep(t_us: int, compacted: Future) -> None:
            writer.add_sweep(lid.id, t_us, *compacted.result())

        def emit_sweeps(ks, clean, noisy, inten, actor) -> None:
            for j, k in enumerate(ks):
                t_us = int(frame_us[k])
                # compaction runs in the shared pool; the lidar's serial writer adds sweeps in order
                compacted = writers.pool.submit(compact, t_us, clean[j], noisy[j], inten[j], actor[j])
                writers.submit(lid.id, write_sweep, t_us, compacted)
            tick(len(ks))

        with timer("lidar"):
            for ks in _chunks(preset.frames, sweep_batch):
                out = dscene.scan(lsetup, frame_s[ks], int(ks[0]), lidar_seed)
                emit_sweeps(ks, *[a.numpy().copy() if on_cpu else a.numpy() for a in out])

        for a in scene.actors:
            writer.add_track(a.track_id, a.label, np.asarray(a.size), key_us[a.key_first:a.key_last + 1],
                             to_capture_world(a.poses))

        with timer("writing"):
            writers.drain()
            writer.finish()
            if gtw is not None:
                gtw.finish(_gt_index(preset, seed, spp, name, scene, frame_us))
    except BaseException:
        writers.close()
        writer.abort()
        if gtw is not None:
            gtw.abort()
        raise
    writers.close()
    timer.add("writer_wait", writers.wait_s)
    timer.add("total", time.perf_counter() - total_start)
    return SynthResult(out_dir, gt_dir, dict(timer.seconds), describe(scene))


def _gt_index(preset: Preset, seed: int, spp: int, name: str, scene, frame_us: np.ndarray) -> dict:
    key_us = T0_US + np.round(scene.key_times_s * 1e6).astype(np.int64)
    return {
        "format": GT_FORMAT,
        "version": GT_VERSION,
        "capture_name": name,
        "preset": preset.name,
        "seed": int(seed),
        "samples_per_pixel": spp,
        "conventions": CONVENTIONS,
        "world_offset_m": list(WORLD_OFFSET_M),
        "sun_direction": [float(v) for v in scene.light.sun_dir],
        "actors": [{"index": i, "track_id": a.track_id, "class": a.label, "role": a.role,
                    "size_m": [float(s) for s in a.size], "first_us": int(key_us[a.key_first]),
                    "last_us": int(key_us[a.key_last])} for i, a in enumerate(scene.actors)],
        "cameras": {c.id: {"model": c.model, "width": c.width, "height": c.height,
                           "frames": [{"timestamp_us": int(t), "file": GroundTruthWriter.camera_rel(c.id, t)}
                                      for t in frame_us]} for c in preset.cameras},
        "lidars": {preset.lidar.id: {"range_noise_m": preset.lidar.range_noise_m,
                                     "sweeps": [{"timestamp_us": int(t),
                                                 "file": GroundTruthWriter.lidar_rel(preset.lidar.id, t)}
                                                for t in frame_us]}},
    }
