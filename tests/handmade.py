"""A tiny analytic capture: a street corridor of textured planes and moving boxes.

Every camera model, a rolling shutter, a spinning lidar and two tracked actors, rendered
by exact ray casting against planes and boxes, so its geometry is known in closed form.
The capture tests use it (it is fast, and independent of the ``synth`` generator that
writes the bundled sample). Deterministic: the same call writes byte-identical files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from nurec_usd.capture.writer import CaptureWriter
from nurec_usd.sensors.cameras import camera_model
from nurec_usd.sensors.lidar import SpinningLidarModel
from nurec_usd.sensors.rolling_shutter import line_time_offsets
from nurec_usd.sensors.se3 import interpolate_poses

T0_US = 1_700_000_000_000_000  # absolute timestamps, as real logs have
WORLD_OFFSET = np.array([120.0, -45.0, 3.0])  # world coordinates far from 0, as real logs have
DT_US = 100_000
N_RIG = 7  # rig poses span 0.6 s; frames and sweeps 0.0..0.4 s, inside that span
N_FRAMES = 5
WIDTH, HEIGHT = 160, 96
SKY = np.array([0.55, 0.70, 0.90])

# OpenCV camera axes (x right, y down, z forward) looking along rig +x, +y, -x.
_R_FORWARD = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
_R_LEFT = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
_R_REAR = np.array([[0.0, 0.0, -1.0], [1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])

CAMERAS = [
    # id, model, intrinsics, R_rig_camera, position, shutter, readout_us
    ("front", "pinhole", {"fx": 100.0, "fy": 100.0, "cx": 79.5, "cy": 47.5}, _R_FORWARD, (1.6, 0.0, 1.6),
     "global", 0),
    ("front_wide", "opencv", {"fx": 70.0, "fy": 70.0, "cx": 80.0, "cy": 48.0, "k1": -0.12, "k2": 0.015,
                              "p1": 0.001, "p2": -0.0005, "k3": 0.0}, _R_FORWARD, (1.6, 0.2, 1.5),
     "top_to_bottom", 20_000),
    ("left_fisheye", "opencv_fisheye", {"fx": 45.0, "fy": 45.0, "cx": 79.5, "cy": 47.5, "k1": 0.02, "k2": -0.005,
                                        "k3": 0.001, "k4": 0.0}, _R_LEFT, (1.0, 0.9, 1.4), "left_to_right", 15_000),
    ("rear_ftheta", "ftheta", {"cx": 79.5, "cy": 47.5, "angle_to_pixel": [0.0, 48.0, 0.0, -1.5],
                               "max_fov_deg": 180.0}, _R_REAR, (-0.8, 0.0, 1.5), "global", 0),
]
LIDAR_ELEVATIONS = np.array([-15.0, -12.0, -9.5, -7.5, -6.0, -4.5, -3.0, -2.0,
                             -1.0, 0.0, 1.0, 2.0, 3.5, 5.0, 7.5, 10.0])
LIDAR_COLUMNS = 360
LIDAR_POSITION = (0.5, 0.0, 1.9)

# Tracks: id, class, size (l, w, h), start position, velocity (m/s), heading rate (rad/s), colour.
TRACKS = [
    ("car_1", "car", (4.5, 1.9, 1.6), (8.0, 3.5, 0.8), 10.0, 0.0, (0.75, 0.12, 0.10)),
    ("car_2", "car", (4.2, 1.8, 1.5), (30.0, -3.5, 0.75), -6.0, 0.15, (0.15, 0.25, 0.70)),
]


def _transform(R: np.ndarray, t) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = t
    return T


def _yaw(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def rig_poses() -> tuple[np.ndarray, np.ndarray]:
    """Rig keyframes: 8 m/s along a gentle left curve. Returns (timestamps_us [K], T_world_rig [K, 4, 4])."""
    ts = T0_US + DT_US * np.arange(N_RIG)
    poses = []
    for k in range(N_RIG):
        t = k * DT_US * 1e-6
        yaw = 0.1 * t
        poses.append(_transform(_yaw(yaw), WORLD_OFFSET + np.array([8.0 * t, 0.4 * t * t, 0.0])))
    return ts, np.stack(poses)


def track_poses(track) -> tuple[np.ndarray, np.ndarray]:
    """One track's keyframes (same times as the rig). Returns (timestamps_us [K], T_world_box [K, 4, 4])."""
    _, _, _, start, speed, yaw_rate, _ = track
    ts = T0_US + DT_US * np.arange(N_RIG)
    poses = []
    for k in range(N_RIG):
        t = k * DT_US * 1e-6
        yaw = yaw_rate * t
        heading = np.pi if speed < 0 else 0.0
        pos = WORLD_OFFSET + np.array(start) + np.array([speed * t, 0.5 * yaw_rate * abs(speed) * t * t, 0.0])
        poses.append(_transform(_yaw(heading + yaw), pos))
    return ts, np.stack(poses)


