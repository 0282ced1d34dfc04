"""Pictures: JPEG encoding of the held-out pairs, with libjpeg-turbo's encoder and with PIL's."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from nurec_usd.util import pictures


def _smooth_picture(h: int = 48, w: int = 80) -> np.ndarray:  # [H, W, 3] uint8
    y, x = np.mgrid[0:h, 0:w]
    return np.stack((x * 255 // (w - 1), y * 255 // (h - 1), (x + y) * 255 // (w + h - 2)), -1).astype(np.uint8)


@pytest.mark.parametrize("with_simplejpeg", [True, False])
def test_encode_jpeg_writes_a_jpeg_of_the_picture(monkeypatch, with_simplejpeg):
    if not with_simplejpeg:
        monkeypatch.setattr(pictures, "simplejpeg", None)
    rgb = _smooth_picture()
    data = pictures.encode_jpeg(rgb[:, ::-1])  # a non-contiguous view is accepted
    with Image.open(io.BytesIO(data)) as im:
        assert im.format == "JPEG" and im.mode == "RGB" and im.size == (80, 48)
        assert im.layer[1][1:3] == (1, 1) and im.layer[0][1:3] == (2, 2)  # 4:2:0 chroma, as PIL writes
        back = np.asarray(im).astype(int)
    assert np.abs(back - rgb[:, ::-1]).mean() < 2.0


def test_both_encoders_give_nearly_the_same_file():
    rgb = _smooth_picture()
    fast = np.asarray(Image.open(io.BytesIO(pictures.encode_jpeg(rgb, quality=90)))).astype(int)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=90)
    slow = np.asarray(Image.open(buf)).astype(int)
    diff = np.abs(fast - slow)
    assert diff.mean() < 1.0 and diff.max() <= 6  # the same quality tables, other DCT rounding


def test_quantise_rounds_and_clamps_where_the_image_is():
    import torch

    image = torch.tensor([[[-0.1, 0.5, 1.2], [0.2 / 255, 0.6 / 255, 254.4 / 255]]])  # [1, 2, 3]
    out = pictures.quantise(image)
    assert out.dtype == torch.uint8 and out.device == image.device
    assert out.tolist() == [[[0, 128, 255], [0, 1, 254]]]
    assert (pictures.to_uint8(image) == out.numpy()).all()
