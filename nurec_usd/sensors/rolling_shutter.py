"""Rolling-shutter timing: when each image line is read out, and projection with a moving camera.

A frame's timestamp is the time its FIRST line (in readout order) is captured; the readout time is
the time from the first line read to the last. Line k (0-based, in readout order) of n lines is
read ``readout_s * k / (n - 1)`` seconds after the frame timestamp. Lines are image rows for
"top_to_bottom"/"bottom_to_top" and image columns for "left_to_right"/"right_to_left"; "global"
reads every pixel at the frame timestamp. Pixel coordinates are OpenCV's (centre of the top-left
pixel at (0, 0)), so continuous coordinates give continuous line indices.
"""

from __future__ import annotations

from typing import Callable

import torch

from .cameras import CameraModel
from .se3 import invert_transform, transform_points

__all__ = [
    "ROLLING_SHUTTER_DIRECTIONS",
    "line_time_offsets",
    "row_times",
    "project_rolling_shutter",
]

ROLLING_SHUTTER_DIRECTIONS = ("global", "top_to_bottom", "bottom_to_top", "left_to_right", "right_to_left")


def _check(width: int, height: int, direction: str, readout_s: float) -> None:
    if direction not in ROLLING_SHUTTER_DIRECTIONS:
        raise ValueError(f"unknown rolling-shutter direction {direction!r}; known: {list(ROLLING_SHUTTER_DIRECTIONS)}")
    if width < 1 or height < 1:
        raise ValueError(f"image size must be positive, got width={width}, height={height}")
    if not readout_s >= 0:
        raise ValueError(f"readout_s must be >= 0, got {readout_s}")


def _line_index(width: int, height: int, direction: str, uv: torch.Tensor) -> tuple[torch.Tensor, int]:
    # Continuous line index in readout order, and the number of lines.
    u, v = uv[..., 0], uv[..., 1]
    if direction == "top_to_bottom":
        return v, height
    if direction == "bottom_to_top":
        return (height - 1) - v, height
    if direction == "left_to_right":
        return u, width
    return (width - 1) - u, width  # right_to_left


def line_time_offsets(
    width: int, height: int, direction: str, readout_s: float, uv: torch.Tensor
) -> torch.Tensor:
    """Capture time of pixel coordinates, in seconds after the frame timestamp.

    ``readout_s * k / (n_lines - 1)`` for the continuous line index k in readout order, clamped to
    [0, readout_s] (coordinates beyond the first/last line centre get that line's time); 0 for a
    global shutter or a single-line image.

    Args:
        width, height: image size in pixels.
        direction: one of :data:`ROLLING_SHUTTER_DIRECTIONS`.
        readout_s: time from the first line read to the last, seconds.
        uv: pixel coordinates (u = column, v = row).  # [..., 2]

    Returns:
        Time offsets in seconds, dtype of ``uv``.  # [...]
    """
    _check(width, height, direction, readout_s)
    if direction == "global":
        return torch.zeros_like(uv[..., 0])
    k, n = _line_index(width, height, direction, uv)
    if n == 1:
        return torch.zeros_like(k)
    return readout_s * (k / (n - 1)).clamp(0.0, 1.0)


def row_times(
    height: int,
    width: int,
    direction: str,
    readout_s: float,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Readout time offset of every image line, indexed in image order (not readout order).

    Args:
        height, width: image size in pixels (note the order).
        direction: one of :data:`ROLLING_SHUTTER_DIRECTIONS`.
        readout_s: time from the first line read to the last, seconds.
        dtype, device: of the result.

    Returns:
        Seconds after the frame timestamp: [height] for row-wise directions and "global" (all
        zeros), [width] indexed by column for "left_to_right"/"right_to_left".
    """
    _check(width, height, direction, readout_s)
    horizontal = direction in ("left_to_right", "right_to_left")
    idx = torch.arange(width if horizontal else height, dtype=dtype, device=device)
    zeros = torch.zeros_like(idx)
    # Put the line index on the coordinate that the direction reads along.
    uv = torch.stack((idx, zeros) if horizontal else (zeros, idx), dim=-1)
    return line_time_offsets(width, height, direction, readout_s, uv)


def project_rolling_shutter(
    camera: CameraModel,
    T_world_camera_at: Callable[[torch.Tensor], torch.Tensor],
    frame_time_s: float,
    points_world: torch.Tensor,
    iterations: int = 2,
    *,
    direction: str,
    readout_s: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Project world points with a rolling-shutter camera: each point with the pose at its line time.

    Fixed-point iteration: start every point at the frame's mid-readout time, project with the pose
    at that time, take the line time of the resulting pixel, and repeat ``iterations`` times; the
    returned pixels are the projection with the pose at the returned times. Each step shrinks the
    time error by roughly the fraction of the image a point moves during the readout, so a few
    steps suffice for realistic motion. This is the simple reference path for tests and data
    synthesis (one pose evaluation per point per step), not the renderer's fast path.

    Args:
        camera: the camera model.
        T_world_camera_at: callable mapping times in seconds ([...], float64) to camera poses
            T_world_camera ([..., 4, 4]), e.g. ``PoseTrajectory.at``.
        frame_time_s: the frame timestamp (capture time of the first line read), seconds.
        points_world: points in the world frame.  # [N, 3] (any leading dims work)
        iterations: number of pose re-evaluations after the mid-readout start.
        direction: rolling-shutter direction, one of :data:`ROLLING_SHUTTER_DIRECTIONS`.
        readout_s: readout time in seconds.

    Returns:
        uv: pixel coordinates.  # [N, 2]
        valid: the camera's validity mask at those pixels.  # [N]
        t: capture times in seconds (float64), the times whose poses gave ``uv``.  # [N]
    """
    _check(camera.width, camera.height, direction, readout_s)
    # Times are float64: absolute timestamps (~1e9 s) lose milliseconds in float32.
    mid = frame_time_s + (0.0 if direction == "global" else 0.5 * readout_s)
    t = torch.full(points_world.shape[:-1], mid, dtype=torch.float64, device=points_world.device)

    def project_at(times: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T_camera_world = invert_transform(T_world_camera_at(times).to(points_world.dtype))
        return camera.project(transform_points(T_camera_world, points_world))

    for _ in range(iterations):
        uv, _ = project_at(t)
        offsets = line_time_offsets(camera.width, camera.height, direction, readout_s, uv)
        t = frame_time_s + offsets.to(torch.float64)
    uv, valid = project_at(t)
    return uv, valid, t
