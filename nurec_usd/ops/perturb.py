"""The densification noise: near-transparent Gaussians moved by noise shaped like themselves."""

from __future__ import annotations

import torch

from nurec_usd.ops.reference import perturb_transparent_reference
from nurec_usd.ops.warp_torch import launch, warp_device
from warp_kernels import perturb as kperturb


@torch.no_grad()
def perturb_transparent(means: torch.Tensor,  # [N, 3], moved in place
                        quats: torch.Tensor,  # [N, 4] (w, x, y, z), any norm
                        log_scales: torch.Tensor,  # [N, 3]
                        opacity_logits: torch.Tensor,  # [N]
                        scale: float, dead_opacity: float,
                        generator: torch.Generator | None = None) -> None:
    """Move near-transparent Gaussians by noise shaped like themselves (their rotation and scales).

    One Warp kernel (``warp_kernels.perturb``) for float32 tensors; the noise comes from
    ``torch.randn`` with ``generator``, as in :func:`perturb_transparent_reference`, its torch
    twin (used for other dtypes).
    """
    if means.shape[0] == 0 or scale <= 0:
        return
    if means.dtype != torch.float32:
        perturb_transparent_reference(means, quats, log_scales, opacity_logits, scale, dead_opacity, generator)
        return
    z = torch.randn(means.shape, device=means.device, generator=generator)  # [N, 3]
    launch(kperturb.perturb_transparent, means.shape[0],
           [means, quats, log_scales, opacity_logits, z, float(scale), float(dead_opacity)],
           device=warp_device(means.device))
