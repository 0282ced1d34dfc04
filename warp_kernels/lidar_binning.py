"""Binning lidar splats into (elevation band, column) tiles, and splitting long tiles into work items.

Tiles. The rays of a sweep are the grid (channel, column). Channels are sorted by
elevation and cut into *bands* of consecutive channels; a band of ``rows`` channels is
cut along the columns into tiles of ``cols = TILE_RAYS / rows`` columns, so every tile
holds TILE_RAYS rays (one per thread of a rasterizer work item) wherever its band lies: bands follow the
real, non-uniform channel elevations, and no tile lies where there are no beams. The
band table (built on the host, see ``nurec_usd.ops.lidar``) is, per band,
``band_i = (first sorted slot, rows, cols, first tile)`` and
``band_f = (lowest elevation, highest elevation, lowest s*offset, highest s*offset)``
of its channels (s = rotation sign, offsets in radians).

Binning. A splat reaches the elevations [elev - e, elev + e] and the sweep azimuths
[alpha - a, alpha + a] (``extents`` = (a, e)). It meets band b when that elevation interval
meets the band's channel elevations, and there the columns k whose rays (at
``2 pi k / W + s * offset``) fall in the azimuth interval for some channel of the band.
Column indices wrap modulo W, so a splat straddling the sweep's wrap (between the last
and the first column) is emitted into the tiles at both ends, once each. The sort key is
a 32-bit int, ``tile << range_bits | quantised range`` (range_bits = 31 - tile bits, at
least 16, so a quantum is at most max_range / 65536): a 32-bit key sorts in fewer radix
passes and half the bytes of the camera's 64-bit keys, and Gaussians closer than a quantum
keep their index order (the sort is stable, and keys are emitted in Gaussian order). The
fills the binning needs ride along with its kernels rather than taking launches of their own
(each is host time): ``count_tiles`` zeroes the tile ranges, ``emit_keys`` writes the
total and pads the key slots past it, and ``ray_masks`` zeroes the backward's gradient buffer
when it is given one.

Ray masks. A tile's TILE_RAYS rays are WARPS CUDA warps of the rasterizer, each a small block
of rays in (azimuth, elevation) (``ray_of_lane``). ``ray_masks`` writes, per sorted (tile,
Gaussian) entry and warp, a 32-bit set of the warp's rays that may see the splat: per row of the
tile within the splat's elevation reach, the columns where the splat's quadratic form is within
its alpha >= ALPHA_MIN bound (an interval: one square root per row), cut at the warps' column
boundaries. It is conservative (bounds widened by SIGMA_MARGIN and COL_MARGIN; where the splat's
azimuth reach plus the tile's half-width exceeds WIDE it gets whole rows), so results do not
change, and nearly exact: on the benchmark's street the marked pairs exceed the real hits by
under 1%. The rasterizer's threads walk only their own ray's marked entries (see
``warp_kernels.lidar_raster``). Computed once, read by the three passes. One thread per entry:
the pass is bound by its instructions, and one thread per (entry, warp) or per entry over every
warp does more of them. It walks the tile's rows once (the warps of a row of blocks share its
rows' spans), gathers an entry's words in registers and writes them with one 16-byte store; it
takes the splat's box from its conic (no second gather of the extents) and finds the tiles'
slices of the sorted list on the way (``tile_bounds``), which saves a launch and a pass over the
keys. Measurements: benchmarks/RESULTS.md, raster-lidar.

Work items. A tile's Gaussian list is cut into chunks of at most L Gaussians, each chunk
one work item of the rasterizer: a handful of tiles (looking down a street at the horizon)
would otherwise hold many times the mean work and set the kernel's tail. L is a fraction
num / den of the mean tile's list, rounded up to whole batches of the rasterizer (BATCH
Gaussians: a chunk of 541 would walk a last batch of 29), computed on the device from the
number of intersections: ``L = max(CHUNK_MIN, ceil(ceil(num * intersections / (den * tiles))
/ BATCH) * BATCH)``. No chunk then holds more than num / den of the mean tile's work
(or a batch more), and as L is at least num / den of the mean list, there are at most
``tiles + ceil(den * tiles / num)`` items: the launch size is fixed, with no host
synchronisation. Items of one tile are consecutive, in front-to-back order.

Launch order. The rasterizer's blocks take the items longest first (``order``: slot -> item),
in ORDER_BUCKETS length classes (``length_bucket``): whole chunks (and last chunks nearly as
long) first, then the tiles' other last chunks from the longest class down; within a class, in
tile order, a tile's chunks front to back. The last blocks an SM starts are then short, and no long item
starts at the end of the launch and sets its tail. It is a counting sort, with no sort call
and no launch of its own: ``count_items`` counts each tile's items per class, the one
torch.cumsum scans every class's row at once, and ``emit_items`` places each item.

The fraction depends on the device (``CHUNK_OF_MEAN``):
  * CUDA, a half. Each chunk but a tile's first and last costs a walk that only multiplies its
    (1 - alpha), in the forward's first launch, and every chunk a block and a merge term, so long
    chunks are cheaper, as long as they do not set the tail; launched longest first, half the
    mean list does as well as any length tried, while in tile order long chunks lose to the tail
    (benchmarks/RESULTS.md, raster-lidar).
  * CPU, twice the mean. The CPU runs blocks one after another, so there is no tail to cut,
    only the extra passes, which shorter chunks multiply.
"""

