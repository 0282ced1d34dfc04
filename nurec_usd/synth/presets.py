"""Presets of the synthetic generator: sensors, duration, traffic and image settings.

``tiny`` is CI-sized (its output is the bundled sample), ``small`` is for local experiments,
``drive30`` is the 30-second benchmark capture (6 x 1280x720 cameras, a 128 x 2048 lidar).
Every camera model of the capture format appears across the presets (``drive30`` alone has
all four).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

T0_US = 1_700_000_000_000_000  # absolute capture start, as real logs have
# The capture's world is a local ENU-like frame shifted by this offset (like UTM coordinates);
# the loader re-centres on the first rig pose, so loaded coordinates equal the generator's.
WORLD_OFFSET_M = (512_340.25, 4_141_872.5, 18.75)


@dataclass(frozen=True)
class CameraSpec:
    """One camera of the rig: model and intrinsics, mounting, rolling shutter, exposure."""

    id: str
    model: str
    width: int
    height: int
    intrinsics: dict[str, Any]
    yaw_deg: float  # about rig +z, 0 = looking forward (+x), 90 = left
    pitch_deg: float  # positive looks down
    position: tuple[float, float, float]  # in the rig frame (origin on the ground under the rear axle)
    shutter: str = "global"
    readout_us: int = 0
    exposure: float = 1.0  # relative gain; cameras differ as real auto-exposure does
    white_balance: tuple[float, float, float] = (1.0, 1.0, 1.0)
    vignette: float = 0.25


@dataclass(frozen=True)
class LidarSpec:
    """A spinning lidar: channel layout, columns, range limits and noise."""

    id: str
    channels: int
    columns: int
    elevation_min_deg: float
    elevation_max_deg: float
    dense_elevation_deg: float  # channels bunch up around this elevation (near the horizon)
    position: tuple[float, float, float]
    scan_rate_hz: float = 10.0
    min_range_m: float = 0.8
    max_range_m: float = 120.0
    range_noise_m: float = 0.02
    start_azimuth_deg: float = 180.0
    rotation: str = "clockwise"
    stagger_deg: float = 0.8  # per-channel azimuth offsets alternate +- this much / 2

    def elevations_deg(self) -> list[float]:
        """Channel elevations, bottom to top, denser near ``dense_elevation_deg``."""
        c = self.channels
        lo, hi, mid = self.elevation_min_deg, self.elevation_max_deg, self.dense_elevation_deg
        out = []
        for i in range(c):
            x = -1.0 + 2.0 * i / (c - 1)  # [-1, 1]
            span = (mid - lo) if x < 0 else (hi - mid)
            out.append(round(mid + math.copysign(abs(x) ** 1.7, x) * span, 4))
        return out

    def azimuth_offsets_deg(self) -> list[float]:
        """Per-channel azimuth offsets (real multi-laser heads stagger their emitters)."""
        return [round((0.5 if i % 2 == 0 else -0.5) * self.stagger_deg, 4) for i in range(self.channels)]


@dataclass(frozen=True)
class Preset:
    """Everything that sizes one synthetic capture."""

    name: str
    description: str
    frames: int  # camera frames and lidar sweeps, at ``rate_hz``
    cameras: tuple[CameraSpec, ...]
    lidar: LidarSpec
    rate_hz: float = 10.0
    key_rate_hz: float = 20.0  # rig and track poses are written at this rate
    ego_speeds: tuple[tuple[float, float], ...] = ((0.0, 9.0), (1.0, 10.0))  # (fraction of duration, m/s)
    # traffic: roles of the moving actors (see nurec_usd.synth.traffic)
    roles: tuple[str, ...] = ()
    role_times: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # start/end overrides (s)
    crossing_at: float = 0.5  # the ego passes the crossing at this fraction of the duration
    crossing_ahead_m: float | None = None  # or: the crossing lies this far ahead of the ego's start
    image_format: str = "png"
    spp: int = 1  # samples per pixel: 1 (centre) or 5 (centre + rotated grid)
    frame_batch: int = 16  # frames per camera launch

    @property
    def duration_s(self) -> float:
        """Time span of the frames and sweeps (the last sweep ends one period after the last frame)."""
        return self.frames / self.rate_hz


# -- intrinsics helpers --------------------------------------------------------------------


def pinhole(width: int, height: int, hfov_deg: float) -> dict[str, float]:
    """Pinhole intrinsics with a horizontal field of view and the principal point near the centre."""
    f = 0.5 * width / math.tan(math.radians(hfov_deg) / 2)
    return {"fx": round(f, 3), "fy": round(f, 3), "cx": round(width / 2 - 0.5 + 0.013 * width, 3),
            "cy": round(height / 2 - 0.5 - 0.009 * height, 3)}


def opencv(width: int, height: int, hfov_deg: float, k1: float, k2: float, p1: float, p2: float,
           k3: float = 0.0) -> dict[str, float]:
    """OpenCV radial-tangential intrinsics (barrel distortion when k1 < 0)."""
    intr = pinhole(width, height, hfov_deg)
    intr.update({"k1": k1, "k2": k2, "p1": p1, "p2": p2, "k3": k3})
    return intr


def fisheye(width: int, height: int, hfov_deg: float, k: tuple[float, float, float, float]) -> dict[str, float]:
    """OpenCV fisheye intrinsics whose image width spans ``hfov_deg`` (equidistant approximation)."""
    f = 0.5 * width / math.radians(hfov_deg / 2)
    return {"fx": round(f, 3), "fy": round(f, 3), "cx": round(width / 2 - 0.5, 3), "cy": round(height / 2 - 0.5, 3),
            "k1": k[0], "k2": k[1], "k3": k[2], "k4": k[3]}


def ftheta(width: int, height: int, circle_fraction: float, max_fov_deg: float) -> dict[str, Any]:
    """F-theta intrinsics: the lens circle (``max_fov_deg``) has radius ``circle_fraction * width / 2``.

    The corners beyond the circle see nothing (rendered black).
    """
    radius = circle_fraction * width / 2
    theta_max = math.radians(max_fov_deg / 2)
    # rho = c1 theta + c3 theta^3 with a mild compression towards the rim
    c3 = -0.04 * radius / theta_max ** 3
    c1 = (radius - c3 * theta_max ** 3) / theta_max
    return {"cx": round(width / 2 - 0.5, 3), "cy": round(height / 2 - 0.5, 3),
            "angle_to_pixel": [0.0, round(c1, 5), 0.0, round(c3, 5)], "max_fov_deg": max_fov_deg}


# -- the presets ---------------------------------------------------------------------------


def _tiny() -> Preset:
    w, h = 320, 180
    cams = (
        CameraSpec("front", "pinhole", w, h, pinhole(w, h, 70.0), 0.0, 3.0, (1.9, 0.0, 1.45), "global", 0, 1.0),
        CameraSpec("front_left", "opencv", w, h, opencv(w, h, 95.0, -0.22, 0.05, 0.0008, -0.0006, -0.004), 50.0, 4.0,
                   (1.7, 0.45, 1.45), "top_to_bottom", 20_000, 1.12, (1.02, 1.0, 0.96)),
        CameraSpec("rear_fisheye", "opencv_fisheye", w, h, fisheye(w, h, 185.0, (0.03, -0.006, 0.001, 0.0)), 180.0,
                   12.0, (-0.9, 0.0, 1.2), "bottom_to_top", 15_000, 0.9, (0.97, 1.0, 1.04)),
        CameraSpec("right_ftheta", "ftheta", w, h, ftheta(w, h, 0.98, 200.0), -90.0, 10.0, (1.0, -0.95, 1.3),
                   "left_to_right", 18_000, 1.05, (1.0, 0.98, 1.0)),
    )
    lidar = LidarSpec("top", 16, 512, -22.0, 8.0, -3.0, (1.2, 0.0, 1.95), max_range_m=100.0)
    return Preset("tiny", "CI-sized: 4 cameras (every model) at 320x180, 10 frames, 16x512 lidar, 2 moving cars",
                  frames=10, cameras=cams, lidar=lidar, ego_speeds=((0.0, 8.0), (1.0, 9.0)),
                  roles=("lead", "oncoming"), role_times={"lead": (None, 0.6), "oncoming": (0.3, None)},
                  crossing_ahead_m=48.0, image_format="png", spp=5, frame_batch=10)


def _small() -> Preset:
    w, h = 640, 360
    cams = (
        CameraSpec("front", "opencv", w, h, opencv(w, h, 75.0, -0.12, 0.02, 0.0005, -0.0004), 0.0, 3.0,
                   (1.9, 0.0, 1.45), "top_to_bottom", 25_000, 1.0),
        CameraSpec("front_wide", "ftheta", w, h, ftheta(w, h, 0.95, 190.0), 0.0, 8.0, (1.95, 0.0, 1.5),
                   "top_to_bottom", 28_000, 0.92, (0.98, 1.0, 1.03)),
        CameraSpec("left", "opencv_fisheye", w, h, fisheye(w, h, 180.0, (0.02, -0.004, 0.0008, 0.0)), 90.0, 15.0,
                   (1.2, 0.95, 1.3), "left_to_right", 20_000, 1.1, (1.03, 1.0, 0.97)),
        CameraSpec("right", "opencv", w, h, opencv(w, h, 95.0, -0.2, 0.04, -0.0007, 0.0005), -75.0, 6.0,
                   (1.2, -0.95, 1.4), "top_to_bottom", 25_000, 1.06),
        CameraSpec("rear", "pinhole", w, h, pinhole(w, h, 80.0), 180.0, 5.0, (-0.9, 0.0, 1.25), "global", 0, 0.95),
    )
    lidar = LidarSpec("top", 64, 1024, -25.0, 12.0, -2.0, (1.2, 0.0, 1.95), max_range_m=150.0)
    return Preset("small", "a few seconds for local experiments: 5 cameras at 640x360, 40 frames, 64x1024 lidar, "
                  "6 moving actors", frames=40, cameras=cams, lidar=lidar,
                  ego_speeds=((0.0, 9.0), (0.4, 11.0), (0.7, 7.0), (1.0, 9.5)),
                  roles=("leave", "appear", "oncoming", "oncoming", "follower", "pedestrian"), crossing_at=0.55,
                  image_format="jpg", spp=1, frame_batch=8)


def _drive30() -> Preset:
    w, h = 1280, 720
    cams = (
        CameraSpec("front", "opencv", w, h, opencv(w, h, 65.0, -0.1, 0.015, 0.0004, -0.0003), 0.0, 2.0,
                   (1.9, 0.0, 1.45), "top_to_bottom", 25_000, 1.0),
        CameraSpec("front_wide", "ftheta", w, h, ftheta(w, h, 0.95, 200.0), 0.0, 8.0, (1.95, 0.0, 1.5),
                   "top_to_bottom", 30_000, 0.9, (0.98, 1.0, 1.03)),
        CameraSpec("front_tele", "pinhole", w, h, pinhole(w, h, 30.0), 0.0, 0.5, (1.9, 0.15, 1.45), "top_to_bottom",
                   22_000, 1.08, (1.02, 1.0, 0.98)),
        CameraSpec("left", "opencv_fisheye", w, h, fisheye(w, h, 180.0, (0.02, -0.004, 0.0008, 0.0)), 90.0, 15.0,
                   (1.2, 0.95, 1.3), "left_to_right", 20_000, 1.1, (1.03, 1.0, 0.97)),
        CameraSpec("right", "opencv_fisheye", w, h, fisheye(w, h, 180.0, (0.025, -0.005, 0.001, 0.0)), -90.0, 15.0,
                   (1.2, -0.95, 1.3), "right_to_left", 20_000, 0.95, (1.0, 1.0, 1.02)),
        CameraSpec("rear", "pinhole", w, h, pinhole(w, h, 75.0), 180.0, 5.0, (-0.9, 0.0, 1.25), "global", 0, 0.96),
    )
    lidar = LidarSpec("top", 128, 2048, -25.0, 15.0, -2.0, (1.2, 0.0, 1.95), max_range_m=200.0)
    return Preset("drive30", "benchmark: 30 s at 10 Hz, 6 cameras at 1280x720 (every model), 128x2048 lidar, "
                  "13 moving actors", frames=300, cameras=cams, lidar=lidar,
                  ego_speeds=((0.0, 8.0), (0.12, 12.5), (0.3, 12.0), (0.42, 6.0), (0.52, 6.5), (0.66, 11.5),
                              (0.8, 13.0), (0.9, 9.0), (1.0, 10.0)),
                  roles=("lead", "follower", "leave", "appear", "oncoming", "oncoming", "oncoming", "oncoming",
                         "pullout", "truck", "pedestrian", "pedestrian", "pedestrian"),
                  crossing_at=0.48, image_format="jpg", spp=1, frame_batch=12)


PRESETS: dict[str, Preset] = {p.name: p for p in (_tiny(), _small(), _drive30())}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; ``ValueError`` listing the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}") from None
