"""Camera rasterization of projected Gaussians, forward and hand-written backward.

Threads are laid out tile by tile: 256 consecutive threads are the 16x16 pixels of one
tile (so a CUDA warp is two pixel rows of one tile and walks the same Gaussian list),
and the tiles of all cameras of a launch follow one another. Each pixel composites its
tile's depth-sorted Gaussians front to back:

    alpha_i = min(0.99, opacity_i * exp(-sigma_i)),  sigma_i = 0.5 d^T conic_i d
    rgb = sum_i colour_i alpha_i T_i + T_final * background,   T_i = prod_{j<i} (1 - alpha_j)

skipping alpha < 1/255 and stopping before T would fall to 1e-4. The backward walks
the same list back to front, recovering T_i from T_final, and on CUDA sums each
Gaussian's gradient over the 32 pixels of a warp (shuffles) before one atomic add, so
the atomics per Gaussian drop 32-fold. The module is compiled without Warp's generated
adjoint: compositing loops have run-time trip counts, which Warp's adjoint cannot replay.
"""

import warp as wp

from warp_kernels.tile_binning import TILE_SIZE

wp.set_module_options({"enable_backward": False})

TILE_PIXELS = TILE_SIZE * TILE_SIZE
ALPHA_MIN = 1.0 / 255.0
ALPHA_MAX = 0.99
T_MIN = 1e-4


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return (int)(threadIdx.x & 31);
#else
return 0;
#endif
""")
def lane_id() -> int:
    """Lane of the thread in its CUDA warp (0 on the CPU, where each thread stands alone)."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return __any_sync(0xffffffff, pred != 0) ? 1 : 0;
#else
return pred;
#endif
""")
def warp_any(pred: int) -> int:
    """1 when any lane of the warp passes a non-zero pred (must be reached by all 32 lanes)."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
int m = x;
for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffff, m, o));
return m;
#else
return x;
#endif
""")
def warp_max_int(x: int) -> int:
    """Maximum of x over the warp (must be reached by all 32 lanes)."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
float s = x;
for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
return s;
#else
return x;
#endif
""")
def warp_sum_f32(x: wp.float32) -> wp.float32:
    """Sum of x over the warp, valid in lane 0 (must be reached by all 32 lanes)."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
