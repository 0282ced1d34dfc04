"""The Warp camera renderer against its pure-torch twin: forward, backward, float64 gradcheck,
every camera model, rolling shutter, SH degrees, culling, overflow, and the real garden points."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from conftest import shared_data_dir

from nurec_usd.ops import camera as camera_ops
from nurec_usd.ops.camera import CameraBatch, RenderSettings, render_cameras
from nurec_usd.ops.reference import render_cameras_reference

W, H = 40, 30
MODELS = ["pinhole", "opencv", "opencv_fisheye", "ftheta"]
PARAMS = {
    "pinhole": {"fx": 30.0, "fy": 31.0, "cx": 19.5, "cy": 14.5},
    "opencv": {"fx": 30.0, "fy": 30.0, "cx": 20.0, "cy": 15.0, "k1": -0.1, "k2": 0.02, "p1": 0.001, "p2": -0.002,
               "k3": 0.001, "k4": 0.01, "k5": 0.0, "k6": 0.0},
    "opencv_fisheye": {"fx": 20.0, "fy": 20.0, "cx": 19.5, "cy": 14.5, "k1": 0.02, "k2": -0.01, "k3": 0.0, "k4": 0.0},
    "ftheta": {"cx": 19.5, "cy": 14.5, "angle_to_pixel": [0.0, 20.0, 0.0, -0.5], "max_fov_deg": 190.0},
}
SHUTTERS = ["global", "top_to_bottom", "left_to_right", "bottom_to_top"]


def _rot_x(a: float, dtype) -> torch.Tensor:
    c, s = math.cos(a), math.sin(a)
    return torch.tensor([[1, 0, 0], [0, c, -s], [0, s, c]], dtype=dtype)


def make_cameras(dtype, moving: bool = True) -> CameraBatch:
    """Four cameras, one of each model, with rolling shutters on three of them."""
    start = torch.eye(4, dtype=dtype).repeat(4, 1, 1)
    start[1, 0, 3] = 0.3
    start[2, :3, :3] = _rot_x(0.3, dtype)
    start[3, :3, :3] = _rot_x(-0.2, dtype)
    end = start.clone()
    if moving:  # the camera moves and turns during the readout
        end[:, 0, 3] += 0.2
        end[:, 1, 3] -= 0.1
        end[:, :3, :3] = end[:, :3, :3] @ _rot_x(0.05, dtype)
    return CameraBatch.create(MODELS, [PARAMS[m] for m in MODELS], W, H, start, end, SHUTTERS)


def make_gaussians(n: int, dtype, sh_dim: int = 16, seed: int = 0, spread: float = 0.7):
    g = torch.Generator().manual_seed(seed)
    means = (torch.randn(n, 3, generator=g) * spread + torch.tensor([0.0, 0.0, 4.0])).to(dtype)
    quats = torch.randn(n, 4, generator=g).to(dtype)
    scales = (torch.rand(n, 3, generator=g) * 0.1 + 0.03).to(dtype)
    opacities = (torch.rand(n, generator=g) * 0.8 + 0.1).to(dtype)
    sh = (torch.randn(n, sh_dim, 3, generator=g) * 0.3).to(dtype)
    return [means, quats, scales, opacities, sh]


def _render_both(params, cams, sh_degree, background):
    ours = render_cameras(*params, cams, sh_degree=sh_degree, background=background)
    ref = render_cameras_reference(*params, cams, sh_degree=sh_degree, background=background)
    return ours, ref


@pytest.mark.parametrize("sh_degree", [None, 0, 1, 2, 3])
def test_forward_matches_twin(sh_degree):
    params = make_gaussians(300, torch.float32, sh_dim=16)
    if sh_degree is None:
        params[4] = torch.rand(300, 3)
    cams = make_cameras(torch.float32)
    bg = torch.tensor([0.1, 0.2, 0.3])
    ours, (rgb, alpha, depth, means2d, radii) = _render_both(params, cams, sh_degree, bg)
    assert torch.equal(ours.radii, radii), "the same Gaussians must be culled"
    assert ours.alpha.mean() > 0.1, "the scene should cover a good part of every image"
    # float32 kernels vs float32 torch: rounding differences only
    torch.testing.assert_close(ours.rgb, rgb, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(ours.alpha, alpha, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(ours.depth, depth, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.means2d[radii > 0], means2d[radii > 0], atol=1e-4, rtol=1e-5)
    assert int(ours.intersections) > 0 and not bool(ours.overflow)


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_backward_matches_twin(dtype, rtol):
    params = make_gaussians(300, dtype)
    for p in params:
        p.requires_grad_(True)
    cams = make_cameras(dtype)
    bg = torch.tensor([0.1, 0.2, 0.3], dtype=dtype)
    ours, ref = _render_both(params, cams, 3, bg)
    g = torch.Generator().manual_seed(1)
    w_rgb = torch.randn(ours.rgb.shape, generator=g).to(dtype)
    w_alpha = torch.randn(ours.alpha.shape, generator=g).to(dtype)
    w_depth = torch.randn(ours.depth.shape, generator=g).to(dtype)
    loss = (ours.rgb * w_rgb).sum() + (ours.alpha * w_alpha).sum() + (ours.depth * w_depth).sum()
    loss_ref = (ref[0] * w_rgb).sum() + (ref[1] * w_alpha).sum() + (ref[2] * w_depth).sum()
    grads = torch.autograd.grad(loss, params)
    grads_ref = torch.autograd.grad(loss_ref, params)
    for name, a, b in zip(["means", "quats", "scales", "opacities", "sh"], grads, grads_ref):
        assert b.abs().sum() > 0, name
        # relative error of the whole gradient (atomics reorder float sums)
        err = ((a - b).norm() / b.norm()).item()
        assert err < rtol, f"{name}: relative gradient error {err:.2e} >= {rtol:.0e}"


def test_screen_gradient_sums_match_twin():
    """RenderSettings.grad2d_sums: the backward adds each Gaussian's 2D mean gradient norm, summed over
    the cameras, into the buffer; against the norms of the twin's 2D mean gradients (float64)."""
    dtype = torch.float64
    params = [p.requires_grad_(True) for p in make_gaussians(300, dtype, seed=4)]
    cams = make_cameras(dtype)
    start = torch.full((300,), 0.5, dtype=dtype)
    sums = start.clone()
    ours = render_cameras(*params, cams, sh_degree=3, settings=RenderSettings(depth=False, grad2d_sums=sums))
    rgb, alpha, _, means2d, radii = render_cameras_reference(*params, cams, sh_degree=3)
    means2d.retain_grad()
    w = torch.randn(ours.rgb.shape, generator=torch.Generator().manual_seed(3), dtype=dtype)
    (ours.rgb * w).sum().backward()
    (rgb * w).sum().backward()
    expected = start + (means2d.grad * (radii > 0)[..., None]).norm(dim=-1).sum(0)
    assert int((expected > 0.5 + 1e-6).sum()) > 100, "most Gaussians should get a gradient"
    torch.testing.assert_close(sums, expected, atol=1e-9, rtol=1e-6)
    with pytest.raises(ValueError, match="grad2d_sums"):
        render_cameras(*params, cams, sh_degree=3, settings=RenderSettings(grad2d_sums=torch.zeros(7, dtype=dtype)))


