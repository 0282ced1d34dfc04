"""Structural similarity (SSIM) of two images and its gradient, as four Warp kernels.

The training loss's SSIM (``nurec_usd.train.metrics.ssim``, its torch twin) blurs five images
(x, y, x^2, y^2, xy) with an 11-tap Gaussian, each blur two grouped convolutions, and autograd
adds as many again: a large share of a drive30 training step (benchmarks/RESULTS.md, ssim).
Here the blur is separable and fused:

  * :data:`ssim_rows`: along each row, the window's weighted sums of the five images at once;
  * :data:`ssim_map`: down each column, the five blurred values, then SSIM and its partial
    derivatives with respect to (mu_x, E[x^2], E[xy]) at every output pixel;
  * backward, the transposed blur of those derivatives, rows (:data:`ssim_grad_rows`) then
    columns (:data:`ssim_grad_cols`), which also applies the chain rule through x^2 and xy.

Layout: images [B, H, W, C] (channels last, as the renderer writes them); windows inside the
image only ("valid": Hv = H - K + 1 rows, Wv = W - K + 1 columns of outputs), as the twin.

Gradient: with S = (2 mx my + C1)(2 sxy + C2) / ((mx^2 + my^2 + C1)(sxx + syy + C2)) and
sxx = E[x^2] - mx^2, sxy = E[xy] - mx my, the derivatives per output pixel are
  dS/dE[x^2] = -S / (sxx + syy + C2),  dS/dE[xy] = 2 (2 mx my + C1) / denominator,
  dS/dmx = 2 my (2 sxy + C2) / denominator - 2 S mx / (mx^2 + my^2 + C1)
           - 2 mx dS/dE[x^2] - my dS/dE[xy],
and dL/dx = blur^T(g dS/dmx) + 2 x blur^T(g dS/dE[x^2]) + y blur^T(g dS/dE[xy]).

Every kernel is generic over the float type: float32 on the GPU, float64 for the tests'
gradient checks (a module of its own, ``warp_kernels.modules``).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from warp_kernels.modules import variant_module


@wp.kernel(enable_backward=False)
def ssim_rows(
    x: wp.array4d(dtype=Any),  # [B, H, W, C] image
    y: wp.array4d(dtype=Any),  # [B, H, W, C] target
    weights: wp.array(dtype=Any),  # [K] the 1D window
    rows: wp.array4d(dtype=Any),  # [B, H, Wv, C] vec5 out: row sums of x, y, x^2, y^2, xy
):
    """One thread per (image, row, output column, channel): the window's sums along the row."""
    b, h, w, c = wp.tid()
    zero = weights[0] * type(weights[0])(0.0)
    sx = zero
    sy = zero
    sxx = zero
    syy = zero
    sxy = zero
    for k in range(weights.shape[0]):
        g = weights[k]
        xv = x[b, h, w + k, c]
        yv = y[b, h, w + k, c]
        gx = g * xv
        gy = g * yv
        sx += gx
        sy += gy
        sxx += gx * xv
        syy += gy * yv
        sxy += gx * yv
    rows[b, h, w, c] = wp.vector(sx, sy, sxx, syy, sxy)


@wp.kernel(enable_backward=False)
def ssim_map(
    rows: wp.array4d(dtype=Any),  # [B, H, Wv, C] vec5, from ssim_rows
    weights: wp.array(dtype=Any),  # [K]
    c1: Any,
    c2: Any,
    out: wp.array4d(dtype=Any),  # [B, Hv, Wv, C] vec4 out: dS/dmx, dS/dE[x^2], dS/dE[xy], S
):
    """One thread per output pixel and channel: the column sums, SSIM and its derivatives."""
    b, h, w, c = wp.tid()
    acc = rows[b, h, w, c] * weights[0]
    for k in range(1, weights.shape[0]):
        acc += rows[b, h + k, w, c] * weights[k]
    mx = acc[0]
    my = acc[1]
    sxx = acc[2] - mx * mx
    syy = acc[3] - my * my
    sxy = acc[4] - mx * my
    two = type(mx)(2.0)
    num_l = two * mx * my + c1  # luminance term
    num_c = two * sxy + c2  # contrast-structure term
    den_l = mx * mx + my * my + c1
    den_c = sxx + syy + c2
    den = den_l * den_c
    s = num_l * num_c / den
    d_exx = -s / den_c
    d_exy = two * num_l / den
    d_mx = two * my * num_c / den - two * s * mx / den_l - two * mx * d_exx - my * d_exy
    out[b, h, w, c] = wp.vector(d_mx, d_exx, d_exy, s)


