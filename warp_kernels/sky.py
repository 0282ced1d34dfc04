"""The sky's bilinear lookup in its equirectangular map, forward and backward, as Warp kernels.

The torch twin (``nurec_usd.ops.reference.sky_colors_reference``) samples the map with
``grid_sample``; its backward adds every pixel's four corner weights into the map atomically.
The map is tiny (3 x 16 x 64 texels by default) and a camera image has ~1M pixels, so ~900
pixels land on each texel, and those atomics serialise (benchmarks/RESULTS.md, sky). Here the
backward first sums, within each CUDA warp, the lanes that share their texel footprint (a
segmented scan over the 32 lanes: neighbouring pixels of a row), and only the last lane of each
run adds into the map.

Geometry, as the twin: azimuth atan2(y, x) spans the map's W columns with one wrapped column
added on each side (so +-180 degrees blend), elevation +90 degrees at the top row, bilinear
weights of ``grid_sample`` (align_corners=False, border padding: coordinates clamped to the
padded map). Colours are the sigmoid of the map's values.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from warp_kernels.modules import variant_module

_PI = 3.14159265358979323846


@wp.func
def sky_footprint(d: Any, rows: int, cols: int):
    """Texel coordinates (x in the padded map of cols + 2 columns, y) of direction d, clamped as
    grid_sample's border padding clamps them."""
    one = type(d[0])(1.0)
    half = type(d[0])(0.5)
    az = wp.atan2(d[1], d[0])
    el = wp.asin(wp.clamp(d[2], -one, one))
    padded = cols + 2
    u = (az / type(d[0])(_PI)) * (type(d[0])(cols) / type(d[0])(padded))
    v = -el / (type(d[0])(_PI) * half)
    x = ((u + one) * type(d[0])(padded) - one) * half
    y = ((v + one) * type(d[0])(rows) - one) * half
    x = wp.clamp(x, type(d[0])(0.0), type(d[0])(padded - 1))
    y = wp.clamp(y, type(d[0])(0.0), type(d[0])(rows - 1))
    return x, y


@wp.func
def map_column(c: int, cols: int):
    """The map column of padded column c (0 and cols + 1 wrap around)."""
    return (c - 1 + cols) % cols


@wp.kernel(enable_backward=False)
def sky_lookup(
    sky: wp.array3d(dtype=Any),  # [3, rows, cols] pre-sigmoid map
    directions: wp.array(dtype=Any),  # [M] vec3, world, unit
    colors: wp.array(dtype=Any),  # [M] vec3 out
):
    """One thread per direction: the bilinear colour."""
    i = wp.tid()
    rows = sky.shape[1]
    cols = sky.shape[2]
    x, y = sky_footprint(directions[i], rows, cols)
    x0 = int(wp.floor(x))
    y0 = int(wp.floor(y))
    fx = x - type(x)(x0)
    fy = y - type(x)(y0)
    one = type(x)(1.0)
    zero = type(x)(0.0)
    out = wp.vector(zero, zero, zero)
    for corner in range(4):
        cx = x0 + corner % 2
        cy = y0 + corner // 2
        if cx <= cols + 1 and cy < rows:  # a corner past the border weighs 0 (x, y are clamped)
            w = wp.where(corner % 2 == 1, fx, one - fx) * wp.where(corner // 2 == 1, fy, one - fy)
            col = map_column(cx, cols)
            for ch in range(3):
                out[ch] = out[ch] + w / (one + wp.exp(-sky[ch, cy, col]))
    colors[i] = out


# A segmented inclusive sum over the lanes of a CUDA warp: lanes whose key equals their
# neighbour's form one run, and each lane gets the sum of its run up to itself (so the run's last
# lane holds the run's total). Runs are contiguous lanes: a key met again after another one starts
# a new run (still correct, one more atomic). All 32 lanes must call it. CPU: a warp of one.
_SEGMENTED_SUM = """
#if defined(__CUDA_ARCH__)
const unsigned full = 0xffffffff;
const int lane = threadIdx.x & 31;
const int prev = __shfl_up_sync(full, key, 1);
int start = (lane == 0 || prev != key) ? lane : 0;
for (int o = 1; o < 32; o <<= 1) {
    const int s = __shfl_up_sync(full, start, o);
    if (lane >= o && s > start) start = s;
}
auto out = v;
for (int o = 1; o < 32; o <<= 1) {
    for (int e = 0; e < 12; ++e) {
        const T s = __shfl_up_sync(full, out.c[e], o);
        if (lane - o >= start) out.c[e] += s;
    }
}
return out;
#else
return v;
#endif
"""


@wp.func_native(_SEGMENTED_SUM.replace("T ", "float "))
def run_sum12(key: int, v: wp.types.vector(12, wp.float32)) -> wp.types.vector(12, wp.float32):
    """Segmented inclusive sum of 12 values over the warp's runs of equal ``key``."""
    ...


@wp.func_native(_SEGMENTED_SUM.replace("T ", "double "))
def run_sum12(key: int, v: wp.types.vector(12, wp.float64)) -> wp.types.vector(12, wp.float64):  # noqa: F811
    """float64 :func:`run_sum12`."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
const int next = __shfl_down_sync(0xffffffff, key, 1);
return ((threadIdx.x & 31) == 31 || next != key) ? 1 : 0;
#else
return 1;
#endif
""")
def run_end(key: int) -> int:
    """1 in the last lane of a run of equal ``key`` (every thread on the CPU). All 32 lanes call it."""
    ...