def test_screen_gradient_counts_match_twin():
    """RenderSettings.grad2d_counts: the backward adds, per Gaussian, the number of cameras in which
    its 2D mean got a gradient; against the twin's 2D mean gradients (float64)."""
    dtype = torch.float64
    params = [p.requires_grad_(True) for p in make_gaussians(300, dtype, seed=5, spread=3.0)]
    cams = make_cameras(dtype)
    counts = torch.full((300,), 2.0, dtype=dtype)
    settings = RenderSettings(depth=False, grad2d_sums=torch.zeros(300, dtype=dtype), grad2d_counts=counts)
    ours = render_cameras(*params, cams, sh_degree=3, settings=settings)
    rgb, alpha, _, means2d, radii = render_cameras_reference(*params, cams, sh_degree=3)
    means2d.retain_grad()
    w = torch.randn(ours.rgb.shape, generator=torch.Generator().manual_seed(6), dtype=dtype)
    (ours.rgb * w).sum().backward()
    (rgb * w).sum().backward()
    seen = ((means2d.grad != 0).any(-1) & (radii > 0)).sum(0)  # [N] cameras that gave a gradient
    assert len(cams) > 1 and int((seen > 1).sum()) > 20, "some Gaussians should be seen by several cameras"
    assert int((seen == 0).sum()) > 0, "some Gaussians should get no gradient at all"
    torch.testing.assert_close(counts, 2.0 + seen.to(dtype), atol=0, rtol=0)
    with pytest.raises(ValueError, match="grad2d_counts"):
        render_cameras(*params, cams, sh_degree=3, settings=RenderSettings(grad2d_counts=torch.zeros(7, dtype=dtype)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_without_depth_image_equals_the_full_forward(dtype):
    """RenderSettings(depth=False): the forward that leaves the depths out renders the same colour
    and alpha (the same sums in the same order), and no depth image."""
    params = make_gaussians(300, dtype, seed=5)
    cams = make_cameras(dtype)
    full = render_cameras(*params, cams, sh_degree=3)
    plain = render_cameras(*params, cams, sh_degree=3, settings=RenderSettings(depth=False))
    assert plain.depth is None and full.depth is not None
    for name in ("rgb", "alpha", "means2d", "radii", "intersections"):
        assert torch.equal(getattr(plain, name), getattr(full, name)), name
    assert full.alpha.mean() > 0.1


@pytest.mark.parametrize("depth_image", [True, False])
@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_backward_without_depth_matches_twin(dtype, rtol, depth_image):
    """A loss without the depth image takes the backward that leaves the depth out, after a
    forward that rendered the depth image or one that did not."""
    params = [p.requires_grad_(True) for p in make_gaussians(300, dtype, seed=8)]
    cams = make_cameras(dtype)
    bg = torch.tensor([0.1, 0.2, 0.3], dtype=dtype)
    ours = render_cameras(*params, cams, sh_degree=3, background=bg, settings=RenderSettings(depth=depth_image))
    ref = render_cameras_reference(*params, cams, sh_degree=3, background=bg)
    g = torch.Generator().manual_seed(9)
    w_rgb = torch.randn(ours.rgb.shape, generator=g).to(dtype)
    w_alpha = torch.randn(ours.alpha.shape, generator=g).to(dtype)
    grads = torch.autograd.grad((ours.rgb * w_rgb).sum() + (ours.alpha * w_alpha).sum(), params)
    grads_ref = torch.autograd.grad((ref[0] * w_rgb).sum() + (ref[1] * w_alpha).sum(), params)
    for name, a, b in zip(["means", "quats", "scales", "opacities", "sh"], grads, grads_ref):
        assert b.abs().sum() > 0, name
        assert ((a - b).norm() / b.norm()).item() < rtol, name


def test_background_gradient_matches_twin_when_asked_for():
    params = make_gaussians(100, torch.float64, seed=12)
    cams = make_cameras(torch.float64)
    bg = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64).repeat(4, 1).requires_grad_(True)
    w = torch.randn(4, H, W, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(13))
    (ours,) = torch.autograd.grad((render_cameras(*params, cams, sh_degree=3, background=bg).rgb * w).sum(), bg)
    rgb = render_cameras_reference(*params, cams, sh_degree=3, background=bg)[0]
    (ref,) = torch.autograd.grad((rgb * w).sum(), bg)
    assert ref.abs().sum() > 0
    torch.testing.assert_close(ours, ref, atol=1e-10, rtol=1e-10)


def _gradcheck_render(cams: CameraBatch, seed: int, outputs, settings: RenderSettings | None = None) -> bool:
    """float64 gradcheck of the renderer on six Gaussians big enough to cover the small images;
    ``outputs(render, w)`` picks the images (weighted per camera) the loss uses."""
    params = make_gaussians(6, torch.float64, sh_dim=4, seed=seed, spread=0.4)
    params[2] = params[2] * 3
    w = torch.randn(len(cams), H, W, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))

    def f(means, quats, scales, opacities, sh):
        return outputs(render_cameras(means, quats, scales, opacities, sh, cams, sh_degree=1, settings=settings), w)

    inputs = [p.clone().requires_grad_(True) for p in params]
    return torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("depth_image", [True, False])
