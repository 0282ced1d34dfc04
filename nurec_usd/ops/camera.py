"""Camera rendering of 3D Gaussians: the torch-facing API over the Warp camera kernels.

``render_cameras`` projects (``warp_kernels.camera_project``), bins and sorts
(``warp_kernels.tile_binning`` + Warp's radix sort) and composites
(``warp_kernels.camera_raster``) a batch of cameras of one resolution in one pass, and is
differentiable: the rasterizer's and the projection's backwards are hand-written (Warp's
generated adjoint of the projection stays as their oracle: ``projection_backward``).
``nurec_usd.ops.reference.render_cameras_reference`` is its slow pure-torch twin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import warp as wp

from nurec_usd.ops.autograd_apply import direct_apply
from nurec_usd.ops.warp_torch import launch, warp_device, warp_view
from nurec_usd.sensors.cameras import camera_model
from nurec_usd.sensors.se3 import matrix_to_quat
from warp_kernels import camera_project as kproj
from warp_kernels import camera_raster as kraster
from warp_kernels import tile_binning as kbin
from warp_kernels import tuning

SHUTTERS = {
    "global": kproj.SHUTTER_GLOBAL,
    "top_to_bottom": kproj.SHUTTER_TOP_TO_BOTTOM,
    "bottom_to_top": kproj.SHUTTER_BOTTOM_TO_TOP,
    "left_to_right": kproj.SHUTTER_LEFT_TO_RIGHT,
    "right_to_left": kproj.SHUTTER_RIGHT_TO_LEFT,
}
MODELS = {
    "pinhole": kproj.MODEL_PINHOLE,
    "opencv": kproj.MODEL_OPENCV,
    "opencv_fisheye": kproj.MODEL_OPENCV_FISHEYE,
    "ftheta": kproj.MODEL_FTHETA,
}


@dataclass
class CameraBatch:
    """C cameras of one resolution, laid out as the projection kernel reads them.

    Poses are ``T_camera_world`` at the start and at the end of each camera's
    rolling-shutter readout (the same for a global shutter).
    """

    model: torch.Tensor  # [C] int32, MODELS
    params: torch.Tensor  # [C, 16], warp_kernels.camera_project.CAMERA_PARAM_LAYOUT
    rot_start: torch.Tensor  # [C, 4] (w, x, y, z)
    trans_start: torch.Tensor  # [C, 3]
    rot_end: torch.Tensor  # [C, 4] (w, x, y, z), same hemisphere as rot_start
    trans_end: torch.Tensor  # [C, 3]
    shutter: torch.Tensor  # [C] int32, SHUTTERS
    width: int
    height: int
    # every camera pinhole with a global shutter (known on the host: picks the specialised
    # projection kernel without reading the device tensors); False is always correct
    pinhole_global: bool = False

    def __len__(self) -> int:
        return int(self.model.shape[0])

    @classmethod
    def create(cls, models: list[str], params: list[dict], width: int, height: int,
               T_camera_world_start: torch.Tensor,  # [C, 4, 4]
               T_camera_world_end: torch.Tensor | None = None,  # [C, 4, 4]; None: global shutters
               shutters: list[str] | None = None) -> "CameraBatch":
        """From camera models and parameters by name (as in a capture's manifest)."""
        c = len(models)
        device, dtype = T_camera_world_start.device, T_camera_world_start.dtype
        if len(params) != c or T_camera_world_start.shape != (c, 4, 4):
            raise ValueError(f"models ({c}), params ({len(params)}) and T_camera_world_start "
                             f"{tuple(T_camera_world_start.shape)} disagree")
        if T_camera_world_end is not None and shutters is None:
            raise ValueError("T_camera_world_end was given without shutters: say which cameras roll "
                             f"(one of {sorted(SHUTTERS)} per camera)")
        shutters = shutters or ["global"] * c
        if len(shutters) != c:
            raise ValueError(f"{len(shutters)} shutters for {c} cameras")
        for k, name in enumerate(shutters):
            if name not in SHUTTERS:
                raise ValueError(f"camera {k}: unknown shutter {name!r}; known: {sorted(SHUTTERS)}")
        table = torch.zeros(c, 16, dtype=torch.float64)
        for k, (name, p) in enumerate(zip(models, params)):
            if name not in MODELS:
                raise ValueError(f"camera {k}: unknown model {name!r}; known: {sorted(MODELS)}")
            layout = kproj.CAMERA_PARAM_LAYOUT[name]
            values = dict(p)
            if name == "ftheta":
                coeffs = list(p["angle_to_pixel"]) + [0.0] * (6 - len(p["angle_to_pixel"]))
                values.update({"fx": 1.0, "fy": 1.0, **{f"c{n}": v for n, v in enumerate(coeffs)}})
            if name in ("opencv_fisheye", "ftheta"):
                values["max_theta"] = float(camera_model(name, width, height, p, dtype=torch.float64).max_theta)
            if name == "opencv":
                values["max_r2"] = float(camera_model(name, width, height, p, dtype=torch.float64).max_r) ** 2
            for slot, key in enumerate(layout):
                table[k, slot] = float(values.get(key, 0.0))
        end = T_camera_world_start if T_camera_world_end is None else T_camera_world_end
        q0 = matrix_to_quat(T_camera_world_start[:, :3, :3])
        q1 = matrix_to_quat(end[:, :3, :3])
        q1 = torch.where((q0 * q1).sum(-1, keepdim=True) < 0, -q1, q1)
        return cls(
            model=torch.tensor([MODELS[m] for m in models], dtype=torch.int32, device=device),
            params=table.to(device=device, dtype=dtype),
            rot_start=q0.contiguous(), trans_start=T_camera_world_start[:, :3, 3].contiguous(),
            rot_end=q1.contiguous(), trans_end=end[:, :3, 3].contiguous(),
            shutter=torch.tensor([SHUTTERS[s] for s in shutters], dtype=torch.int32, device=device),
            width=int(width), height=int(height),
            pinhole_global=all(m == "pinhole" for m in models) and all(s == "global" for s in shutters))

    @classmethod
    def pinhole(cls, viewmats: torch.Tensor,  # [C, 4, 4] T_camera_world
                Ks: torch.Tensor,  # [C, 3, 3]
                width: int, height: int) -> "CameraBatch":
        """Global-shutter pinhole cameras from view matrices and intrinsic matrices."""
        params = [{"fx": float(K[0, 0]), "fy": float(K[1, 1]), "cx": float(K[0, 2]), "cy": float(K[1, 2])}
                  for K in Ks.detach().cpu()]
        return cls.create(["pinhole"] * len(params), params, width, height, viewmats)

    def to(self, dtype: torch.dtype) -> "CameraBatch":
        f = lambda t: t.to(dtype)  # noqa: E731
        return CameraBatch(self.model, f(self.params), f(self.rot_start), f(self.trans_start), f(self.rot_end),
                           f(self.trans_end), self.shutter, self.width, self.height, self.pinhole_global)


@dataclass
class RenderSettings:
    """Options of ``render_cameras``."""

    near: float = 0.01
    far: float = 1e4
    capacity: int | None = None  # intersections buffer; None: sized exactly (one host sync)
    # the depth image (CameraRender.depth); without it the forward rasterizer leaves the depths
    # out (about a tenth of its time) and the render's depth is None
    depth: bool = True
    # [N] float, or None: the backward adds each Gaussian's screen-space position gradient norm
    # (pixels, summed over the cameras) into it; densification reads where the error is from it
    grad2d_sums: torch.Tensor | None = None
    # [N] float, or None: the backward adds the number of cameras in which each Gaussian got a
    # screen-space position gradient (with grad2d_sums: the gradient's mean over the views that saw it)
    grad2d_counts: torch.Tensor | None = None


@dataclass
class CameraRender:
    """What ``render_cameras`` returns. Images are [C, H, W(, 3)]."""

    rgb: torch.Tensor  # [C, H, W, 3]
    alpha: torch.Tensor  # [C, H, W]
    depth: torch.Tensor | None  # [C, H, W] sum of w_i depth_i (divide by alpha for the expected
    # depth); None when rendered with RenderSettings(depth=False)
    means2d: torch.Tensor  # [C, N, 2] (no gradient; for densification statistics)
    radii: torch.Tensor  # [C, N] int32, 0 where culled
    intersections: torch.Tensor  # [1] int32 on the device: (camera, Gaussian, tile) pairs wanted
    overflow: torch.Tensor  # [1] bool on the device: more intersections than the capacity


def _kernels(dtype: torch.dtype, pinhole_global: bool = False):
    if dtype == torch.float32:
        project = kproj.project_pinhole_global_f32 if pinhole_global else kproj.project_gaussians_f32
        return (project, kproj.sh_colors_f32, kbin.count_tiles_f32, kbin.emit_keys_f32,
                (kraster.rasterize_forward_f32, kraster.rasterize_forward_nodepth_f32),
                (kraster.rasterize_backward_f32, kraster.rasterize_backward_nodepth_f32))
    if dtype == torch.float64:
        project = kproj.project_pinhole_global_f64 if pinhole_global else kproj.project_gaussians_f64
        return (project, kproj.sh_colors_f64, kbin.count_tiles_f64, kbin.emit_keys_f64,
                (kraster.rasterize_forward_f64, kraster.rasterize_forward_nodepth_f64),
                (kraster.rasterize_backward_f64, kraster.rasterize_backward_nodepth_f64))
    raise ValueError(f"Gaussians must be float32 or float64, got {dtype}")


def _split(make, shapes: list[tuple], dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """Contiguous tensors of these shapes carved from one ``make`` (torch.zeros or torch.empty)
    allocation: one allocation and one fill instead of one each (a render makes dozens)."""
    return _carve(make(sum(math.prod(shape) for shape in shapes), dtype=dtype, device=device), shapes)


def _carve(flat: torch.Tensor, shapes: list[tuple]) -> list[torch.Tensor]:
    """Views of consecutive parts of a 1-d tensor, of these shapes."""
    sizes = [math.prod(shape) for shape in shapes]
    return [part.view(shape) for part, shape in zip(flat.split(sizes), shapes)]


def _per_splat(tensors: tuple) -> list[torch.Tensor]:
    """Per-(camera, Gaussian) tensors [C, N, (k)] as the rasterizers read them: [C * N, (k)]."""
    return [t.view(-1, t.shape[-1]) if t.dim() == 3 else t.view(-1) for t in tensors]


def _camera_inputs(means, quats, scales, opacities, cams: CameraBatch, settings: RenderSettings) -> list:
    """The projection kernels' inputs (the forward's, which their adjoints take again)."""
    return [means, quats, scales, opacities, cams.rot_start, cams.trans_start, cams.rot_end, cams.trans_end,
            cams.model, cams.params, cams.shutter, cams.width, cams.height, float(settings.near), float(settings.far)]


# Warp's generated adjoint of the projection kernel, not the hand-written backward, for batches that
# are not all pinhole with a global shutter: the oracle that tests/ops/test_projection_backward.py
# and benchmarks/projection_backward.py compare the hand-written one with.
GENERATED_PROJECTION_ADJOINT = False


def projection_backward(means, quats, scales, opacities, cams: CameraBatch, settings: RenderSettings,
                        radii: torch.Tensor, g_means2d: torch.Tensor, g_conics: torch.Tensor, g_depths: torch.Tensor,
                        g_dirs: torch.Tensor, generated: bool | None = None):
    """dL/d(means, quats, scales) of the projection (the forward's inputs and radii [C, N]) from the
    gradients of its outputs [C, N, (k)]; culled pairs carry none. All-pinhole global-shutter batches
    take their hand-written kernel, every other batch the general hand-written one, or Warp's
    generated adjoint with ``generated`` (default: ``GENERATED_PROJECTION_ADJOINT``). The cameras get
    no gradient, nor do the opacities (they only set a splat's extent, piecewise constant)."""
    dtype, device = means.dtype, means.device
    c, n = len(cams), means.shape[0]
    w, h = cams.width, cams.height
    f32 = dtype == torch.float32
    wdev = warp_device(device)
    if generated is None:
        generated = GENERATED_PROJECTION_ADJOINT
    if cams.pinhole_global or not generated:  # the hand-written kernels write every Gaussian's gradient
        g_means, g_quats, g_scales = torch.empty_like(means), torch.empty_like(quats), torch.empty_like(scales)
        if cams.pinhole_global:
            launch(kproj.project_pinhole_backward_f32 if f32 else kproj.project_pinhole_backward_f64, n,
                   [means, quats, scales, cams.rot_start, cams.trans_start, cams.params, w, h, radii, g_means2d,
                    g_conics, g_depths, g_dirs], [g_means, g_quats, g_scales], device=wdev)
        else:
            launch(kproj.project_gaussians_backward_f32 if f32 else kproj.project_gaussians_backward_f64, n,
                   [means, quats, scales, cams.rot_start, cams.trans_start, cams.rot_end, cams.trans_end,
                    cams.model, cams.params, cams.shutter, w, h, float(settings.near), radii, g_means2d, g_conics,
                    g_depths, g_dirs], [g_means, g_quats, g_scales], device=wdev)
        return g_means, g_quats, g_scales
    # Warp's adjoint of the projection kernel adds into zeros; it replays the forward into scratch
    # outputs (never read). The opacities' adjoint is discarded.
    g_means, g_quats, g_scales = torch.zeros_like(means), torch.zeros_like(quats), torch.zeros_like(scales)
    s_means2d, s_conics, s_depths, s_dirs, s_opacities2d, d_opacities, d_opacities2d = _split(
        torch.empty, [(c, n, 2), (c, n, 3), (c, n), (c, n, 3), (c, n), (n,), (c, n)], dtype, device)
    adj_inputs = [g_means, g_quats, g_scales, d_opacities.zero_(), None, None, None, None, None, None,
                  None, 0, 0, 0.0, 0.0]
    adj_outputs = [g_means2d, g_conics, g_depths, None, g_dirs, d_opacities2d.zero_()]
    launch(_kernels(dtype)[0], (c, n), _camera_inputs(means, quats, scales, opacities, cams, settings),
           [s_means2d, s_conics, s_depths, torch.empty_like(radii), s_dirs, s_opacities2d],
           adj_inputs=adj_inputs, adj_outputs=adj_outputs, adjoint=True, device=wdev)
    return g_means, g_quats, g_scales


# The order in which the rasterizer's blocks take the tiles. A tile's time grows with its list,
# and a few tiles hold many times the mean. "list" launches the longest lists first in both
# passes (on a drive30 step, benchmarks/RESULTS.md: the backward 16% and the forward 11% faster
# than "index"; the backward keyed by its own walk, from each tile's furthest pixel, no better),
# "index" in the tiles' own order. Images and gradients do not depend on it; benchmarks compare
# the two through NUREC_CAMERA_TILE_ORDER (warp_kernels.tuning).
TILE_ORDER = tuning.CAMERA_TILE_ORDER
_LONGEST_LIST = torch.iinfo(torch.int32).max  # the sort key of an empty tile


def _tile_order(lengths: torch.Tensor) -> torch.Tensor:
    """[tiles] int32: the tiles by descending ``lengths`` [tiles] int32, ties in index order (or
    0..tiles-1 when TILE_ORDER is "index"). Warp's radix sort, not torch's: it is already part of
    the render that GraphedCameraRenderer captures."""
    n, device = lengths.shape[0], lengths.device
    keys, values = torch.empty(2, 2 * n, dtype=torch.int32, device=device)  # the sort's double buffers
    order = values[:n]
    torch.arange(n, dtype=torch.int32, device=device, out=order)
    if TILE_ORDER == "index" or n == 0:
        return order
    torch.sub(_LONGEST_LIST, lengths, out=keys[:n])  # ascending keys: descending lengths
    wp.utils.radix_sort_pairs(warp_view(keys), warp_view(values), n)
    return order


class _RenderCameras(torch.autograd.Function):
    @staticmethod
    def forward(ctx, means, quats, scales, opacities, sh, background, cams: CameraBatch, sh_degree: int,
                settings: RenderSettings):
        dtype, device = means.dtype, means.device
        project, sh_kernel, count_tiles, emit_keys, (raster_fwd, raster_fwd_nodepth), _ = _kernels(
            dtype, cams.pinhole_global)
        c, n = len(cams), means.shape[0]
        w, h = cams.width, cams.height
        tiles_x, tiles_y = math.ceil(w / kbin.TILE_SIZE), math.ceil(h / kbin.TILE_SIZE)
        tiles = c * tiles_x * tiles_y

        # No fills: each is host time. The projection writes every radius (0 = culled) and every
        # 2D mean (0 where culled: returned), the other rows of visible splats only (nothing reads
        # a culled splat's rows); the tile count zeroes the ranges and the key emission pads the
        # keys (warp_kernels.tile_binning).
        means2d = torch.empty(c, n, 2, dtype=dtype, device=device)  # returned: an allocation of its own
        radii = torch.empty(c, n, dtype=torch.int32, device=device)
        conics, depths, dirs, opacities2d = _split(torch.empty, [(c, n, 3), (c, n), (c, n, 3), (c, n)], dtype, device)
        if sh_degree < 0:  # colours given: the same for every camera
            colors = sh[:, 0, :].expand(c, n, 3).contiguous()
        else:
            colors = torch.empty(c, n, 3, dtype=dtype, device=device)
        counts, offsets = _split(torch.empty, [(c * n + 1,), (c * n + 1,)], torch.int32, device)
        ranges = torch.empty(tiles + 1, 2, dtype=torch.int32, device=device)  # + the binning's dead tile
        if c * n == 0:  # (no splat: the kernels that write these do not run)
            counts.zero_()
            ranges.zero_()
        wdev = warp_device(device)
        launch(project, (c, n), _camera_inputs(means, quats, scales, opacities, cams, settings),
               [means2d, conics, depths, radii, dirs, opacities2d], device=wdev)
        if sh_degree >= 0:
            launch(sh_kernel, (c, n), [sh, int(sh_degree), dirs, radii], [colors], device=wdev)
        launch(count_tiles, (c, n), [means2d, conics, opacities2d, radii, tiles_x, tiles_y], [counts, ranges],
               device=wdev)
        torch.cumsum(counts, 0, dtype=torch.int32, out=offsets)  # each splat's first slot, then the total
        total = offsets[c * n:]  # [1] intersections wanted (may exceed the capacity)
        capacity = settings.capacity
        if capacity is None:  # exact size: the one host synchronisation of this mode
            capacity = int(total.item())
        capacity = max(capacity, 1)
        keys = torch.empty(2 * capacity, dtype=torch.int64, device=device)
        values = torch.empty(2 * capacity, dtype=torch.int32, device=device)
        overflow = torch.empty(1, dtype=torch.bool, device=device)
        launch(emit_keys, (c, n), [means2d, conics, opacities2d, radii, depths, offsets, tiles_x, tiles_y, capacity],
               [keys, values], device=wdev)
        tile_bits = max(1, int(tiles).bit_length())
        wp.utils.radix_sort_pairs(warp_view(keys), warp_view(values), capacity, end_bit=32 + tile_bits)
        launch(kbin.tile_ranges, capacity, [keys, total, capacity], [ranges, overflow], device=wdev)

        rgb = torch.empty(c, h, w, 3, dtype=dtype, device=device)
        alpha = torch.empty(c, h, w, dtype=dtype, device=device)
        depth = torch.empty(c, h, w, dtype=dtype, device=device) if settings.depth else None
        last = torch.empty(c, h, w, dtype=torch.int32, device=device)
        order = _tile_order(ranges[:tiles, 1] - ranges[:tiles, 0])
        launch(raster_fwd if settings.depth else raster_fwd_nodepth, [tiles],
               [ranges, order, values, *_per_splat((means2d, conics, colors, depths, opacities2d)), background, tiles_x,
                tiles_x * tiles_y, w, h], [rgb, alpha, depth, last], device=wdev, block_dim=kraster.TILE_PIXELS,
               tiled=True)

        ctx.save_for_backward(means, quats, scales, opacities, sh, background, means2d, conics, depths, radii,
                              colors, opacities2d, ranges, order, values, alpha, last, dirs)
        # Never keep this function's outputs (or views of them) on ctx but through save_for_backward:
        # an output -> ctx -> output cycle is freed only by the garbage collector, and GPU memory ran out first.
        ctx.cams, ctx.sh_degree, ctx.settings = cams, sh_degree, settings
        ctx.tiles = (tiles_x, tiles_y)
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None, not zeros
        ctx.mark_non_differentiable(means2d, radii, total, overflow)
        return rgb, alpha, depth, means2d, radii, total, overflow

    @staticmethod
    def backward(ctx, grad_rgb, grad_alpha, grad_depth, *_):
        (means, quats, scales, opacities, sh, background, means2d, conics, depths, radii, colors, opacities2d, ranges,
         order, values, alpha, last, dirs) = ctx.saved_tensors
        cams = ctx.cams
        dtype, device = means.dtype, means.device
        _, sh_kernel, _, _, _, (raster_bwd, raster_bwd_nodepth) = _kernels(dtype, cams.pinhole_global)
        c, n = len(cams), means.shape[0]
        w, h = cams.width, cams.height
        tiles_x, tiles_y = ctx.tiles

        def grad_or_zeros(g, shape):
            return torch.zeros(shape, dtype=dtype, device=device) if g is None else g.contiguous()

        grad_rgb = grad_or_zeros(grad_rgb, (c, h, w, 3))
        grad_alpha = grad_or_zeros(grad_alpha, (c, h, w))
        if grad_depth is None:  # the loss does not use the depth image: a backward without it
            raster_bwd, grad_depth = raster_bwd_nodepth, alpha  # (an image the kernel does not read)
        else:
            grad_depth = grad_depth.contiguous()
        # the rasterizer's gradients, one after the other in one buffer (it adds into them by offset),
        # and after them the view directions' (one fill for both)
        g_raster, g_dirs = torch.zeros(13 * c * n, dtype=dtype, device=device).split([10 * c * n, 3 * c * n])
        g_means2d, g_conics, g_colors, g_depths, g_opacities2d = _carve(
            g_raster, [(c, n, 2), (c, n, 3), (c, n, 3), (c, n), (c, n)])
        g_dirs = g_dirs.view(c, n, 3)
        g_sh = torch.zeros_like(sh)
        wdev = warp_device(device)
        launch(raster_bwd, [c * tiles_x * tiles_y],
               [ranges, order, values, *_per_splat((means2d, conics, colors, depths, opacities2d)), background, tiles_x,
                tiles_x * tiles_y, w, h, alpha, last, grad_rgb, grad_alpha, grad_depth, c * n],
               [g_raster], device=wdev, block_dim=kraster.TILE_PIXELS, tiled=True)
        if ctx.sh_degree < 0:
            g_sh[:, 0, :] = g_colors.sum(0)
        else:  # colours: Warp's adjoint of sh_colors (it replays the forward into a scratch output)
            launch(sh_kernel, (c, n), [sh, int(ctx.sh_degree), dirs, radii], [torch.empty_like(g_colors)],
                   adj_inputs=[g_sh, 0, g_dirs, None], adj_outputs=[g_colors], adjoint=True, device=wdev)
        g_means, g_quats, g_scales = projection_backward(means, quats, scales, opacities, cams, ctx.settings, radii,
                                                         g_means2d, g_conics, g_depths, g_dirs)
        grad_background = None  # a training step's background is a constant: no image-sized sum for it
        if ctx.needs_input_grad[5]:
            grad_background = (grad_rgb * (1.0 - alpha)[..., None]).sum(dim=(1, 2))
        g_opacities = g_opacities2d.sum(0)
        if ctx.settings.grad2d_sums is not None:
            ctx.settings.grad2d_sums.add_(torch.linalg.vector_norm(g_means2d, dim=-1).sum(0))
        if ctx.settings.grad2d_counts is not None:
            ctx.settings.grad2d_counts.add_((g_means2d != 0).any(-1).sum(0))
        return g_means, g_quats, g_scales, g_opacities, g_sh, grad_background, None, None, None


_apply_render_cameras = direct_apply(_RenderCameras)


_blacks: dict[tuple, torch.Tensor] = {}


def _black(c: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A black background for c cameras, made once per (c, dtype, device): a fill per render is
    host time, and the renderer only reads it."""
    key = (c, dtype, device)
    black = _blacks.get(key)
    if black is None:
        black = torch.zeros(c, 3, dtype=dtype, device=device)
        # not one made while a CUDA graph is captured: it lives in the graph's memory pool
        if device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
            _blacks[key] = black
    return black


def render_cameras(
    means: torch.Tensor,  # [N, 3] world
    quats: torch.Tensor,  # [N, 4] (w, x, y, z), any norm
    scales: torch.Tensor,  # [N, 3] linear standard deviations
    opacities: torch.Tensor,  # [N] in [0, 1]
    colors: torch.Tensor,  # [N, 3] RGB, or [N, K, 3] SH coefficients when sh_degree is given
    cameras: CameraBatch,
    sh_degree: int | None = None,
    background: torch.Tensor | None = None,  # [C, 3] or [3]; black when None
    settings: RenderSettings | None = None,
) -> CameraRender:
    """Render C cameras of one resolution; differentiable in every Gaussian parameter.

    Pixel (u, v) samples the image plane at the pixel's centre, with OpenCV's convention
    (the centre of the top-left pixel is (0, 0)).
    """
    settings = settings or RenderSettings()
    dtype = means.dtype
    n = means.shape[0]
    for name, t, shape in (("means", means, (n, 3)), ("quats", quats, (n, 4)), ("scales", scales, (n, 3)),
                           ("opacities", opacities, (n,))):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
        if t.dtype != dtype or t.device != means.device:
            raise ValueError(f"{name} must be {dtype} on {means.device} like means")
    if sh_degree is None:
        if colors.shape != (n, 3):
            raise ValueError(f"colors must have shape {(n, 3)} without sh_degree, got {tuple(colors.shape)}")
        sh, degree = colors[:, None, :], -1
    else:
        if not 0 <= sh_degree <= 3 or colors.dim() != 3 or colors.shape[0] != n or colors.shape[2] != 3 \
                or colors.shape[1] < (sh_degree + 1) ** 2:
            raise ValueError(f"SH coefficients must be [N, K>=(d+1)^2, 3] with 0 <= d <= 3, got {tuple(colors.shape)} "
                             f"for degree {sh_degree}")
        sh, degree = colors, sh_degree
    for name in ("grad2d_sums", "grad2d_counts"):  # buffers the backward adds into
        buf = getattr(settings, name)
        if buf is not None and (tuple(buf.shape) != (n,) or not buf.is_floating_point() or buf.device != means.device):
            raise ValueError(f"RenderSettings.{name} must be a float tensor of shape {(n,)} on {means.device}, "
                             f"got {buf.dtype} {tuple(buf.shape)} on {buf.device}")
    c = len(cameras)
    if 10 * c * n >= 2**31:  # the backward adds into one buffer of 10 values per (camera, Gaussian)
        raise ValueError(f"{c} cameras x {n} Gaussians is too large a batch for one render (at most "
                         f"{(2**31 - 1) // 10:,} camera-Gaussian pairs): render fewer cameras at a time")
    if background is None:
        background = _black(c, dtype, means.device)
    background = background.to(dtype).expand(c, 3).contiguous()
    cams = cameras if cameras.params.dtype == dtype else cameras.to(dtype)
    rgb, alpha, depth, means2d, radii, total, overflow = _apply_render_cameras(
        means.contiguous(), quats.contiguous(), scales.contiguous(), opacities.contiguous(), sh.contiguous(),
        background, cams, degree, settings)
    return CameraRender(rgb, alpha, depth, means2d, radii, total, overflow)


def project_points(points: torch.Tensor,  # [N, 3] world, float32 or float64
                   cameras: CameraBatch, near: float = 0.01, far: float = 1e4,
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where world points land in each camera, exactly as the renderer places a Gaussian's centre:
    the same projection kernel (every camera model; a rolling shutter's pose at the point's own
    line), the same depth (z for pinhole / opencv, the distance for fisheye / f-theta).

    Returns ``uv [C, N, 2]`` (pixel centres at integers), ``depth [C, N]`` and ``inside [C, N]``
    (bool: in front of the camera within [near, far], where the model images it, and its pixel
    centre's square inside the image); ``uv`` and ``depth`` are 0 where not ``inside``.
    """
    if points.dim() != 2 or points.shape[1] != 3:
        raise ValueError(f"points must have shape (N, 3), got {tuple(points.shape)}")
    dtype, device = points.dtype, points.device
    c, n = len(cameras), points.shape[0]
    cams = cameras if cameras.params.dtype == dtype else cameras.to(dtype)
    # a point as a tiny opaque Gaussian: the kernel keeps it while its pixel footprint reaches the image
    quats = torch.zeros(n, 4, dtype=dtype, device=device)
    quats[:, 0] = 1
    scales = torch.full((n, 3), 1e-6, dtype=dtype, device=device)
    opacities = torch.ones(n, dtype=dtype, device=device)
    uv = torch.empty(c, n, 2, dtype=dtype, device=device)
    radii = torch.empty(c, n, dtype=torch.int32, device=device)
    conics, depth, dirs, opacities2d = _split(torch.empty, [(c, n, 3), (c, n), (c, n, 3), (c, n)], dtype, device)
    if c * n:
        launch(_kernels(dtype, cams.pinhole_global)[0], (c, n),
               _camera_inputs(points.contiguous(), quats, scales, opacities, cams, RenderSettings(near=near, far=far)),
               [uv, conics, depth, radii, dirs, opacities2d], device=warp_device(device))
    half = 0.5
    inside = (radii > 0) & (uv[..., 0] >= -half) & (uv[..., 0] < cams.width - half) & \
        (uv[..., 1] >= -half) & (uv[..., 1] < cams.height - half)
    zero = torch.zeros((), dtype=dtype, device=device)
    return torch.where(inside[..., None], uv, zero), torch.where(inside, depth, zero), inside


class IntersectionCapacity:
    """Sizes the intersection buffers across training steps without a host sync inside a step.

    Each render reports how many (camera, Gaussian, tile) intersections it wanted
    (``CameraRender.intersections``, on the device). ``observe`` copies that count to pinned
    host memory without blocking; a later ``settings()`` reads it once the copy has landed
    (checked with an event, never waited on) and grows the capacity with headroom. A render
    that overflowed says so in ``CameraRender.overflow``; the caller re-renders that step
    with ``settings()`` after ``sync_grow()``, or skips it: overflow is never silent.
    """

    def __init__(self, initial: int = 1 << 20, headroom: float = 1.25):
        self.capacity = int(initial)
        self.headroom = float(headroom)
        self.latest: int | None = None  # the latest count that has reached the host
        self._pending: list[tuple[torch.Tensor, object]] = []

    def observe(self, render: CameraRender) -> None:
        """Start a non-blocking copy of the render's wanted intersection count."""
        count = render.intersections
        if count.device.type == "cuda":
            host = torch.empty(1, dtype=count.dtype, pin_memory=True)
            host.copy_(count, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._pending.append((host, event))
        else:
            self._pending.append((count.clone(), None))

    def grow_to(self, wanted: int) -> None:
        """Make room for ``wanted`` intersections (with headroom) if there is not enough."""
        if wanted > self.capacity:
            self.capacity = int(wanted * self.headroom)

    def _collect(self) -> None:
        """Grow by every count that has arrived (never waits)."""
        still = []
        for host, event in self._pending:
            if event is None or event.query():
                self.latest = int(host[0])
                self.grow_to(self.latest)
            else:
                still.append((host, event))
        self._pending = still

    def settings(self, **options) -> RenderSettings:
        """Render settings with the current capacity, grown by every count that has arrived."""
        self._collect()
        return RenderSettings(capacity=self.capacity, **options)

    def grow_by(self, factor: float) -> None:
        """The scene grew ``factor``-fold: make room for the latest arrived count times ``factor``
        (without waiting for the device; before any count arrived, for the capacity's own)."""
        self._collect()
        wanted = self.latest if self.latest is not None else self.capacity / self.headroom
        self.grow_to(int(wanted * factor))

    def sync_grow(self, render: CameraRender) -> None:
        """After an overflow: wait for this render's count (one sync) and grow to fit it."""
        self.latest = int(render.intersections.item())
        self.grow_to(self.latest)
