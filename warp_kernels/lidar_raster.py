"""Lidar rasterization of projected Gaussians along each ray, forward and hand-written backward.

Specialised for the lidar rather than shared with the camera: a lidar ray carries no
colour, so its state (transmittance, range and intensity sums) and the Gaussian record (one
``vec8``: alpha, elev, conic, range, opacity, intensity: one 32-byte gather) are small, and
the kernels have their own register budgets (``LAUNCH_BOUNDS_WALK_F32`` and
``LAUNCH_BOUNDS_BACKWARD_F32``, below).

Each thread walks only its own ray's (ray, Gaussian) pairs. The binning's ray masks
(``lidar_binning.ray_masks``: per sorted entry and CUDA warp, a 32-bit set of the warp's rays
that may see the splat, conservative and nearly exact) go with the entries; a warp
takes 32 entries (a *window*) at a time, transposes their 32 masks across its lanes
(``warp_transpose_bits``: five shuffles), and each lane then visits only the entries its bit
marks, front to back (back to front in the backward). A warp thus steps in a window as often
as its busiest lane has pairs, not once per entry any of its rays might see: splats of a few
cm against rays a few cm apart meet only a handful of a warp's 32 rays, so evaluating every
entry in every lane would waste most of the work.

Work layout (see ``warp_kernels.lidar_binning``): per *work item* (a chunk of at most L
Gaussians of one tile's front-to-back list), one thread per ray of the tile (TILE_RAYS rays:
``rows`` channels x ``cols`` columns of one elevation band), in SPLIT blocks of BLOCK_WARPS
CUDA warps (by default one block per item: 4 warps with tiles of 128 rays), the items taken
longest first (the binning's launch order). In the forward each warp stages its own windows:
the records of the entries its mask words mark, one window ahead of its walk, with no block
barrier (``warp_kernels.lidar_staging``), so no warp waits for the block's slowest at every
batch. The backward stages per block (BATCH Gaussians behind a barrier): its walks start at each
warp's own furthest ray and hold fewer of the warp's entries per window, so per-warp staging
there exposes the wait for the next window's loads. Per ray, front to back:

    alpha_i = min(0.99, opacity_i * exp(-sigma_i)),  sigma_i = 0.5 d^T conic_i d,
    d = (wrap(alpha_i - ray azimuth), elev_i - ray elevation)
    range_sum = sum_i w_i range_i,  intensity_sum = sum_i w_i intensity_i,  w_i = alpha_i T_i
    hit = 1 - T_final,  median = range of the Gaussian after which T first falls to <= 0.5

skipping alpha < 1/255 and stopping before a Gaussian that would take T to <= 1e-4 (the
camera's rules; as there, a CUDA warp leaves its chunk once its 32 rays have stopped, and
walks back from its own furthest ray). Invariant: a tile cut into several chunks gives the same
result as one long walk:

1. ``lidar_forward``, phase 0: every tile's first chunk is composited (it starts at T = 1), and
   every other chunk but its tile's last only multiplies its (1 - alpha) per ray, stopping once
   the product is <= T_MIN (then the walk has stopped by the end of this chunk anyway). Those
   product-only walks take two of a thread's entries per step (``two_hits``), so that their
   loads and exponentials overlap; the composited walk and the backward keep more state per
   entry and take one (two-wide they need more registers and are slower). A first chunk that is
   not its tile's last gives its final T as its product, 0 for a ray it stopped (for the others,
   the product-only walk's value: the same factors multiplied in the same order), so first
   chunks are walked once.
2. ``lidar_forward``, phase 1: chunk j >= 1 starts from T = prod of the earlier chunks'
   products. Up to the stop, that is the sequential walk's T; at or below T_MIN the walk had
   stopped earlier, and the chunk contributes nothing (it writes T = -1 as "stopped before").
   Each composited chunk writes its partial sums, its final T and its last composited index per
   ray, and the median Gaussian's index where T crosses 0.5 (in exactly one chunk, or none).
3. ``lidar_merge``: one thread per ray sums its tile's chunk partials, and writes the
   expected range and intensity (the sums over the hit probability).

The backward walks each chunk back to front (as the camera's does), starting from the
chunk's final T and from the sums of the chunks behind it. Its lanes are at different
entries at each step, so there is no sum over the warp per entry: each pair adds its
eight record gradients with two 16-byte vector atomics (``add8_f32``; per entry and warp
only a few pairs). That is cheaper than summing per entry in shared memory (which has no
float atomic add: a compare-and-swap loop) or a warp-per-entry walk with warp sums.
Before it, ``lidar_output_grads`` (one thread per ray) turns the gradients of the
expected range and intensity into gradients of the sums and the hit probability, and passes
the median range's gradient to the median Gaussian's range (which Gaussian is chosen is
piecewise constant: no gradient), so the walk holds no median state, and no torch ops (host
time per render) are needed around the kernels. The module is compiled without Warp's
generated adjoint: the compositing loops have run-time trip counts. Measurements behind these
choices: benchmarks/RESULTS.md, raster-lidar.
"""