def test_gradcheck_float64_without_depth(depth_image):
    assert _gradcheck_render(make_cameras(torch.float64), 10, lambda out, w: (out.rgb * w).sum(dim=(1, 2, 3)),
                             RenderSettings(depth=depth_image))


def test_gradcheck_float64():
    """Finite differences of the Warp renderer itself, every model and a rolling shutter."""
    assert _gradcheck_render(make_cameras(torch.float64), 2, lambda out, w: (
        (out.rgb * w).sum(dim=(1, 2, 3)), out.alpha.sum(dim=(1, 2)), out.depth.sum(dim=(1, 2))))


def pinhole_cameras(dtype) -> CameraBatch:
    """Three global-shutter pinhole cameras in different poses: the specialised projection kernel."""
    start = torch.eye(4, dtype=dtype).repeat(3, 1, 1)
    start[1, 0, 3] = 0.3
    start[1, :3, :3] = _rot_x(0.25, dtype)
    start[2, :3, :3] = _rot_x(-0.2, dtype)
    cams = CameraBatch.create(["pinhole"] * 3, [PARAMS["pinhole"]] * 3, W, H, start)
    assert cams.pinhole_global
    return cams


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_pinhole_global_kernel_matches_twin_and_generic_kernel(dtype, rtol):
    params = make_gaussians(300, dtype)
    # and large splats centred beyond the view's margin, where the Jacobian is clamped
    edge = make_gaussians(30, dtype, seed=7, spread=0.2)
    edge[0] = edge[0] + torch.tensor([4.5, -2.0, 0.0], dtype=dtype)
    edge[2] = edge[2] * 12
    params = [torch.cat([a, b]).requires_grad_(True) for a, b in zip(params, edge)]
    cams = pinhole_cameras(dtype)
    generic = dataclasses.replace(cams, pinhole_global=False)
    bg = torch.tensor([0.1, 0.2, 0.3], dtype=dtype)
    ours, ref = _render_both(params, cams, 2, bg)
    other = render_cameras(*params, generic, sh_degree=2, background=bg)
    assert torch.equal(ours.radii, ref[4]) and ours.alpha.mean() > 0.1
    atol = 2e-5 if dtype == torch.float32 else 1e-10
    for a, b, c in ((ours.rgb, ref[0], other.rgb), (ours.alpha, ref[1], other.alpha)):
        torch.testing.assert_close(a, b, atol=atol, rtol=0)
        torch.testing.assert_close(a, c, atol=atol, rtol=0)
    w = torch.randn(ours.rgb.shape, generator=torch.Generator().manual_seed(4)).to(dtype)
    for name, a, b, c in zip(["means", "quats", "scales", "opacities", "sh"],
                             torch.autograd.grad((ours.rgb * w).sum() + ours.depth.sum(), params),
                             torch.autograd.grad((ref[0] * w).sum() + ref[2].sum(), params),
                             torch.autograd.grad((other.rgb * w).sum() + other.depth.sum(), params)):
        assert b.abs().sum() > 0, name
        assert ((a - b).norm() / b.norm()).item() < rtol, name
        assert ((a - c).norm() / c.norm()).item() < rtol, name


