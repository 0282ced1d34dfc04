"""A capture laid out for training: frames and sweeps on the device, split into train and held-out.

Everything a training step needs is prepared once here, so that a step is only device work:
per camera a one-camera ``CameraBatch`` template and the poses of every frame over its
readout; images decoded once and kept as uint8 (on the GPU when they fit); per lidar a
``LidarBatch`` template, the poses of every sweep and its measured range image.

Held-out data: frames and sweeps whose index (per sensor, in time order) satisfies
``index % eval_every == eval_every // 2`` are never trained on. Cameras and lidars sampled at
the same rate therefore hold out the same instants.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from nurec_usd.capture.model import Capture
from nurec_usd.capture.prefetch import default_workers, prefetched
from nurec_usd.render.camera import CameraBatch
from nurec_usd.render.lidar import LidarBatch
from nurec_usd.scene.render import CameraView
from nurec_usd.scene.views import camera_geometry, sensor_poses
from nurec_usd.sensors.se3 import PoseTrajectory


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
    ranges: torch.Tensor  # [S, C, W] measured range per ray, 0 where there was no return
    intensities: torch.Tensor  # [S, C, W] measured intensity, 0 where there was no return


def held_out(index: int, eval_every: int) -> bool:
    """Whether the index-th frame or sweep of a sensor is held out (0 disables holding out)."""
    return eval_every > 0 and index % eval_every == eval_every // 2


def _decode(frame, size: tuple[int, int], factor: int) -> np.ndarray:
    """One frame as uint8 ``[H, W, 3]``, shrunk by ``factor`` (``size``: its (W, H) after that)."""
    from nurec_usd.capture.images import read_rgb

    img = read_rgb(frame.image_path, factor)
    if img.shape != (size[1], size[0], 3):
        raise ValueError(f"{frame.image_path}: decoded to {img.shape[1]}x{img.shape[0]} pixels, expected "
                         f"{size[0]}x{size[1]} (the camera's width x height, divided by the downscale factor)")
    return img


def _new_image_store(frames: int, size: tuple[int, int], device: torch.device, on_device: bool) -> torch.Tensor:
    """Room for a camera's images: ``[F, H, W, 3]`` uint8 on the GPU, in pinned host memory, or on the CPU."""
    shape = (frames, size[1], size[0], 3)
    if device.type != "cuda":
        return torch.empty(shape, dtype=torch.uint8)
    if on_device:
        return torch.empty(shape, dtype=torch.uint8, device=device)
    return torch.empty(shape, dtype=torch.uint8, pin_memory=True)


_staging = threading.local()  # per decoding thread: a pinned host image on its way to the GPU


def _decode_into(store: torch.Tensor, index: int, frame, factor: int) -> None:
    """Decode one frame straight into its slot of the store (a copy to the GPU blocks this thread only)."""
    img = _decode(frame, (store.shape[2], store.shape[1]), factor)  # read-only: PIL's buffer
    if store.device.type == "cpu":
        store[index].numpy()[...] = img
        return
    buf = getattr(_staging, "image", None)
    if buf is None or buf.shape != img.shape:
        buf = _staging.image = torch.empty(img.shape, dtype=torch.uint8, pin_memory=True)
    buf.numpy()[...] = img
    store[index].copy_(buf)  # synchronous: the buffer is free again when it returns


