"""Image decoding: the JPEG fast path (libjpeg-turbo into a buffer) gives PIL's pixels and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nurec_usd.capture import images
from nurec_usd.capture.images import read_rgb, read_rgb_into


def _picture(h: int = 48, w: int = 64) -> np.ndarray:
    """A smooth picture with noise: chroma detail that subsampling and the DCT both touch."""
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(0)
    base = np.stack([x * 3.0 + 20 * np.sin(y / 5), y * 4.0, (x + y) * 2.0], -1) % 255
    return (base + rng.normal(0, 10, base.shape)).clip(0, 255).astype(np.uint8)


def _save(path: Path, mode: str = "RGB", **kwargs) -> Path:
    im = Image.fromarray(_picture())
    if mode != "RGB":
        im = im.convert(mode)
    im.save(path, **kwargs)
    return path


@pytest.mark.parametrize("name,mode,kwargs", [
    ("baseline.jpg", "RGB", {"quality": 95}),
    ("subsampled.jpeg", "RGB", {"quality": 80, "subsampling": 2}),  # 4:2:0
    ("full_chroma.jpg", "RGB", {"quality": 90, "subsampling": 0}),  # 4:4:4
    ("progressive.jpg", "RGB", {"quality": 90, "progressive": True}),
    ("grey.jpg", "L", {"quality": 90}),
    ("cmyk.jpg", "CMYK", {"quality": 90}),  # not the fast path's: PIL decodes it
    ("plain.png", "RGB", {}),
    ("grey.png", "L", {}),
])
def test_read_rgb_into_gives_read_rgb_pixels(tmp_path: Path, name: str, mode: str, kwargs: dict) -> None:
    path = _save(tmp_path / name, mode, **kwargs)
    expected = read_rgb(path)  # [H, W, 3]
    out = np.full(expected.shape, 7, np.uint8)
    assert read_rgb_into(path, out) == (expected.shape[1], expected.shape[0])
    np.testing.assert_array_equal(out, expected)  # bit for bit: the same library and settings


def test_fast_path_is_used_for_jpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JPEG goes through simplejpeg, not PIL (PIL refuses to open it here)."""
    if images.simplejpeg is None:
        pytest.skip("simplejpeg is not installed")
    path = _save(tmp_path / "a.jpg", quality=95)
    expected = read_rgb(path)

    def no_pil(*_args, **_kwargs):
        raise AssertionError("PIL was asked to decode a JPEG the fast path reads")

    monkeypatch.setattr(images, "read_rgb", no_pil)
    out = np.zeros_like(expected)
    read_rgb_into(path, out)
    np.testing.assert_array_equal(out, expected)


def test_without_simplejpeg_pil_decodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _save(tmp_path / "a.jpg", quality=95)
    expected = read_rgb(path)
    monkeypatch.setattr(images, "simplejpeg", None)
    out = np.zeros_like(expected)
    read_rgb_into(path, out)
    np.testing.assert_array_equal(out, expected)


def test_other_size_writes_nothing(tmp_path: Path) -> None:
    for path in (_save(tmp_path / "a.jpg", quality=95), _save(tmp_path / "a.png")):
        out = np.full((10, 20, 3), 3, np.uint8)
        assert read_rgb_into(path, out) == (64, 48)
        assert (out == 3).all()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_damaged_jpeg_gets_pils_message(tmp_path: Path, damage: str) -> None:
    good = _save(tmp_path / "good.jpg", quality=95).read_bytes()
    data = {"truncated": good[:len(good) // 2], "garbage": b"not a jpeg at all" * 10, "empty": b""}[damage]
    path = tmp_path / "bad.jpg"
    path.write_bytes(data)
    with pytest.raises(ValueError) as by_pil:
        read_rgb(path)
    with pytest.raises(ValueError) as by_fast:
        read_rgb_into(path, np.zeros((48, 64, 3), np.uint8))
    assert str(by_fast.value) == str(by_pil.value)
    assert str(path) in str(by_fast.value)


def test_missing_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "gone.jpg"
    with pytest.raises(ValueError, match="gone.jpg: cannot decode image"):
        read_rgb_into(path, np.zeros((48, 64, 3), np.uint8))


@pytest.mark.parametrize("name,mode,kwargs", [
    ("baseline.jpg", "RGB", {"quality": 95}),
    ("progressive.jpg", "RGB", {"quality": 90, "progressive": True}),
    ("with_exif.jpg", "RGB", {"exif": b"Exif\x00\x00" + bytes(30000)}),  # a long segment before the frame header
    ("cmyk.jpg", "CMYK", {"quality": 90}),
    ("plain.png", "RGB", {}),
    ("grey16.png", "I;16", {}),
])
def test_header_sizes_are_pils(tmp_path, name, mode, kwargs):
    """PNG and JPEG sizes are read from the headers without PIL (``_header_size``), and agree with it."""
    path = _save(tmp_path / name, mode, **kwargs) if mode != "I;16" else tmp_path / name
    if mode == "I;16":
        Image.fromarray((_picture()[..., 0].astype(np.uint16) * 257)).save(path)
    with Image.open(path) as im:
        want = im.size
    assert want == (64, 48)
    assert images._header_size(path) == want
    assert images.image_size(path) == want


def test_header_size_leaves_other_files_to_pil(tmp_path):
    """Headers not laid out as expected (a JPEG cut before its frame header, another format) go
    through PIL: its size, or its refusal as a ValueError naming the reason."""
    bmp = tmp_path / "x.bmp"
    Image.fromarray(_picture()).save(bmp)
    assert images._header_size(bmp) is None and images.image_size(bmp) == (64, 48)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(_save(tmp_path / "whole.jpg", "RGB").read_bytes()[:20])
    assert images._header_size(cut) is None
    with pytest.raises(ValueError, match="not a readable image"):
        images.image_size(cut)
    garbage = tmp_path / "garbage.png"
    garbage.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    assert images._header_size(garbage) is None
    with pytest.raises(ValueError, match="not a readable image"):
        images.image_size(garbage)
