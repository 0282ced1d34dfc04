"""Sensor geometry shared by training and replay.

Training (``nurec_usd.train.data``) builds its views from a capture; replay
(``nurec_usd.replay.stage``) from a USD stage. Both go through these functions, so that a frame
rendered from the USD is laid out exactly as the same frame rendered in training:

* :func:`camera_geometry`: a camera's one-camera ``CameraBatch`` template, its pixel rays and
  its lens mask, at an integer downscale;
* :func:`sensor_poses`: world poses of a sensor at the start and end of a readout, as the
  ``T_sensor_world`` quaternions and translations the kernels read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from nurec_usd.ops.camera import CameraBatch
from nurec_usd.sensors.cameras import camera_model
from nurec_usd.sensors.se3 import invert_transform, matrix_to_quat

__all__ = ["CameraGeometry", "camera_geometry", "downscaled_intrinsics", "sensor_poses"]


def downscaled_intrinsics(model: str, intrinsics: dict, factor: int) -> dict:
    """Intrinsics of a camera whose images are shrunk by an integer ``factor`` (pixel centres kept:
    pixel (0, 0)'s centre maps to ((0.5 / factor) - 0.5) in the new image, as area resampling does)."""
    out = dict(intrinsics)
    if factor == 1:
        return out
    for key in ("fx", "fy"):
        if key in out:
            out[key] = out[key] / factor
    for key in ("cx", "cy"):
        out[key] = (out[key] + 0.5) / factor - 0.5
    if model == "ftheta":  # pixel radius = polynomial of the angle: every coefficient scales
        out["angle_to_pixel"] = [c / factor for c in out["angle_to_pixel"]]
    return out


@dataclass
class CameraGeometry:
    """What rendering one camera needs besides its poses."""

    template: CameraBatch  # C = 1, float32 on the device; poses replaced per frame
    rays: torch.Tensor  # [H, W, 3] unit ray of every pixel in the camera frame, float32
    lens: torch.Tensor | None  # [H, W] bool: pixels the lens images (fisheye / f-theta circles); None: all
    intrinsics: dict  # at this resolution

    @property
    def width(self) -> int:
        return self.template.width

    @property
    def height(self) -> int:
        return self.template.height


def camera_geometry(model: str, width: int, height: int, intrinsics: dict, shutter: str,
                    device: torch.device | str, downscale: int = 1) -> CameraGeometry:
    """A camera's render template, rays and lens mask, with images shrunk by ``downscale``.

    Args:
        model, width, height, intrinsics: the camera as recorded (full resolution).
        shutter: rolling-shutter direction ("global", "top_to_bottom", ...).
        device: where the tensors go.
        downscale: integer factor (intrinsics scaled with :func:`downscaled_intrinsics`).
    """
    if int(downscale) != downscale or downscale < 1:
        raise ValueError(f"downscale must be a positive integer, got {downscale!r}")
    k = int(downscale)
    width, height = width // k, height // k
    intr = downscaled_intrinsics(model, intrinsics, k)
    eye = torch.eye(4, dtype=torch.float64)[None]
    template = CameraBatch.create([model], [intr], width, height, eye, eye, [shutter]).to(torch.float32)
    template = dataclasses.replace(template, model=template.model.to(device), params=template.params.to(device),
                                   shutter=template.shutter.to(device))
    # every pixel's ray, computed where it is used (float64: the unprojections iterate)
    cam = camera_model(model, width, height, intr, dtype=torch.float64, device=device)
    v, u = torch.meshgrid(torch.arange(height, dtype=torch.float64, device=device),
                          torch.arange(width, dtype=torch.float64, device=device), indexing="ij")
    uv = torch.stack((u, v), -1)
    rays = cam.unproject(uv)
    rays = rays / rays.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    # pixels outside the lens's field of view (fisheye and f-theta circles) image nothing:
    # their rays do not project back onto themselves
    back, valid = cam.project(rays)
    lens = valid & torch.isfinite(rays).all(-1) & ((back - uv).norm(dim=-1) < 0.5)
    lens = None if bool(lens.all()) else lens.to(device)
    return CameraGeometry(template, rays.to(device=device, dtype=torch.float32).contiguous(), lens, intr)


def sensor_poses(T_world_sensor_start: torch.Tensor,  # [F, 4, 4]
                 T_world_sensor_end: torch.Tensor,  # [F, 4, 4]
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``T_sensor_world`` at the readout's start and end as the kernels read them.

    Returns:
        rot_start [F, 4] (w, x, y, z), trans_start [F, 3], rot_end [F, 4] (same hemisphere as
        rot_start, so the kernels' slerp takes the short way), trans_end [F, 3]; in the input dtype.
    """
    T0 = invert_transform(T_world_sensor_start)
    T1 = invert_transform(T_world_sensor_end)
    q0, q1 = matrix_to_quat(T0[:, :3, :3]), matrix_to_quat(T1[:, :3, :3])
    q1 = torch.where((q0 * q1).sum(-1, keepdim=True) < 0, -q1, q1)
    return q0, T0[:, :3, 3], q1, T1[:, :3, 3]