def range_image(points: np.ndarray,  # [N, 3] lidar frame
                intensity: np.ndarray,  # [N]
                channel: np.ndarray,  # [N] int
                lidar_model, channels: int, columns: int,
                device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The measured sweep as a range image ``[C, W]`` (nearest return per ray; 0: none) and its intensities."""
    p = torch.from_numpy(np.ascontiguousarray(points, dtype=np.float64)).to(device)
    az, _, rng = lidar_model.spherical(p)
    ch = torch.from_numpy(np.asarray(channel, dtype=np.int64)).to(device)
    ok = (ch >= 0) & (ch < channels) & (rng >= lidar_model.min_range_m) & (rng <= lidar_model.max_range_m)
    # the column from the point's own channel's azimuth offset (the renderer's rays have them too)
    offset = torch.deg2rad(lidar_model.azimuth_offset_deg.to(device=device, dtype=torch.float64))
    turns = lidar_model.sign * (az - offset[ch.clamp(0, channels - 1)]
                                - math.radians(lidar_model.start_azimuth_deg)) / (2 * math.pi)
    col = torch.remainder(torch.round(turns * columns).long(), columns)
    flat = (ch * columns + col)[ok]
    best = torch.full((channels * columns,), float("inf"), dtype=torch.float64, device=device)
    best.scatter_reduce_(0, flat, rng[ok], reduce="amin")
    # the intensity of the point that gave the nearest range
    winner = rng[ok] <= best[flat]
    inten = torch.zeros(channels * columns, dtype=torch.float64, device=device)
    inten[flat[winner]] = torch.from_numpy(np.asarray(intensity, dtype=np.float64)).to(device)[ok][winner]
    best = torch.where(torch.isinf(best), torch.zeros_like(best), best)
    return best.view(channels, columns).float(), inten.view(channels, columns).float()


class CaptureData:
    """The capture's frames and sweeps prepared for training on ``device``.

    ``images_on_device``: ``None`` keeps the images on the GPU when they take at most half of
    its free memory (else pinned host memory, copied per step); True / False force it.
    ``downscale``: train and evaluate on images shrunk by this integer factor (intrinsics
    scaled to match), for quick runs on slow machines. ``workers``: decoding threads (default:
    one per CPU core, at most 32).
    """

    def __init__(self, capture: Capture, device: torch.device | str, eval_every: int = 8,
                 images_on_device: bool | None = None, workers: int | None = None,
                 progress: Callable[[str], None] | None = None, downscale: int = 1):
        if int(downscale) != downscale or downscale < 1:
            raise ValueError(f"downscale must be a positive integer, got {downscale!r}")
        self.capture = capture
        self.device = torch.device(device)
        self.eval_every = eval_every
        self.downscale = int(downscale)
        note = progress or (lambda _msg: None)
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
        self.nonfinite_points = self.nonfinite_sweeps = 0  # dropped when the sweeps were read
        for ci, cam in enumerate(capture.cameras.values()):
            self.cameras.append(self._camera(cam, rig))  # before the decoding threads start: they slow the host
            for fi, frame in enumerate(cam.frames):
                self.frames.append(FrameRef(ci, fi, float(capture.seconds(frame.timestamp_us)),
                                            held_out(fi, eval_every)))
        # Every image of every camera is decoded in one pool, straight into its place; the
        # sweeps are read and turned into range images meanwhile.
        pool = ThreadPoolExecutor(max_workers=workers or default_workers(), thread_name_prefix="decode")
        try:
            if self.frames:
                note(f"decoding {len(self.frames)} images of {len(self.cameras)} cameras")
            decoded = [pool.submit(_decode_into, data.images, fi, frame, self.downscale)
                       for data, cam in zip(self.cameras, capture.cameras.values())
                       for fi, frame in enumerate(cam.frames)]
            for li, (lidar_id, lidar) in enumerate(capture.lidars.items()):
                note(f"reading {len(lidar.sweeps)} sweeps of lidar {lidar_id}")
                self.lidars.append(self._lidar(lidar, rig))
                for si, sweep in enumerate(lidar.sweeps):
                    self.sweeps.append(SweepRef(li, si, float(capture.seconds(sweep.timestamp_us)),
                                                held_out(si, eval_every)))
            for job in decoded:
                job.result()  # re-raises a failed decode, naming its file
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        self.intensity_scale = self._normalise_intensities()
        self.train_frames = [f for f in self.frames if not f.held_out]
        self.eval_frames = [f for f in self.frames if f.held_out]
        self.train_sweeps = [s for s in self.sweeps if not s.held_out]
        self.eval_sweeps = [s for s in self.sweeps if s.held_out]

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
        ranges, intens = [], []
        for sweep in prefetched(lidar.load_sweep, range(len(lidar.sweeps))):
            self.nonfinite_points += sweep.dropped_nonfinite
            self.nonfinite_sweeps += int(sweep.dropped_nonfinite > 0)
            r, it = range_image(sweep.points, sweep.intensity, sweep.channel, model, lidar.channels, lidar.columns,
                                dev)
            ranges.append(r)
            intens.append(it)
        f32 = lambda t: t.to(device=dev, dtype=torch.float32).contiguous()  # noqa: E731
        return LidarData(lidar.id, template, f32(q0), f32(p0), f32(q1), f32(p1), f32(t0 + period / 2),
                         f32(torch.stack(ranges)), f32(torch.stack(intens)))

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

    # -- per step ---------------------------------------------------------------------------

    def camera_view(self, ref: FrameRef) -> CameraView:
        """The view of one frame (tensor views only: no host sync, no copies)."""
        cam = self.cameras[ref.camera]
        f = ref.frame
        batch = dataclasses.replace(cam.template, rot_start=cam.rot_start[f:f + 1], trans_start=cam.trans_start[f:f + 1],
                                    rot_end=cam.rot_end[f:f + 1], trans_end=cam.trans_end[f:f + 1])
        return CameraView(batch, ref.camera, cam.mid_times[f], cam.R_world_camera[f], cam.rays, cam.lens)

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
        index = next((i for i, cam in enumerate(self.cameras) if cam.id == camera_id), None)
        if index is None:
            raise KeyError(f"no camera {camera_id!r} in this capture (cameras: {[c.id for c in self.cameras]})")
        return self.cameras[index].images[frame]

    def mean_colors(self) -> torch.Tensor:
        """Per camera, the mean colour of its training frames (the mean-colour baseline). Returns ``[C, 3]``."""
        out = []
        for ci, cam in enumerate(self.cameras):
            idx = [f.frame for f in self.train_frames if f.camera == ci]
            total = torch.zeros(3, dtype=torch.float64, device=self.device)
            for i in idx:  # one frame at a time: all of them as floats may not fit
                total += cam.images[i].to(self.device).double().mean(dim=(0, 1)) / 255.0
            out.append(total / len(idx) if idx else torch.full((3,), 0.5, dtype=torch.float64, device=self.device))
        return torch.stack(out).float()
