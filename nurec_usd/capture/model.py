"""The in-memory capture: typed, documented dataclasses, filled by the loader or an importer.

Arrays are numpy, float64 for poses (they are composed many times before they reach
float32 on the GPU). Images and sweeps are not held in memory: each frame and sweep
knows its file and decodes it on demand (``CameraFrame.load_image``,
``LidarSweepFile.load``), so large captures load quickly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nurec_usd.capture.images import read_mask, read_rgb
from nurec_usd.capture.sweep_io import LidarSweep, checked_sweep, read_sweep

if TYPE_CHECKING:  # torch is only needed to build sensor models
    import torch

    from nurec_usd.sensors.cameras import CameraModel
    from nurec_usd.sensors.lidar import SpinningLidarModel
    from nurec_usd.sensors.se3 import PoseTrajectory

CAMERA_MODELS = ("pinhole", "opencv", "opencv_fisheye", "ftheta")
ROLLING_SHUTTER_DIRECTIONS = ("global", "top_to_bottom", "bottom_to_top", "left_to_right", "right_to_left")
LIDAR_ROTATIONS = ("clockwise", "counterclockwise")


@dataclass(frozen=True)
class RollingShutter:
    """How a camera reads its lines out.

    A frame's timestamp is the time of the first line in readout order; the last line
    is read ``readout_time_us`` later. ``direction == "global"`` means all lines at once.
    """

    direction: str
    readout_time_us: int

    @property
    def readout_time_s(self) -> float:
        return self.readout_time_us * 1e-6


@dataclass(frozen=True)
class CameraFrame:
    """One image of one camera. ``timestamp_us`` is the capture time of the first line read.

    ``held_out``: the dataset's own train / test split where it has one (an importer sets it:
    True = a test frame, never trained on; False = a training frame); None leaves the choice
    to the build's held-out rule (``nurec_usd.train.data.held_out``).
    """

    timestamp_us: int
    image_path: Path
    mask_path: Path | None = None
    held_out: bool | None = None

    def load_image(self) -> np.ndarray:
        """Decode the image as RGB. Returns uint8 ``[H, W, 3]``."""
        return read_rgb(self.image_path)

    def load_mask(self) -> np.ndarray | None:
        """Decode the mask, ``True`` where the pixel is to be used. Returns bool ``[H, W]`` or None."""
        if self.mask_path is None:
            return None

        return read_mask(self.mask_path)


@dataclass(frozen=True)
class Camera:
    """A camera of the rig: its model, intrinsics, mounting and frames.

    ``intrinsics`` holds the model's parameters by name (see docs/capture-format.md):
    pinhole ``fx fy cx cy``; opencv adds ``k1 k2 p1 p2 [k3 k4 k5 k6]``; opencv_fisheye
    ``fx fy cx cy k1 k2 k3 k4``; ftheta ``cx cy angle_to_pixel max_fov_deg``.
    Pixel coordinates follow OpenCV: the centre of the top-left pixel is (0, 0).
    """

    id: str
    model: str
    width: int
    height: int
    intrinsics: dict[str, Any]
    T_rig_camera: np.ndarray  # [4, 4] float64, camera (OpenCV axes) -> rig
    rolling_shutter: RollingShutter
    frames: tuple[CameraFrame, ...]

    @property
    def timestamps_us(self) -> np.ndarray:
        """Frame timestamps. Returns int64 ``[F]``."""
        return np.array([f.timestamp_us for f in self.frames], dtype=np.int64)

    def sensor_model(self, dtype: "torch.dtype | None" = None, device: "torch.device | str | None" = None) -> "CameraModel":
        """The differentiable torch camera model (project / unproject) of this camera."""
        import torch

        from nurec_usd.sensors.cameras import camera_model

        return camera_model(self.model, self.width, self.height, self.intrinsics,
                            dtype=dtype or torch.float32, device=device)


@dataclass(frozen=True)
class LidarSweepFile:
    """One sweep on disk. ``timestamp_us`` is the start of the sweep (column 0 fires)."""

    timestamp_us: int
    path: Path


@dataclass(frozen=True)
class Lidar:
    """A spinning lidar of the rig and its sweeps.

    Column ``k`` of a sweep fires ``k / (columns * scan_rate_hz)`` seconds after the sweep
    starts, at azimuth ``start_azimuth_deg ± 360 k / columns`` (+ counterclockwise, -
    clockwise, seen from above); channel ``c`` adds ``azimuth_offset_deg[c]`` and looks
    up at ``elevation_deg[c]``. Azimuth is measured from +x toward +y.
    """

    id: str
    T_rig_lidar: np.ndarray  # [4, 4] float64, lidar -> rig
    elevation_deg: np.ndarray  # [C] float64
    azimuth_offset_deg: np.ndarray  # [C] float64
    columns: int
    rotation: str
    scan_rate_hz: float
    start_azimuth_deg: float
    min_range_m: float
    max_range_m: float
    sweeps: tuple[LidarSweepFile, ...]
    # the rig poses' time range (us): a sweep whose points lie outside it is refused when read
    time_range_us: tuple[int, int] | None = None

    @property
    def channels(self) -> int:
        return int(self.elevation_deg.shape[0])

    @property
    def sweep_duration_us(self) -> int:
        return int(round(1e6 / self.scan_rate_hz))

    @property
    def timestamps_us(self) -> np.ndarray:
        """Sweep start times. Returns int64 ``[S]``."""
        return np.array([s.timestamp_us for s in self.sweeps], dtype=np.int64)

    def load_sweep(self, index: int) -> LidarSweep:
        """Read sweep ``index`` (``.nrl`` binary, or ``.ply`` / ``.pcd`` through open3d), checked.

        Point clouds without per-point times or channels get them from this lidar's
        spinning model (the column each point falls in, the nearest channel elevation).
        Points with non-finite coordinates are dropped (counted in ``dropped_nonfinite``);
        channels outside the table, non-finite intensities and point times outside
        ``time_range_us`` raise ``SweepFormatError`` naming the file and field, as ``validate`` reports them.
        """
        sweep = self.sweeps[index]
        return checked_sweep(sweep.path, read_sweep(sweep.path, sweep.timestamp_us, self), self.channels,
                             self.time_range_us)

    def sensor_model(self, dtype: "torch.dtype | None" = None, device: "torch.device | str | None" = None) -> "SpinningLidarModel":
        """The torch spinning-lidar model (ray directions, firing times) of this lidar."""
        import torch

        from nurec_usd.sensors.lidar import SpinningLidarModel

        return SpinningLidarModel(
            elevation_deg=self.elevation_deg.tolist(),
            azimuth_offset_deg=self.azimuth_offset_deg.tolist(),
            columns=self.columns,
            rotation=self.rotation,
            scan_rate_hz=self.scan_rate_hz,
            start_azimuth_deg=self.start_azimuth_deg,
            min_range_m=self.min_range_m,
            max_range_m=self.max_range_m,
            dtype=dtype or torch.float32,
            device=device,
        )


@dataclass(frozen=True)
class RigTrajectory:
    """Rig poses over time."""

    timestamps_us: np.ndarray  # [K] int64, strictly increasing
    T_world_rig: np.ndarray  # [K, 4, 4] float64, rig -> world


@dataclass(frozen=True)
class Track:
    """A tracked (dynamic) actor: its class, box size and box poses over time.

    The box frame has its origin at the box centre, x along the length (forward),
    y along the width (left), z up.
    """

    id: str
    label: str
    size_m: np.ndarray  # [3] float64: length, width, height
    timestamps_us: np.ndarray  # [K] int64, strictly increasing
    T_world_box: np.ndarray  # [K, 4, 4] float64, box -> world


@dataclass(frozen=True)
class Capture:
    """A whole capture, as the rest of nurec_usd sees it.

    World coordinates are re-centred on load so that the first rig pose sits at the
    origin (keeps float32 small); ``world_offset_m`` is where that origin lies in the
    coordinates the capture was written in. The world keeps its orientation (Z up).
    """

    root: Path
    name: str
    rig: RigTrajectory
    cameras: dict[str, Camera]
    lidars: dict[str, Lidar]
    tracks: dict[str, Track]
    world_offset_m: np.ndarray  # [3] float64
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def start_us(self) -> int:
        """The capture's time origin: the first rig pose."""
        return int(self.rig.timestamps_us[0])

    @property
    def end_us(self) -> int:
        return int(self.rig.timestamps_us[-1])

    @property
    def duration_s(self) -> float:
        return (self.end_us - self.start_us) * 1e-6

    def rig_trajectory(self, device: "torch.device | str | None" = None) -> "PoseTrajectory":
        """``T_world_rig(t)`` for t in seconds since the capture start (slerp + lerp between the rig poses)."""
        import torch

        from nurec_usd.sensors.se3 import PoseTrajectory

        return PoseTrajectory(torch.as_tensor(self.seconds(self.rig.timestamps_us), device=device),
                              torch.as_tensor(self.rig.T_world_rig, dtype=torch.float64, device=device))

    def seconds(self, timestamps_us: np.ndarray | int) -> np.ndarray:
        """Microsecond timestamps to float seconds since the capture start. ``[...]`` -> ``[...]`` float64."""
        return (np.asarray(timestamps_us, dtype=np.int64) - self.start_us) * 1e-6
