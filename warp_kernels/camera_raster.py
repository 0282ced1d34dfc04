"""Camera rasterization of projected Gaussians, forward and hand-written backward.

One block per 16x16 tile (the tiles of all cameras of a launch follow one another), one
thread per pixel (a CUDA warp is two pixel rows of a tile and walks the same Gaussian
list). Each pixel composites its tile's depth-sorted Gaussians front to back:

    alpha_i = min(0.99, opacity_i * exp(-sigma_i)),  sigma_i = 0.5 d^T conic_i d
    rgb = sum_i colour_i alpha_i T_i + T_final * background,   T_i = prod_{j<i} (1 - alpha_j)

skipping alpha < 1/255 and stopping before T would fall to 1e-4; a CUDA warp leaves a
batch as soon as its 32 pixels have stopped. On CUDA each warp visits only the Gaussians
that can reach one of its pixels (``splat_reaches``: the box where alpha >= 1/255 against
the warp's two pixel rows; 32 entries tested at once, one per lane, then a ballot), so a
splat covering part of a tile costs only the warps it covers; on the CPU, where a warp is
one pixel, the test would cost more than it saves (24% on a CPU forward + backward), and
every entry is visited. The backward walks the same list back to front, recovering T_i
from T_final, each CUDA warp starting at the furthest Gaussian any of its pixels
composited, and on CUDA sums each Gaussian's gradient over the 32 pixels of a warp
(shuffles) before one atomic add, so the atomics per Gaussian drop 32-fold. Both passes come
in two forms, with the depth image (its expected-depth sums, or their gradients) and
without, for renders and losses that do not use it. The module is compiled without Warp's
generated adjoint: compositing loops have run-time trip counts, which Warp's adjoint cannot
replay.
"""

from typing import Any

import warp as wp

from warp_kernels.compositing import ALPHA_MAX, ALPHA_MIN, T_MIN
from warp_kernels.modules import variant_module
from warp_kernels.tile_binning import TILE_SIZE
from warp_kernels.warp_lanes import (lane_id, lowest_bit, on_cuda, warp_any, warp_ballot, warp_max_i32,
                                     warp_sum2_f32, warp_sum2_f64, warp_sum8_f32, warp_sum8_f64, warp_sum_f32,
                                     warp_sum_f64, warp_width)

# fast_math: __expf and friends in the compositing loop (the twin tests bound the difference)
wp.set_module_options({"enable_backward": False, "fast_math": True})

TILE_PIXELS = TILE_SIZE * TILE_SIZE
BATCH = TILE_PIXELS  # Gaussians staged in shared memory at a time (one per thread)


@wp.func
def splat_reaches(m: Any, q: Any, op: Any, x0: int, x1: int, y0: int, y1: int):
    """0 when the splat's alpha is below ALPHA_MIN at every pixel centre of the box
    [x0, x1] x [y0, y1] (every pixel there would skip it, so a warp whose pixels these are need
    not evaluate it), else 1.

    alpha >= ALPHA_MIN needs sigma <= s = ln(opacity / ALPHA_MIN): an ellipse whose bounding
    box has half-widths sqrt(2 s (Q^-1)_xx) and sqrt(2 s (Q^-1)_yy) for the conic Q. The box is
    widened by margins that cover fast_math's exp and log, so that no pixel the evaluation
    would composite is ever skipped; a conic that is not positive definite is never skipped.
    """
    s = wp.log(wp.max(op, type(op)(1e-30)) / type(op)(ALPHA_MIN))
    det = q[0] * q[2] - q[1] * q[1]
    hit = int(1)
    if s < type(op)(-1e-3):
        hit = 0  # opacity below ALPHA_MIN: alpha = opacity * exp(-sigma) never reaches it for sigma >= 0
    elif det > type(op)(0.0) and q[0] > type(op)(0.0):
        r = type(op)(2.0) * (wp.max(s, type(op)(0.0)) + type(op)(1e-3)) / det
        ex = wp.sqrt(r * q[2]) * type(op)(1.001) + type(op)(1e-3)
        ey = wp.sqrt(r * q[0]) * type(op)(1.001) + type(op)(1e-3)
        if m[0] + ex < type(op)(x0) or m[0] - ex > type(op)(x1) or m[1] + ey < type(op)(y0) \
                or m[1] - ey > type(op)(y1):
            hit = 0
    return hit


