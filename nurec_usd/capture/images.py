"""Image and mask files: decoding, and reading just the size from the header."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the file header, without decoding the pixels.

    Raises ``ValueError`` when the file is not a readable image.
    """
    try:
        with Image.open(path) as im:
            return im.size
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"not a readable image ({exc})") from None


def _to_8bit(im: Image.Image, path: Path) -> Image.Image:
    """16-bit grey images (``I;16*``: 16-bit PNGs) as 8-bit grey, by their top 8 bits: PIL's own
    conversion clips them at 255, which turns most of such an image white. (16-bit colour
    PNGs PIL already reads as 8-bit RGB.) 32-bit integer and float images are refused."""
    if im.mode.startswith("I;16"):
        values = np.asarray(im).astype(np.uint16)  # native order, whatever the file's
        return Image.fromarray((values >> 8).astype(np.uint8), mode="L")
    if im.mode in ("I", "F"):
        raise ValueError(f"{path}: {'32-bit integer' if im.mode == 'I' else 'floating-point'} images are not "
                         f"supported; save it as an 8- or 16-bit PNG or a JPEG")
    return im


def read_rgb(path: Path, factor: int = 1) -> np.ndarray:
    """Decode an image as RGB, shrunk by the integer ``factor`` with area averaging (the size
    rounded down). 16-bit grey images keep their top 8 bits. Returns uint8 ``[H, W, 3]``;
    ``ValueError`` naming the file when it cannot be decoded."""
    try:
        with Image.open(path) as im:
            im = _to_8bit(im, path)
            im = im if im.mode == "RGB" else im.convert("RGB")  # (converting to its own mode copies)
            if factor > 1:
                im = im.reduce(factor).crop((0, 0, im.width // factor, im.height // factor))
            return np.asarray(im)
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"{path}: cannot decode image ({exc})") from None


def read_mask(path: Path) -> np.ndarray:
    """Decode a mask. Returns bool ``[H, W]``: True (non-zero) where a pixel is to be used."""
    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("L")) > 0
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"{path}: cannot decode mask ({exc})") from None


def write_image(path: Path, pixels: np.ndarray, quality: int = 95) -> None:
    """Encode ``pixels`` (uint8 ``[H, W, 3]`` or ``[H, W]``) as PNG or JPEG by the path's suffix."""
    if pixels.dtype != np.uint8:
        raise ValueError(f"{path}: images are written from uint8 arrays, got {pixels.dtype}")
    im = Image.fromarray(pixels)
    suffix = path.suffix.lower()
    if suffix == ".png":
        im.save(path, format="PNG", optimize=False)
    elif suffix in (".jpg", ".jpeg"):
        im.save(path, format="JPEG", quality=quality)
    else:
        raise ValueError(f"{path}: unknown image suffix (expected one of {IMAGE_SUFFIXES})")