import math

import warp as wp

from warp_kernels import tuning
from warp_kernels.compositing import ALPHA_MAX, ALPHA_MIN, T_MIN
from warp_kernels.lidar_binning import BATCH, WARPS, lane_of_ray, ray_of_lane
from warp_kernels.lidar_staging import SLOTS, make_staging_funcs, window_wait
from warp_kernels.modules import variant_module
from warp_kernels.warp_lanes import (add8_f32, add8_f64, bits_below, lane_id, lowest_bit, on_cuda, warp_any,
                                     warp_max_i32, warp_transpose_bits, warp_width)

# fast_math: __expf in the compositing loops (the twin tests bound the difference)
wp.set_module_options({"enable_backward": False, "fast_math": True})

# CUDA warps per block of the per-item kernels: a work item's TILE_RAYS rays are SPLIT blocks of
# BLOCK_RAYS threads. A block lasts as long as its slowest warp, and its SM starts no other block
# in its place until then, so smaller blocks balance better; but every block of an item loads the
# chunk's Gaussians, so smaller blocks also load more. With tiles of 128 rays
# (``lidar_binning.TILE_RAYS``) a work item is one block of 4 warps with a list of its own (the
# default is 4, or WARPS where a tile has fewer); the forward's warps stage their own windows, so
# blocks of one warp gain nothing there. Warps walking with no staging at all (records passed
# between lanes by shuffles) trade the barrier's waits for as many instructions. See
# benchmarks/RESULTS.md, raster-lidar. NUREC_LIDAR_BLOCK_WARPS overrides it at import
# (``warp_kernels.tuning``).
BLOCK_WARPS = tuning.LIDAR_BLOCK_WARPS
BLOCK_RAYS = 32 * BLOCK_WARPS
SPLIT = WARPS // BLOCK_WARPS
MEDIAN_T = 0.5  # the median return: where the accumulated opacity 1 - T reaches 0.5

# Register budgets of the float32 per-item kernels: at most 56 registers for the forward's two
# phases (36 warps per SM: 9 blocks of 4 warps, as many as shared memory allows), 64 for the
# backward (32 warps per SM, 50% occupancy; with more blocks per SM it is slower, and then it
# spills), and no grid-stride loop (``grid_stride=False``: a tiled launch starts exactly
# the blocks the items need, and the loop's 64-bit index arithmetic costs registers). The sm_90
# cubins' resource attributes show them (benchmarks/raster_lidar.py --registers; the tests check
# it); the timings behind the bounds: benchmarks/RESULTS.md, raster-lidar. NUREC_LIDAR_MIN_BLOCKS
# (blocks per SM for both kernels; 0 = no bound) overrides them at import (``warp_kernels.tuning``).
# The float64 kernels (CPU gradcheck) are unbounded.
_MIN_BLOCKS = tuning.LIDAR_MIN_BLOCKS
MAX_BLOCKS_PER_SM = 32  # resident blocks per SM on sm_80 / sm_90 (the bound for blocks of one warp)


