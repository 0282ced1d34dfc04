"""A capture laid out for training: frames and sweeps on the device, split into train and held-out.

Everything a training step needs is prepared once here, so that a step is only device work:
per camera a one-camera ``CameraBatch`` template and the poses of every frame over its
readout; images decoded once and kept as uint8 (on the GPU when they fit); per lidar a
``LidarBatch`` template, the poses of every sweep and its measured range image.

Held-out data: frames and sweeps whose index (per sensor, in time order) satisfies
``index % eval_every == eval_every // 2`` are never trained on. Cameras and lidars sampled at
the same rate therefore hold out the same instants. A sensor with 3 or more but too few for
that index to occur holds out its middle one; a frame whose capture gives it a ``held_out`` flag
(a dataset's own test split) follows the flag.

Frame groups: the frames that cameras of one resolution recorded together (readouts starting
within ``GROUP_TOLERANCE_S``) form a group, rendered in one call (``camera_views``) with the
actors placed at one time, the mean of the frames' readout middles. A training step takes a
group; evaluation renders group by group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from nurec_usd.capture.images import read_rgb, read_rgb_into
from nurec_usd.capture.model import Capture
from nurec_usd.ops.camera import CameraBatch
from nurec_usd.ops.lidar import LidarBatch
from nurec_usd.render.scene_renderer import CameraView, CameraViews
from nurec_usd.render.views import camera_geometry, sensor_poses
from nurec_usd.scene.free_space import SweepRanges
from nurec_usd.sensors.se3 import PoseTrajectory
from nurec_usd.train.sweep_reads import KeepFn, checked_sweep, read_columns
from nurec_usd.util.prefetch import default_workers, prefetched

# Frames of one resolution whose readouts start within this many seconds of each other are
# rendered together: rigs trigger their cameras together (their frames share a timestamp), and
# the actors of a group are placed at one time, so a wider window would misplace them.
GROUP_TOLERANCE_S = 0.010
RANGE_IMAGE_BATCH = 16  # sweeps turned into range images in one pass


@dataclass(frozen=True)
class FrameRef:
    """One camera frame: which camera, which frame, when, and whether it is held out."""

    camera: int  # index into CaptureData.cameras
    frame: int  # index into that camera's frames
    time_s: float  # first line read, seconds since the capture start
    held_out: bool


@dataclass(frozen=True)
class SweepRef:
    """One lidar sweep."""

    lidar: int  # index into CaptureData.lidars
    sweep: int
    time_s: float  # sweep start
    held_out: bool


@dataclass(frozen=True)
class FrameGroup:
    """Frames of cameras of one resolution recorded together, rendered in one call."""

    frames: tuple[FrameRef, ...]  # one frame per camera at most, cameras in capture order


def group_frames(frames: Sequence[FrameRef], sizes: Sequence[tuple[int, int]], max_cameras: int = 0,
                 tolerance_s: float = GROUP_TOLERANCE_S) -> list[FrameGroup]:
    """Frames in groups of frames recorded together (``GROUP_TOLERANCE_S``) by cameras of one size.

    Args:
        frames: the frames to group.
        sizes: (width, height) of each camera (``FrameRef.camera`` indexes it).
        max_cameras: at most this many frames in a group (0: no limit; 1: every frame alone).
        tolerance_s: readout starts further apart than this are not grouped.

    Returns:
        The groups, in the order of their first frame's time (ties: by resolution, then camera).
    """
    by_size: dict[tuple[int, int], list[FrameRef]] = {}
    for ref in frames:
        by_size.setdefault(tuple(sizes[ref.camera]), []).append(ref)
    groups: list[list[FrameRef]] = []
    for refs in by_size.values():
        current: list[FrameRef] = []
        for ref in sorted(refs, key=lambda r: (r.time_s, r.camera)):
            full = max_cameras > 0 and len(current) >= max_cameras
            if current and (full or ref.time_s - current[0].time_s > tolerance_s
                            or any(r.camera == ref.camera for r in current)):
                groups.append(current)
                current = []
            current.append(ref)
        if current:
            groups.append(current)
    groups.sort(key=lambda g: (g[0].time_s, g[0].camera))
    return [FrameGroup(tuple(sorted(g, key=lambda r: r.camera))) for g in groups]


@dataclass
class CameraData:
    """One camera's frames, ready for rendering and losses."""

    id: str
    width: int
    height: int
    template: CameraBatch  # C = 1; poses replaced per frame
    shutter: str
    rays: torch.Tensor  # [H, W, 3] unit rays in the camera frame
    rot_start: torch.Tensor  # [F, 4] T_camera_world rotation (w, x, y, z) at the first line
    trans_start: torch.Tensor  # [F, 3]
    rot_end: torch.Tensor  # [F, 4] ... at the last line
    trans_end: torch.Tensor  # [F, 3]
    R_world_camera: torch.Tensor  # [F, 3, 3] at the first line
    mid_times: torch.Tensor  # [F] seconds: the middle of each readout (actors are placed then)
    images: torch.Tensor  # [F, H, W, 3] uint8, on the device or pinned host memory
    masks: torch.Tensor | None  # [F, H, W] bool, True where pixels count; None without masks
    lens: torch.Tensor | None = None  # [H, W] bool, pixels inside the lens's field of view; None: all