double s = x;
for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
return s;
#else
return x;
#endif
""")
def warp_sum_f64(x: wp.float64) -> wp.float64:
    """Sum of x over the warp, valid in lane 0 (must be reached by all 32 lanes)."""
    ...


def make_raster_kernels(float_t, warp_sum):
    """Forward and backward rasterization kernels for one float type."""
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)

    @wp.func
    def pixel_of(tid: int, tiles_x: int, tiles_per_cam: int):
        tile = tid // TILE_PIXELS
        local = tid - tile * TILE_PIXELS
        c = tile // tiles_per_cam
        t = tile - c * tiles_per_cam
        ty = t // tiles_x
        tx = t - ty * tiles_x
        return tile, c, tx * TILE_SIZE + local % TILE_SIZE, ty * TILE_SIZE + local // TILE_SIZE

    @wp.kernel
    def rasterize_forward(
        ranges: wp.array2d(dtype=wp.int32),  # [tiles, 2] slice of the sorted list per tile
        gaussian_ids: wp.array(dtype=wp.int32),  # [M] sorted values
        means2d: wp.array2d(dtype=vec2),  # [C, N]
        conics: wp.array2d(dtype=vec3),  # [C, N]
        colors: wp.array2d(dtype=vec3),  # [C, N]
        depths: wp.array2d(dtype=float_t),  # [C, N]
        opacities: wp.array(dtype=float_t),  # [N]
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
        tid = wp.tid()
        tile, c, px, py = pixel_of(tid, tiles_x, tiles_per_cam)
        if px >= width or py >= height:
            return
        start = ranges[tile, 0]
        end = ranges[tile, 1]
        fx = float_t(px)
        fy = float_t(py)
        T = float_t(1.0)
        rgb = vec3(float_t(0.0), float_t(0.0), float_t(0.0))
        depth = float_t(0.0)
        last = start
        for j in range(start, end):
            i = gaussian_ids[j]
            m = means2d[c, i]
            q = conics[c, i]
            dx = m[0] - fx
            dy = m[1] - fy
            sigma = float_t(0.5) * (q[0] * dx * dx + q[2] * dy * dy) + q[1] * dx * dy
            if sigma < float_t(0.0):
                continue
            alpha = wp.min(float_t(ALPHA_MAX), opacities[i] * wp.exp(-sigma))
            if alpha < float_t(ALPHA_MIN):
                continue
            next_T = T * (float_t(1.0) - alpha)
            if next_T <= float_t(T_MIN):
                break
            w = alpha * T
            rgb += colors[c, i] * w
            depth += depths[c, i] * w
            T = next_T
            last = j + 1
        out_rgb[c, py, px] = rgb + background[c] * T
        out_alpha[c, py, px] = float_t(1.0) - T
        out_depth[c, py, px] = depth
        out_last[c, py, px] = last

    @wp.kernel
    def rasterize_backward(
        ranges: wp.array2d(dtype=wp.int32),
        gaussian_ids: wp.array(dtype=wp.int32),
        means2d: wp.array2d(dtype=vec2),
        conics: wp.array2d(dtype=vec3),
        colors: wp.array2d(dtype=vec3),
        depths: wp.array2d(dtype=float_t),
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
        # accumulated outputs (zero-initialised)
        grad_means2d: wp.array2d(dtype=vec2),  # [C, N]
        grad_conics: wp.array2d(dtype=vec3),  # [C, N]
        grad_colors: wp.array2d(dtype=vec3),  # [C, N]
        grad_depths: wp.array2d(dtype=float_t),  # [C, N]
        grad_opacities: wp.array(dtype=float_t),  # [N]
    ):
        tid = wp.tid()
        tile, c, px, py = pixel_of(tid, tiles_x, tiles_per_cam)
        # Pixels outside the image still walk the list: warp shuffles need all 32 lanes.
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
            g_depth = grad_depth[c, py, px]
        fx = float_t(px)
        fy = float_t(py)
        T = T_final
        behind_rgb = background[c] * T_final  # colour of everything behind the current Gaussian
        behind_depth = float_t(0.0)
        lane = lane_id()
        end = warp_max_int(last)
        j = end - 1
        while j >= start:
            i = gaussian_ids[j]
            active = 0
            d_mean = vec2()
            d_conic = vec3()
            d_color = vec3()
            d_depth = float_t(0.0)
            d_opacity = float_t(0.0)
            if j < last:
                m = means2d[c, i]
                q = conics[c, i]
                dx = m[0] - fx
                dy = m[1] - fy
                sigma = float_t(0.5) * (q[0] * dx * dx + q[2] * dy * dy) + q[1] * dx * dy
                op = opacities[i]
                g = wp.exp(-sigma)
                raw = op * g
                alpha = wp.min(float_t(ALPHA_MAX), raw)
                if sigma >= float_t(0.0) and alpha >= float_t(ALPHA_MIN):
                    active = 1
                    one_minus = float_t(1.0) - alpha
                    T = T / one_minus  # transmittance in front of this Gaussian
                    w = alpha * T
                    col = colors[c, i]
                    dep = depths[c, i]
                    d_color = g_rgb * w
                    d_depth = g_depth * w
                    d_a = (wp.dot(g_rgb, col * T - behind_rgb / one_minus)
                           + g_depth * (dep * T - behind_depth / one_minus)
                           + g_alpha * T_final / one_minus)
                    behind_rgb += col * w
                    behind_depth += dep * w
                    if raw < float_t(ALPHA_MAX):
                        d_opacity = d_a * g
                        d_sigma = -d_a * alpha
                        d_conic = vec3(float_t(0.5) * dx * dx * d_sigma, dx * dy * d_sigma,
                                       float_t(0.5) * dy * dy * d_sigma)
                        d_mean = vec2((q[0] * dx + q[1] * dy) * d_sigma, (q[1] * dx + q[2] * dy) * d_sigma)
            if warp_any(active) != 0:
                d_mean = vec2(warp_sum(d_mean[0]), warp_sum(d_mean[1]))
                d_conic = vec3(warp_sum(d_conic[0]), warp_sum(d_conic[1]), warp_sum(d_conic[2]))
                d_color = vec3(warp_sum(d_color[0]), warp_sum(d_color[1]), warp_sum(d_color[2]))
                d_depth = warp_sum(d_depth)
                d_opacity = warp_sum(d_opacity)
                # lane 0 holds the warp's sums on CUDA; on the CPU every thread is its own lane 0
                if lane == 0:
                    wp.atomic_add(grad_means2d, c, i, d_mean)
                    wp.atomic_add(grad_conics, c, i, d_conic)
                    wp.atomic_add(grad_colors, c, i, d_color)
                    wp.atomic_add(grad_depths, c, i, d_depth)
                    wp.atomic_add(grad_opacities, i, d_opacity)
            j -= 1

    return rasterize_forward, rasterize_backward


rasterize_forward_f32, rasterize_backward_f32 = make_raster_kernels(wp.float32, warp_sum_f32)
rasterize_forward_f64, rasterize_backward_f64 = make_raster_kernels(wp.float64, warp_sum_f64)
