"""``FusedAdam``: torch's Adam, each tensor's step done by one Warp kernel (``warp_kernels.adam``)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterable

import torch

from nurec_usd.ops.warp_torch import launch, warp_device
from warp_kernels import adam as kadam


class FusedAdam:
    """Adam (no weight decay, no amsgrad) with one fused kernel launch per parameter tensor.

    Same update as ``torch.optim.Adam`` (the tests compare them step by step) and the same
    ``param_groups`` / ``state`` layout, which the densification edits. Parameters must be
    contiguous float32 tensors. Per-group ``lr`` as usual, so SH, means, scales, ... keep their
    own learning rates. Parameters without a gradient are skipped, as in torch.

    Not a ``torch.optim.Optimizer``: constructing one of those imports ``torch._dynamo``, 2-4 s
    of a build's wall time that nothing else in a build needs.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        if lr < 0 or eps < 0 or not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid Adam settings: lr={lr}, betas={betas}, eps={eps}")
        self.defaults = {"lr": lr, "betas": tuple(betas), "eps": eps}
        self.state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        params = list(params)
        if not params:
            raise ValueError("FusedAdam got an empty parameter list")
        for group in params if isinstance(params[0], dict) else [{"params": params}]:
            group = {**self.defaults, **group}
            group["params"] = list(group["params"])
            self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) every parameter's gradient."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
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