def _launch_bounds(warps_per_sm: int) -> tuple[int, int] | None:
    """(threads per block, blocks per SM) for ``warps_per_sm`` resident warps, or the override."""
    blocks = _MIN_BLOCKS if _MIN_BLOCKS is not None else min(MAX_BLOCKS_PER_SM, warps_per_sm // BLOCK_WARPS)
    return (BLOCK_RAYS, blocks) if blocks > 0 else None


LAUNCH_BOUNDS_WALK_F32 = _launch_bounds(36)  # lidar_forward
LAUNCH_BOUNDS_BACKWARD_F32 = _launch_bounds(32)  # lidar_backward

PI = math.pi
TWO_PI = 2.0 * math.pi


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return (int)(threadIdx.x >> 5);
#else
return lane >> 5;
#endif
""")
def warp_index(lane: int) -> int:
    """CUDA warp of the thread in its block (recomputed from the thread index: no register held);
    CPU: of the block's thread ``lane``."""
    ...


@wp.func
def window_hits(h: int, t: int, done: int):
    """The entries of a window (warp_width() entries) that may reach the ray of the block's thread
    ``t``, as a bit set (bit j: the window's entry j), from ``h``, the mask word of this lane's entry
    (entry lane_id(); 0 past the chunk) for its warp; 0 where the thread's walk is done. CUDA: the
    warp's 32 entries' masks (bit r: ray r of the warp) transposed across the warp (skipped, 0 in
    every lane, when none of the 32 reaches the warp). Reached by all 32 lanes."""
    mine = int(0)
    if warp_any(h) != 0:
        mine = warp_transpose_bits(h, t)
    if done != 0:
        mine = 0
    return mine


@wp.func
def window_entry(ids: wp.array(dtype=wp.int32), ray_masks: wp.array2d(dtype=wp.int32), e: int, lo: int, hi: int,
                 col: int):
    """(ray-mask word of column ``col``, Gaussian index) of sorted entry e; (0, 0) outside lo .. hi - 1.
    The index is loaded whatever the word: both loads are then in flight together, not one after the other."""
    h = int(0)
    i = int(0)
    if e >= lo and e < hi:
        h = ray_masks[e, col]
        i = ids[e]
    return h, i


@wp.func
def item_of_block(order: wp.array(dtype=wp.int32), n_items: int, blk: int, t: int):
    """Work item of block ``blk`` (-1: none; ``order``: the launch order, slot -> item), which of its
    SPLIT parts of the tile's rays the block takes, and the tile lane (``ray_of_lane``) of the block's
    thread ``t``."""
    slot = blk / SPLIT
    part = blk - slot * SPLIT
    item = int(-1)
    if slot < n_items:
        item = order[slot]
    return item, part, part * BLOCK_RAYS + t


@wp.func
def tile_last_chunk(items: wp.array(dtype=wp.vec4i), n_items: int, item: int):
    """Whether work item ``item`` (of ``n_items``; ``items``: (tile, start, end, chunk index)) is its tile's last."""
    last = True
    if item + 1 < n_items:
        last = items[item + 1][3] == 0
    return last


@wp.func
def two_hits(mine: int):
    """The window's next two entries of this thread (their bits in ``mine``), the second -1 when
    there is none, and the bits left after them."""
    j1 = lowest_bit(mine)
    rest = mine & (mine - 1)
    return j1, lowest_bit(rest), rest & (rest - 1)


@wp.func
def ray_of(tile: int, lane: int, tile_band: wp.array(dtype=int), band_i: wp.array(dtype=wp.vec4i),
           channel_order: wp.array(dtype=int), columns: int):
    """Channel (-1: no ray) and column of thread ``lane`` of ``tile``."""
    bi = band_i[tile_band[tile]]
    cols = bi[2]
    row, col = ray_of_lane(lane, cols)
    k = (tile - bi[3]) * cols + col
    ch = int(-1)
    if row < bi[1] and k < columns:
        ch = channel_order[bi[0] + row]
    return ch, k


def make_raster_kernels(float_t, add8, walk_bounds, backward_bounds):
    """The five rasterization kernels for one float type.

    Launched tiled: ``wp.launch_tiled(dim=[max_items * SPLIT], block_dim=BLOCK_RAYS)`` for the
    per-item kernels (block slots in the binning's launch order; those past the device-side item
    count return at once), and
    ``wp.launch(dim=(C, W))`` for the merge and the output gradients.
    """
    module = variant_module(__name__, float_t)  # float64 kernels compile apart (warp_kernels.modules)
    vec2 = wp.types.vector(2, float_t)
    vec8 = wp.types.vector(8, float_t)
    staging = make_staging_funcs(float_t, BLOCK_RAYS, BLOCK_WARPS)
    staging_buffer, stage_window = staging["buffer"], staging["stage"]
    staged_record, staged_id = staging["record"], staging["id"]

    @wp.func(module=module)
    def ray_angles(ch: int, k: int, channel_f: wp.array(dtype=vec2), columns: int):
        """Sweep azimuth in [0, 2 pi) and elevation of ray (ch, k); ch < 0 gives a dummy."""
        cf = channel_f[wp.max(ch, 0)]
        az = float_t(TWO_PI) * float_t(k) / float_t(columns) + cf[0]
        az = az - float_t(TWO_PI) * wp.floor(az / float_t(TWO_PI))
        return az, cf[1]

    @wp.func(module=module)
    def offsets(rec: vec8, ray_az: float_t, ray_el: float_t):
        """(azimuth, elevation) of the splat's centre from the ray, azimuth wrapped to [-pi, pi)."""
        da = rec[0] - ray_az  # in (-2 pi, 2 pi]: both lie in [0, 2 pi]
        if da >= float_t(PI):
            da -= float_t(TWO_PI)
        elif da < float_t(-PI):
            da += float_t(TWO_PI)
        return da, rec[1] - ray_el

    @wp.func(module=module)
    def splat_sigma(rec: vec8, ray_az: float_t, ray_el: float_t):
        """Offsets (da, de) of the splat from the ray and sigma = 0.5 d^T conic d."""
        da, de = offsets(rec, ray_az, ray_el)
        return da, de, float_t(0.5) * (rec[2] * da * da + rec[4] * de * de) + rec[3] * da * de

    @wp.func(module=module)
    def splat_alpha(rec: vec8, ray_az: float_t, ray_el: float_t):
        """The splat's alpha on the ray, or 0 where the walk skips it (alpha < ALPHA_MIN)."""
        da, de, sigma = splat_sigma(rec, ray_az, ray_el)
        alpha = wp.min(float_t(ALPHA_MAX), rec[6] * wp.exp(-sigma))
        if sigma < float_t(0.0) or alpha < float_t(ALPHA_MIN):
            alpha = float_t(0.0)
        return alpha

    @wp.kernel(module=module, launch_bounds=walk_bounds, grid_stride=False)
    def lidar_forward(
        phase: int,  # 0: every tile's first chunk, and the products of the chunks before their tile's last; 1: the rest
        order: wp.array(dtype=wp.int32),  # [I] launch order: slot -> item
        items: wp.array(dtype=wp.vec4i),  # [I] (tile, start, end, chunk index)
        num_items: wp.array(dtype=wp.int32),  # [1]
        tile_band: wp.array(dtype=int),  # [T]
        band_i: wp.array(dtype=wp.vec4i),  # [B]
        channel_order: wp.array(dtype=int),  # [C] channel of each elevation-sorted slot
        channel_f: wp.array(dtype=vec2),  # [C] (s * azimuth offset, elevation) rad
        columns: int,
        ids: wp.array(dtype=wp.int32),  # [M] sorted Gaussian indices
        splats: wp.array(dtype=vec8),  # [N]
        ray_masks: wp.array2d(dtype=wp.int32),  # [M, WARPS] per sorted entry and warp: bit l = lane l's ray may see it
        chunk_P: wp.array2d(dtype=float_t),  # [I, TILE_RAYS] phase 0 writes (chunks before their tile's last), 1 reads
        # outputs, per (item, ray of its tile)
        part_T: wp.array2d(dtype=float_t),  # [I, TILE_RAYS] T after the chunk; -1: the walk stopped before it
        part_range: wp.array2d(dtype=float_t),  # [I, TILE_RAYS] sum of w_i range_i over the chunk
        part_int: wp.array2d(dtype=float_t),  # [I, TILE_RAYS] sum of w_i intensity_i over the chunk
        part_last: wp.array2d(dtype=wp.int32),  # [I, TILE_RAYS] one past the last Gaussian composited
        median_id: wp.array2d(dtype=wp.int32),  # [C, W] (pre-filled with -1) the median Gaussian
    ):
        blk, t = wp.tid()
        n_items = num_items[0]
        item, part, lane = item_of_block(order, n_items, blk, t)
        if item < 0:
            return
        it = items[item]
        tile = it[0]
        start = it[1]
        end = it[2]
        j = it[3]
        if phase == 0 and j > 0 and tile_last_chunk(items, n_items, item):
            return  # composited in phase 1, with no product to give
        if phase == 1 and j == 0:
            return  # composited in phase 0
        composite = j == 0 or phase == 1  # else this pass only multiplies the chunk's (1 - alpha)
        ch, k = ray_of(tile, lane, tile_band, band_i, channel_order, columns)
        ray_az, ray_el = ray_angles(ch, k, channel_f, columns)
        T = float_t(1.0)  # (the chunk's product, where it does not composite)
        if composite:
            for m in range(j):
                T *= chunk_P[item - j + m, lane]
        done = int(1)  # a composited walk's T stays above T_MIN: T <= T_MIN at the end says it never started
        if ch >= 0 and T > float_t(T_MIN):
            done = 0
        rng = float_t(0.0)
        inten = float_t(0.0)
        last = start
        med = int(-1)
        # Each CUDA warp walks the chunk a window of warp_width() entries at a time, on its own (no block
        # barrier): lane l's entry of window c is start + c nw + l. The window's mask words and indices are
        # loaded two windows ahead and its records staged one window ahead (warp_kernels.lidar_staging).
        nw = warp_width()
        col = part * BLOCK_WARPS + warp_index(t)  # the warp's column of the ray masks
        buf = staging_buffer(splats)
        n_win = (end - start + nw - 1) // nw
        h_now, i_now = window_entry(ids, ray_masks, start + lane_id(), start, end, col)
        if warp_any(1 - done) != 0 and n_win > 0:
            stage_window(buf, splats, 0, i_now, h_now, t)
        h_next, i_next = window_entry(ids, ray_masks, start + nw + lane_id(), start, end, col)
        for c in range(n_win):
            if warp_any(1 - done) == 0:
                break  # a CUDA warp leaves the chunk as soon as its 32 rays have stopped
            ahead = int(c + 1 < n_win)
            if ahead != 0:
                stage_window(buf, splats, (c + 1) % SLOTS, i_next, h_next, t)
            h_after, i_after = window_entry(ids, ray_masks, start + (c + 2) * nw + lane_id(), start, end, col)
            window_wait(ahead)
            slot = c % SLOTS
            # each thread visits only the window's entries its ray mask marks
            mine = window_hits(h_now, t, done)
            if composite:
                while mine != 0:
                    jj = lowest_bit(mine)
                    mine = mine & (mine - 1)
                    rec = staged_record(buf, splats, slot, jj, t)
                    # The ray's state is updated without branches (alpha is 0 where the walk skips the
                    # splat, and then T, the sums and the median stay as they are): branches here compile
                    # to a dozen selects per step, which cost more than the arithmetic they skip.
                    alpha = splat_alpha(rec, ray_az, ray_el)
                    next_T = T * (float_t(1.0) - alpha)
                    stop = next_T <= float_t(T_MIN)
                    w = wp.where(stop, float_t(0.0), alpha * T)
                    rng += w * rec[5]
                    inten += w * rec[7]
                    if T > float_t(MEDIAN_T) and next_T <= float_t(MEDIAN_T) and not stop:
                        med = staged_id(buf, splats, slot, jj, t)
                    last = wp.where(alpha > float_t(0.0) and not stop, start + c * nw + jj + 1, last)
                    T = wp.where(stop, T, next_T)
                    done = wp.where(stop, 1, done)
                    mine = wp.where(stop, 0, mine)
            else:
                while mine != 0:
                    # two entries per step: their loads and exponentials overlap (no dependence)
                    j1, j2, mine = two_hits(mine)
                    a1 = splat_alpha(staged_record(buf, splats, slot, j1, t), ray_az, ray_el)
                    a2 = splat_alpha(staged_record(buf, splats, slot, wp.max(j2, 0), t), ray_az, ray_el)
                    if j2 < 0:
                        a2 = float_t(0.0)
                    # a skipped entry's alpha is 0: the factor 1 is exact. Past the stop the product
                    # only shrinks, and a product <= T_MIN is all phase 1 reads from it.
                    T = T * (float_t(1.0) - a1) * (float_t(1.0) - a2)  # the sequential walk's rounding
                    if T <= float_t(T_MIN):
                        done = 1
                        mine = 0
            h_now, i_now = h_next, i_next
            h_next, i_next = h_after, i_after
        window_wait(0)  # no copy in flight into the warp's slots when it leaves
        if ch >= 0:
            if composite:
                part_T[item, lane] = wp.where(T > float_t(T_MIN), T, float_t(-1.0))
                part_range[item, lane] = rng
                part_int[item, lane] = inten
                part_last[item, lane] = last
                if med >= 0:
                    median_id[ch, k] = med
            if phase == 0 and not tile_last_chunk(items, n_items, item):
                # the chunk's product for the chunks behind it: a first chunk's T is the sequential walk's
                # (the same products in the same order); a ray it stopped gets 0 (<= T_MIN: stopped)
                chunk_P[item, lane] = wp.where(composite and done != 0, float_t(0.0), T)

    # (keeps Warp's grid-stride loop: unlike the binning's kernels, the merge is slower without it, for
    # reasons not understood; benchmarks/RESULTS.md, raster-lidar)
    @wp.kernel(module=module)
    def lidar_merge(
        tile_items: wp.array(dtype=wp.vec2i),  # [T] (first item, number of items)
        channel_rank: wp.array(dtype=int),  # [C] elevation-sorted slot of each channel
        slot_band: wp.array(dtype=int),  # [C] band of each slot
        band_i: wp.array(dtype=wp.vec4i),  # [B]
        part_T: wp.array2d(dtype=float_t),  # [I, TILE_RAYS]
        part_range: wp.array2d(dtype=float_t),  # [I, TILE_RAYS]
        part_int: wp.array2d(dtype=float_t),  # [I, TILE_RAYS]
        median_id: wp.array2d(dtype=wp.int32),  # [C, W]
        splats: wp.array(dtype=vec8),  # [N]
        min_hit: float_t,  # rays with hit <= min_hit report range and intensity 0
        # outputs, [C, W] in the lidar's own channel order
        out_range_sum: wp.array2d(dtype=float_t),
        out_int_sum: wp.array2d(dtype=float_t),
        out_hit: wp.array2d(dtype=float_t),
        out_T: wp.array2d(dtype=float_t),
        out_median: wp.array2d(dtype=float_t),
        out_range: wp.array2d(dtype=float_t),  # range_sum / hit
        out_intensity: wp.array2d(dtype=float_t),  # intensity_sum / hit
    ):
        c, k = wp.tid()
        slot = channel_rank[c]
        bi = band_i[slot_band[slot]]
        cols = bi[2]
        tx = k / cols
        lane = lane_of_ray(slot - bi[0], k - tx * cols, cols)
        ti = tile_items[bi[3] + tx]
        rng = float_t(0.0)
        inten = float_t(0.0)
        T = float_t(1.0)
        for m in range(ti[1]):
            rng += part_range[ti[0] + m, lane]
            inten += part_int[ti[0] + m, lane]
            tm = part_T[ti[0] + m, lane]
            if tm >= float_t(0.0):
                T = tm
        hit = float_t(1.0) - T
        out_range_sum[c, k] = rng
        out_int_sum[c, k] = inten
        out_hit[c, k] = hit
        out_T[c, k] = T
        med = median_id[c, k]
        if med >= 0:
            out_median[c, k] = splats[med][5]
        else:
            out_median[c, k] = float_t(0.0)
        if hit > min_hit:
            out_range[c, k] = rng / hit
            out_intensity[c, k] = inten / hit
        else:
            out_range[c, k] = float_t(0.0)
            out_intensity[c, k] = float_t(0.0)

    @wp.func(module=module)
    def grad_at(g: wp.array2d(dtype=float_t), c: int, k: int):
        """g[c, k], or 0 where the output has no gradient (an empty array)."""
        v = float_t(0.0)
        if g.shape[0] > 0:
            v = g[c, k]
        return v

    @wp.kernel(module=module)
    def lidar_output_grads(
        range_sum: wp.array2d(dtype=float_t),  # [C, W] the forward's outputs
        int_sum: wp.array2d(dtype=float_t),  # [C, W]
        out_T: wp.array2d(dtype=float_t),  # [C, W] final transmittance: hit = 1 - T
        median_id: wp.array2d(dtype=wp.int32),  # [C, W] the median Gaussian (-1: none)
        min_hit: float_t,
        # dL / d each output [C, W]; an empty array where the output has no gradient
        g_range_sum: wp.array2d(dtype=float_t),
        g_int_sum: wp.array2d(dtype=float_t),
        g_hit: wp.array2d(dtype=float_t),
        g_median: wp.array2d(dtype=float_t),
        g_range: wp.array2d(dtype=float_t),
        g_intensity: wp.array2d(dtype=float_t),
        # outputs: dL / d (range_sum, intensity_sum, hit) in full, the backward walk's inputs
        grad_range_sum: wp.array2d(dtype=float_t),
        grad_int_sum: wp.array2d(dtype=float_t),
        grad_hit: wp.array2d(dtype=float_t),
        grad_splats: wp.array(dtype=float_t),  # [8 N] zero-initialised: the median's range gradient added
    ):
        c, k = wp.tid()
        grs = grad_at(g_range_sum, c, k)
        gis = grad_at(g_int_sum, c, k)
        gh = grad_at(g_hit, c, k)
        # range = range_sum / hit and intensity = intensity_sum / hit where hit > min_hit, else 0
        hit = float_t(1.0) - out_T[c, k]
        if hit > min_hit:
            gr = grad_at(g_range, c, k)
            gi = grad_at(g_intensity, c, k)
            grs += gr / hit
            gis += gi / hit
            gh -= (gr * range_sum[c, k] + gi * int_sum[c, k]) / (hit * hit)
        grad_range_sum[c, k] = grs
        grad_int_sum[c, k] = gis
        grad_hit[c, k] = gh
        # the median range is the median Gaussian's range (which one is piecewise constant)
        if g_median.shape[0] > 0:
            med = median_id[c, k]
            if med >= 0:
                wp.atomic_add(grad_splats, 8 * med + 5, g_median[c, k])

    @wp.kernel(module=module, launch_bounds=backward_bounds, grid_stride=False)
    def lidar_backward(
        order: wp.array(dtype=wp.int32),  # [I]
        items: wp.array(dtype=wp.vec4i),  # [I]
        num_items: wp.array(dtype=wp.int32),  # [1]
        tile_band: wp.array(dtype=int),  # [T]
        band_i: wp.array(dtype=wp.vec4i),  # [B]
        channel_order: wp.array(dtype=int),  # [C]
        channel_f: wp.array(dtype=vec2),  # [C]
        columns: int,
        ids: wp.array(dtype=wp.int32),  # [M]
        splats: wp.array(dtype=vec8),  # [N]
        ray_masks: wp.array2d(dtype=wp.int32),  # [M, WARPS]
        tile_items: wp.array(dtype=wp.vec2i),  # [T]
        part_T: wp.array2d(dtype=float_t),  # [I, TILE_RAYS] from the forward
        part_range: wp.array2d(dtype=float_t),
        part_int: wp.array2d(dtype=float_t),
        part_last: wp.array2d(dtype=wp.int32),
        out_T: wp.array2d(dtype=float_t),  # [C, W] final transmittance
        grad_range_sum: wp.array2d(dtype=float_t),  # [C, W] dL / d range_sum
        grad_int_sum: wp.array2d(dtype=float_t),  # [C, W]
        grad_hit: wp.array2d(dtype=float_t),  # [C, W]
        grad_splats: wp.array(dtype=float_t),  # [N * 8] accumulated (zero-initialised): the records' gradients, flat
    ):
        blk, t = wp.tid()
        item, part, lane = item_of_block(order, num_items[0], blk, t)
        if item < 0:
            return
        it = items[item]
        tile = it[0]
        start = it[1]
        ch, k = ray_of(tile, lane, tile_band, band_i, channel_order, columns)
        ray_az, ray_el = ray_angles(ch, k, channel_f, columns)
        last = start
        T = float_t(1.0)
        g_rng = float_t(0.0)
        g_int = float_t(0.0)
        g_hit = float_t(0.0)  # dL/d hit times T_final: d hit / d alpha_i = T_final / (1 - alpha_i)
        behind_rng = float_t(0.0)  # sum of w r over everything behind the current Gaussian
        behind_int = float_t(0.0)
        if ch >= 0:
            T = part_T[item, lane]
            if T >= float_t(0.0):
                last = part_last[item, lane]
                g_rng = grad_range_sum[ch, k]
                g_int = grad_int_sum[ch, k]
                g_hit = grad_hit[ch, k] * out_T[ch, k]
                ti = tile_items[tile]
                for m in range(item + 1, ti[0] + ti[1]):
                    behind_rng += part_range[m, lane]
                    behind_int += part_int[m, lane]
        end = wp.tile_max(wp.tile(last))[0]  # the block walks back from its furthest ray
        warp_last = warp_max_i32(last)  # ... and each CUDA warp from its own furthest ray
        nw = warp_width()
        for b in range((end - start + BATCH - 1) // BATCH):
            batch_end = end - b * BATCH
            base = wp.max(start, batch_end - BATCH)
            t_ids = wp.tile_load(ids, shape=BATCH, offset=base, storage="shared")
            t_rec = wp.tile_load_indexed(splats, indices=t_ids, shape=(BATCH,), axis=0, storage="shared")
            count = batch_end - base
            t_masks = wp.tile_load(ray_masks, shape=(BATCH, BLOCK_WARPS), offset=(base, part * BLOCK_WARPS),
                                   storage="shared")
            # entries at or past warp_last are beyond every ray of the warp: skipped whole. Back to
            # front, a warp's width of entries at a time (window entry j: the batch's entry
            # count - 1 - (first + c * nw + j)); each lane walks only those its ray mask marks
            first = wp.clamp(batch_end - warp_last, 0, count)
            lim = last - base  # the lane's entries end before its ray's last composited one
            for c in range((count - first + nw - 1) // nw):
                e_own = count - 1 - (first + c * nw + lane_id())  # this lane's entry of the window (CUDA)
                h = int(0)
                if e_own >= 0:
                    h = wp.tile_extract(t_masks, e_own, warp_index(t))
                if warp_any(h) == 0:
                    continue
                # the entries at or past the lane's last (j <= count - 1 - first - c nw - lim) are dropped
                # from its bits rather than stepped over: a warp steps in a window as often as its busiest
                # lane has entries there, so a lane's entries past its own last would cost the warp steps.
                # On the CPU (a warp of one thread) ``first`` already starts the walk at the thread's own last.
                mine = warp_transpose_bits(h, t) & ~bits_below(count - first - c * nw - lim)
                while mine != 0:
                    j = lowest_bit(mine)
                    mine = mine & (mine - 1)
                    kx = count - 1 - (first + c * nw + j)
                    rec = wp.tile_extract(t_rec, kx)
                    da, de, sigma = splat_sigma(rec, ray_az, ray_el)
                    g = wp.exp(-sigma)
                    raw = rec[6] * g
                    alpha = wp.min(float_t(ALPHA_MAX), raw)
                    if sigma >= float_t(0.0) and alpha >= float_t(ALPHA_MIN):
                        one_minus = float_t(1.0) - alpha
                        T = T / one_minus  # transmittance in front of this Gaussian
                        w = alpha * T
                        d_a = (g_rng * (rec[5] * T - behind_rng / one_minus)
                               + g_int * (rec[7] * T - behind_int / one_minus)
                               + g_hit / one_minus)
                        behind_rng += rec[5] * w
                        behind_int += rec[7] * w
                        d_op = float_t(0.0)
                        d_sigma = float_t(0.0)
                        if raw < float_t(ALPHA_MAX):
                            d_op = d_a * g
                            d_sigma = -d_a * alpha
                        d = vec8((rec[2] * da + rec[3] * de) * d_sigma, (rec[3] * da + rec[4] * de) * d_sigma,
                                 float_t(0.5) * da * da * d_sigma, da * de * d_sigma, float_t(0.5) * de * de * d_sigma,
                                 g_rng * w, d_op, g_int * w)
                        i = wp.tile_extract(t_ids, kx)
                        if on_cuda() != 0:
                            add8(grad_splats, i, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7])
                        else:  # on the CPU every thread is a warp of its own
                            for f in range(8):
                                wp.atomic_add(grad_splats, i * 8 + f, d[f])

    return lidar_forward, lidar_merge, lidar_output_grads, lidar_backward


(lidar_forward_f32, lidar_merge_f32, lidar_output_grads_f32,
 lidar_backward_f32) = make_raster_kernels(wp.float32, add8_f32, LAUNCH_BOUNDS_WALK_F32, LAUNCH_BOUNDS_BACKWARD_F32)
(lidar_forward_f64, lidar_merge_f64, lidar_output_grads_f64,
 lidar_backward_f64) = make_raster_kernels(wp.float64, add8_f64, None, None)