@wp.kernel(enable_backward=False)
def ssim_grad_rows(
    coef: wp.array4d(dtype=Any),  # [B, Hv, Wv, C] vec4, from ssim_map
    weights: wp.array(dtype=Any),  # [K]
    rows: wp.array4d(dtype=Any),  # [B, Hv, W, C] vec3 out
):
    """One thread per (image, output row, input column, channel): the transposed row blur of the
    three derivatives (the output columns whose window covers this input column)."""
    b, h, w, c = wp.tid()
    num_w = coef.shape[2]
    zero = weights[0] * type(weights[0])(0.0)
    acc = wp.vector(zero, zero, zero)
    for k in range(weights.shape[0]):
        j = w - k
        if j >= 0 and j < num_w:
            d = coef[b, h, j, c]
            acc += wp.vector(d[0], d[1], d[2]) * weights[k]
    rows[b, h, w, c] = acc


@wp.kernel(enable_backward=False)
def ssim_grad_cols(
    rows: wp.array4d(dtype=Any),  # [B, Hv, W, C] vec3, from ssim_grad_rows
    weights: wp.array(dtype=Any),  # [K]
    x: wp.array4d(dtype=Any),  # [B, H, W, C] image
    y: wp.array4d(dtype=Any),  # [B, H, W, C] target
    grad_out: wp.array(dtype=Any),  # [1] dL/d(mean SSIM), read on the device
    inv_count: Any,  # 1 / (B Hv Wv C): the mean's weight
    grad_x: wp.array4d(dtype=Any),  # [B, H, W, C] out
):
    """One thread per input pixel and channel: the transposed column blur, then the chain rule
    through x (mean), x^2 and xy."""
    b, h, w, c = wp.tid()
    num_h = rows.shape[1]
    zero = weights[0] * type(weights[0])(0.0)
    acc = wp.vector(zero, zero, zero)
    for k in range(weights.shape[0]):
        i = h - k
        if i >= 0 and i < num_h:
            acc += rows[b, i, w, c] * weights[k]
    two = type(zero)(2.0)
    g = grad_out[0] * inv_count
    grad_x[b, h, w, c] = g * (acc[0] + two * x[b, h, w, c] * acc[1] + y[b, h, w, c] * acc[2])


# ---------------------------------------------------------------------------------------------
# Overloads: float32 (GPU path) and float64 (gradient checks).


_OVERLOADS: dict[type, dict[str, wp.Kernel]] = {}


def overloads(scalar: type) -> dict[str, wp.Kernel]:
    """The concrete kernels for ``scalar`` (wp.float32 or wp.float64), by kernel name."""
    return _OVERLOADS[scalar]


def _declare_overloads(scalar: type) -> None:
    kernels = (ssim_rows, ssim_map, ssim_grad_rows, ssim_grad_cols)
    module = variant_module(__name__, scalar)
    if module is not None:
        kernels = tuple(wp.kernel(enable_backward=False, module=module)(k.func) for k in kernels)
    rows_k, map_k, grad_rows_k, grad_cols_k = kernels
    img = wp.array4d(dtype=scalar)
    w = wp.array(dtype=scalar)
    vec = lambda n: wp.array4d(dtype=wp.types.vector(n, scalar))  # noqa: E731
    found = _OVERLOADS[scalar] = {}
    found["ssim_rows"] = wp.overload(rows_k, {"x": img, "y": img, "weights": w, "rows": vec(5)})
    found["ssim_map"] = wp.overload(map_k, {"rows": vec(5), "weights": w, "c1": scalar, "c2": scalar,
                                            "out": vec(4)})
    found["ssim_grad_rows"] = wp.overload(grad_rows_k, {"coef": vec(4), "weights": w, "rows": vec(3)})
    found["ssim_grad_cols"] = wp.overload(grad_cols_k, {"rows": vec(3), "weights": w, "x": img, "y": img,
                                                        "grad_out": w, "inv_count": scalar, "grad_x": img})


_declare_overloads(wp.float32)
_declare_overloads(wp.float64)