import math

import warp as wp

from warp_kernels import tuning
from warp_kernels.compositing import ALPHA_MIN
from warp_kernels.modules import variant_module
from warp_kernels.warp_lanes import lowest_bit
from warp_kernels.wide_io import load_row2, load_row4, load_row8, store_row4

# integer bookkeeping only: no adjoints (halves the compile time)
wp.set_module_options({"enable_backward": False})
# The kernels run without Warp's grid-stride loop (``grid_stride=False``: one thread per item, as
# launched): the loop's 64-bit index arithmetic costs each of them time (benchmarks/RESULTS.md,
# raster-lidar).

# Rays per tile = threads of a rasterizer work item (lidar_raster.SPLIT blocks). 128: a block of 4
# warps walks a list of its own rays' Gaussians. With tiles of 256 rays, two blocks per item would
# each load and walk the whole tile's list, of which each needs little more than half (its warps'
# masks); the smaller tiles bin somewhat more entries, which costs less than those extra walks.
# Tiles of 64 rays (one block of 2 warps per item) have cheaper masks (two words per entry), but the
# sort and the raster passes then have too many more entries to go through (benchmarks/RESULTS.md,
# raster-lidar).
# NUREC_LIDAR_TILE_RAYS selects another size at import (``warp_kernels.tuning``).
TILE_RAYS = tuning.LIDAR_TILE_RAYS
BATCH = 256  # Gaussians the backward stages in shared memory at a time; chunks are whole batches
KEY_PAD = wp.constant(wp.int32(0x7FFFFFFF))  # sorts after every real key
ORDER_BUCKETS = 16  # length classes of the work items' launch order (longest first; see the module docstring)
CHUNK_MIN = 256  # never cut a tile's list finer than this (a chunk costs a block and a merge)
# L as a fraction (num, den) of the mean tile's list, by device type (see the module docstring)
CHUNK_OF_MEAN = {"cuda": (1, 2), "cpu": (2, 1)}
WARPS = TILE_RAYS // 32  # CUDA warps per tile
RECT_MARGIN = 1e-3  # relative widening of a splat's reach in ray_masks: rounding never culls a visible pair
SIGMA_MARGIN = 1e-3  # relative widening of the ray test's sigma bound (rounding, fast_math's exp)
COL_MARGIN = 0.01  # columns added at each end of a row's span (rounding of the azimuths)
CONIC_BOX_MIN_DET = 0.01  # ray_masks takes a splat's box from its conic where det >= this x a c (else its extents)
# rad: where a splat's azimuth reach plus its tile's half-width exceeds this, ray_masks marks whole rows. Its
# row test wraps the splat's offset once, from the tile's middle column, which is exact while that sum is
# below pi (a column whose offset wraps lies at least pi - half-width from the splat); this leaves a wide
# margin for rounding.
WIDE = 1.0