class _Scene:
    """Ground, two facades and a far wall (static), plus the tracked boxes (moving)."""

    def __init__(self) -> None:
        key_s = torch.tensor((np.arange(N_RIG) * DT_US) * 1e-6, dtype=torch.float64)
        self.key_s = key_s
        self.rig = torch.from_numpy(rig_poses()[1])
        self.boxes = [(torch.from_numpy(track_poses(tr)[1]), torch.tensor(tr[2], dtype=torch.float64),
                       torch.tensor(tr[6], dtype=torch.float64)) for tr in TRACKS]
        self.offset = torch.from_numpy(WORLD_OFFSET)

    def rig_at(self, t: torch.Tensor) -> torch.Tensor:  # [M] s -> [M, 4, 4]
        return interpolate_poses(self.key_s, self.rig, t)

    def cast(self, origin: torch.Tensor, dirs: torch.Tensor, t: torch.Tensor):
        """Nearest hit of rays (world frame) at times t.

        origin, dirs: [M, 3]; t: [M] seconds. Returns depth [M] (inf: no hit), colour [M, 3],
        intensity [M] and actor [M] (-1 static, else the track's index).
        """
        m = dirs.shape[0]
        depth = torch.full((m,), float("inf"), dtype=torch.float64)
        colour = torch.tensor(SKY, dtype=torch.float64).expand(m, 3).clone()
        intensity = torch.zeros(m, dtype=torch.float64)
        actor = torch.full((m,), -1, dtype=torch.long)
        local = origin - self.offset

        def plane(axis: int, value: float, texture) -> None:
            d = dirs[:, axis]
            s = (value - local[:, axis]) / torch.where(d.abs() > 1e-12, d, torch.full_like(d, 1e-12))
            hit = (s > 1e-6) & (s < depth)
            p = local + s[:, None] * dirs
            c, i = texture(p)
            depth[hit] = s[hit]
            colour[hit] = c[hit]
            intensity[hit] = i[hit]

        def checker(p, a, b, size):
            k = (torch.floor(p[:, a] / size) + torch.floor(p[:, b] / size)) % 2
            return k

        def ground(p):
            k = checker(p, 0, 1, 1.0)
            lane = ((p[:, 1].abs() - 0.0).abs() < 0.12) & ((p[:, 0] % 3.0) < 1.5)
            g = 0.30 + 0.10 * k
            c = torch.stack([g, g, g * 1.05], -1)
            c[lane] = torch.tensor([0.95, 0.95, 0.9], dtype=torch.float64)
            return c, torch.where(lane, 0.8, 0.15 + 0.05 * k)

        def facade(p):
            brick = checker(p, 0, 2, 0.5)
            window = ((p[:, 0] % 4.0) > 2.5) & ((p[:, 2] % 3.0) > 1.2)
            c = torch.stack([0.55 + 0.15 * brick, 0.30 + 0.05 * brick, 0.22 + 0.0 * brick], -1)
            c[window] = torch.tensor([0.2, 0.3, 0.4], dtype=torch.float64)
            return c, torch.where(window, 0.05, 0.4 + 0.1 * brick)

        def far_wall(p):
            k = checker(p, 1, 2, 2.0)
            return torch.stack([0.4 + 0.2 * k, 0.5 + 0.2 * k, 0.4 + 0.0 * k], -1), 0.3 + 0.2 * k

        plane(2, 0.0, ground)
        plane(1, 10.0, facade)
        plane(1, -10.0, facade)
        plane(0, 70.0, far_wall)

        for index, (poses, size, rgb) in enumerate(self.boxes):
            T = interpolate_poses(self.key_s, poses, t)  # [M, 4, 4] box -> world
            R = T[:, :3, :3]
            o = torch.einsum("mji,mj->mi", R, origin - T[:, :3, 3])  # ray in the box frame
            d = torch.einsum("mji,mj->mi", R, dirs)
            half = size / 2
            safe = torch.where(d.abs() > 1e-12, d, torch.full_like(d, 1e-12))
            t1, t2 = (-half - o) / safe, (half - o) / safe
            near = torch.minimum(t1, t2).amax(-1)
            far = torch.maximum(t1, t2).amin(-1)
            hit = (near <= far) & (near > 1e-6) & (near < depth)
            face = torch.minimum(t1, t2).argmax(-1)  # the slab entered last gives the face normal
            shade = torch.tensor([0.8, 0.65, 1.0], dtype=torch.float64)[face]
            depth[hit] = near[hit]
            colour[hit] = (rgb * shade[:, None])[hit]
            intensity[hit] = 0.6
            actor[hit] = index
        return depth, colour, intensity, actor


