"""Training losses: images (L1 + D-SSIM), lidar (range, hit probability, intensity), regularisers."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nurec_usd.ops.ssim import fast_ssim


def image_loss(image: torch.Tensor,  # [H, W, 3] or [C, H, W, 3] rendered
               target: torch.Tensor,  # the same shape
               mask: torch.Tensor | None,  # [H, W] / [C, H, W] bool or None
               ssim_weight: float) -> torch.Tensor:  # []
    """(1 - w) L1 + w (1 - SSIM), the usual 3DGS photometric loss; masked pixels take the target's value.

    For C views (``[C, H, W, 3]``) the loss is the sum of the views' losses, so each view's
    Gaussians get the gradient a step of that view alone would give them.
    The SSIM is :func:`fast_ssim`: the Warp kernels on a GPU (the torch version's grouped
    convolutions were a large share of a GPU training step), the torch version on the CPU.
    """
    if mask is not None:
        m = mask[..., None]
        image = torch.where(m, image, target)
    views = image.shape[0] if image.dim() == 4 else 1
    l1 = (image - target).abs().mean() * views
    if ssim_weight <= 0:
        return l1
    similarity = fast_ssim(image, target)  # the mean over the views
    return (1 - ssim_weight) * l1 + ssim_weight * (1 - similarity) * views


def lidar_loss(pred_range: torch.Tensor,  # [C, W] rendered expected range
               pred_hit: torch.Tensor,  # [C, W] rendered hit probability
               pred_intensity: torch.Tensor,  # [C, W] rendered intensity (0..1)
               true_range: torch.Tensor,  # [C, W] measured, 0 where no return, < 0 where unknown
               true_intensity: torch.Tensor,  # [C, W] measured, normalised to 0..1
               range_weight: float, hit_weight: float, intensity_weight: float,
               ) -> torch.Tensor:  # []
    """Range L1 (relative to range, so near and far returns weigh alike) on rays with a return;
    binary cross-entropy of the hit probability against return / no return (rays without a
    return, such as the sky, push floaters away); intensity L1 on returns. Rays marked
    unknown (a negative range: their return was the ego vehicle's, and dropped) count in none."""
    real = true_range > 0
    n_real = real.sum().clamp_min(1)
    rel = (pred_range - true_range).abs() / true_range.clamp_min(1.0)
    loss_range = torch.where(real, rel, torch.zeros_like(rel)).sum() / n_real
    hit = pred_hit.clamp(1e-4, 1 - 1e-4)
    known = (true_range >= 0).to(hit.dtype)
    loss_hit = (F.binary_cross_entropy(hit, real.to(hit.dtype), reduction="none") * known).sum() / \
        known.sum().clamp_min(1)
    loss_int = torch.where(real, (pred_intensity - true_intensity).abs(), torch.zeros_like(rel)).sum() / n_real
    return range_weight * loss_range + hit_weight * loss_hit + intensity_weight * loss_int


def regularisers(opacity_logits: torch.Tensor,  # [N]
                 log_scales: torch.Tensor,  # [N, 3]
                 opacity_weight: float, scale_weight: float) -> torch.Tensor:  # []
    """Mean opacity and mean scale penalties: they keep Gaussians small and let unneeded ones
    fade, so that relocation can reuse them (as in MCMC densification)."""
    return opacity_weight * torch.sigmoid(opacity_logits).mean() + scale_weight * log_scales.exp().mean()
