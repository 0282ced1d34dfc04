"""Image and mask files: decoding, and reading just the size from the header."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

try:  # libjpeg-turbo without PIL's Python-side work: decodes into a given buffer, Python's lock released
    import simplejpeg
except ImportError:  # pragma: no cover - a dependency; PIL decodes the same pixels, slower in many threads
    simplejpeg = None

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_JPEG_SUFFIXES = (".jpg", ".jpeg")


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG frame headers (SOF0-3, 5-7, 9-11, 13-15) hold the size; markers without a length field
_JPEG_FRAMES = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_JPEG_BARE = frozenset((0x01, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8))


def _jpeg_size(f) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, walking the segments before it (None when the
    stream is not laid out as expected)."""
    if f.read(2) != b"\xff\xd8":
        return None
    while True:
        if f.read(1) != b"\xff":
            return None
        marker = f.read(1)
        while marker == b"\xff":  # fill bytes
            marker = f.read(1)
        if not marker or marker[0] in (0xD9, 0xDA):  # the end, or the scan, before any frame header
            return None
        if marker[0] in _JPEG_BARE:
            continue
        length = int.from_bytes(f.read(2), "big")
        if length < 2:
            return None
        if marker[0] in _JPEG_FRAMES:
            head = f.read(5)  # precision, height, width
            h, w = int.from_bytes(head[1:3], "big"), int.from_bytes(head[3:5], "big")
            return (w, h) if len(head) == 5 and w > 0 and h > 0 else None
        f.seek(length - 2, 1)


def _header_size(path: Path) -> tuple[int, int] | None:
    """(width, height) of a PNG or JPEG from its first bytes; None for anything else."""
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:8] == _PNG_SIGNATURE and head[12:16] == b"IHDR":
            w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
            return (w, h) if w > 0 and h > 0 else None
        if head[:2] == b"\xff\xd8":
            f.seek(0)
            return _jpeg_size(f)
    return None


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the file header, without decoding the pixels.

    PNG and JPEG headers are read here (a capture's thousands of frames are checked before
    anything loads: PIL's opening of each took most of that time); other files, and headers
    not laid out as expected, go through PIL. Raises ``ValueError`` when the file is not a
    readable image.
    """
    try:
        size = _header_size(path)
        if size is not None:
            return size
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


def read_rgb_into(path: Path, out: np.ndarray) -> tuple[int, int]:
    """Decode an image at full size into ``out`` (uint8 ``[H, W, 3]``, C-contiguous, writable)
    and return its (width, height); when that is not ``out``'s size nothing is written, and the
    caller says what it expected. Same pixels and errors as ``read_rgb``.

    JPEGs are decoded by libjpeg-turbo straight into ``out`` with Python's lock released for the
    whole file: a build decodes thousands of them in many threads, and PIL's parsing and its copy
    to an array hold that lock for a sixth of each decode. PIL uses the same library with the same
    settings (accurate DCT, smooth chroma upsampling), so the pixels are identical; anything the
    fast path does not take (PNG, CMYK, a file it finds damaged) goes through PIL, which also gives
    the error message.
    """
    if simplejpeg is not None and path.suffix.lower() in _JPEG_SUFFIXES:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{path}: cannot decode image ({exc})") from None
        try:
            height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
            if colorspace in ("CMYK", "YCCK"):
                raise ValueError(colorspace)
            if out.shape != (height, width, 3):
                return width, height
            simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False, buffer=out)
            return width, height
        except ValueError:
            pass  # PIL decodes it or names the problem
    img = read_rgb(path)
    if img.shape == out.shape:
        out[...] = img
    return img.shape[1], img.shape[0]


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
