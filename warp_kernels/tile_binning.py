"""Binning projected Gaussians into 16x16 pixel tiles, for every camera of a launch.

Each projected (camera, Gaussian) with a non-zero radius covers a rectangle of tiles.
``count_tiles`` counts them; after an exclusive scan of the counts, ``emit_keys`` writes
one (key, value) per covered tile into fixed-capacity buffers: the key is
``tile << 32 | depth bits`` (the global tile id across cameras, then the float32 depth's
bit pattern, which orders like the depth for positive values) and the value the
Gaussian's index. After a radix sort, ``tile_ranges`` finds each tile's slice.
Intersections past the capacity are not written; ``emit_keys`` counts all of them in
``total`` so the caller detects the overflow on the device.
"""

import warp as wp

from warp_kernels.modules import variant_module

TILE_SIZE = 16
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
    """``count_tiles`` and ``emit_keys`` for one float type of the projected means."""
    module = variant_module(__name__, float_t)  # float64 kernels compile apart (warp_kernels.modules)
    vec2 = wp.types.vector(2, float_t)

    @wp.func(module=module)
    def tile_rect(uv: vec2, radius: float_t, tiles_x: int, tiles_y: int):
        """Tiles [x0, x1) x [y0, y1) that a splat of this radius around uv may touch."""
        ts = float_t(TILE_SIZE)
        x0 = wp.clamp(int(wp.floor((uv[0] - radius) / ts)), 0, tiles_x)
        x1 = wp.clamp(int(wp.floor((uv[0] + radius) / ts)) + 1, 0, tiles_x)
        y0 = wp.clamp(int(wp.floor((uv[1] - radius) / ts)), 0, tiles_y)
        y1 = wp.clamp(int(wp.floor((uv[1] + radius) / ts)) + 1, 0, tiles_y)
        return x0, x1, y0, y1

    @wp.kernel(module=module)
    def count_tiles(
        means2d: wp.array2d(dtype=vec2),  # [C, N]
        radii: wp.array2d(dtype=wp.int32),  # [C, N]
        tiles_x: int,
        tiles_y: int,
        counts: wp.array(dtype=wp.int32),  # [C * N] out
    ):
        c, i = wp.tid()
        n = radii.shape[1]
        r = radii[c, i]
        count = 0
        if r > 0:
            x0, x1, y0, y1 = tile_rect(means2d[c, i], float_t(r), tiles_x, tiles_y)
            count = (x1 - x0) * (y1 - y0)
        counts[c * n + i] = count

    @wp.kernel(module=module)
    def emit_keys(
        means2d: wp.array2d(dtype=vec2),  # [C, N]
        radii: wp.array2d(dtype=wp.int32),  # [C, N]
        depths: wp.array2d(dtype=float_t),  # [C, N]
        offsets: wp.array(dtype=wp.int32),  # [C * N] exclusive scan of counts
        counts: wp.array(dtype=wp.int32),  # [C * N]
        tiles_x: int,
        tiles_y: int,
        capacity: int,
        keys: wp.array(dtype=wp.int64),  # [>= capacity] out
        values: wp.array(dtype=wp.int32),  # [>= capacity] out: camera * N + Gaussian
        total: wp.array(dtype=wp.int32),  # [1] out: intersections wanted (may exceed capacity)
    ):
        c, i = wp.tid()
        n = radii.shape[1]
        flat = c * n + i
        if flat == radii.shape[0] * n - 1:
            total[0] = offsets[flat] + counts[flat]  # the scan's last entry: all intersections
        r = radii[c, i]
        if r <= 0:
            return
        x0, x1, y0, y1 = tile_rect(means2d[c, i], float_t(r), tiles_x, tiles_y)
        depth = wp.uint32(float_bits(wp.float32(depths[c, i])))
        k = offsets[flat]
        tiles_per_cam = tiles_x * tiles_y
        for ty in range(y0, y1):
            for tx in range(x0, x1):
                if k < capacity:
                    tile = wp.int64(c * tiles_per_cam + ty * tiles_x + tx)
                    keys[k] = (tile << wp.int64(32)) | wp.int64(depth)
                    values[k] = flat
                k += 1

    return count_tiles, emit_keys


count_tiles_f32, emit_keys_f32 = make_binning_kernels(wp.float32)
count_tiles_f64, emit_keys_f64 = make_binning_kernels(wp.float64)


@wp.kernel
def pad_keys(keys: wp.array(dtype=wp.int64), start: wp.array(dtype=wp.int32), capacity: int):
    """Fill keys[start:capacity] with KEY_PAD so that a fixed-size sort leaves them last."""
    k = wp.tid()
    if k >= start[0] and k < capacity:
        keys[k] = KEY_PAD


@wp.kernel
def tile_ranges(
    keys: wp.array(dtype=wp.int64),  # [M] sorted
    count: wp.array(dtype=wp.int32),  # [1] number of valid keys (clamped to M)
    ranges: wp.array2d(dtype=wp.int32),  # [num_tiles, 2] out, zero-initialised: [start, end)
):
    k = wp.tid()
    n = count[0]
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
