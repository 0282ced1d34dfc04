"""Device side of the generator: upload the scene, set up sensors, launch the ray-casting kernels.

The kernels live in ``warp_kernels/synth_raycast.py``. Here: the static scene becomes one
``wp.Mesh`` (one BVH) and every actor its own ``wp.Mesh`` in its box frame; poses are uploaded as
key frames (``wp.transform``, quaternions converted from (w, x, y, z) to Warp's (x, y, z, w) here
and nowhere else). Camera rays are unprojected once per camera with the capture format's own
camera models (``nurec_usd.sensors``), and every pixel's rolling-shutter time comes from
``line_time_offsets``; the kernels interpolate the rig and actor poses at each ray's own time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import warp as wp

from nurec_usd.sensors.cameras import camera_model
from nurec_usd.sensors.lidar import SpinningLidarModel
from nurec_usd.sensors.rolling_shutter import line_time_offsets
from nurec_usd.sensors.se3 import matrix_to_quat
from nurec_usd.synth.presets import CameraSpec, LidarSpec
from nurec_usd.synth.scene import SceneData
from warp_kernels import synth_raycast as K

# Sub-pixel offsets of the 5-sample pattern: the pixel centre (ground truth comes from it) and a
# rotated grid around it.
SAMPLE_OFFSETS = {1: [(0.0, 0.0)], 5: [(0.0, 0.0), (-0.125, -0.375), (0.375, -0.125), (0.125, 0.375), (-0.375, 0.125)]}


def poses_to_wp(T: np.ndarray  # [N, 4, 4]
                ) -> np.ndarray:
    """Rigid transforms as Warp transforms: [N, 7] = (px, py, pz, qx, qy, qz, qw), float32."""
    T = np.asarray(T, dtype=np.float64).reshape(-1, 4, 4)
    q = matrix_to_quat(torch.from_numpy(T[:, :3, :3])).numpy()  # (w, x, y, z)
    return np.concatenate([T[:, :3, 3], q[:, 1:], q[:, :1]], axis=1).astype(np.float32)


def look_rotation(yaw_deg: float, pitch_deg: float) -> np.ndarray:
    """R_rig_camera of a camera (OpenCV axes) looking along rig yaw, tilted down by pitch. Returns [3, 3]."""
    yaw, pitch = np.radians(yaw_deg), np.radians(pitch_deg)
    forward = np.array([np.cos(yaw) * np.cos(pitch), np.sin(yaw) * np.cos(pitch), -np.sin(pitch)])
    right = np.array([np.sin(yaw), -np.cos(yaw), 0.0])
    down = np.cross(forward, right)
    return np.stack([right, down, forward], axis=1)


def camera_extrinsics(spec: CameraSpec) -> np.ndarray:
    """T_rig_camera of a camera spec. Returns [4, 4]."""
    T = np.eye(4)
    T[:3, :3] = look_rotation(spec.yaw_deg, spec.pitch_deg)
    T[:3, 3] = spec.position
    return T


def lidar_extrinsics(spec: LidarSpec) -> np.ndarray:
    """T_rig_lidar (axes aligned with the rig). Returns [4, 4]."""
    T = np.eye(4)
    T[:3, 3] = spec.position
    return T


def lidar_model(spec: LidarSpec) -> SpinningLidarModel:
    """The spinning-lidar model of a spec (float64)."""
    return SpinningLidarModel(elevation_deg=spec.elevations_deg(), columns=spec.columns, rotation=spec.rotation,
                              scan_rate_hz=spec.scan_rate_hz, start_azimuth_deg=spec.start_azimuth_deg,
                              min_range_m=spec.min_range_m, max_range_m=spec.max_range_m,
                              azimuth_offset_deg=spec.azimuth_offsets_deg(), dtype=torch.float64)


def lidar_column_times_us(spec: LidarSpec) -> np.ndarray:
    """Each column's firing time after the sweep start, rounded to the microseconds the sweep file stores. [W] int64."""
    k = np.arange(spec.columns, dtype=np.float64)
    return np.round(k / (spec.columns * spec.scan_rate_hz) * 1e6).astype(np.int64)


def _torch_device(device: str) -> torch.device:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.device(device)
    return torch.device("cpu")


@dataclass
class CameraSetup:
    """Per-camera device data that is the same for every frame."""

    spec: CameraSpec
    params: K.CameraParams
    dirs: wp.array  # [S, H*W] vec3
    pixel_dt: wp.array  # [H*W] float32


def camera_rays(spec: CameraSpec, spp: int, device: str = "cpu") -> tuple[np.ndarray, np.ndarray, float]:
    """Camera-frame unit rays of every sample of every pixel, the pixels' readout times, the sample spacing.

    Returns dirs [S, H*W, 3] float32 (zero where a sample falls outside the lens's field of view),
    pixel_dt [H*W] float32 seconds, and the angle between neighbouring samples near the centre (rad).
    """
    tdev = _torch_device(device)
    if tdev.type == "cpu":
        # Small element-wise work: one thread avoids OpenMP barriers that crawl when the cores are busy.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return _camera_rays(spec, spp, tdev)
        finally:
            torch.set_num_threads(threads)
    return _camera_rays(spec, spp, tdev)


