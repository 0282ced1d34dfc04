"""Sensor outputs as pictures people can look at: camera images and lidar range images as uint8 RGB."""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["to_uint8", "range_picture"]


def to_uint8(image: torch.Tensor) -> np.ndarray:  # [..., H, W, 3] float in [0, 1] -> [..., H, W, 3] uint8
    """A float image clamped to [0, 1] and rounded to 8 bits, on the host."""
    return (image.detach().clamp(0, 1) * 255 + 0.5).to(torch.uint8).cpu().numpy()


def range_picture(ranges: torch.Tensor, max_range: float) -> np.ndarray:  # [C, W] -> [C, W, 3] uint8
    """Range image in false colour on a log scale from 1 m to the maximum range (near: yellow,
    far: blue; no return: black). Rows as given: order channels highest first to see the world upright."""
    # computed where the ranges are (the GPU in a build): one uint8 copy to the host
    r = (ranges.float().clamp_min(1.0).log() / math.log(max(max_range, 2.0))).clamp(0, 1)
    rgb = torch.stack((1 - r, 1 - 0.5 * r, 0.2 + 0.8 * r), -1) * (ranges > 0)[..., None]
    return (rgb * 255).to(torch.uint8).cpu().numpy()
