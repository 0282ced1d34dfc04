"""``sky_lookup``: the sky map's colours for world directions, in Warp kernels (``warp_kernels.sky``).

The same function as :func:`nurec_usd.ops.reference.sky_colors_reference` (``grid_sample``
on the map padded with one wrapped column on each side), differentiable with respect to the
map only. Its backward sums the gradients of neighbouring pixels that share a texel footprint
within each CUDA warp before adding them into the map: the map is small and a camera image
large, and the twin's one atomic per pixel and corner contend.
"""

from __future__ import annotations

import torch
import warp as wp

from nurec_usd.ops.warp_torch import launch, warp_device
from warp_kernels import sky as ksky

__all__ = ["sky_lookup"]

_FLOATS = (torch.float32, torch.float64)
_KERNELS = {torch.float32: ksky.overloads(wp.float32), torch.float64: ksky.overloads(wp.float64)}
WARP_LANES = 32  # the backward's launch is a whole number of CUDA warps


class _SkyLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, sky: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
        # sky: [3, H, W] contiguous; directions: [M, 3] contiguous, the map's dtype
        colors = torch.empty_like(directions)  # [M, 3]
        launch(_KERNELS[sky.dtype]["sky_lookup"], directions.shape[0], [sky, directions, colors],
               device=warp_device(sky.device))
        ctx.save_for_backward(sky, directions)
        return colors

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_colors: torch.Tensor):
        sky, directions = ctx.saved_tensors
        grad_sky = None
        if ctx.needs_input_grad[0]:
            M = directions.shape[0]
            grad_sky = torch.zeros_like(sky)
            launch(_KERNELS[sky.dtype]["sky_lookup_backward"], -(-M // WARP_LANES) * WARP_LANES,
                   [sky, directions, grad_colors.contiguous(), M, grad_sky], device=warp_device(sky.device))
        return grad_sky, None


def sky_lookup(sky: torch.Tensor,  # [3, H, W] pre-sigmoid equirectangular map
               directions: torch.Tensor,  # [..., 3] unit, world (Z up)
               ) -> torch.Tensor:  # [..., 3]
    """Sky colours (sigmoid of the map, bilinear, wrapping in azimuth) for world directions.

    Differentiable with respect to ``sky``; ``directions`` take no gradient (use the twin,
    ``sky_colors_reference``, where they need one).

    Args:
        sky: the map's pre-sigmoid values, rows from +90 to -90 degrees of elevation, columns
            over azimuth -180 to +180 degrees; float32 or float64.
        directions: unit directions in the world frame; converted to the map's dtype.

    Returns:
        RGB colours in [0, 1], the directions' shape with the last dimension 3.
    """
    if sky.dim() != 3 or sky.shape[0] != 3 or sky.shape[1] < 1 or sky.shape[2] < 1:
        raise ValueError(f"sky must have shape [3, H, W], got {tuple(sky.shape)}")
    if sky.dtype not in _FLOATS:
        raise ValueError(f"sky must be float32 or float64, got {sky.dtype}")
    if directions.shape[-1:] != (3,):
        raise ValueError(f"directions must have shape [..., 3], got {tuple(directions.shape)}")
    if directions.device != sky.device:
        raise ValueError(f"directions are on {directions.device}, the sky on {sky.device}")
    shape = directions.shape[:-1]
    d = directions.detach().reshape(-1, 3).to(sky.dtype).contiguous()
    return _SkyLookup.apply(sky.contiguous(), d).reshape(*shape, 3)