def _camera_rays(spec: CameraSpec, spp: int, tdev: torch.device) -> tuple[np.ndarray, np.ndarray, float]:
    cm = camera_model(spec.model, spec.width, spec.height, spec.intrinsics, dtype=torch.float64, device=tdev)
    v, u = torch.meshgrid(torch.arange(spec.height, dtype=torch.float64, device=tdev),
                          torch.arange(spec.width, dtype=torch.float64, device=tdev), indexing="ij")
    centres = torch.stack([u, v], -1).reshape(-1, 2)
    out = []
    for du, dv in SAMPLE_OFFSETS[spp]:
        uv = centres + torch.tensor([du, dv], dtype=torch.float64, device=tdev)
        rays = cm.unproject(uv)
        back, valid = cm.project(rays)
        # pixels the lens cannot see (beyond an f-theta/fisheye circle) do not round-trip
        valid = valid & ((back - uv).norm(dim=-1) < 0.01) & torch.isfinite(rays).all(-1)
        out.append(torch.where(valid[:, None], rays, torch.zeros_like(rays)))
    dirs = torch.stack(out).to(torch.float32).cpu().numpy()
    dt = line_time_offsets(spec.width, spec.height, spec.shutter, spec.readout_us * 1e-6, centres.cpu())
    cx, cy = spec.width / 2 - 0.5, spec.height / 2 - 0.5
    pair = cm.unproject(torch.tensor([[cx, cy], [cx + 1.0, cy]], dtype=torch.float64, device=tdev)).cpu()
    angle = float(torch.arccos(torch.clamp((pair[0] * pair[1]).sum(), -1.0, 1.0)))
    spacing = angle / (2.0 if spp > 1 else 1.0)
    return dirs, dt.numpy().astype(np.float32), spacing


