"""``fused_ssim``: the training loss's SSIM and its gradient in four Warp kernels.

The same function as :func:`nurec_usd.ops.reference.ssim` (its torch twin: Gaussian window 11,
sigma 1.5, K1 = 0.01, K2 = 0.03, per channel, the mean over the windows inside the image),
differentiable with respect to the image. The twin's five blurs are grouped convolutions,
forward and backward; here a row pass and a column pass compute all five blurs, SSIM and its
derivatives at once, and the backward is two transposed passes (``warp_kernels.ssim``).
"""

from __future__ import annotations

import torch
import warp as wp

from nurec_usd.ops.reference import SSIM_C1, SSIM_C2, gaussian_window, ssim
from nurec_usd.ops.warp_torch import launch, warp_device
from warp_kernels import ssim as kssim

__all__ = ["fused_ssim", "fast_ssim"]

_FLOATS = (torch.float32, torch.float64)
_KERNELS = {torch.float32: kssim.overloads(wp.float32), torch.float64: kssim.overloads(wp.float64)}
_windows: dict[tuple, torch.Tensor] = {}  # (size, sigma, dtype, device) -> the 1D window


def _window(size: int, sigma: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    key = (size, sigma, dtype, device)
    w = _windows.get(key)
    if w is None:
        w = _windows[key] = gaussian_window(size, sigma, dtype, device).contiguous()
    return w


class _FusedSSIM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, image: torch.Tensor, target: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
        # image, target: [B, H, W, C] contiguous; window: [K]
        B, H, W, C = image.shape
        K = window.shape[0]
        Hv, Wv = H - K + 1, W - K + 1
        kernels, device = _KERNELS[image.dtype], warp_device(image.device)
        rows = torch.empty(B, H, Wv, C, 5, dtype=image.dtype, device=image.device)
        launch(kernels["ssim_rows"], (B, H, Wv, C), [image, target, window, rows], device=device)
        coef = torch.empty(B, Hv, Wv, C, 4, dtype=image.dtype, device=image.device)
        launch(kernels["ssim_map"], (B, Hv, Wv, C), [rows, window, SSIM_C1, SSIM_C2, coef], device=device)
        ctx.save_for_backward(image, target, window, coef)
        return coef[..., 3].mean()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        image, target, window, coef = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        B, H, W, C = image.shape
        Hv, Wv = coef.shape[1], coef.shape[2]
        kernels, device = _KERNELS[image.dtype], warp_device(image.device)
        rows = torch.empty(B, Hv, W, C, 3, dtype=image.dtype, device=image.device)
        launch(kernels["ssim_grad_rows"], (B, Hv, W, C), [coef, window, rows], device=device)
        grad_image = torch.empty_like(image)
        launch(kernels["ssim_grad_cols"], (B, H, W, C),
               [rows, window, image, target, grad.detach().to(image.dtype).contiguous(), 1.0 / (B * Hv * Wv * C),
                grad_image], device=device)
        return grad_image, None, None


def fused_ssim(image: torch.Tensor,  # [H, W, C] or [B, H, W, C]
               target: torch.Tensor,  # same shape
               window: int = 11, sigma: float = 1.5) -> torch.Tensor:  # []
    """Mean SSIM of ``image`` against ``target``, as :func:`nurec_usd.ops.reference.ssim`, in
    Warp kernels; differentiable with respect to ``image`` (the target takes no gradient).

    Args:
        image: rendered image, float32 or float64, channels last.
        target: reference image, the same shape and dtype (no gradient flows into it).
        window: Gaussian window size in pixels (odd); the image must be at least this large.
        sigma: Gaussian window sigma in pixels.

    Returns:
        The mean SSIM over the windows inside the image and the channels, a 0-dim tensor.
    """
    if not isinstance(image, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("fused_ssim takes two tensors (image, target)")
    if image.shape != target.shape or image.dim() not in (3, 4):
        raise ValueError(f"image and target must have the same shape [H, W, C] or [B, H, W, C], got "
                         f"{tuple(image.shape)} and {tuple(target.shape)}")
    if image.dtype not in _FLOATS or target.dtype != image.dtype:
        raise ValueError(f"image and target must both be float32 or float64, got {image.dtype} and {target.dtype}")
    if image.device != target.device:
        raise ValueError(f"image is on {image.device}, target on {target.device}")
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd size, got {window}")
    if min(image.shape[-3], image.shape[-2]) < window:
        raise ValueError(f"images of {image.shape[-3]}x{image.shape[-2]} pixels are smaller than the "
                         f"{window}-pixel window")
    x = image if image.dim() == 4 else image[None]
    y = target if target.dim() == 4 else target[None]
    w = _window(window, sigma, image.dtype, image.device)
    return _FusedSSIM.apply(x.contiguous(), y.detach().contiguous(), w)


def fast_ssim(image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # []
    """The mean SSIM by the faster implementation for the device: :func:`fused_ssim` on a GPU
    (several times faster than the torch version), :func:`nurec_usd.ops.reference.ssim` on the
    CPU, where torch's convolutions are the faster. Both compute the same function."""
    return fused_ssim(image, target) if image.is_cuda else ssim(image, target)
