"""PSNR, SSIM and the lidar figures, against independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nurec_usd.train.metrics import lidar_errors, psnr, ssim


def test_psnr_of_a_known_error():
    a = torch.zeros(4, 5, 3)
    b = torch.full((4, 5, 3), 0.1)
    assert float(psnr(a, b)) == pytest.approx(20.0, abs=1e-4)
    mask = torch.zeros(4, 5, dtype=torch.bool)
    mask[0, 0] = True
    b[1:] = 0.5
    assert float(psnr(a, b, mask)) == pytest.approx(20.0, abs=1e-4)


def test_ssim_matches_an_opencv_computation():
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    x = rng.random((40, 50, 3))
    y = np.clip(x + 0.1 * rng.standard_normal(x.shape), 0, 1)
    # Wang et al.'s formula with OpenCV's Gaussian blur, keeping only windows fully inside the image
    def blur(z):
        return cv2.GaussianBlur(z, (11, 11), 1.5, borderType=cv2.BORDER_REPLICATE)[5:-5, 5:-5]
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    mx, my = blur(x), blur(y)
    sxx, syy, sxy = blur(x * x) - mx ** 2, blur(y * y) - my ** 2, blur(x * y) - mx * my
    expected = (((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx ** 2 + my ** 2 + c1) * (sxx + syy + c2))).mean()
    got = float(ssim(torch.from_numpy(x), torch.from_numpy(y)))
    assert got == pytest.approx(expected, abs=1e-6)
    assert float(ssim(torch.from_numpy(x), torch.from_numpy(x))) == pytest.approx(1.0, abs=1e-9)


def test_ssim_is_differentiable():
    x = torch.rand(13, 12, 3, dtype=torch.float64, requires_grad=True)
    y = torch.rand(13, 12, 3, dtype=torch.float64)
    torch.autograd.gradcheck(lambda a: ssim(a, y), (x,), fast_mode=True)


def test_lidar_errors():
    true = torch.tensor([[10.0, 0.0, 20.0, 5.0]])
    pred = torch.tensor([[10.5, 3.0, 19.0, 0.0]])
    hit = torch.tensor([[0.9, 0.9, 0.8, 0.1]])
    e = lidar_errors(pred, hit, true)
    assert e["median_range_error_m"] == pytest.approx(0.75)  # median of 0.5 and 1.0
    assert e["hit_accuracy"] == pytest.approx(0.5)  # ray 0 and 2 right; 1 false hit; 3 missed
    assert e["returns"] == 3
    nothing = lidar_errors(pred, torch.zeros_like(hit), true)
    assert math.isnan(nothing["median_range_error_m"])