PI = math.pi
TWO_PI = 2.0 * math.pi
INV_TWO_PI = 1.0 / TWO_PI

# Rays of a tile per CUDA warp: the WARPS warps tile it as 2 x WARP_BLOCK_COLS blocks of (rows / 2)
# channels x (cols / WARP_BLOCK_COLS) columns (2 x 1 for 64 rays, 2 x 2 for 128, 2 x 4 for 256),
# the tile's own shape scaled down. Tiles are about as tall as they are wide in angle (see
# nurec_usd.ops.lidar.plan_bands), so a warp's rays are nearly so too (1:1 with 128 rays, 2:1
# with 256; 32 consecutive rays of a row would make 8:1 strips). A small splat then reaches fewer
# warps, and each warp that it reaches does work for it (benchmarks/RESULTS.md, raster-lidar).
WARP_BLOCK_COLS = WARPS // 2  # warp blocks across a tile (and 2 down)


@wp.func_native("""
return (int64_t)((0xFFFFFFFFFFFFFFFFull >> (63 - hi)) & (0xFFFFFFFFFFFFFFFFull << lo));
""")
def bit_span64(lo: int, hi: int) -> wp.int64:
    """Bits lo..hi set (0 <= lo <= hi <= 63), as an int64."""
    ...


# ray_masks' words of an entry, two to a 64-bit accumulator per warp column (low half: the lower warp)
acc_t = wp.types.vector(WARP_BLOCK_COLS, wp.int64)
# word w of an entry (warp row w / WARP_BLOCK_COLS, warp column w % WARP_BLOCK_COLS) as a C expression
_WORD = [f"(int)(acc.c[{w % WARP_BLOCK_COLS}] >> {32 * (w // WARP_BLOCK_COLS)})" for w in range(WARPS)]
_STORE_WORDS = {
    2: f"*(int2*)p = make_int2({_WORD[0]}, {_WORD[1]});",
    4: f"*(int4*)p = make_int4({', '.join(_WORD)});",
    8: f"((int4*)p)[0] = make_int4({', '.join(_WORD[:4])}); ((int4*)p)[1] = make_int4({', '.join(_WORD[4:])});",
}[WARPS]


@wp.func_native(f"""
int* p = ((int*)a.data) + (size_t)k * {WARPS};
#if defined(__CUDA_ARCH__)
{_STORE_WORDS}
#else
{" ".join(f"p[{w}] = {word};" for w, word in enumerate(_WORD))}
#endif
""")
def store_words(a: wp.array(dtype=wp.int32), k: int, acc: acc_t):
    """a[WARPS k : WARPS (k + 1)] = an entry's words from their accumulators (CUDA: 16-byte stores, one
    8-byte store for 2 words; a's data 16-byte aligned, as torch's allocations are)."""
    ...


@wp.func
def ray_of_lane(lane: int, cols: int):
    """(row, column) within its tile of thread ``lane`` of a block whose tile is ``cols`` wide."""
    cw = cols / WARP_BLOCK_COLS  # columns of a warp's block
    w = lane / 32
    lw = lane - w * 32
    wr = w / WARP_BLOCK_COLS
    wc = w - wr * WARP_BLOCK_COLS
    return wr * (32 / cw) + lw / cw, wc * cw + lw - (lw / cw) * cw


@wp.func
def lane_of_ray(row: int, col: int, cols: int):
    """The thread of a block that handles (row, column) of its tile: the inverse of ray_of_lane."""
    cw = cols / WARP_BLOCK_COLS
    rw = 32 / cw  # rows of a warp's block
    wr = row / rw
    wc = col / cw
    return (wr * WARP_BLOCK_COLS + wc) * 32 + (row - wr * rw) * cw + col - wc * cw


