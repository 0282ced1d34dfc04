"""Lidar returns inside an actor's box: what the Renderer's actor tests count."""

from __future__ import annotations

import numpy as np


def returns_in_box(points_world: np.ndarray,  # [P, 3]
                   T_world_box: np.ndarray,  # [4, 4]
                   size_m,  # length, width, height
                   margin_m: float = 0.3) -> int:
    """Points inside the box grown by ``margin_m``, less its bottom half metre: the road under it (on the
    sample, returns of the reconstructed road reach 0.3 m above the box's floor without the car)."""
    T = np.asarray(T_world_box, dtype=np.float64)
    local = (np.asarray(points_world, dtype=np.float64) - T[:3, 3]) @ T[:3, :3]
    half = np.asarray(size_m, dtype=np.float64) / 2
    inside = (np.abs(local[:, 0]) < half[0] + margin_m) & (np.abs(local[:, 1]) < half[1] + margin_m) \
        & (local[:, 2] > -half[2] + 0.5) & (local[:, 2] < half[2] + margin_m)
    return int(inside.sum())
