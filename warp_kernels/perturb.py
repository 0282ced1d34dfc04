"""The densification's noise step as one Warp kernel: near-transparent Gaussians drift.

In torch (``nurec_usd.train.densify.perturb_transparent_reference``, its twin) this is about 20
element-wise operations and a batched 3x3 matrix product over every Gaussian, twice per training
step (static and actor Gaussians): host time for the launches and GPU time for the small
matrix products (benchmarks/RESULTS.md, training step).
One thread per Gaussian does it here; the standard-normal noise is drawn by torch (its
generator, so runs stay reproducible).
"""

import warp as wp


@wp.kernel(enable_backward=False)
def perturb_transparent(
    means: wp.array(dtype=wp.vec3f),  # [N] updated in place
    quats: wp.array(dtype=wp.vec4f),  # [N] (w, x, y, z), any norm
    log_scales: wp.array(dtype=wp.vec3f),  # [N]
    opacity_logits: wp.array(dtype=wp.float32),  # [N]
    noise: wp.array(dtype=wp.vec3f),  # [N] standard normal
    scale: float,  # the step's noise scale
    dead_opacity: float,  # opacity below which a Gaussian counts as transparent
):
    """means += R(q) (noise * exp(log_scales)) * scale * gate, gate = sigmoid(-100 (opacity - dead))."""
    i = wp.tid()
    opacity = 1.0 / (1.0 + wp.exp(-opacity_logits[i]))
    gate = 1.0 / (1.0 + wp.exp(100.0 * (opacity - dead_opacity)))  # ~1 transparent, ~0 opaque
    qv = quats[i]
    inv = 1.0 / wp.max(wp.length(qv), 1.0e-12)  # the torch version's quat_normalize
    q = wp.quatf(qv[1] * inv, qv[2] * inv, qv[3] * inv, qv[0] * inv)
    s = log_scales[i]
    local = wp.cw_mul(noise[i], wp.vec3f(wp.exp(s[0]), wp.exp(s[1]), wp.exp(s[2])))
    means[i] = means[i] + wp.quat_rotate(q, local) * (scale * gate)