class DeviceScene:
    """The scene on a Warp device, and the launches that render it."""

    def __init__(self, scene: SceneData, device: str = "cpu"):
        self.scene = scene
        self.device = device
        d = device
        self.static_mesh = wp.Mesh(points=wp.array(scene.static_vertices, dtype=wp.vec3, device=d),
                                   indices=wp.array(scene.static_faces.reshape(-1), dtype=wp.int32, device=d))
        self.actor_meshes = []
        face_uv = [scene.static_face_uv.reshape(-1, 2)]
        face_mat = [scene.static_face_material]
        face_normal = [scene.static_face_normal.reshape(-1, 3)]
        face_offset, key_offset, key_start, key_count, keys = [], [], [], [], []
        n_faces = len(scene.static_faces)
        n_keys = 0
        for a in scene.actors:
            v, f, uv, m, n = a.mesh.build(with_normals=True)
            self.actor_meshes.append(wp.Mesh(points=wp.array(v, dtype=wp.vec3, device=d),
                                             indices=wp.array(f.reshape(-1), dtype=wp.int32, device=d)))
            face_uv.append(uv.reshape(-1, 2))
            face_mat.append(m)
            face_normal.append(n.reshape(-1, 3))
            face_offset.append(n_faces)
            n_faces += len(f)
            key_offset.append(n_keys)
            key_start.append(a.key_first)
            key_count.append(a.key_last - a.key_first + 1)
            keys.append(poses_to_wp(a.poses))
            n_keys += len(a.poses)
        mats = scene.materials
        s = K.SynthScene()
        s.static_mesh = self.static_mesh.id
        s.actor_meshes = wp.array(np.array([m.id for m in self.actor_meshes], dtype=np.uint64), dtype=wp.uint64,
                                  device=d)
        s.actor_key_start = wp.array(np.asarray(key_start, dtype=np.int32), dtype=wp.int32, device=d)
        s.actor_key_count = wp.array(np.asarray(key_count, dtype=np.int32), dtype=wp.int32, device=d)
        s.actor_key_offset = wp.array(np.asarray(key_offset, dtype=np.int32), dtype=wp.int32, device=d)
        s.actor_face_offset = wp.array(np.asarray(face_offset, dtype=np.int32), dtype=wp.int32, device=d)
        s.actor_keys = wp.array(np.concatenate(keys) if keys else np.zeros((1, 7), np.float32), dtype=wp.transform,
                                device=d)
        s.num_actors = len(scene.actors)
        s.rig_keys = wp.array(poses_to_wp(scene.rig_poses), dtype=wp.transform, device=d)
        s.key_rate = float(scene.key_rate_hz)
        s.face_material = wp.array(np.concatenate(face_mat).astype(np.int32), dtype=wp.int32, device=d)
        s.face_uv = wp.array(np.concatenate(face_uv).astype(np.float32), dtype=wp.vec2, device=d)
        s.face_normal = wp.array(np.concatenate(face_normal).astype(np.float32), dtype=wp.vec3, device=d)
        s.mat_kind = wp.array(mats["kind"], dtype=wp.int32, device=d)
        s.mat_color_a = wp.array(mats["color_a"], dtype=wp.vec3, device=d)
        s.mat_color_b = wp.array(mats["color_b"], dtype=wp.vec3, device=d)
        s.mat_params = wp.array(mats["params"], dtype=wp.vec4, device=d)
        s.mat_params2 = wp.array(mats["params2"], dtype=wp.vec4, device=d)
        s.mat_lidar = wp.array(mats["lidar"], dtype=wp.float32, device=d)
        light = scene.light
        s.sun_dir = wp.vec3(*light.sun_dir.astype(np.float32))
        s.sun_color = wp.vec3(*light.sun_color.astype(np.float32))
        s.ambient = wp.vec3(*light.ambient.astype(np.float32))
        s.zenith = wp.vec3(*light.zenith.astype(np.float32))
        s.horizon = wp.vec3(*light.horizon.astype(np.float32))
        s.max_dist = 3000.0
        self.struct = s

    # -- cameras -------------------------------------------------------------------------

    def camera(self, spec: CameraSpec, spp: int) -> CameraSetup:
        """Upload a camera's rays and readout times."""
        dirs, dt, spacing = camera_rays(spec, spp, self.device)
        p = K.CameraParams()
        p.T_rig_cam = wp.transform(*poses_to_wp(camera_extrinsics(spec))[0])
        p.exposure = 0.5 * float(spec.exposure)
        p.white_balance = wp.vec3(*[float(c) for c in spec.white_balance])
        p.pixel_angle = float(spacing)
        p.vignette = float(spec.vignette)
        return CameraSetup(spec, p, wp.array(dirs, dtype=wp.vec3, device=self.device),
                           wp.array(dt, dtype=wp.float32, device=self.device))

    def render(self, cam: CameraSetup, frame_times_s: np.ndarray  # [B] seconds since the capture start
               ) -> tuple[wp.array, wp.array, wp.array]:
        """Launch one batch of frames.

        Returns device arrays rgb [B, H, W, 3] uint8, depth [B, H, W] float32, actor [B, H, W] int16.
        """
        spec = cam.spec
        b, h, w = len(frame_times_s), spec.height, spec.width
        d = self.device
        times = wp.array(np.asarray(frame_times_s, dtype=np.float32), dtype=wp.float32, device=d)
        rgb = wp.empty((b, h, w, 3), dtype=wp.uint8, device=d)
        depth = wp.empty((b, h, w), dtype=wp.float32, device=d)
        actor = wp.empty((b, h, w), dtype=wp.int16, device=d)
        wp.launch(K.render_camera_kernel, dim=(b, h, w), inputs=[self.struct, cam.params, times, cam.dirs,
                                                                 cam.pixel_dt], outputs=[rgb, depth, actor], device=d)
        return rgb, depth, actor

    # -- lidar ---------------------------------------------------------------------------

    def lidar(self, spec: LidarSpec) -> "LidarSetup":
        """Upload a lidar's ray directions ([columns, channels], column-major like its firing order)."""
        model = lidar_model(spec)
        rays = model.ray_directions().permute(1, 0, 2).contiguous().numpy().astype(np.float32)  # [W, C, 3]
        col_dt = (lidar_column_times_us(spec) * 1e-6).astype(np.float32)
        return LidarSetup(spec, wp.array(rays, dtype=wp.vec3, device=self.device),
                          wp.array(col_dt, dtype=wp.float32, device=self.device),
                          wp.transform(*poses_to_wp(lidar_extrinsics(spec))[0]))

    def scan(self, lid: "LidarSetup", sweep_times_s: np.ndarray,  # [B] seconds since the capture start
             first_sweep: int, seed: int) -> tuple[wp.array, wp.array, wp.array, wp.array]:
        """Launch one batch of sweeps.

        Returns device arrays (range_clean, range_noisy, intensity, actor), each [B, W, C] (W = columns).
        """
        spec = lid.spec
        b, w, c = len(sweep_times_s), spec.columns, spec.channels
        d = self.device
        times = wp.array(np.asarray(sweep_times_s, dtype=np.float32), dtype=wp.float32, device=d)
        clean = wp.empty((b, w, c), dtype=wp.float32, device=d)
        noisy = wp.empty((b, w, c), dtype=wp.float32, device=d)
        inten = wp.empty((b, w, c), dtype=wp.float32, device=d)
        actor = wp.empty((b, w, c), dtype=wp.int16, device=d)
        wp.launch(K.scan_lidar_kernel, dim=(b, w, c),
                  inputs=[self.struct, lid.T_rig_lidar, times, lid.column_dt, lid.rays, float(spec.min_range_m),
                          float(spec.max_range_m), float(spec.range_noise_m), int(seed), int(first_sweep)],
                  outputs=[clean, noisy, inten, actor], device=d)
        return clean, noisy, inten, actor


@dataclass
class LidarSetup:
    spec: LidarSpec
    rays: wp.array  # [W, C] vec3
    column_dt: wp.array  # [W] float32
    T_rig_lidar: wp.transform
