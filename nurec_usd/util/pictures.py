"""Sensor outputs as pictures people can look at: camera images and lidar range images as uint8 RGB."""

from __future__ import annotations

import io
import math

import numpy as np
import torch
from PIL import Image

try:  # libjpeg-turbo with Python's lock released: pictures encode in many threads at once
    import simplejpeg
except ImportError:  # pragma: no cover - a dependency; PIL writes the same kind of file, one thread at a time
    simplejpeg = None

__all__ = ["quantise", "to_uint8", "range_picture", "encode_jpeg"]


def quantise(image: torch.Tensor) -> torch.Tensor:  # [..., H, W, 3] float in [0, 1] -> [..., H, W, 3] uint8
    """A float image clamped to [0, 1] and rounded to 8 bits, where it is."""
    return (image.detach().clamp(0, 1) * 255 + 0.5).to(torch.uint8)


def to_uint8(image: torch.Tensor) -> np.ndarray:  # [..., H, W, 3] float in [0, 1] -> [..., H, W, 3] uint8
    """A float image clamped to [0, 1] and rounded to 8 bits, on the host."""
    return quantise(image).cpu().numpy()


def encode_jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:  # [H, W, 3] uint8
    """A JPEG file's bytes (4:2:0 chroma, as PIL writes by default)."""
    rgb = np.ascontiguousarray(rgb)
    if simplejpeg is not None:
        return simplejpeg.encode_jpeg(rgb, quality=quality, colorspace="RGB", colorsubsampling="420")
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def range_picture(ranges: torch.Tensor, max_range: float) -> np.ndarray:  # [C, W] -> [C, W, 3] uint8
    """Range image in false colour on a log scale from 1 m to the maximum range (near: yellow,
    far: blue; no return: black). Rows as given: order channels highest first to see the world upright."""
    # computed where the ranges are (the GPU in a build): one uint8 copy to the host
    r = (ranges.float().clamp_min(1.0).log() / math.log(max(max_range, 2.0))).clamp(0, 1)
    rgb = torch.stack((1 - r, 1 - 0.5 * r, 0.2 + 0.8 * r), -1) * (ranges > 0)[..., None]
    return (rgb * 255).to(torch.uint8).cpu().numpy()