def test_gradcheck_float64_pinhole_global():
    assert _gradcheck_render(pinhole_cameras(torch.float64), 5, lambda out, w: (
        (out.rgb * w).sum(dim=(1, 2, 3)), out.depth.sum(dim=(1, 2))))


def test_render_memory_is_freed_without_the_garbage_collector():
    """No reference cycle through the autograd context: a training loop frees each step's
    buffers by reference counting (the GPU runs out long before the collector runs)."""
    import gc
    import weakref

    params = [p.requires_grad_(True) for p in make_gaussians(50, torch.float32)]
    cams = make_cameras(torch.float32)
    gc.disable()
    try:
        out = render_cameras(*params, cams, sh_degree=3)
        (out.rgb.sum() + out.depth.sum()).backward()
        refs = [weakref.ref(t) for t in (out.rgb, out.means2d, out.alpha)]
        del out
        assert all(r() is None for r in refs), "a render's outputs outlived it (a reference cycle)"
    finally:
        gc.enable()


def test_global_shutter_static_camera_matches_plain_projection():
    """With no motion, every shutter gives the same image as a global shutter."""
    params = make_gaussians(200, torch.float32)
    still = make_cameras(torch.float32, moving=False)
    global_cams = CameraBatch.create(MODELS, [PARAMS[m] for m in MODELS], W, H,
                                     _starts(still))
    a = render_cameras(*params, still, sh_degree=3)
    b = render_cameras(*params, global_cams, sh_degree=3)
    torch.testing.assert_close(a.rgb, b.rgb, atol=1e-5, rtol=0)  # poses re-derived through quaternions


def _starts(cams: CameraBatch) -> torch.Tensor:
    from nurec_usd.sensors.se3 import make_transform, quat_to_matrix

    return make_transform(quat_to_matrix(cams.rot_start), cams.trans_start)


