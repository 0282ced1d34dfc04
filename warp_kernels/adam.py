"""The Adam update as one Warp kernel per parameter tensor: moments and parameter in one pass.

A torch Adam step is several element-wise kernels per tensor (moment updates, square root,
division, in-place update), each reading and writing the whole tensor; this kernel reads
parameter, gradient and moments once and writes them once. Bias corrections come from the
host-side step count (no device data is read on the host).
"""

import warp as wp


@wp.kernel
def adam_step(
    param: wp.array(dtype=wp.float32),  # [M] flattened parameter, updated in place
    grad: wp.array(dtype=wp.float32),  # [M]
    exp_avg: wp.array(dtype=wp.float32),  # [M] first moment, updated in place
    exp_avg_sq: wp.array(dtype=wp.float32),  # [M] second moment, updated in place
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    bias_correction1: float,  # 1 - beta1^step
    sqrt_bias_correction2: float,  # sqrt(1 - beta2^step)
):
    i = wp.tid()
    g = grad[i]
    m = beta1 * exp_avg[i] + (1.0 - beta1) * g
    v = beta2 * exp_avg_sq[i] + (1.0 - beta2) * g * g
    exp_avg[i] = m
    exp_avg_sq[i] = v
    # torch.optim.Adam's arithmetic: p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
    param[i] = param[i] - (lr / bias_correction1) * m / (wp.sqrt(v) / sqrt_bias_correction2 + eps)