@dataclass
class LidarData:
    """One lidar's sweeps and their measured range images."""

    id: str
    template: LidarBatch
    rot_start: torch.Tensor  # [S, 4] T_lidar_world at the sweep start
    trans_start: torch.Tensor  # [S, 3]
    rot_end: torch.Tensor  # [S, 4] ... one revolution later
    trans_end: torch.Tensor  # [S, 3]
    mid_times: torch.Tensor  # [S] seconds: actors are placed at the sweep's middle
    ranges: torch.Tensor  # [S, C, W] measured range per ray, 0 where there was no return, -1 where the
    # only return was dropped (``CaptureData``'s ``lidar_keep``: the ego vehicle): such rays are left out
    intensities: torch.Tensor  # [S, C, W] measured intensity, 0 where there was no return


def held_out(index: int, eval_every: int, count: int = 0) -> bool:
    """Whether the index-th of a sensor's ``count`` frames or sweeps is held out (0 disables holding out).

    With 3 or more of them but fewer than ``eval_every // 2 + 1`` (so that no index qualifies),
    the middle one is held out: a tiny capture is still scored."""
    if eval_every <= 0:
        return False
    if 3 <= count <= eval_every // 2:
        return index == count // 2
    return index % eval_every == eval_every // 2


def _decode(frame, size: tuple[int, int], factor: int) -> np.ndarray:
    """One frame as uint8 ``[H, W, 3]``, shrunk by ``factor`` (``size``: its (W, H) after that)."""
    img = read_rgb(frame.image_path, factor)
    _check_size(frame, (img.shape[1], img.shape[0]), size)
    return img


def _check_size(frame, got: tuple[int, int], size: tuple[int, int]) -> None:
    if got != size:
        raise ValueError(f"{frame.image_path}: decoded to {got[0]}x{got[1]} pixels, expected "
                         f"{size[0]}x{size[1]} (the camera's width x height, divided by the downscale factor)")


def _new_image_store(frames: int, size: tuple[int, int], device: torch.device, on_device: bool) -> torch.Tensor:
    """Room for a camera's images: ``[F, H, W, 3]`` uint8 on the GPU, in pinned host memory, or on the CPU."""
    shape = (frames, size[1], size[0], 3)
    if device.type != "cuda":
        return torch.empty(shape, dtype=torch.uint8)
    if on_device:
        return torch.empty(shape, dtype=torch.uint8, device=device)
    return torch.empty(shape, dtype=torch.uint8, pin_memory=True)


_staging = threading.local()  # per decoding thread: a pinned host image on its way to the GPU