def test_rolling_shutter_changes_the_image():
    params = make_gaussians(200, torch.float32)
    moving = render_cameras(*params, make_cameras(torch.float32, moving=True), sh_degree=3)
    still = render_cameras(*params, make_cameras(torch.float32, moving=False), sh_degree=3)
    assert (moving.rgb[1:] - still.rgb[1:]).abs().max() > 0.05


def test_multi_camera_launch_equals_single_camera_launches():
    params = make_gaussians(200, torch.float32)
    cams = make_cameras(torch.float32)
    together = render_cameras(*params, cams, sh_degree=3)
    for c in range(len(cams)):
        one = CameraBatch(cams.model[c:c + 1], cams.params[c:c + 1], cams.rot_start[c:c + 1],
                          cams.trans_start[c:c + 1], cams.rot_end[c:c + 1], cams.trans_end[c:c + 1],
                          cams.shutter[c:c + 1], W, H)
        alone = render_cameras(*params, one, sh_degree=3)
        torch.testing.assert_close(together.rgb[c], alone.rgb[0], atol=0, rtol=0)


def test_tile_order_changes_neither_images_nor_gradients(monkeypatch):
    """camera.TILE_ORDER only schedules the rasterizer's blocks: longest list first against the tiles'
    own order, float64 images are identical and gradients differ by the atomics' summation order at most."""
    dtype = torch.float64
    cams = make_cameras(dtype)

    def render(tile_order):
        monkeypatch.setattr(camera_ops, "TILE_ORDER", tile_order)
        params = [p.requires_grad_(True) for p in make_gaussians(300, dtype, seed=6)]
        out = render_cameras(*params, cams, sh_degree=3)
        w = torch.Generator().manual_seed(2)
        loss = sum((t * torch.randn(t.shape, generator=w, dtype=dtype)).sum() for t in (out.rgb, out.alpha, out.depth))
        return out, torch.autograd.grad(loss, params)

    base, base_grads = render("index")
    out, grads = render("list")
    for name in ("rgb", "alpha", "depth"):
        torch.testing.assert_close(getattr(out, name), getattr(base, name), atol=0, rtol=0)
    for a, b in zip(grads, base_grads):
        torch.testing.assert_close(a, b, atol=1e-14, rtol=1e-12)


def test_tile_order_puts_the_longest_lists_first(monkeypatch):
    lengths = torch.tensor([3, 0, 9, 9, 1, 40, 2], dtype=torch.int32)
    order = camera_ops._tile_order(lengths)
    assert order.dtype == torch.int32 and order.tolist() == [5, 2, 3, 0, 6, 4, 1]  # ties in index order
    monkeypatch.setattr(camera_ops, "TILE_ORDER", "index")
    assert camera_ops._tile_order(lengths).tolist() == list(range(7))


def test_culling_behind_and_outside():
    means = torch.tensor([[0.0, 0.0, -3.0], [100.0, 0.0, 3.0], [0.0, 0.0, 3.0]])
    quats = torch.tensor([[1.0, 0, 0, 0]] * 3)
    scales = torch.full((3, 3), 0.1)
    opacities = torch.full((3,), 0.9)
    colors = torch.rand(3, 3)
    cams = CameraBatch.pinhole(torch.eye(4)[None], torch.tensor([[[30.0, 0, 19.0], [0, 30.0, 14.0], [0, 0, 1]]]), W, H)
    out = render_cameras(means, quats, scales, opacities, colors, cams)
    assert out.radii[0].tolist()[:2] == [0, 0] and out.radii[0, 2] > 0
    # the visible one lands on the principal point, and pixel (19, 14) samples exactly there
    # (OpenCV's convention: pixel centres at integer coordinates)
    assert out.alpha[0, 14, 19] == pytest.approx(0.9, abs=1e-6)
    assert out.alpha[0, 14, 18] == pytest.approx(float(out.alpha[0, 14, 20]), abs=1e-6)
    assert out.alpha[0, 13, 19] == pytest.approx(float(out.alpha[0, 15, 19]), abs=1e-6)


