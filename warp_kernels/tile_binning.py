"""Binning projected Gaussians into 16x16 pixel tiles, for every camera of a launch.

A splat is drawn where alpha = opacity exp(-d^T conic d / 2) >= ALPHA_MIN, i.e. inside the
ellipse d^T Sigma^-1 d <= r2 with r2 = 2 ln(opacity / ALPHA_MIN) (Sigma = conic^-1, the 2D
covariance). Binning walks the tile rows that ellipse reaches and, in each, takes the tiles
whose pixel centres meet the ellipse's exact x-range over the row's pixel-centre lines
(``row_span``): a thin diagonal splat lands in a diagonal band of tiles, not in its square
box. The test is conservative (r2 widened by ``SPAN_MARGIN``), so the image is unchanged.
``count_tiles`` counts the tiles (after a leading zero); their inclusive scan gives each
splat's first slot and, last, the total. ``emit_keys`` writes one (key, value) per tile
into fixed-capacity buffers: the key is
``tile << 32 | depth bits`` (the global tile id across cameras, then the float32 depth's
bit pattern, which orders like the depth for positive values) and the value the
Gaussian's index. After a radix sort, ``tile_ranges`` finds each tile's slice.
Intersections past the capacity are not written; the scan's total counts all of them, and
``tile_ranges`` flags the overflow on the device.

The fills a render needs ride along with these kernels rather than taking launches of their
own (each launch or torch fill is host time, and small renders are bound by it):
``count_tiles`` zeroes the tile ranges, and ``emit_keys`` pads the key slots past the total.
"""

import warp as wp

from warp_kernels.compositing import ALPHA_MIN
from warp_kernels.modules import variant_module

# integer bookkeeping only: no adjoints (less to compile)
wp.set_module_options({"enable_backward": False})

TILE_SIZE = 16
SPAN_MARGIN = 1e-3  # relative widening of r2: rounding (and fast-math exp in the rasterizer) never drops a pixel
KEY_PAD = wp.constant(wp.int64(0x7FFFFFFFFFFFFFFF))  # sorts after every real key


@wp.func_native("""
union { float f; unsigned int u; } v;
v.f = x;
return v.u;
""")
def float_bits(x: wp.float32) -> wp.uint32:
    """The IEEE bit pattern of x (orders like x for x >= 0)."""
    ...