def _decode_into(store: torch.Tensor,  # [F, H, W, 3] uint8
                 index: int, frame, factor: int) -> None:
    """Decode one frame straight into its slot of the store, or into this thread's pinned buffer
    and from there to the GPU (the copy blocks this thread only)."""
    size = (store.shape[2], store.shape[1])
    if store.device.type == "cpu":
        target = store[index].numpy()
    else:
        buf = getattr(_staging, "image", None)
        if buf is None or buf.shape != store.shape[1:]:
            buf = _staging.image = torch.empty(store.shape[1:], dtype=torch.uint8, pin_memory=True)
        target = buf.numpy()
    if factor == 1:
        _check_size(frame, read_rgb_into(frame.image_path, target), size)
    else:
        target[...] = _decode(frame, size, factor)
    if store.device.type != "cpu":
        store[index].copy_(buf)  # synchronous: the buffer is free again when it returns


def range_image(points: np.ndarray,  # [N, 3] lidar frame
                intensity: np.ndarray,  # [N]
                channel: np.ndarray,  # [N] int
                lidar_model, channels: int, columns: int,
                device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The measured sweep as a range image ``[C, W]`` (nearest return per ray; 0: none) and its intensities."""
    r, i = range_images([_sweep_tensors(points, intensity, channel, device)], lidar_model, channels, columns)
    return r[0], i[0]


def _sweep_tensors(points, intensity, channel, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A sweep's points ``[N, 3]``, intensities ``[N]`` and channels ``[N]`` as tensors on ``device``."""
    return (torch.from_numpy(np.ascontiguousarray(points, dtype=np.float32)).to(device),
            torch.from_numpy(np.ascontiguousarray(intensity, dtype=np.float32)).to(device),
            torch.from_numpy(np.asarray(channel, dtype=np.int64)).to(device))


def range_images(sweeps: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],  # (points [N, 3], intensity [N], channel [N])
                 lidar_model, channels: int, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Several sweeps of one lidar as range images ``[S, C, W]`` and their intensities, in one pass
    (a sweep alone is a few small kernels: batching them keeps the GPU busy)."""
    device = sweeps[0][0].device
    counts = torch.tensor([len(sw[0]) for sw in sweeps], device=device)
    p = torch.cat([sw[0] for sw in sweeps]).double()
    ch = torch.cat([sw[2] for sw in sweeps])
    which = torch.repeat_interleave(torch.arange(len(sweeps), device=device), counts)
    az, _, rng = lidar_model.spherical(p)
    ok = (ch >= 0) & (ch < channels) & (rng >= lidar_model.min_range_m) & (rng <= lidar_model.max_range_m)
    # the column from the point's own channel's azimuth offset (the renderer's rays have them too)
    offset = torch.deg2rad(lidar_model.azimuth_offset_deg.to(device=device, dtype=torch.float64))
    turns = lidar_model.sign * (az - offset[ch.clamp(0, channels - 1)]
                                - math.radians(lidar_model.start_azimuth_deg)) / (2 * math.pi)
    col = torch.remainder(torch.round(turns * columns).long(), columns)
    flat = ((which * channels + ch) * columns + col)[ok]
    size = len(sweeps) * channels * columns
    best = torch.full((size,), float("inf"), dtype=torch.float64, device=device)
    best.scatter_reduce_(0, flat, rng[ok], reduce="amin")
    # the intensity of the point that gave the nearest range
    winner = rng[ok] <= best[flat]
    inten = torch.zeros(size, dtype=torch.float64, device=device)
    inten[flat[winner]] = torch.cat([sw[1] for sw in sweeps]).double()[ok][winner]
    best = torch.where(torch.isinf(best), torch.zeros_like(best), best)
    return best.view(-1, channels, columns).float(), inten.view(-1, channels, columns).float()


@dataclass
class SweepPoints:
    """A training sweep's points as read, kept for the initialisation (which places them in the world)."""

    points: torch.Tensor  # [N, 3] float32, lidar frame (every point of the file)
    intensity: torch.Tensor  # [N] float32, as recorded
    times_s: torch.Tensor  # [N] float64, each point's firing time, seconds since the capture start


class CaptureData:
    """The capture's frames and sweeps prepared for training on ``device``.

    ``images_on_device``: ``None`` keeps the images on the GPU when they take at most half of
    its free memory (else pinned host memory, copied per step); True / False force it.
    ``downscale``: train and evaluate on images shrunk by this integer factor (intrinsics
    scaled to match), for quick runs on slow machines. ``workers``: decoding threads (default:
    one per CPU core, at most 32). ``clock``: times the parts (a ``nurec_usd.util.profiling.StageClock``).
    ``lidar_keep``: ``(lidar id, points [N, 3] in its frame, a tensor) -> bool [N]``, the returns to use
    (``nurec_usd.train.ego``: not the ego vehicle's); the others are dropped, and rays whose
    only return was dropped are marked -1 in the range images (neither a return nor a miss).

    A sweep whose points all carry the sweep's timestamp was compensated to that instant by its
    source (DGP, nuScenes): its sensor is held at that pose over the revolution, where a raw
    sweep's moves with the rig.
    """

    def __init__(self, capture: Capture, device: torch.device | str, eval_every: int = 8,
                 images_on_device: bool | None = None, workers: int | None = None,
                 progress: Callable[[str], None] | None = None, downscale: int = 1,
                 clock: Callable[[str], Any] | None = None,
                 lidar_keep: KeepFn | None = None):
        if int(downscale) != downscale or downscale < 1:
            raise ValueError(f"downscale must be a positive integer, got {downscale!r}")
        self.capture = capture
        self.device = torch.device(device)
        self.eval_every = eval_every
        self.downscale = int(downscale)
        note = progress or (lambda _msg: None)
        part = clock or (lambda _name: contextlib.nullcontext())
        rig = capture.rig_trajectory()
        total_bytes = sum((c.width // downscale) * (c.height // downscale) * 3 * len(c.frames)
                          for c in capture.cameras.values())
        if images_on_device is None:
            images_on_device = self.device.type == "cuda" and \
                total_bytes <= 0.5 * torch.cuda.mem_get_info(self.device)[0]
        self.images_on_device = bool(images_on_device) or self.device.type != "cuda"
        self.cameras: list[CameraData] = []
        self.frames: list[FrameRef] = []
        self.lidars: list[LidarData] = []
        self.sweeps: list[SweepRef] = []
        # the training sweeps' points, by (lidar id, sweep index), until release_sweep_points()
        self.sweep_points: dict[tuple[str, int], SweepPoints] = {}
        self.nonfinite_points = self.nonfinite_sweeps = 0  # dropped when the sweeps were read
        self.lidar_keep = lidar_keep
        self.dropped_points = 0  # returns lidar_keep left out
        with part("cameras"):
            for ci, cam in enumerate(capture.cameras.values()):
                self.cameras.append(self._camera(cam, rig))  # before the decoding threads start: they slow the host
                for fi, frame in enumerate(cam.frames):
                    split = held_out(fi, eval_every, len(cam.frames)) if frame.held_out is None else frame.held_out
                    self.frames.append(FrameRef(ci, fi, float(capture.seconds(frame.timestamp_us)), split))
        # Every image of every camera is decoded in one pool, straight into its place; the
        # sweeps are read and turned into range images meanwhile.
        pool = ThreadPoolExecutor(max_workers=workers or default_workers(), thread_name_prefix="decode")
        try:
            if self.frames:
                note(f"decoding {len(self.frames)} images of {len(self.cameras)} cameras")
            decoded = [pool.submit(_decode_into, data.images, fi, frame, self.downscale)
                       for data, cam in zip(self.cameras, capture.cameras.values())
                       for fi, frame in enumerate(cam.frames)]
            with part("sweeps"):
                for li, (lidar_id, lidar) in enumerate(capture.lidars.items()):
                    note(f"reading {len(lidar.sweeps)} sweeps of lidar {lidar_id}")
                    self.lidars.append(self._lidar(lidar, rig))
                    for si, sweep in enumerate(lidar.sweeps):
                        self.sweeps.append(SweepRef(li, si, float(capture.seconds(sweep.timestamp_us)),
                                                    held_out(si, eval_every, len(lidar.sweeps))))
            with part("images (after the sweeps)"):
                for job in decoded:
                    job.result()  # re-raises a failed decode, naming its file
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        self.intensity_scale = self._normalise_intensities()
        self.train_frames = [f for f in self.frames if not f.held_out]
        self.eval_frames = [f for f in self.frames if f.held_out]
        self.train_sweeps = [s for s in self.sweeps if not s.held_out]
        self.eval_sweeps = [s for s in self.sweeps if s.held_out]
        self.eval_groups = self.groups(self.eval_frames)
        self._levels: dict[tuple[int, int], tuple] = {}  # (camera, level) -> its geometry at that level
        self._views: dict[tuple[FrameGroup, int], CameraViews] = {}

    # -- building ----------------------------------------------------------------------------

    def _camera(self, cam, rig: PoseTrajectory) -> CameraData:
        """The camera's geometry, poses and masks, with room for its images (decoded by the caller)."""
        dev = self.device
        t0 = torch.as_tensor(self.capture.seconds(cam.timestamps_us))
        readout = cam.rolling_shutter.readout_time_s if cam.rolling_shutter.direction != "global" else 0.0
        T_rig_cam = torch.as_tensor(cam.T_rig_camera, dtype=torch.float64)
        T_wc0 = rig.at(t0) @ T_rig_cam  # [F, 4, 4] T_world_camera at the first line
        q0, p0, q1, p1 = sensor_poses(T_wc0, rig.at(t0 + readout) @ T_rig_cam)
        k = self.downscale
        geometry = camera_geometry(cam.model, cam.width, cam.height, cam.intrinsics, cam.rolling_shutter.direction,
                                   dev, k)
        width, height = geometry.width, geometry.height
        masks = None
        if any(f.mask_path is not None for f in cam.frames):
            full = [f.load_mask() if f.mask_path is not None else np.ones((cam.height, cam.width), bool)
                    for f in cam.frames]
            # a shrunk pixel counts only when all of the pixels it covers do
            masks = torch.from_numpy(np.stack([m[:height * k, :width * k].reshape(height, k, width, k).all((1, 3))
                                               for m in full]))
            masks = masks.to(dev)
        f32 = lambda t: t.to(device=dev, dtype=torch.float32).contiguous()  # noqa: E731
        images = _new_image_store(len(cam.frames), (width, height), dev, self.images_on_device)
        return CameraData(cam.id, width, height, geometry.template, cam.rolling_shutter.direction, geometry.rays,
                          f32(q0), f32(p0), f32(q1), f32(p1), f32(T_wc0[:, :3, :3]),
                          f32(t0 + readout / 2), images, masks, geometry.lens)

    def _lidar(self, lidar, rig: PoseTrajectory) -> LidarData:
        dev = self.device
        t0 = torch.as_tensor(self.capture.seconds(lidar.timestamps_us))
        period = 1.0 / lidar.scan_rate_hz
        T_rig_lidar = torch.as_tensor(lidar.T_rig_lidar, dtype=torch.float64)
        q0, p0, q1, p1 = sensor_poses(rig.at(t0) @ T_rig_lidar, rig.at(t0 + period) @ T_rig_lidar)
        model = lidar.sensor_model(dtype=torch.float64, device=dev)
        template = LidarBatch.from_model(model, torch.eye(4, dtype=torch.float32, device=dev))
        ranges, intens, batch, dropped = [], [], [], []
        compensated = torch.zeros(len(lidar.sweeps), dtype=torch.bool)

        def flush() -> None:
            r, it = range_images(batch, model, lidar.channels, lidar.columns)
            if any(d is not None for d in dropped):  # rays whose only return was dropped: -1, left out
                empty = tuple(a[:0] for a in batch[0])
                blocked, _ = range_images([d if d is not None else empty for d in dropped], model,
                                          lidar.channels, lidar.columns)
                r = torch.where((r == 0) & (blocked > 0), torch.full_like(r, -1.0), r)
            ranges.append(r)
            intens.append(it)
            batch.clear()
            dropped.clear()

        def read(si: int):  # in a read-ahead thread: the file onto the device
            return read_columns(lidar, si, dev)

        for si, columns in enumerate(prefetched(read, range(len(lidar.sweeps)), workers=6, depth=12)):
            sweep = checked_sweep(columns, lidar, si, self.lidar_keep, self.capture.start_us)
            self.nonfinite_points += sweep.nonfinite
            self.nonfinite_sweeps += int(sweep.nonfinite > 0)
            compensated[si] = sweep.compensated
            batch.append((sweep.points, sweep.intensity, sweep.channel))
            dropped.append(sweep.dropped)
            if sweep.dropped is not None:
                self.dropped_points += len(sweep.dropped[0])
            if not held_out(si, self.eval_every, len(lidar.sweeps)):  # the initialisation reads them again otherwise
                self.sweep_points[(lidar.id, si)] = SweepPoints(sweep.points, sweep.intensity, sweep.times_s)
            if len(batch) == RANGE_IMAGE_BATCH:
                flush()
        if batch:
            flush()
        # compensated sweeps: the sensor stays at the sweep's pose (its points are relative to it)
        held = compensated[:, None].to(q0.device)
        q1, p1 = torch.where(held, q0, q1), torch.where(held, p0, p1)
        f32 = lambda t: t.to(device=dev, dtype=torch.float32).contiguous()  # noqa: E731
        return LidarData(lidar.id, template, f32(q0), f32(p0), f32(q1), f32(p1), f32(t0 + period / 2),
                         f32(torch.cat(ranges)), f32(torch.cat(intens)))

    def _normalise_intensities(self) -> float:
        """Divide measured intensities by the 99th percentile of the training sweeps' returns
        (clamped to [0, 1]): captures store 0..1, 0..255 or raw counts. Returns the scale."""
        values = [lid.intensities[s.sweep][lid.ranges[s.sweep] > 0]
                  for s in self.sweeps if not s.held_out for lid in [self.lidars[s.lidar]]]
        values = torch.cat(values) if values else torch.zeros(0)
        if values.numel() == 0:
            return 1.0
        sample = values[:: max(1, values.numel() // 1_000_000)].float()  # quantile's input limit
        scale = float(torch.quantile(sample, 0.99))
        scale = scale if scale > 0 else 1.0
        for lid in self.lidars:
            lid.intensities = (lid.intensities / scale).clamp(0, 1).contiguous()
        return scale

    def training_ranges(self) -> list[SweepRanges]:
        """Each lidar's training sweeps as range images with their poses (the lidar's own tensors,
        the training sweeps picked by ``use``): what ``nurec_usd.scene.free_space`` judges points against."""
        out = []
        for li, lidar in enumerate(self.lidars):
            train = torch.tensor([s.sweep for s in self.train_sweeps if s.lidar == li], dtype=torch.long,
                                 device=lidar.ranges.device)
            if train.numel():
                out.append(SweepRanges(self.capture.lidars[lidar.id].sensor_model(torch.float64, self.device),
                                       lidar.rot_start, lidar.trans_start, lidar.rot_end, lidar.trans_end,
                                       lidar.ranges, use=train))
        return out

    def release_sweep_points(self) -> None:
        """Drop the training sweeps' points (the initialisation's input; training uses range images)."""
        self.sweep_points = {}

    # -- per step ---------------------------------------------------------------------------

    def camera_view(self, ref: FrameRef) -> CameraView:
        """The view of one frame (tensor views only: no host sync, no copies)."""
        cam = self.cameras[ref.camera]
        f = ref.frame
        batch = dataclasses.replace(cam.template, rot_start=cam.rot_start[f:f + 1], trans_start=cam.trans_start[f:f + 1],
                                    rot_end=cam.rot_end[f:f + 1], trans_end=cam.trans_end[f:f + 1])
        return CameraView(batch, ref.camera, cam.mid_times[f], cam.R_world_camera[f], cam.rays, cam.lens)

    def groups(self, frames: Sequence[FrameRef], max_cameras: int = 0) -> list[FrameGroup]:
        """``frames`` in groups of frames recorded together (``group_frames``), at most
        ``max_cameras`` in a group (0: no limit)."""
        return group_frames(frames, [(c.width, c.height) for c in self.cameras], max_cameras)

    def _level(self, camera: int, level: int) -> tuple[CameraBatch, torch.Tensor, torch.Tensor | None]:
        """A camera's one-camera template, rays ``[H, W, 3]`` and lens mask at ``level`` (images
        shrunk ``level`` times more than the stored ones)."""
        key = (camera, level)
        if key not in self._levels:
            cam = self.cameras[camera]
            if level == 1:
                self._levels[key] = (cam.template, cam.rays, cam.lens)
            else:
                src = self.capture.cameras[cam.id]
                g = camera_geometry(src.model, src.width, src.height, src.intrinsics, cam.shutter, self.device,
                                    self.downscale * level)
                self._levels[key] = (g.template, g.rays, g.lens)
        return self._levels[key]

    def camera_views(self, group: FrameGroup, level: int = 1) -> CameraViews:
        """The group's frames as one batch, images shrunk ``level`` times (1: as stored).
        Built once per (group, level) and kept: a step only looks it up."""
        key = (group, level)
        views = self._views.get(key)
        if views is not None:
            return views
        parts = [self._level(ref.camera, level) for ref in group.frames]
        templates = [p[0] for p in parts]

        def stack(per_frame) -> torch.Tensor:
            return torch.cat([per_frame(self.cameras[ref.camera], ref.frame) for ref in group.frames]).contiguous()

        batch = dataclasses.replace(
            templates[0], model=torch.cat([t.model for t in templates]), params=torch.cat([t.params for t in templates]),
            shutter=torch.cat([t.shutter for t in templates]),
            rot_start=stack(lambda c, f: c.rot_start[f:f + 1]), trans_start=stack(lambda c, f: c.trans_start[f:f + 1]),
            rot_end=stack(lambda c, f: c.rot_end[f:f + 1]), trans_end=stack(lambda c, f: c.trans_end[f:f + 1]),
            pinhole_global=all(t.pinhole_global for t in templates))
        lenses = [p[2] for p in parts]
        lens = None if all(m is None for m in lenses) else torch.stack(
            [m if m is not None else torch.ones_like(parts[0][1][..., 0], dtype=torch.bool) for m in lenses])
        views = CameraViews(
            batch=batch,
            camera_indices=torch.tensor([ref.camera for ref in group.frames], dtype=torch.long, device=self.device),
            time=stack(lambda c, f: c.mid_times[f:f + 1]).mean(),
            R_world_camera=stack(lambda c, f: c.R_world_camera[f:f + 1]),
            rays_camera=torch.stack([p[1] for p in parts]), lens=lens)
        self._views[key] = views
        return views

    def target_images(self, group: FrameGroup, level: int = 1) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The group's images as float in [0, 1] ``[C, H, W, 3]`` on the device (shrunk ``level``
        times by averaging, as the loader shrinks them), and their masks ``[C, H, W]`` or None."""
        images = [self.cameras[ref.camera].images[ref.frame] for ref in group.frames]
        img = torch.stack(images).to(self.device, non_blocking=True).float() / 255.0  # [C, H, W, 3]
        if level > 1:
            img = torch.nn.functional.avg_pool2d(img.permute(0, 3, 1, 2), level).permute(0, 2, 3, 1).contiguous()
        masks = [self.cameras[ref.camera].masks for ref in group.frames]
        if all(m is None for m in masks):
            return img, None
        # a camera without masks gets an all-true one of its stored size (odd sizes do not halve exactly)
        mask = torch.stack([m[ref.frame] if m is not None else torch.ones(stored.shape[:2], dtype=torch.bool,
                                                                           device=self.device)
                            for m, ref, stored in zip(masks, group.frames, images)])
        if level > 1:  # a shrunk pixel counts only when all of the pixels it covers do
            c, h, w = img.shape[:3]
            mask = mask[:, :h * level, :w * level].reshape(c, h, level, w, level).all(4).all(2)
        return img, mask

    def target_image(self, ref: FrameRef) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The frame's image as float in [0, 1] ``[H, W, 3]`` on the device, and its mask ``[H, W]`` or None."""
        cam = self.cameras[ref.camera]
        img = cam.images[ref.frame].to(self.device, non_blocking=True).float() / 255.0
        mask = None if cam.masks is None else cam.masks[ref.frame]
        return img, mask

    def lidar_batch(self, ref: SweepRef) -> tuple[LidarBatch, torch.Tensor]:
        """The sweep's ``LidarBatch`` and the time its actors are placed at ([] on the device)."""
        lid = self.lidars[ref.lidar]
        s = ref.sweep
        batch = dataclasses.replace(lid.template, rot_start=lid.rot_start[s:s + 1], trans_start=lid.trans_start[s:s + 1],
                                    rot_end=lid.rot_end[s:s + 1], trans_end=lid.trans_end[s:s + 1])
        return batch, lid.mid_times[s]

    def lidar_target(self, ref: SweepRef) -> tuple[torch.Tensor, torch.Tensor]:
        """Measured ranges and intensities of the sweep, ``[C, W]`` each (0: no return)."""
        lid = self.lidars[ref.lidar]
        return lid.ranges[ref.sweep], lid.intensities[ref.sweep]

    def image_of(self, camera_id: str, frame: int) -> torch.Tensor:
        """A frame's decoded image, uint8 ``[H, W, 3]``, where the images are kept (shrunk by
        ``downscale``); the signature of ``nurec_usd.scene.init.ImageSource``."""
        return self._camera_named(camera_id).images[frame]

    def _camera_named(self, camera_id: str) -> CameraData:
        cam = next((cam for cam in self.cameras if cam.id == camera_id), None)
        if cam is None:
            raise KeyError(f"no camera {camera_id!r} in this capture (cameras: {[c.id for c in self.cameras]})")
        return cam

    def mask_of(self, camera_id: str, frame: int) -> torch.Tensor | None:
        """A frame's mask, bool ``[H, W]`` at the images' size (True where a pixel counts), or None
        when all of its pixels do; the signature of ``nurec_usd.scene.init.MaskSource``."""
        masks = self._camera_named(camera_id).masks
        return None if masks is None else masks[frame]

    def mean_colors(self) -> torch.Tensor:
        """Per camera, the mean colour of its training frames (the mean-colour baseline). Returns ``[C, 3]``."""
        out = []
        for ci, cam in enumerate(self.cameras):
            idx = [f.frame for f in self.train_frames if f.camera == ci]
            total = torch.zeros(3, dtype=torch.float64, device=self.device)
            for k in range(0, len(idx), 32):  # a few frames at a time: all of them as floats may not fit
                chunk = cam.images[idx[k:k + 32]].to(self.device)
                total += chunk.double().mean(dim=(1, 2)).sum(0) / 255.0
            out.append(total / len(idx) if idx else torch.full((3,), 0.5, dtype=torch.float64, device=self.device))
        return torch.stack(out).float()