def test_capacity_overflow_is_reported_not_silent():
    params = make_gaussians(300, torch.float32)
    cams = make_cameras(torch.float32)
    exact = render_cameras(*params, cams, sh_degree=3)
    wanted = int(exact.intersections)
    roomy = render_cameras(*params, cams, sh_degree=3, settings=RenderSettings(capacity=wanted + 100))
    assert not bool(roomy.overflow)
    torch.testing.assert_close(roomy.rgb, exact.rgb, atol=0, rtol=0)
    short = render_cameras(*params, cams, sh_degree=3, settings=RenderSettings(capacity=wanted // 2))
    assert bool(short.overflow) and int(short.intersections) == wanted


def test_bad_shapes_are_refused():
    params = make_gaussians(10, torch.float32)
    cams = make_cameras(torch.float32)
    with pytest.raises(ValueError, match="quats"):
        render_cameras(params[0], params[1][:, :3], *params[2:], cams, sh_degree=3)
    with pytest.raises(ValueError, match="SH coefficients"):
        render_cameras(*params[:4], params[4][:, :4], cams, sh_degree=3)


def test_too_large_a_batch_is_refused():
    """The backward's gradient buffer holds 10 values per (camera, Gaussian) pair, indexed in int32."""
    n = 30_000_000  # x 8 cameras x 10 > 2^31 (expanded views: no memory)
    means, quats, scales = torch.zeros(1, 3).expand(n, 3), torch.ones(1, 4).expand(n, 4), torch.ones(1, 3).expand(n, 3)
    opacities, colors = torch.ones(1).expand(n), torch.ones(1, 3).expand(n, 3)
    K = torch.tensor([[[30.0, 0, 19.0], [0, 30.0, 14.0], [0, 0, 1]]]).repeat(8, 1, 1)
    cams = CameraBatch.pinhole(torch.eye(4).repeat(8, 1, 1), K, 38, 28)
    with pytest.raises(ValueError, match="too large a batch"):
        render_cameras(means, quats, scales, opacities, colors, cams)


def _garden_inputs(dtype):
    data = shared_data_dir()
    if data is None or not (data / "garden" / "test_garden.npz").exists():
        pytest.skip("real test data (../shared/data/garden) is not available")
    d = np.load(data / "garden" / "test_garden.npz")
    pts = torch.from_numpy(d["means3d"]).float()
    keep = (pts.abs() <= 2).all(-1)
    g = torch.Generator().manual_seed(0)
    means = pts[keep][torch.randperm(int(keep.sum()), generator=g)[:1500]]
    n = len(means)
    quats = torch.nn.functional.normalize(torch.randn(n, 4, generator=g), dim=-1)
    scales = torch.rand(n, 3, generator=g) * 0.02 + 1e-4
    opacities = torch.rand(n, generator=g)
    colors = torch.from_numpy(d["colors"][keep.numpy()][:n]).float() / 255
    w, h = 81, 52  # 1/8 of the 648x420 images
    Ks = torch.from_numpy(d["Ks"]).float().clone()
    Ks[:, :2] *= w / int(d["width"])
    cams = CameraBatch.pinhole(torch.from_numpy(d["viewmats"]).to(dtype), Ks, w, h)
    params = [p.to(dtype).requires_grad_(True) for p in (means, quats, scales, opacities, colors)]
    return params, cams


def test_real_garden_points_match_twin_float64():
    """The real Mip-NeRF 360 garden points and cameras (scaled down) through both renderers."""
    params, cams = _garden_inputs(torch.float64)
    ours = render_cameras(*params, cams)
    ref = render_cameras_reference(*params, cams)
    assert ours.alpha.mean() > 0.05
    torch.testing.assert_close(ours.rgb, ref[0], atol=1e-10, rtol=1e-10)
    a = torch.autograd.grad(ours.rgb.sum(), params)
    b = torch.autograd.grad(ref[0].sum(), params)
    for x, y in zip(a, b):
        assert ((x - y).norm() / y.norm()) < 1e-9


def test_real_garden_points_float32_statistics():
    """In float32, near-camera points amplify rounding (up to ~1e-3 px here), which flips a few
    Gaussians across the 1/255 alpha threshold: pixels agree on average, a few differ by a step."""
    params, cams = _garden_inputs(torch.float32)
    ours = render_cameras(*params, cams)
    ref = render_cameras_reference(*params, cams)
    diff = (ours.rgb - ref[0]).abs()
    assert diff.mean() < 1e-4
    assert diff.max() < 5e-3
    assert (diff > 5e-5).float().mean() < 0.05


def test_intersection_capacity_grows_without_losing_a_step():
    from nurec_usd.ops.camera import IntersectionCapacity

    params = make_gaussians(300, torch.float32)
    cams = make_cameras(torch.float32)
    budget = IntersectionCapacity(initial=64)
    first = render_cameras(*params, cams, sh_degree=3, settings=budget.settings())
    assert bool(first.overflow), "64 intersections cannot hold this scene"
    budget.observe(first)
    budget.sync_grow(first)
    again = render_cameras(*params, cams, sh_degree=3, settings=budget.settings())
    assert not bool(again.overflow)
    assert budget.capacity >= int(first.intersections)
    exact = render_cameras(*params, cams, sh_degree=3)
    torch.testing.assert_close(again.rgb, exact.rgb, atol=0, rtol=0)


def test_intersection_capacity_grows_by_the_scene_growth_from_the_latest_count():
    """A refinement that grew the scene by a factor makes room for the latest count that has
    arrived times that factor (no wait for the device), with the usual headroom."""
    from nurec_usd.ops.camera import IntersectionCapacity

    params = make_gaussians(300, torch.float32)
    cams = make_cameras(torch.float32)
    budget = IntersectionCapacity(initial=64, headroom=1.25)
    budget.grow_by(2.0)  # no count yet: the capacity's own (64 = 1.25 x 51.2) times 2
    assert budget.capacity == int(int(51.2 * 2.0) * 1.25)
    render = render_cameras(*params, cams, sh_degree=3)
    count = int(render.intersections)
    budget.observe(render)
    budget.grow_by(1.5)
    assert budget.latest == count and budget.capacity == int(int(count * 1.5) * 1.25)
    before = budget.capacity
    budget.grow_by(1.0)  # no growth: no change (the capacity already holds the count)
    assert budget.capacity == before


@pytest.mark.parametrize("module_name", ["camera_project", "tile_binning", "camera_raster", "camera_project_pinhole",
                                         "camera_project_poses", "camera_project_backward", "camera_project_f64",
                                         "tile_binning_f64", "camera_raster_f64", "camera_project_pinhole_f64",
                                         "camera_project_poses_f64", "camera_project_backward_f64"])
def test_cuda_code_generation(module_name, tmp_path):
    """The CUDA build of each camera module compiles (NVRTC, sm_90) on a machine without a GPU:
    CUDA-only code (warp shuffles, fast math) is checked in CI, not first on the device. The
    ``_f64`` modules hold the float64 variants (``warp_kernels.modules``)."""
    import importlib

    import warp as wp

    from nurec_usd.ops.warp_torch import init_warp

    init_warp()
    base = module_name.removesuffix("_f64").removesuffix("_pinhole").removesuffix("_poses").removesuffix("_backward")
    importlib.import_module(f"warp_kernels.{base}")
    module = f"warp_kernels.{module_name}"
    assert wp.get_module(module).kernels, f"{module} holds no kernels"
    try:
        paths = wp.compile_aot_module(module, arch=90, module_dir=tmp_path)
    except Exception as exc:  # pragma: no cover - Warp builds without NVRTC (e.g. macOS)
        if "nvrtc" in str(exc).lower():
            pytest.skip(f"no NVRTC here: {exc}")
        raise
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)


def _reach_kernel():
    """A kernel (built on first use) that evaluates splats at pixels exactly as the rasterizer
    does (fast_math, as its module) next to ``splat_reaches`` for the pixel alone."""
    import warp as wp

    from warp_kernels import camera_raster
    from warp_kernels.compositing import ALPHA_MAX, ALPHA_MIN

    @wp.kernel(enable_backward=False, module_options={"fast_math": True}, module="unique")
    def reach(means: wp.array(dtype=wp.vec2f), conics: wp.array(dtype=wp.vec3f), opacities: wp.array(dtype=float),
              size: int, composited: wp.array2d(dtype=int), reached: wp.array2d(dtype=int)):
        i, p = wp.tid()
        px = p % size
        py = p // size
        m, q, op = means[i], conics[i], opacities[i]
        dx = m[0] - float(px)
        dy = m[1] - float(py)
        sigma = 0.5 * (q[0] * dx * dx + q[2] * dy * dy) + q[1] * dx * dy
        alpha = wp.min(float(ALPHA_MAX), op * wp.exp(-sigma))
        if sigma >= 0.0 and alpha >= float(ALPHA_MIN):
            composited[i, p] = 1
        reached[i, p] = camera_raster.splat_reaches(m, q, op, px, px, py, py)

    return reach


def test_warp_skip_test_never_skips_a_composited_splat():
    """The rasterizer's warps skip a splat when ``splat_reaches`` says it cannot reach their
    pixels. That must never drop a pixel the evaluation would composite: checked on 2,000 random
    splats (sizes 0.3-12 px, any orientation, opacities from below ALPHA_MIN to 1, many near the
    threshold) at every pixel of a 40 x 40 grid. The test also culls most pairs (else it would
    save nothing)."""
    import warp as wp

    from nurec_usd.ops.warp_torch import init_warp

    init_warp()
    g = torch.Generator().manual_seed(7)
    n, size = 2000, 40
    means = torch.rand(n, 2, generator=g) * (size + 10) - 5
    ang = torch.rand(n, generator=g) * math.pi
    s1 = torch.exp(torch.rand(n, generator=g) * math.log(40.0)) * 0.3
    s2 = s1 * (0.05 + 0.95 * torch.rand(n, generator=g))
    rot = torch.stack((torch.stack((ang.cos(), -ang.sin()), -1), torch.stack((ang.sin(), ang.cos()), -1)), -2)
    cov = rot @ torch.diag_embed(torch.stack((s1, s2), -1) ** 2) @ rot.transpose(-1, -2)
    inv = torch.linalg.inv(cov)
    conics = torch.stack((inv[:, 0, 0], inv[:, 0, 1], inv[:, 1, 1]), -1)
    alpha_min = 1.0 / 255.0
    # half log-uniform from half ALPHA_MIN to 1, half within 2.5% of ALPHA_MIN
    spread = torch.exp(torch.rand(n // 2, generator=g) * math.log(2.0 / alpha_min)) * 0.5 * alpha_min
    near = alpha_min * (1.0 + 0.05 * (torch.rand(n - n // 2, generator=g) - 0.5))
    opacities = torch.cat((spread, near))
    opacities = opacities.clamp(max=1.0)
    composited = wp.zeros((n, size * size), dtype=int, device="cpu")
    reached = wp.zeros((n, size * size), dtype=int, device="cpu")
    wp.launch(_reach_kernel(), (n, size * size),
              [wp.from_torch(means.contiguous(), dtype=wp.vec2f),
               wp.from_torch(conics.float().contiguous(), dtype=wp.vec3f),
               wp.from_torch(opacities.float().contiguous()), size, composited, reached], device="cpu")
    comp, reach = torch.from_numpy(composited.numpy()), torch.from_numpy(reached.numpy())
    assert int(comp.sum()) > 1000
    assert int((comp & (1 - reach)).sum()) == 0, "a composited (splat, pixel) pair was skipped"
    assert float((reach == 0).float().mean()) > 0.5


def test_opencv_points_folded_back_by_the_distortion_are_not_drawn():
    """Beyond the radius where the OpenCV distortion stops increasing, the model maps points
    back into the image; the sensor model calls them invalid and the renderer must not draw them."""
    from nurec_usd.sensors.cameras import camera_model

    params = {"fx": 40.0, "fy": 40.0, "cx": 19.5, "cy": 14.5, "k1": -0.3, "k2": 0.0, "p1": 0.0, "p2": 0.0}
    max_r = camera_model("opencv", W, H, params, dtype=torch.float64).max_r
    assert 1.0 < max_r < 1.2
    means = torch.tensor([[2.0 * 3.0, 0.0, 3.0], [0.2 * 3.0, 0.0, 3.0]])  # x/z = 2 (folded) and 0.2 (fine)
    quats = torch.tensor([[1.0, 0, 0, 0]] * 2)
    scales = torch.full((2, 3), 0.05)
    opacities = torch.full((2,), 0.9)
    colors = torch.rand(2, 3)
    cams = CameraBatch.create(["opencv"], [params], W, H, torch.eye(4)[None])
    out = render_cameras(means, quats, scales, opacities, colors, cams)
    assert out.radii[0, 0] == 0 and out.radii[0, 1] > 0
    ref = render_cameras_reference(means, quats, scales, opacities, colors, cams)
    assert ref[4][0, 0] == 0
    torch.testing.assert_close(out.rgb, ref[0], atol=2e-5, rtol=1e-4)


def test_camera_batch_refuses_unclear_shutters():
    start = torch.eye(4)[None]
    with pytest.raises(ValueError, match="without shutters"):
        CameraBatch.create(["pinhole"], [PARAMS["pinhole"]], W, H, start, start)
    with pytest.raises(ValueError, match="unknown shutter"):
        CameraBatch.create(["pinhole"], [PARAMS["pinhole"]], W, H, start, start, ["sideways"])