def _render_camera(scene: _Scene, cam, frame_s: float) -> np.ndarray:
    cid, model, intr, R, pos, shutter, readout_us = cam
    cm = camera_model(model, WIDTH, HEIGHT, intr, dtype=torch.float64)
    v, u = torch.meshgrid(torch.arange(HEIGHT, dtype=torch.float64), torch.arange(WIDTH, dtype=torch.float64),
                          indexing="ij")
    uv = torch.stack([u, v], -1).reshape(-1, 2)
    rays = cm.unproject(uv)  # [M, 3] camera frame
    t = frame_s + line_time_offsets(WIDTH, HEIGHT, shutter, readout_us * 1e-6, uv)
    T_world_cam = scene.rig_at(t) @ torch.from_numpy(_transform(R, pos))
    dirs = torch.einsum("mij,mj->mi", T_world_cam[:, :3, :3], rays)
    depth, colour, _, _ = scene.cast(T_world_cam[:, :3, 3], dirs, t)
    # Fisheye and f-theta pixels beyond the lens's field of view stay black.
    _, valid = cm.project(rays)
    colour[~valid] = 0.0
    return (colour.clamp(0, 1).reshape(HEIGHT, WIDTH, 3).numpy() * 255 + 0.5).astype(np.uint8)


def _scan_lidar(scene: _Scene, sweep_s: float):
    lidar = SpinningLidarModel(elevation_deg=LIDAR_ELEVATIONS.tolist(), columns=LIDAR_COLUMNS,
                               rotation="clockwise", scan_rate_hz=10.0, start_azimuth_deg=180.0,
                               min_range_m=0.5, max_range_m=80.0, dtype=torch.float64)
    rays = lidar.ray_directions()  # [C, W, 3]
    c, w = rays.shape[:2]
    t = (sweep_s + lidar.firing_time_offsets())[None, :].expand(c, w).reshape(-1)  # [C*W]
    T_world_lidar = scene.rig_at(t) @ torch.from_numpy(_transform(np.eye(3), LIDAR_POSITION))
    dirs = torch.einsum("mij,mj->mi", T_world_lidar[:, :3, :3], rays.reshape(-1, 3))
    depth, _, intensity, _ = scene.cast(T_world_lidar[:, :3, 3], dirs, t)
    keep = (depth >= 0.5) & (depth <= 80.0)
    points = (rays.reshape(-1, 3) * depth[:, None])[keep]
    channel = torch.arange(c)[:, None].expand(c, w).reshape(-1)[keep]
    times_us = torch.round(t[keep] * 1e6).long()
    return points.numpy().astype(np.float32), intensity[keep].numpy().astype(np.float32), times_us.numpy(), \
        channel.numpy()


def write_handmade_capture(out_dir: str | Path, overwrite: bool = False) -> Path:
    """Write the analytic capture to ``out_dir`` (about 0.2 MB). Returns its path."""
    scene = _Scene()
    ts, T_world_rig = rig_poses()
    with CaptureWriter(out_dir, name="handmade", overwrite=overwrite,
                       metadata={"source": "tests/handmade.py: analytic planes and boxes"}) as w:
        w.set_rig(ts, T_world_rig)
        for cam in CAMERAS:
            cid, model, intr, R, pos, shutter, readout_us = cam
            w.add_camera(cid, model, WIDTH, HEIGHT, intr, _transform(R, pos), shutter, readout_us)
            for k in range(N_FRAMES):
                w.add_frame(cid, int(ts[k]), _render_camera(scene, cam, k * DT_US * 1e-6))
        w.add_lidar("top", _transform(np.eye(3), LIDAR_POSITION), LIDAR_ELEVATIONS, LIDAR_COLUMNS,
                    scan_rate_hz=10.0, min_range_m=0.5, max_range_m=80.0, rotation="clockwise",
                    start_azimuth_deg=180.0)
        for k in range(N_FRAMES):
            points, intensity, times_rel_us, channel = _scan_lidar(scene, k * DT_US * 1e-6)
            w.add_sweep("top", int(ts[k]), points, intensity, times_rel_us + T0_US, channel)
        for tr in TRACKS:
            tts, poses = track_poses(tr)
            w.add_track(tr[0], tr[1], np.array(tr[2]), tts, poses)
    return Path(out_dir)
