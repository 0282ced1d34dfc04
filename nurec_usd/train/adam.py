"""``FusedAdam``: torch's Adam, each tensor's step done by one Warp kernel (``warp_kernels.adam``)."""

from __future__ import annotations

import math
from typing import Iterable

import torch

from nurec_usd.render.warp_torch import launch, warp_device
from warp_kernels import adam as kadam


class FusedAdam(torch.optim.Optimizer):
    """Adam (no weight decay, no amsgrad) with one fused kernel launch per parameter tensor.

    Same update as ``torch.optim.Adam`` (the tests compare them step by step). Parameters
    must be contiguous float32 tensors. Per-group ``lr`` as usual, so SH, means, scales, ...
    keep their own learning rates. Parameters without a gradient are skipped, as in torch.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        if lr < 0 or eps < 0 or not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid Adam settings: lr={lr}, betas={betas}, eps={eps}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        """One Adam step for every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for g, group in enumerate(self.param_groups):
            beta1, beta2 = group["betas"]
            for i, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                if p.dtype != torch.float32 or not p.is_contiguous() or p.grad.is_sparse:
                    raise ValueError(f"FusedAdam needs contiguous dense float32 parameters, got {p.dtype} "
                                     f"{tuple(p.shape)}")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                # One recorded launch per parameter (slot): its shapes stay, so a launch only
                # rewrites pointers (one shared launch rebuilt every descriptor per parameter).
                launch(kadam.adam_step, p.numel(), [
                    p.view(-1), p.grad.contiguous().view(-1), state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1),
                    float(group["lr"]), float(beta1), float(beta2), float(group["eps"]), 1.0 - beta1 ** t,
                    math.sqrt(1.0 - beta2 ** t)], device=warp_device(p.device), slot=("FusedAdam", g, i))
        return loss