def make_binning_kernels(float_t):
    """``count_tiles`` and ``emit_keys`` for one float type of the projected splats."""
    module = variant_module(__name__, float_t)  # float64 kernels compile apart (warp_kernels.modules)
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)
    ts = float_t(TILE_SIZE)
    last = float_t(TILE_SIZE - 1)  # offset of a tile's last pixel centre from its first

    @wp.func(module=module)
    def ellipse(conic: vec3, opacity: float_t):
        """(Sigma_xx, Sigma_xy, Sigma_yy, r2) of the splat's drawn ellipse."""
        inv = float_t(1.0) / (conic[0] * conic[2] - conic[1] * conic[1])
        r2 = float_t(2.0 * (1.0 + SPAN_MARGIN)) * wp.log(opacity / float_t(ALPHA_MIN))
        return conic[2] * inv, -conic[1] * inv, conic[0] * inv, r2

    @wp.func(module=module)
    def row_span(sxx: float_t, sxy: float_t, syy: float_t, r2: float_t, ya: float_t, yb: float_t):
        """The ellipse's x-range over the horizontal strip ya <= y <= yb (both relative to the
        centre and inside [-hy, hy]). At height y the ellipse spans mu(y) -/+ w(y) with
        mu = y Sxy / Syy and w = sqrt((det / Syy)(r2 - y^2 / Syy)); mu - w is convex, so its
        minimum over the strip is the ellipse's leftmost point when that lies in the strip
        (at y = -r Sxy / sqrt(Sxx), x = -r sqrt(Sxx)) and an end of the strip otherwise."""
        slope = sxy / syy
        cond = (sxx * syy - sxy * sxy) / syy
        wa = wp.sqrt(wp.max(float_t(0.0), cond * (r2 - ya * ya / syy)))
        wb = wp.sqrt(wp.max(float_t(0.0), cond * (r2 - yb * yb / syy)))
        r_sx = wp.sqrt(r2 * sxx)
        y_right = sxy * wp.sqrt(r2 / sxx)
        lo = wp.min(slope * ya - wa, slope * yb - wb)
        hi = wp.max(slope * ya + wa, slope * yb + wb)
        if ya <= -y_right and -y_right <= yb:
            lo = -r_sx
        if ya <= y_right and y_right <= yb:
            hi = r_sx
        return lo, hi

    @wp.func(module=module)
    def row_tiles(uv: vec2, sxx: float_t, sxy: float_t, syy: float_t, r2: float_t, ty: int, tiles_x: int):
        """Tiles [x0, x1) of tile row ty whose pixel centres meet the ellipse (x1 <= x0: none)."""
        hy = wp.sqrt(r2 * syy)
        ya = wp.max(float_t(ty) * ts - uv[1], -hy)
        yb = wp.min(float_t(ty) * ts + last - uv[1], hy)
        x0 = int(0)
        x1 = int(0)
        if ya <= yb:
            lo, hi = row_span(sxx, sxy, syy, r2, ya, yb)
            x0 = wp.max(int(wp.ceil((uv[0] + lo - last) / ts)), 0)
            x1 = wp.min(int(wp.floor((uv[0] + hi) / ts)) + 1, tiles_x)
        return x0, x1

    @wp.func(module=module)
    def tile_rows(uv: vec2, syy: float_t, r2: float_t, tiles_y: int):
        """Tile rows [y0, y1) with a pixel-centre line inside the ellipse's height."""
        hy = wp.sqrt(r2 * syy)
        y0 = wp.max(int(wp.ceil((uv[1] - hy - last) / ts)), 0)
        y1 = wp.min(int(wp.floor((uv[1] + hy) / ts)) + 1, tiles_y)
        return y0, y1

    @wp.kernel(module=module)
    def count_tiles(
        means2d: wp.array2d(dtype=vec2),  # [C, N]
        conics: wp.array2d(dtype=vec3),  # [C, N]
        opacities2d: wp.array2d(dtype=float_t),  # [C, N]
        radii: wp.array2d(dtype=wp.int32),  # [C, N]: 0 = culled
        tiles_x: int,
        tiles_y: int,
        counts: wp.array(dtype=wp.int32),  # [C * N + 1] out: 0, then each splat's tile count
        ranges: wp.array2d(dtype=wp.int32),  # [num_tiles + 1, 2] out: zeroed, for tile_ranges
    ):
        # One leading zero: an inclusive scan of counts is then the exclusive offsets followed
        # by the total (torch.cumsum, which a CUDA graph can capture).
        c, i = wp.tid()
        n = radii.shape[1]
        for r in range(c * n + i, ranges.shape[0], radii.shape[0] * n):
            ranges[r, 0] = 0
            ranges[r, 1] = 0
        count = int(0)
        if radii[c, i] > 0:
            uv = means2d[c, i]
            sxx, sxy, syy, r2 = ellipse(conics[c, i], opacities2d[c, i])
            y0, y1 = tile_rows(uv, syy, r2, tiles_y)
            for ty in range(y0, y1):
                x0, x1 = row_tiles(uv, sxx, sxy, syy, r2, ty, tiles_x)
                count += wp.max(x1 - x0, 0)
        counts[c * n + i + 1] = count
        if c == 0 and i == 0:
            counts[0] = 0

    @wp.kernel(module=module)
    def emit_keys(
        means2d: wp.array2d(dtype=vec2),  # [C, N]
        conics: wp.array2d(dtype=vec3),  # [C, N]
        opacities2d: wp.array2d(dtype=float_t),  # [C, N]
        radii: wp.array2d(dtype=wp.int32),  # [C, N]
        depths: wp.array2d(dtype=float_t),  # [C, N]
        offsets: wp.array(dtype=wp.int32),  # [C * N + 1] each splat's first slot, then the total
        tiles_x: int,
        tiles_y: int,
        capacity: int,
        keys: wp.array(dtype=wp.int64),  # [>= capacity] out; slots [total, capacity) get KEY_PAD
        values: wp.array(dtype=wp.int32),  # [>= capacity] out: camera * N + Gaussian
    ):
        c, i = wp.tid()
        n = radii.shape[1]
        flat = c * n + i
        splats = radii.shape[0] * n
        # KEY_PAD in the slots past the total, so that the fixed-size sort leaves them last
        for p in range(offsets[splats] + flat, capacity, splats):
            keys[p] = KEY_PAD
        count = offsets[flat + 1] - offsets[flat]
        if count == 0:
            return
        uv = means2d[c, i]
        sxx, sxy, syy, r2 = ellipse(conics[c, i], opacities2d[c, i])
        depth = wp.uint32(float_bits(wp.float32(depths[c, i])))
        k = offsets[flat]
        end = k + count
        tiles_per_cam = tiles_x * tiles_y
        y0, y1 = tile_rows(uv, syy, r2, tiles_y)
        for ty in range(y0, y1):
            x0, x1 = row_tiles(uv, sxx, sxy, syy, r2, ty, tiles_x)
            for tx in range(x0, x1):
                if k < end and k < capacity:
                    tile = wp.int64(c * tiles_per_cam + ty * tiles_x + tx)
                    keys[k] = (tile << wp.int64(32)) | wp.int64(depth)
                    values[k] = flat
                k += 1
        # The count came from the same arithmetic in another kernel; should the compiler have
        # rounded it differently there, the slots left over go to the dead tile past the last
        # real one (its range is never drawn), so no slot holds stale data.
        dead = wp.int64(radii.shape[0] * tiles_per_cam) << wp.int64(32)
        for j in range(k, end):
            if j < capacity:
                keys[j] = dead
                values[j] = flat

    return count_tiles, emit_keys


count_tiles_f32, emit_keys_f32 = make_binning_kernels(wp.float32)
count_tiles_f64, emit_keys_f64 = make_binning_kernels(wp.float64)


@wp.kernel
def tile_ranges(
    keys: wp.array(dtype=wp.int64),  # [M] sorted
    total: wp.array(dtype=wp.int32),  # [1] intersections wanted (the valid keys: at most the capacity M)
    capacity: int,  # M
    ranges: wp.array2d(dtype=wp.int32),  # [num_tiles + 1, 2] out, zeroed by count_tiles: [start, end); the last row is the dead tile
    overflow: wp.array(dtype=wp.bool),  # [1] out: more intersections wanted than the capacity
):
    k = wp.tid()
    n = wp.min(total[0], capacity)
    if k == 0:
        overflow[0] = total[0] > capacity
    if k >= n:
        return
    tile = int(keys[k] >> wp.int64(32))
    if k == 0:
        ranges[tile, 0] = 0
    else:
        prev = int(keys[k - 1] >> wp.int64(32))
        if prev != tile:
            ranges[tile, 0] = k
            ranges[prev, 1] = k
    if k == n - 1:
        ranges[tile, 1] = n