@wp.kernel(enable_backward=False)
def sky_lookup_backward(
    sky: wp.array3d(dtype=Any),  # [3, rows, cols] pre-sigmoid map
    directions: wp.array(dtype=Any),  # [M] vec3
    grad_colors: wp.array(dtype=Any),  # [M] vec3
    num: int,  # M (the launch is rounded up to whole warps)
    grad_sky: wp.array3d(dtype=Any),  # [3, rows, cols] accumulated
):
    """One thread per direction: its colour gradient times the corner weights, summed over the
    warp's run of lanes with the same footprint, added into the map (through the sigmoid) by the
    run's last lane. Launch a whole number of warps: every lane reaches the warp sums."""
    i = wp.tid()
    rows = sky.shape[1]
    cols = sky.shape[2]
    zero = sky[0, 0, 0] * type(sky[0, 0, 0])(0.0)
    one = zero + type(zero)(1.0)
    contrib = wp.vector(zero, zero, zero, zero, zero, zero, zero, zero, zero, zero, zero, zero)  # 4 corners x 3 channels
    key = -1
    x0 = int(0)
    y0 = int(0)
    if i < num:
        x, y = sky_footprint(directions[i], rows, cols)
        x0 = int(wp.floor(x))
        y0 = int(wp.floor(y))
        fx = x - type(x)(x0)
        fy = y - type(x)(y0)
        g = grad_colors[i]
        for corner in range(4):
            w = wp.where(corner % 2 == 1, fx, one - fx) * wp.where(corner // 2 == 1, fy, one - fy)
            for ch in range(3):
                contrib[3 * corner + ch] = w * g[ch]
        key = y0 * (cols + 2) + x0
    total = run_sum12(key, contrib)
    if run_end(key) == 1 and key >= 0:
        for corner in range(4):
            cx = x0 + corner % 2
            cy = y0 + corner // 2
            if cx <= cols + 1 and cy < rows:
                col = map_column(cx, cols)
                for ch in range(3):
                    s = one / (one + wp.exp(-sky[ch, cy, col]))
                    wp.atomic_add(grad_sky, ch, cy, col, total[3 * corner + ch] * s * (one - s))


# ---------------------------------------------------------------------------------------------
# Overloads: float32 (GPU path) and float64 (gradient checks).


_OVERLOADS: dict[type, dict[str, wp.Kernel]] = {}


def overloads(scalar: type) -> dict[str, wp.Kernel]:
    """The concrete kernels for ``scalar`` (wp.float32 or wp.float64), by kernel name."""
    return _OVERLOADS[scalar]


def _declare_overloads(scalar: type) -> None:
    kernels = (sky_lookup, sky_lookup_backward)
    module = variant_module(__name__, scalar)
    if module is not None:
        kernels = tuple(wp.kernel(enable_backward=False, module=module)(k.func) for k in kernels)
    lookup, backward = kernels
    sky = wp.array3d(dtype=scalar)
    v3 = wp.array(dtype=wp.types.vector(3, scalar))
    found = _OVERLOADS[scalar] = {}
    found["sky_lookup"] = wp.overload(lookup, {"sky": sky, "directions": v3, "colors": v3})
    found["sky_lookup_backward"] = wp.overload(backward, {"sky": sky, "directions": v3, "grad_colors": v3,
                                                          "num": int, "grad_sky": sky})


_declare_overloads(wp.float32)
_declare_overloads(wp.float64)
