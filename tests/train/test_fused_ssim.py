"""fused_ssim (Warp kernels) against its torch twin nurec_usd.train.metrics.ssim, on the CPU.

Tolerances: float32 values within 1e-5 and gradients within 1e-5 of the largest gradient entry
(the two sum the windows in different orders, and a variance E[x^2] - mu^2 in float32 keeps
about 1e-7 of E[x^2]); float64 within 1e-12 / 1e-10; float64 gradcheck on tiny images.
"""

from __future__ import annotations

import math

import pytest
import torch

from nurec_usd.ops.ssim import fused_ssim
from nurec_usd.train.metrics import ssim

wp = pytest.importorskip("warp")


def structured_pair(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A smooth image with edges (gradients, a disc, stripes) in [0, 1] and a noisy, shifted copy:
    SSIM well inside (0, 1), where both of its terms matter."""
    g = torch.Generator().manual_seed(seed)
    *batch, H, W, C = shape
    v, u = torch.meshgrid(torch.linspace(0, 1, H, dtype=dtype), torch.linspace(0, 1, W, dtype=dtype), indexing="ij")
    disc = ((u - 0.4).square() + (v - 0.6).square() < 0.08).to(dtype)
    stripes = 0.5 + 0.5 * torch.sin(40 * u + 10 * v)
    channels = [0.6 * u + 0.3 * disc, 0.4 * v + 0.4 * stripes * disc, 0.3 + 0.5 * stripes * (1 - disc)]
    image = torch.stack([channels[c % 3] for c in range(C)], -1).expand(*batch, H, W, C).contiguous()
    noise = 0.08 * torch.randn(image.shape, generator=g, dtype=dtype)
    target = (torch.roll(image, shifts=1, dims=-2) + noise).clamp(0, 1)
    return image, target


@pytest.mark.parametrize("shape", [(2, 37, 52, 3), (41, 30, 3), (1, 11, 11, 1), (3, 16, 23, 2)])
def test_matches_twin_float32(shape):
    image, target = structured_pair(shape, torch.float32, seed=len(shape))
    x = image.clone().requires_grad_()
    x_ref = image.clone().requires_grad_()
    ours, ref = fused_ssim(x, target), ssim(x_ref, target)
    assert 0.0 < ref.item() < 1.0
    assert abs(ours.item() - ref.item()) < 1e-5
    (grad,) = torch.autograd.grad(3.0 * ours, x)
    (grad_ref,) = torch.autograd.grad(3.0 * ref, x_ref)
    assert (grad - grad_ref).abs().max() / grad_ref.abs().max() < 1e-5


def test_matches_twin_float64_and_other_windows():
    image, target = structured_pair((2, 29, 33, 3), torch.float64, seed=3)
    for window, sigma in ((11, 1.5), (7, 1.0), (3, 0.8), (1, 1.0)):
        x = image.clone().requires_grad_()
        x_ref = image.clone().requires_grad_()
        ours, ref = fused_ssim(x, target, window, sigma), ssim(x_ref, target, window, sigma)
        assert abs(ours.item() - ref.item()) < 1e-12, window
        (grad,) = torch.autograd.grad(ours, x)
        (grad_ref,) = torch.autograd.grad(ref, x_ref)
        assert (grad - grad_ref).abs().max() / grad_ref.abs().max() < 1e-10, window


def test_identical_images_score_one_with_zero_gradient():
    image, _ = structured_pair((19, 24, 3), torch.float32, seed=0)
    x = image.clone().requires_grad_()
    value = fused_ssim(x, image)
    assert math.isclose(value.item(), 1.0, abs_tol=1e-6)
    (grad,) = torch.autograd.grad(value, x)
    assert grad.abs().max() < 1e-5  # a maximum: the gradient vanishes


@pytest.mark.parametrize("shape", [(1, 13, 14, 2), (12, 15, 1)])
def test_gradcheck_float64(shape):
    image, target = structured_pair(shape, torch.float64, seed=5)
    x = image.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda z: fused_ssim(z, target), (x,), eps=1e-6, atol=1e-8)


def test_target_takes_no_gradient_and_batch_forms_agree():
    image, target = structured_pair((2, 20, 21, 3), torch.float32, seed=1)
    t = target.clone().requires_grad_()
    x = image.clone().requires_grad_()
    value = fused_ssim(x, t)
    value.backward()
    assert t.grad is None and x.grad is not None
    # A batch's mean is the mean of its images' (same size): each image alone, [H, W, C].
    each = [float(fused_ssim(image[b], target[b])) for b in range(2)]
    assert abs(value.item() - sum(each) / 2) < 1e-6


def test_input_errors_say_what_is_wrong():
    a = torch.rand(20, 20, 3)
    with pytest.raises(ValueError, match="same shape"):
        fused_ssim(a, torch.rand(20, 21, 3))
    with pytest.raises(ValueError, match="same shape"):
        fused_ssim(torch.rand(20, 3), torch.rand(20, 3))
    with pytest.raises(ValueError, match="float32 or float64"):
        fused_ssim(a, a.double())
    with pytest.raises(ValueError, match="smaller than the 11-pixel window"):
        fused_ssim(torch.rand(10, 30, 3), torch.rand(10, 30, 3))
    with pytest.raises(ValueError, match="odd"):
        fused_ssim(a, a, window=4)
    with pytest.raises(TypeError):
        fused_ssim(a, a.numpy())


@pytest.mark.parametrize("scalar", ["float32", "float64"])
def test_cuda_code_generation_aot(tmp_path, scalar):
    """The kernel module compiles to sm_90 CUDA (NVRTC, no GPU needed); float64 in its own module."""
    import warp_kernels.ssim as kernels

    wp.init()
    float_t = getattr(wp, scalar)
    module = kernels.overloads(float_t)["ssim_map"].module
    assert module.name == ("warp_kernels.ssim" if scalar == "float32" else "warp_kernels.ssim_f64")
    paths = wp.compile_aot_module(module, arch=90, module_dir=tmp_path)
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)
    assert any("sm90" in p.name for p in paths)