def chunk_length(intersections: int, tiles: int, chunk_of_mean: tuple[int, int]) -> int:
    """L as ``count_items`` computes it on the device (for statistics and tests on the host)."""
    num, den = chunk_of_mean
    share = -(-num * intersections // (den * tiles))
    return max(CHUNK_MIN, -(-share // BATCH) * BATCH)


def max_work_items(tiles: int, capacity: int, fixed_chunk: int, chunk_of_mean: tuple[int, int]) -> int:
    """Upper bound on the work items (the rasterizers' launch size): every non-empty tile
    has one, plus one per full chunk, and there are at most intersections / L full chunks
    (L >= num / den of the mean list: at most den * tiles / num). ``chunk_of_mean`` is the
    device's entry of CHUNK_OF_MEAN; ``fixed_chunk`` > 0 fixes L instead."""
    if fixed_chunk > 0:
        return tiles + capacity // fixed_chunk + 1
    num, den = chunk_of_mean
    return tiles + (den * tiles + num - 1) // num + 1


@wp.func
def band_tiles(k0: int, k1: int, cols: int, columns: int):
    """Tiles of a band holding columns k0..k1 (wrapping modulo ``columns``): first tile t0 and
    n1 tiles from it, then n2 tiles from tile 0 (the part past the wrap); no tile twice.

    ``cols`` is a power of two (TILE_RAYS / rows): divisions by it are shifts, and the modulo
    ``columns`` is taken only where k0 lies outside [0, columns) (integer division is a long
    instruction sequence on the GPU, and these ran for every Gaussian and band it meets)."""
    sh = lowest_bit(cols)
    tiles_b = (columns + cols - 1) >> sh
    t0 = int(0)
    n1 = int(0)
    n2 = int(0)
    if k1 >= k0:
        span = k1 - k0
        if span >= columns - 1:
            n1 = tiles_b
        else:
            kk0 = k0
            if kk0 < 0 or kk0 >= columns:
                kk0 = kk0 % columns
                if kk0 < 0:
                    kk0 += columns
            kk1 = kk0 + span
            t0 = kk0 >> sh
            if kk1 < columns:
                n1 = (kk1 >> sh) - t0 + 1
            else:
                n1 = tiles_b - t0
                n2 = wp.min((kk1 - columns) >> sh, t0 - 1) + 1
    return t0, n1, n2


@wp.func
def tile_bounds(keys: wp.array(dtype=wp.int32), k: int, n: int, tile: int, range_bits: int,
                ranges: wp.array2d(dtype=wp.int32)):
    """Where sorted entry k (of n valid, in ``tile``) starts or ends a tile's slice, write that bound
    into ``ranges`` ([T, 2], zeroed by ``count_tiles``): [start, end) of each tile in the sorted list."""
    if k == 0:
        ranges[tile, 0] = 0
    else:
        prev = keys[k - 1] >> range_bits
        if prev != tile:
            ranges[tile, 0] = k
            ranges[prev, 1] = k
    if k == n - 1:
        ranges[tile, 1] = n


def make_binning_kernels(float_t):
    """``count_tiles``, ``emit_keys`` and ``ray_masks`` for one float type of the splats."""
    module = variant_module(__name__, float_t)  # float64 kernels compile apart (warp_kernels.modules)
    vec2 = wp.types.vector(2, float_t)
    vec4 = wp.types.vector(4, float_t)
    vec8 = wp.types.vector(8, float_t)

    @wp.func(module=module)
    def column_span(alpha: float_t, ext: float_t, off_lo: float_t, off_hi: float_t, columns: int):
        """Columns k with a ray of offset in [off_lo, off_hi] inside [alpha - ext, alpha + ext]."""
        scale = float_t(columns) / float_t(TWO_PI)
        k0 = int(wp.ceil((alpha - ext - off_hi) * scale))
        k1 = int(wp.floor((alpha + ext - off_lo) * scale))
        return k0, k1

    @wp.func(module=module)
    def first_band(band_f: wp.array(dtype=vec4), lo: float_t):
        """The first band whose highest channel is at or above elevation lo (a bisection: bands
        ascend in elevation, and a scan from band 0 diverged across a warp's Gaussians)."""
        b_lo = int(0)
        b_hi = band_f.shape[0]
        while b_lo < b_hi:
            mid = (b_lo + b_hi) / 2
            if band_f[mid][1] < lo:
                b_lo = mid + 1
            else:
                b_hi = mid
        return b_lo

    @wp.kernel(module=module, grid_stride=False)
    def count_tiles(
        splats: wp.array(dtype=vec8),  # [N]
        extents: wp.array(dtype=vec2),  # [N] (0, 0) = culled
        band_i: wp.array(dtype=wp.vec4i),  # [B] (first slot, rows, cols, first tile)
        band_f: wp.array(dtype=vec4),  # [B] (elev lo, elev hi, s*offset lo, s*offset hi)
        columns: int,
        counts: wp.array(dtype=wp.int32),  # [N] out
        ranges: wp.array2d(dtype=wp.int32),  # [T, 2] out: zeroed, for ray_masks' tile bounds (no fill of its own)
    ):
        i = wp.tid()
        # the Gaussian's reads first (with the extents, not after the test on them: one wait for memory, not
        # two), ahead of the writes below (which the compiler may not move them past)
        ext = load_row2(extents, i)
        rec = load_row8(splats, i)
        for r in range(i, ranges.shape[0], extents.shape[0]):
            ranges[r, 0] = 0
            ranges[r, 1] = 0
        count = int(0)
        if ext[0] > float_t(0.0):
            lo = rec[1] - ext[1]
            hi = rec[1] + ext[1]
            for b in range(first_band(band_f, lo), band_f.shape[0]):
                bf = load_row4(band_f, b)
                if bf[0] > hi:
                    break  # bands ascend in elevation
                k0, k1 = column_span(rec[0], ext[0], bf[2], bf[3], columns)
                t0, n1, n2 = band_tiles(k0, k1, band_i[b][2], columns)
                count += n1 + n2
        counts[i] = count

    @wp.kernel(module=module, grid_stride=False)
    def emit_keys(
        splats: wp.array(dtype=vec8),  # [N]
        extents: wp.array(dtype=vec2),  # [N]
        band_i: wp.array(dtype=wp.vec4i),  # [B]
        band_f: wp.array(dtype=vec4),  # [B]
        columns: int,
        offsets: wp.array(dtype=wp.int32),  # [N] inclusive scan of counts (torch.cumsum)
        counts: wp.array(dtype=wp.int32),  # [N]
        range_bits: int,
        range_scale: float_t,  # 2^range_bits / max_range
        capacity: int,
        keys: wp.array(dtype=wp.int32),  # [>= capacity] out: tile << range_bits | quantised range;
        # slots [total, capacity) get KEY_PAD, so that the fixed-size sort leaves them last
        values: wp.array(dtype=wp.int32),  # [>= capacity] out: Gaussian index (slots past the total unwritten)
        total: wp.array(dtype=wp.int32),  # [1] out: intersections wanted (may exceed capacity)
    ):
        i = wp.tid()
        n = extents.shape[0]
        if i == n - 1:
            total[0] = offsets[i]  # the scan's last entry: all intersections
        # the Gaussian's reads first, ahead of the culling test: one wait for memory, not two
        ext = load_row2(extents, i)
        rec = load_row8(splats, i)
        k = offsets[i] - counts[i]
        for p in range(offsets[n - 1] + i, capacity, n):
            keys[p] = KEY_PAD
        if ext[0] <= float_t(0.0):
            return
        qmax = (1 << range_bits) - 1
        q = wp.clamp(int(wp.floor(rec[5] * range_scale)), 0, qmax)
        lo = rec[1] - ext[1]
        hi = rec[1] + ext[1]
        for b in range(first_band(band_f, lo), band_f.shape[0]):
            bf = load_row4(band_f, b)
            if bf[0] > hi:
                break
            bi = band_i[b]
            k0, k1 = column_span(rec[0], ext[0], bf[2], bf[3], columns)
            t0, n1, n2 = band_tiles(k0, k1, bi[2], columns)
            for m in range(n1 + n2):
                t = t0 + m
                if m >= n1:
                    t = m - n1
                if k < capacity:
                    keys[k] = ((bi[3] + t) << range_bits) | q
                    values[k] = i
                k += 1

    # fast_math (approximate division, square root and log): the ray test's margins are far wider
    # than their errors, and they take most of its instructions
    masks_module = variant_module(__name__, float_t, "masks", fast_math=True)

    @wp.func(module=masks_module)
    def row_span(rec: vec8, s_max: float_t, de: float_t, dc: float_t, jc: float_t, per_step: float_t, j_end: int):
        """Columns j_lo..j_hi (j_lo > j_hi: none) of a tile's row (0 .. j_end - 1) whose rays see the splat: those where
        0.5 a da^2 + b de da + 0.5 c de^2 <= s_max, with da_j = dc - (j - jc) step (dc: the splat's offset
        from the row's middle column)."""
        j_lo = int(0)
        j_hi = int(-1)
        a2 = float_t(0.5) * rec[2]
        bq = rec[3] * de
        disc = bq * bq - float_t(4.0) * a2 * (float_t(0.5) * rec[4] * de * de - s_max)
        if disc >= float_t(0.0):
            sq = wp.sqrt(disc)
            inv = float_t(1.0) / (float_t(2.0) * a2)
            lo = (-bq - sq) * inv
            hi = (-bq + sq) * inv
            j_lo = wp.max(0, int(wp.ceil((dc - hi) * per_step + jc - float_t(COL_MARGIN))))
            j_hi = wp.min(j_end - 1, int(wp.floor((dc - lo) * per_step + jc + float_t(COL_MARGIN))))
        return j_lo, j_hi

    @wp.kernel(module=masks_module, grid_stride=False)
    def ray_masks(
        keys: wp.array(dtype=wp.int32),  # [M] sorted
        ids: wp.array(dtype=wp.int32),  # [M] sorted Gaussian indices
        total: wp.array(dtype=wp.int32),  # [1]
        capacity: int,
        range_bits: int,
        splats: wp.array(dtype=vec8),  # [N]
        extents: wp.array(dtype=vec2),  # [N]
        tile_band: wp.array(dtype=int),  # [T]
        band_i: wp.array(dtype=wp.vec4i),  # [B]
        slot_f: wp.array(dtype=vec2),  # [C] (s * azimuth offset, elevation) of each elevation-sorted slot, rad
        columns: int,
        masks: wp.array(dtype=wp.int32),  # [M * WARPS] out: bit l of word k * WARPS + w = lane l of warp w may see entry k
        ranges: wp.array2d(dtype=wp.int32),  # [T, 2] out, zeroed by count_tiles: [start, end) of each tile
        overflow: wp.array(dtype=wp.bool),  # [1] out: more intersections wanted than the capacity
        zeroed: wp.array(dtype=vec4),  # [Z] out: zeroed (the backward's gradient buffer; may be empty)
    ):
        k = wp.tid()
        n = wp.min(total[0], capacity)
        if k == 0:
            overflow[0] = total[0] > capacity
        # The backward's buffer is zeroed here rather than by a fill of its own: the stores cost this pass
        # about what the fill would, and save a launch. 16-byte stores: fewer instructions than 4-byte ones.
        for z in range(k, zeroed.shape[0], capacity):
            store_row4(zeroed, z, vec4())
        if k >= n:
            return
        # the entry's reads ahead of tile_bounds' writes (which the compiler may not move them past)
        tile = keys[k] >> range_bits
        i = ids[k]
        # the gathered record in two 16-byte loads, not eight of 4 bytes (as in count_tiles and emit_keys):
        # fewer instructions in an instruction-bound pass
        rec = load_row8(splats, i)
        tile_bounds(keys, k, n, tile, range_bits, ranges)
        # alpha >= ALPHA_MIN  <=>  sigma <= log(opacity / ALPHA_MIN); widened so rounding never culls a ray
        s_max = wp.log(wp.max(rec[6], float_t(1e-30)) / float_t(ALPHA_MIN))
        s_max = s_max + float_t(SIGMA_MARGIN) * (float_t(1.0) + wp.abs(s_max))
        ea = float_t(0.0)
        ee = float_t(0.0)
        det = rec[2] * rec[4] - rec[3] * rec[3]
        if det >= float_t(CONIC_BOX_MIN_DET) * rec[2] * rec[4]:
            # the splat's box from its conic (the inverse covariance: var_a = c / det, var_e = a / det)
            # and s_max, which is wider than the extents' reach: one gather less per entry. Where det
            # cancels (a needle along a diagonal) rounding could make it too small: there, the extents.
            r2 = float_t(2.0) * wp.max(s_max, float_t(0.0)) / det
            ea = wp.sqrt(r2 * rec[4])
            ee = wp.sqrt(r2 * rec[2])
        else:
            ext = load_row2(extents, i)
            ea = ext[0]
            ee = ext[1]
        ea = ea * float_t(1.0 + RECT_MARGIN) + float_t(1e-6)
        ee = ee * float_t(1.0 + RECT_MARGIN) + float_t(1e-6)
        bi = band_i[tile_band[tile]]
        cols = bi[2]
        cw = cols / WARP_BLOCK_COLS  # columns of a warp's block
        kc = (tile - bi[3]) * cols  # sweep column of the tile's first column
        c_end = wp.min(cols, columns - kc)  # columns past the sweep's last have no ray
        step = float_t(TWO_PI) / float_t(columns)
        per_step = float_t(columns) * float_t(INV_TWO_PI)
        jc = float_t(0.5) * float_t(cols - 1)
        # exact rows where one wrap of the offset from the tile's middle column serves all its columns (see
        # WIDE), else whole rows (conservative)
        exact = ea + float_t(0.5) * float_t(cols) * step <= float_t(WIDE) and rec[2] > float_t(0.0)
        # offset of the splat from the tile's middle column's azimuth, before the channel's offset
        d_mid = rec[0] - step * (float_t(kc) + jc)
        d_mid = d_mid - float_t(TWO_PI) * wp.floor((d_mid + float_t(PI)) * float_t(INV_TWO_PI))
        # The tile's rows, each once for all the warps that share it: per warp column, the bits of tile row r
        # go to bit r cw + (column - wc cw) of a 64-bit word whose low half is the lower warp's word and whose
        # high half the upper one's (a warp's block holds 32 / cw rows).
        acc = acc_t()
        n_rows = bi[1]
        if c_end <= 0 or s_max < float_t(0.0):
            n_rows = 0  # no rays in the tile's columns, or a splat no ray sees
        # rows beyond the splat's elevation reach see nothing (as the binning holds): from the first row at
        # or above rec[1] - ee (a bisection: rows ascend in elevation) to the last at or below rec[1] + ee
        r_lo = int(0)
        r_hi = n_rows
        while r_lo < r_hi:
            mid = (r_lo + r_hi) / 2
            if slot_f[bi[0] + mid][1] < rec[1] - ee:
                r_lo = mid + 1
            else:
                r_hi = mid
        for r in range(r_lo, n_rows):
            cf = slot_f[bi[0] + r]
            de = rec[1] - cf[1]
            if de < -ee:
                break
            j_lo = int(0)
            j_hi = c_end - 1
            if exact:
                # the offset from the row's middle ray (wrapped again: the channel's offset is small)
                dc = d_mid - cf[0]
                if dc >= float_t(PI):
                    dc -= float_t(TWO_PI)
                elif dc < float_t(-PI):
                    dc += float_t(TWO_PI)
                j_lo, j_hi = row_span(rec, s_max, de, dc, jc, per_step, c_end)
            for wc in range(WARP_BLOCK_COLS):
                lo = wp.max(j_lo, wc * cw)
                hi = wp.min(j_hi, wc * cw + cw - 1)
                if lo <= hi:
                    acc[wc] = acc[wc] | bit_span64(r * cw + lo - wc * cw, r * cw + hi - wc * cw)
        store_words(masks, k, acc)

    return count_tiles, emit_keys, ray_masks


count_tiles_f32, emit_keys_f32, ray_masks_f32 = make_binning_kernels(wp.float32)
count_tiles_f64, emit_keys_f64, ray_masks_f64 = make_binning_kernels(wp.float64)


@wp.func
def length_bucket(length: int, L: int):
    """Launch-order class of a work item of ``length`` Gaussians (1 <= length <= L): 0 for the
    shortest, ORDER_BUCKETS - 1 for the longest (a whole chunk)."""
    return int((wp.int64(ORDER_BUCKETS) * wp.int64(length) - wp.int64(1)) / wp.int64(L))


@wp.kernel(grid_stride=False)
def count_items(
    ranges: wp.array2d(dtype=wp.int32),  # [T, 2]
    total: wp.array(dtype=wp.int32),  # [1]
    capacity: int,
    fixed_chunk: int,  # > 0: chunks of exactly this length (tests); 0: the adaptive length above
    chunk_num: int,  # the adaptive length: chunk_num / chunk_den of the mean tile's list
    chunk_den: int,
    chunk: wp.array(dtype=wp.int32),  # [1] out (written by every thread, same value)
    counts: wp.array2d(dtype=wp.int32),  # [1 + ORDER_BUCKETS, T] out: row 0, the chunks of each tile (0 for
    # an empty tile); row 1 + b, how many of them fall in length class b
):
    t = wp.tid()
    tiles = ranges.shape[0]
    valid = wp.min(total[0], capacity)
    # ceil(num * valid / (den * tiles)) in int64: the products may pass 2^31
    parts = wp.int64(chunk_den) * wp.int64(tiles)
    L = int((wp.int64(chunk_num) * wp.int64(valid) + parts - wp.int64(1)) / parts)
    L = wp.max(CHUNK_MIN, (L + BATCH - 1) / BATCH * BATCH)  # whole batches of the rasterizer
    if fixed_chunk > 0:
        L = fixed_chunk
    if t == 0:
        chunk[0] = L
    length = ranges[t, 1] - ranges[t, 0]
    n = (length + L - 1) / L
    counts[0, t] = n
    for b in range(ORDER_BUCKETS):
        counts[1 + b, t] = 0
    if n > 0:
        counts[ORDER_BUCKETS, t] = n - 1  # whole chunks: the top bucket
        last = 1 + length_bucket(length - (n - 1) * L, L)
        counts[last, t] = counts[last, t] + 1


@wp.kernel(grid_stride=False)
def emit_items(
    ranges: wp.array2d(dtype=wp.int32),  # [T, 2]
    chunk: wp.array(dtype=wp.int32),  # [1]
    offsets: wp.array2d(dtype=wp.int32),  # [1 + ORDER_BUCKETS, T] inclusive scans of the counts' rows
    counts: wp.array2d(dtype=wp.int32),  # [1 + ORDER_BUCKETS, T]
    items: wp.array(dtype=wp.vec4i),  # [I] out: (tile, start, end, chunk index within the tile)
    tile_items: wp.array(dtype=wp.vec2i),  # [T] out: (first item, number of items)
    num_items: wp.array(dtype=wp.int32),  # [1] out
    order: wp.array(dtype=wp.int32),  # [I] out: the rasterizer's launch order, slot -> item
):
    t = wp.tid()
    tiles = ranges.shape[0]
    n = counts[0, t]
    off = offsets[0, t] - n
    if t == tiles - 1:
        num_items[0] = offsets[0, t]
    tile_items[t] = wp.vec2i(off, n)
    L = chunk[0]
    start = ranges[t, 0]
    end = ranges[t, 1]
    for j in range(n):
        if off + j < items.shape[0]:  # holds by construction; never write out of bounds anyway
            lo = start + j * L
            hi = wp.min(end, start + (j + 1) * L)
            items[off + j] = wp.vec4i(t, lo, hi, j)
            # slot: the items of longer buckets, then this bucket's items of the tiles before, then
            # this tile's own (whole chunks in order, the last one after them)
            b = length_bucket(hi - lo, L)
            slot = offsets[1 + b, t] - counts[1 + b, t] + wp.min(j, counts[1 + b, t] - 1)
            for above in range(b + 1, ORDER_BUCKETS):
                slot += offsets[1 + above, tiles - 1]
            order[slot] = off + j