def make_raster_kernels(float_t, warp_sum, warp_sum2, warp_sum8, launch_bounds=None):
    """Forward and backward rasterization kernels for one float type: the forward with and
    without the depth image, then the backward with and without its gradient.

    ``launch_bounds`` (CUDA ``__launch_bounds__``, e.g. ``(256, 3)`` for three resident
    blocks per SM) trades registers for occupancy; ``benchmarks/raster_camera.py --tune``
    measures the choices.

    Launched tiled (``wp.launch_tiled(dim=[tiles], block_dim=TILE_PIXELS)``): one block per
    16x16 tile, one thread per pixel. Each block stages its tile's Gaussians BATCH at a time
    in shared memory (cooperative gathers by index), then every pixel walks the batch from
    there: global-memory latency is paid once per batch instead of once per Gaussian.
    Per-(camera, Gaussian) arrays are flat, indexed by ``camera * N + gaussian``.
    Block b renders tile ``tile_order[b]``, so that the caller chooses which tiles start first
    (longest lists first: ``TILE_ORDER`` in nurec_usd.ops.camera).
    """
    module = variant_module(__name__, float_t)  # float64 kernels compile apart (warp_kernels.modules)
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)

    @wp.func(module=module)
    def pixel_of(tile: int, lane: int, tiles_x: int, tiles_per_cam: int):
        c = tile // tiles_per_cam
        t = tile - c * tiles_per_cam
        ty = t // tiles_x
        tx = t - ty * tiles_x
        return c, tx * TILE_SIZE + lane % TILE_SIZE, ty * TILE_SIZE + lane // TILE_SIZE

    @wp.func(module=module)
    def warp_pixels(tile: int, lane: int, tiles_x: int, tiles_per_cam: int):
        """The box (x0, x1, y0, y1) of the pixels of this thread's CUDA warp (its own pixel on the CPU)."""
        first = lane - lane_id()
        _, xa, ya = pixel_of(tile, first, tiles_x, tiles_per_cam)
        _, xb, yb = pixel_of(tile, first + warp_width() - 1, tiles_x, tiles_per_cam)
        return wp.min(xa, xb), wp.max(xa, xb), wp.min(ya, yb), wp.max(ya, yb)

    def make_forward(depth_out: bool):
        """The forward; without ``depth_out`` it leaves out the depth image (the depths' staging,
        sums and stores: about a tenth of the kernel's time), for renders that do not
        use it (``out_depth`` may then be None)."""

        @wp.kernel(module=module, launch_bounds=launch_bounds)
        def rasterize_forward(
            ranges: wp.array2d(dtype=wp.int32),  # [tiles, 2] slice of the sorted list per tile
            tile_order: wp.array(dtype=wp.int32),  # [tiles] the tile each block renders
            flat_ids: wp.array(dtype=wp.int32),  # [M] sorted values: camera * N + gaussian
            means2d: wp.array(dtype=vec2),  # [C * N]
            conics: wp.array(dtype=vec3),  # [C * N]
            colors: wp.array(dtype=vec3),  # [C * N]
            depths: wp.array(dtype=float_t),  # [C * N]
            opacities: wp.array(dtype=float_t),  # [C * N]
            background: wp.array(dtype=vec3),  # [C]
            tiles_x: int,
            tiles_per_cam: int,
            width: int,
            height: int,
            out_rgb: wp.array3d(dtype=vec3),  # [C, H, W]
            out_alpha: wp.array3d(dtype=float_t),  # [C, H, W]
            out_depth: wp.array3d(dtype=float_t),  # [C, H, W] sum of w_i depth_i (not normalised)
            out_last: wp.array3d(dtype=wp.int32),  # [C, H, W] one past the last Gaussian composited
        ):
            block, lane = wp.tid()
            tile = tile_order[block]
            c, px, py = pixel_of(tile, lane, tiles_x, tiles_per_cam)
            inside = px < width and py < height
            start = ranges[tile, 0]
            end = ranges[tile, 1]
            fx = float_t(px)
            fy = float_t(py)
            T = float_t(1.0)
            rgb = vec3(float_t(0.0), float_t(0.0), float_t(0.0))
            depth = float_t(0.0)
            last = start
            done = 0
            if not inside:
                done = 1
            wx0, wx1, wy0, wy1 = warp_pixels(tile, lane, tiles_x, tiles_per_cam)
            nw = warp_width()
            for b in range((end - start + BATCH - 1) // BATCH):
                # the whole block stops once every pixel of the tile is saturated
                if wp.tile_sum(wp.tile(1 - done))[0] == 0:
                    break
                base = start + b * BATCH
                ids = wp.tile_load(flat_ids, shape=BATCH, offset=base, storage="shared")
                t_mean = wp.tile_load_indexed(means2d, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                t_conic = wp.tile_load_indexed(conics, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                t_opacity = wp.tile_load_indexed(opacities, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                t_color = wp.tile_load_indexed(colors, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                if wp.static(depth_out):
                    t_depth = wp.tile_load_indexed(depths, indices=ids, shape=(BATCH,), axis=0,
                                                   storage="shared")
                n_b = wp.min(BATCH, end - base)
                for c32 in range((n_b + nw - 1) // nw):
                    if warp_any(1 - done) == 0:
                        break  # a CUDA warp leaves the batch as soon as its 32 pixels are saturated
                    # a warp's width of entries at a time (one per lane), then only those that can
                    # reach one of the warp's pixels, front to back
                    ei = c32 * nw + lane_id()
                    pred = int(0)
                    if ei < n_b:
                        pred = 1  # on the CPU a warp is one pixel: the test would cost more than it saves
                        if on_cuda() != 0:
                            pred = splat_reaches(wp.tile_extract(t_mean, ei), wp.tile_extract(t_conic, ei),
                                                 wp.tile_extract(t_opacity, ei), wx0, wx1, wy0, wy1)
                    bits = warp_ballot(pred)
                    while bits != 0:
                        k = c32 * nw + lowest_bit(bits)
                        bits = bits & (bits - 1)
                        if done == 0:
                            m = wp.tile_extract(t_mean, k)
                            q = wp.tile_extract(t_conic, k)
                            dx = m[0] - fx
                            dy = m[1] - fy
                            sigma = float_t(0.5) * (q[0] * dx * dx + q[2] * dy * dy) + q[1] * dx * dy
                            alpha = wp.min(float_t(ALPHA_MAX), wp.tile_extract(t_opacity, k) * wp.exp(-sigma))
                            if sigma >= float_t(0.0) and alpha >= float_t(ALPHA_MIN):
                                next_T = T * (float_t(1.0) - alpha)
                                if next_T <= float_t(T_MIN):
                                    done = 1
                                else:
                                    w = alpha * T
                                    rgb += wp.tile_extract(t_color, k) * w
                                    if wp.static(depth_out):
                                        depth += wp.tile_extract(t_depth, k) * w
                                    T = next_T
                                    last = base + k + 1
            if inside:
                out_rgb[c, py, px] = rgb + background[c] * T
                out_alpha[c, py, px] = float_t(1.0) - T
                if wp.static(depth_out):
                    out_depth[c, py, px] = depth
                out_last[c, py, px] = last

        return rasterize_forward

    def make_backward(depth_grad: bool):
        """The backward; without ``depth_grad`` it leaves out the depth image's gradient (the
        depths' loads, sums and atomics), for losses that do not use the depth."""

        @wp.kernel(module=module, launch_bounds=launch_bounds)
        def rasterize_backward(
            ranges: wp.array2d(dtype=wp.int32),
            tile_order: wp.array(dtype=wp.int32),
            flat_ids: wp.array(dtype=wp.int32),
            means2d: wp.array(dtype=vec2),
            conics: wp.array(dtype=vec3),
            colors: wp.array(dtype=vec3),
            depths: wp.array(dtype=float_t),
            opacities: wp.array(dtype=float_t),
            background: wp.array(dtype=vec3),
            tiles_x: int,
            tiles_per_cam: int,
            width: int,
            height: int,
            out_alpha: wp.array3d(dtype=float_t),  # [C, H, W] from the forward
            out_last: wp.array3d(dtype=wp.int32),  # [C, H, W] from the forward
            grad_rgb: wp.array3d(dtype=vec3),  # [C, H, W] dL/d out_rgb
            grad_alpha: wp.array3d(dtype=float_t),  # [C, H, W]
            grad_depth: wp.array3d(dtype=float_t),  # [C, H, W]
            num_splats: int,  # S = C * N
            # accumulated output (zero-initialised), [10 S]: the gradients of means2d [S, 2], conics
            # [S, 3], colours [S, 3], depths [S] and opacities [S], one after the other
            grad: wp.array(dtype=float_t),
        ):
            block, lane = wp.tid()
            tile = tile_order[block]
            c, px, py = pixel_of(tile, lane, tiles_x, tiles_per_cam)
            inside = px < width and py < height
            start = ranges[tile, 0]
            last = start
            T_final = float_t(1.0)
            g_rgb = vec3()
            g_alpha = float_t(0.0)
            g_depth = float_t(0.0)
            if inside:
                last = out_last[c, py, px]
                T_final = float_t(1.0) - out_alpha[c, py, px]
                g_rgb = grad_rgb[c, py, px]
                g_alpha = grad_alpha[c, py, px]
                if wp.static(depth_grad):
                    g_depth = grad_depth[c, py, px]
            fx = float_t(px)
            fy = float_t(py)
            T = T_final
            behind_rgb = background[c] * T_final  # colour of everything behind the current Gaussian
            behind_depth = float_t(0.0)
            lane32 = lane_id()
            wx0, wx1, wy0, wy1 = warp_pixels(tile, lane, tiles_x, tiles_per_cam)
            nw = warp_width()
            end = wp.tile_max(wp.tile(last))[0]  # the block walks back from its furthest pixel
            warp_last = warp_max_i32(last)  # ... and each CUDA warp from its own furthest pixel
            for b in range((end - start + BATCH - 1) // BATCH):
                batch_end = end - b * BATCH
                base = wp.max(start, batch_end - BATCH)
                ids = wp.tile_load(flat_ids, shape=BATCH, offset=base, storage="shared")
                t_mean = wp.tile_load_indexed(means2d, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                t_conic = wp.tile_load_indexed(conics, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                t_opacity = wp.tile_load_indexed(opacities, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                t_color = wp.tile_load_indexed(colors, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                if wp.static(depth_grad):
                    t_depth = wp.tile_load_indexed(depths, indices=ids, shape=(BATCH,), axis=0, storage="shared")
                count = batch_end - base
                # entries at or past warp_last are beyond every pixel of the warp: skipped whole.
                # Back to front, a warp's width of entries at a time, visiting only those that can
                # reach one of the warp's pixels
                first = wp.clamp(batch_end - warp_last, 0, count)
                for c32 in range((count - first + nw - 1) // nw):
                    ei = first + c32 * nw + lane32  # counted from the end of the batch
                    pred = int(0)
                    if ei < count:
                        pred = 1  # (the CPU: see the forward)
                        if on_cuda() != 0:
                            ke = count - 1 - ei
                            pred = splat_reaches(wp.tile_extract(t_mean, ke), wp.tile_extract(t_conic, ke),
                                                 wp.tile_extract(t_opacity, ke), wx0, wx1, wy0, wy1)
                    bits = warp_ballot(pred)
                    while bits != 0:
                        k = count - 1 - (first + c32 * nw + lowest_bit(bits))
                        bits = bits & (bits - 1)
                        j = base + k
                        active = 0
                        d_mean = vec2()
                        d_conic = vec3()
                        d_color = vec3()
                        d_depth = float_t(0.0)
                        d_opacity = float_t(0.0)
                        if j < last:
                            m = wp.tile_extract(t_mean, k)
                            q = wp.tile_extract(t_conic, k)
                            dx = m[0] - fx
                            dy = m[1] - fy
                            sigma = float_t(0.5) * (q[0] * dx * dx + q[2] * dy * dy) + q[1] * dx * dy
                            op = wp.tile_extract(t_opacity, k)
                            g = wp.exp(-sigma)
                            raw = op * g
                            alpha = wp.min(float_t(ALPHA_MAX), raw)
                            if sigma >= float_t(0.0) and alpha >= float_t(ALPHA_MIN):
                                active = 1
                                ra = float_t(1.0) / (float_t(1.0) - alpha)
                                T = T * ra  # transmittance in front of this Gaussian
                                w = alpha * T
                                col = wp.tile_extract(t_color, k)
                                d_color = g_rgb * w
                                d_a = wp.dot(g_rgb, col * T - behind_rgb * ra) + g_alpha * T_final * ra
                                behind_rgb += col * w
                                if wp.static(depth_grad):
                                    dep = wp.tile_extract(t_depth, k)
                                    d_depth = g_depth * w
                                    d_a += g_depth * (dep * T - behind_depth * ra)
                                    behind_depth += dep * w
                                if raw < float_t(ALPHA_MAX):
                                    d_opacity = d_a * g
                                    d_sigma = -d_a * alpha
                                    d_conic = vec3(float_t(0.5) * dx * dx * d_sigma, dx * dy * d_sigma,
                                                   float_t(0.5) * dy * dy * d_sigma)
                                    d_mean = vec2((q[0] * dx + q[1] * dy) * d_sigma, (q[1] * dx + q[2] * dy) * d_sigma)
                        if warp_any(active) != 0:
                            f = wp.tile_extract(ids, k)
                            S = num_splats
                            if on_cuda() != 0:
                                # means2d, conic and colour: eight sums in one transposed butterfly; the
                                # sum of value s lands in lane 4s, and one atomic instruction adds all eight
                                g8 = warp_sum8(d_mean[0], d_mean[1], d_conic[0], d_conic[1], d_conic[2],
                                               d_color[0], d_color[1], d_color[2])
                                if lane32 & 3 == 0:
                                    v = lane32 >> 2
                                    at = 2 * f + v  # means2d
                                    if v >= 5:
                                        at = 5 * S + 3 * f + v - 5  # colours
                                    elif v >= 2:
                                        at = 2 * S + 3 * f + v - 2  # conics
                                    wp.atomic_add(grad, at, g8)
                                if wp.static(depth_grad):
                                    g2 = warp_sum2(d_opacity, d_depth)  # opacity in lane 0, depth in lane 16
                                    if lane32 == 0:
                                        wp.atomic_add(grad, 9 * S + f, g2)
                                    if lane32 == 16:
                                        wp.atomic_add(grad, 8 * S + f, g2)
                                else:
                                    g1 = warp_sum(d_opacity)
                                    if lane32 == 0:
                                        wp.atomic_add(grad, 9 * S + f, g1)
                            else:  # on the CPU every thread is a warp of its own
                                for e in range(2):
                                    wp.atomic_add(grad, 2 * f + e, d_mean[e])
                                for e in range(3):
                                    wp.atomic_add(grad, 2 * S + 3 * f + e, d_conic[e])
                                    wp.atomic_add(grad, 5 * S + 3 * f + e, d_color[e])
                                if wp.static(depth_grad):
                                    wp.atomic_add(grad, 8 * S + f, d_depth)
                                wp.atomic_add(grad, 9 * S + f, d_opacity)

        return rasterize_backward

    return make_forward(True), make_forward(False), make_backward(True), make_backward(False)


# Three resident 256-thread blocks per SM for the float32 kernels (at most 85 registers: the
# forward takes 77, the backward 80 with a 32-64 byte stack frame). Unbounded, the warps' skip
# test takes the backward to 94-96 registers (two blocks per SM). In `raster_camera.py --tune`
# (benchmarks/RESULTS.md, raster-camera), forward + backward, (256, 3) is the fastest on rows 3 and 4
# and within 3% of the fastest on rows 1 and 2.
LAUNCH_BOUNDS_F32 = (TILE_PIXELS, 3)

# the forward with and without the depth image, the backward with and without its gradient
(rasterize_forward_f32, rasterize_forward_nodepth_f32, rasterize_backward_f32,
 rasterize_backward_nodepth_f32) = make_raster_kernels(wp.float32, warp_sum_f32, warp_sum2_f32, warp_sum8_f32,
                                                       LAUNCH_BOUNDS_F32)
(rasterize_forward_f64, rasterize_forward_nodepth_f64, rasterize_backward_f64,
 rasterize_backward_nodepth_f64) = make_raster_kernels(wp.float64, warp_sum_f64, warp_sum2_f64, warp_sum8_f64)
