"""The Warp lidar renderer against its pure-torch twin and against geometry: forward, backward,
float64 gradcheck, the azimuth seam, rolling shutter, culling, overflow, chunked tiles, tile
work balance on a street, a real capture's sweep, and CUDA code generation with the register cap.

Tolerances: float64 kernels agree with the float64 twin to ~1e-12 (the same arithmetic in
another order); float32 to ~1e-5 relative on ranges (tens of metres) and 2e-5 absolute on
probabilities; gradients compare as the relative error of the whole gradient (atomics
reorder float sums): 1e-4 in float32, 1e-10 in float64.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import pytest
import torch
import warp as wp

from nurec_usd.ops.lidar import (
    BAND_ROWS,
    LidarBatch,
    LidarRenderSettings,
    bin_lidar,
    plan_bands,
    render_lidar,
    tile_work,
)
from nurec_usd.ops.reference import lidar_tile_mask_reference, render_lidar_reference
from warp_kernels import lidar_binning as kbin

C, W = 12, 96
FIELDS = ("range_sum", "intensity_sum", "hit_prob", "median_range")


def _rot_z(a: float, dtype) -> torch.Tensor:
    c, s = math.cos(a), math.sin(a)
    return torch.tensor([[c, -s, 0], [s, c, 0], [0, 0, 1]], dtype=dtype)


def make_lidar(dtype=torch.float32, moving: bool = True, band_rows: int | str = 4, rotation: str = "clockwise",
               start_azimuth_deg: float = 30.0, channels: int = C, columns: int = W) -> LidarBatch:
    """A small lidar with uneven channels and per-channel azimuth offsets, moving and turning during its sweep."""
    el = torch.linspace(-15, 10, channels) + 0.3 * torch.sin(torch.arange(channels) * 1.7)
    el = el[torch.randperm(channels, generator=torch.Generator().manual_seed(4))]  # channels in any order
    start = torch.eye(4, dtype=dtype)
    start[:3, 3] = torch.tensor([0.2, -0.1, 0.05], dtype=dtype)
    end = start.clone()
    if moving:  # 1.5 m and 6 degrees of yaw over the sweep
        end[:3, :3] = _rot_z(0.1, dtype)
        end[:3, 3] += torch.tensor([-1.5, 0.3, 0.0], dtype=dtype)
    return LidarBatch.create(el, columns=columns, rotation=rotation, scan_rate_hz=10.0, min_range_m=0.5,
                             max_range_m=50.0, T_lidar_world_start=start, T_lidar_world_end=end,
                             azimuth_offset_deg=torch.linspace(-3, 3, channels), start_azimuth_deg=start_azimuth_deg,
                             band_rows=band_rows)


def make_gaussians(n: int, dtype, seed: int = 0, near: float = 3.0, far: float = 11.0, size: float = 0.3):
    """Gaussians all around the lidar, within the channels' elevations."""
    g = torch.Generator().manual_seed(seed)
    ang = torch.rand(n, generator=g) * 2 * math.pi
    d = torch.rand(n, generator=g) * (far - near) + near
    z = (torch.rand(n, generator=g) - 0.6) * 0.4 * d
    means = torch.stack([d * ang.cos(), d * ang.sin(), z], -1)
    quats = torch.randn(n, 4, generator=g)
    scales = torch.rand(n, 3, generator=g) * size + 0.1 * size
    opacities = torch.rand(n, generator=g) * 0.85 + 0.1
    intensities = torch.rand(n, generator=g)
    return [t.to(dtype) for t in (means, quats, scales, opacities, intensities)]


def opaque_shells(dtype, size: float = 0.5):
    """1000 nearly opaque Gaussians (opacity 0.98) 4-6 m around the lidar: most rays stop on T_MIN."""
    params = make_gaussians(1000, dtype, seed=5, near=4.0, far=6.0, size=size)
    params[3] = torch.full_like(params[3], 0.98)
    return params


def _compare(out, ref, atol_range: float, atol_prob: float, rtol: float) -> None:
    for f in FIELDS:
        atol = atol_prob if f == "hit_prob" else atol_range
        torch.testing.assert_close(getattr(out, f), ref[f], atol=atol, rtol=rtol, msg=f)


@pytest.mark.parametrize("band_rows", ["auto", 4, 8])
def test_forward_matches_twin(band_rows):
    lidar = make_lidar(band_rows=band_rows)
    params = make_gaussians(300, torch.float32)
    out = render_lidar(*params, lidar)
    ref = render_lidar_reference(*params, lidar)
    assert torch.equal(out.extents[:, 0] > 0, ref["extents"][:, 0] > 0), "the same Gaussians must be culled"
    assert 0.3 < float(out.hit_prob.mean()) < 0.99, "the scene should cover much of the sweep"
    assert (out.median_range > 0).float().mean() > 0.2
    # float32 kernels vs float32 torch: rounding differences only
    _compare(out, ref, atol_range=2e-4, atol_prob=2e-5, rtol=1e-5)
    torch.testing.assert_close(out.range, ref["range"], atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(out.intensity, ref["intensity"], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(out.angles, ref["splats"][:, :2], atol=1e-5, rtol=0)
    assert int(out.intersections) > 0 and not bool(out.overflow)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-9), (torch.float32, 1e-3)])
def test_needles_along_diagonals_match_twin(dtype, atol):
    """Long thin splats lying diagonally in (azimuth, elevation): their conics are nearly singular,
    where ``ray_masks`` reads the splat's box from its extents instead of its conic. Both kinds
    must mark every ray that sees them (the walk skips the rays a mask leaves out: one pair lost
    would move a range sum by centimetres). In float32 the needles' sigma cancels, and kernel and
    twin round it differently by up to ~3e-4 here: hence the looser tolerance."""
    lidar = make_lidar(dtype, channels=32, columns=512)
    g = torch.Generator().manual_seed(3)
    n = 60
    az = torch.rand(n, generator=g) * 2 * math.pi
    d = torch.rand(n, generator=g) * 4 + 4
    means = torch.stack((d * az.cos(), d * az.sin(), (torch.rand(n, generator=g) - 0.5) * 0.4), -1)
    # the long axis (x) turned 45 degrees between the horizontal tangent and the vertical, either way
    tilt = torch.where(torch.rand(n, generator=g) < 0.5, 1.0, -1.0) * math.pi / 4
    long_axis = torch.stack((-az.sin() * tilt.cos(), az.cos() * tilt.cos(), tilt.sin()), -1)
    x = torch.tensor([1.0, 0.0, 0.0]).expand(n, 3)
    half = torch.nn.functional.normalize(x + long_axis, dim=-1)  # rotation by pi about the half-way axis
    quats = torch.cat((torch.zeros(n, 1), half), -1)
    length = torch.rand(n, generator=g) * 1.5 + 0.5
    scales = torch.stack((length, torch.full((n,), 0.004), torch.full((n,), 0.004)), -1)
    opacities = torch.rand(n, generator=g) * 0.5 + 0.5
    needles = [means, quats, scales, opacities, torch.rand(n, generator=g)]
    params = [torch.cat((a, b)).to(dtype) for a, b in zip(needles, make_gaussians(200, torch.float32, seed=5))]
    out = render_lidar(*params, lidar)
    ref = render_lidar_reference(*params, lidar)
    conic = ref["splats"][:n, 2:5]
    shown = ref["splats"][:n, 5] > 0
    ratio = (conic[:, 0] * conic[:, 2] - conic[:, 1] ** 2) / (conic[:, 0] * conic[:, 2])
    assert (ratio[shown] < kbin.CONIC_BOX_MIN_DET).sum() >= 5, "some needles must take the extents' box"
    assert (ratio[shown] >= kbin.CONIC_BOX_MIN_DET).sum() >= 5, "... and some the conic's"
    assert float((out.hit_prob > 0.5).float().mean()) > 0.05
    _compare(out, ref, atol_range=atol, atol_prob=atol, rtol=0)


def _weighted_loss(out, weights) -> torch.Tensor:
    if isinstance(out, dict):
        return sum((out[f] * w).sum() for f, w in zip(FIELDS, weights))
    return sum((getattr(out, f) * w).sum() for f, w in zip(FIELDS, weights))


def _assert_grads_close(grads, grads_ref, rtol: float) -> None:
    """Each Gaussian parameter's gradient within ``rtol`` (relative, in norm) of the twin's, which is not zero."""
    for name, a, b in zip(["means", "quats", "scales", "opacities", "intensities"], grads, grads_ref):
        assert b.abs().sum() > 0, name
        err = ((a - b).norm() / b.norm()).item()
        assert err < rtol, f"{name}: relative gradient error {err:.2e} >= {rtol:.0e}"


@pytest.mark.parametrize("dtype, rtol, chunk", [(torch.float32, 1e-4, None), (torch.float64, 1e-10, None),
                                                (torch.float64, 1e-10, 7)])
def test_backward_matches_twin(dtype, rtol, chunk):
    lidar = make_lidar(dtype)
    params = [p.requires_grad_(True) for p in make_gaussians(300, dtype)]
    out = render_lidar(*params, lidar, settings=LidarRenderSettings(chunk=chunk))
    ref = render_lidar_reference(*params, lidar)
    if chunk is not None:
        assert int(out.num_items) > 3 * lidar.tiles.num_tiles, "tiles must really be cut into chunks"
    g = torch.Generator().manual_seed(1)
    weights = [torch.randn(C, W, generator=g).to(dtype) for _ in FIELDS]
    grads = torch.autograd.grad(_weighted_loss(out, weights), params)
    grads_ref = torch.autograd.grad(_weighted_loss(ref, weights), params)
    _assert_grads_close(grads, grads_ref, rtol)


def _motion(n: int, dtype, seed: int = 7, metres: float = 1.0) -> torch.Tensor:
    """Per-Gaussian motion over a sweep: every direction, up to ``metres``, a quarter standing still."""
    g = torch.Generator().manual_seed(seed)
    motion = (torch.rand(n, 3, generator=g) * 2 - 1) * metres
    motion[torch.rand(n, generator=g) < 0.25] = 0
    return motion.to(dtype)


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_moving_gaussians_match_twin(dtype, rtol):
    """Gaussians that move during the sweep (actors) against the twin, forward and backward, on the
    moving, turning lidar: each is seen at mean + (a - 1/2) motion when its column fires."""
    lidar = make_lidar(dtype)
    params = [p.requires_grad_(True) for p in make_gaussians(300, dtype)]
    motion = _motion(300, dtype)
    out = render_lidar(*params, lidar, motion=motion)
    ref = render_lidar_reference(*params, lidar, motion=motion)
    still = render_lidar(*params, lidar)
    assert torch.equal(out.extents[:, 0] > 0, ref["extents"][:, 0] > 0)
    moved = float((out.range_sum - still.range_sum).detach().abs().max())
    assert moved > 0.5, f"the motion must change the render (max range_sum change {moved:.3f})"
    if dtype == torch.float64:
        _compare(out, ref, atol_range=1e-9, atol_prob=1e-9, rtol=0)
    else:
        _compare(out, ref, atol_range=2e-4, atol_prob=2e-5, rtol=1e-5)
    g = torch.Generator().manual_seed(1)
    weights = [torch.randn(C, W, generator=g).to(dtype) for _ in FIELDS]
    grads = torch.autograd.grad(_weighted_loss(out, weights), params)
    grads_ref = torch.autograd.grad(_weighted_loss(ref, weights), params)
    _assert_grads_close(grads, grads_ref, rtol)


def test_motion_is_checked_and_gets_no_gradient():
    lidar = make_lidar()
    params = make_gaussians(50, torch.float32)
    with pytest.raises(ValueError, match="motion must have shape"):
        render_lidar(*params, lidar, motion=torch.zeros(49, 3))
    with pytest.raises(ValueError, match="motion must be torch.float32"):
        render_lidar(*params, lidar, motion=torch.zeros(50, 3, dtype=torch.float64))
    motion = _motion(50, torch.float32).requires_grad_(True)
    out = render_lidar(*[p.requires_grad_(True) for p in params], lidar, motion=motion)
    out.range_sum.sum().backward()
    assert motion.grad is None and params[0].grad is not None
    zero = render_lidar(*params, lidar, motion=torch.zeros(50, 3))
    torch.testing.assert_close(zero.range_sum, render_lidar(*params, lidar).range_sum, atol=0, rtol=0)


def test_second_backward_through_the_same_render():
    """The forward zeroes the backward's gradient buffer (in the binning); a second backward through
    the same graph (retain_graph) must start from zeros too, not from the first one's sums."""
    lidar = make_lidar(torch.float64)
    params = [p.requires_grad_(True) for p in make_gaussians(200, torch.float64)]
    settings = LidarRenderSettings(chunk=7)
    out = render_lidar(*params, lidar, settings=settings)
    loss = (out.range_sum + out.intensity_sum + out.hit_prob + out.median_range).sum()
    first = torch.autograd.grad(loss, params, retain_graph=True)
    second = torch.autograd.grad(loss, params)
    for a, b in zip(first, second):
        assert a.abs().sum() > 0
        torch.testing.assert_close(b, a, atol=1e-12, rtol=1e-12)
    with torch.no_grad():  # a render without gradients (no buffer zeroed for them) gives the same outputs
        plain = render_lidar(*[p.detach() for p in params], lidar, settings=settings)
    torch.testing.assert_close(plain.range_sum, out.range_sum.detach(), atol=0, rtol=0)


def test_misaligned_quaternions_are_copied_for_the_16_byte_loads(monkeypatch):
    """The projections read a quaternion and write its gradient 16 bytes at a time on CUDA
    (``warp_kernels.wide_io``), which faults on a row off a 16-byte boundary. A quaternion view one
    float into a larger tensor is copied first: every float tensor the kernels get is aligned, the
    outputs match an aligned render's, and the gradient reaches the view's base."""
    import nurec_usd.ops.lidar as lidar_module

    lidar = make_lidar(torch.float32)
    means, quats, scales, opacities, intensities = make_gaussians(50, torch.float32)
    base = torch.cat((torch.zeros(1), quats.reshape(-1))).requires_grad_()
    view = base[1:].view(-1, 4)
    assert view.data_ptr() % 16 != 0
    launched = []
    real_launch = lidar_module.launch

    def recording_launch(kernel, dim, inputs, outputs=(), **kwargs):
        launched.extend(x.data_ptr() for x in [*inputs, *outputs]
                        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel())
        return real_launch(kernel, dim, inputs, outputs, **kwargs)

    monkeypatch.setattr(lidar_module, "launch", recording_launch)
    out = render_lidar(means, view, scales, opacities, intensities, lidar)
    (out.range_sum.sum() + out.hit_prob.sum()).backward()
    monkeypatch.undo()
    assert launched and all(ptr % 16 == 0 for ptr in launched)
    ref = render_lidar(means, quats, scales, opacities, intensities, lidar)
    torch.testing.assert_close(out.range_sum, ref.range_sum, atol=0, rtol=0)
    assert base.grad is not None and base.grad[0] == 0 and bool((base.grad[1:] != 0).any())


def test_normalised_outputs_backward():
    """range and intensity (the sums over the hit probability, written by the merge kernel) pass
    their gradients to the sums and the hit probability (``lidar_output_grads``)."""
    lidar = make_lidar(torch.float64)
    params = [p.requires_grad_(True) for p in make_gaussians(100, torch.float64)]
    out = render_lidar(*params, lidar)
    ref = render_lidar_reference(*params, lidar)
    a = torch.autograd.grad((out.range + out.intensity).sum(), params)
    b = torch.autograd.grad((ref["range"] + ref["intensity"]).sum(), params)
    for x, y in zip(a, b):
        assert ((x - y).norm() / y.norm()) < 1e-10


def test_gradcheck_float64():
    """Finite differences of the Warp renderer itself: 8 channels x 64 columns, a moving, turning lidar."""
    lidar = make_lidar(torch.float64, channels=8, columns=64, band_rows=4)
    params = make_gaussians(5, torch.float64, seed=3, near=3.0, far=5.0, size=0.6)
    g = torch.Generator().manual_seed(2)
    weights = [torch.randn(8, 64, generator=g, dtype=torch.float64) for _ in range(len(FIELDS) + 2)]

    def f(means, quats, scales, opacities, intensities):
        out = render_lidar(means, quats, scales, opacities, intensities, lidar)
        return tuple((getattr(out, name) * w).sum() for name, w in zip(FIELDS + ("range", "intensity"), weights))

    inputs = [p.clone().requires_grad_(True) for p in params]
    assert render_lidar(*params, lidar).hit_prob.gt(0.05).float().mean() > 0.1
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_gradcheck_float64_moving_gaussians():
    """As above, with the Gaussians moving during the sweep: the firing fraction moves their place too."""
    lidar = make_lidar(torch.float64, channels=8, columns=64, band_rows=4)
    params = make_gaussians(5, torch.float64, seed=3, near=3.0, far=5.0, size=0.6)
    motion = _motion(5, torch.float64, seed=8, metres=0.8)
    motion[0] = torch.tensor([0.6, -0.5, 0.1], dtype=torch.float64)  # every Gaussian moves
    g = torch.Generator().manual_seed(2)
    weights = [torch.randn(8, 64, generator=g, dtype=torch.float64) for _ in range(len(FIELDS) + 2)]

    def f(means, quats, scales, opacities, intensities):
        out = render_lidar(means, quats, scales, opacities, intensities, lidar, motion=motion)
        return tuple((getattr(out, name) * w).sum() for name, w in zip(FIELDS + ("range", "intensity"), weights))

    inputs = [p.clone().requires_grad_(True) for p in params]
    assert render_lidar(*params, lidar, motion=motion).hit_prob.gt(0.05).float().mean() > 0.1
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("chunk", [5, 200])
def test_chunks_reproduce_one_walk_with_saturated_rays(chunk):
    """Opaque shells saturate most rays (T < 1e-4 stops the walk) part-way along their tiles' lists;
    cutting the lists into chunks (short and long) must give what one front-to-back walk gives, and
    the gradients the twin's (the backward walks only the entries in front of each ray's stop)."""
    params = [p.requires_grad_(True) for p in opaque_shells(torch.float64)]
    lidar = make_lidar(torch.float64)
    whole = render_lidar(*params, lidar)
    chunked = render_lidar(*params, lidar, settings=LidarRenderSettings(chunk=chunk))
    ref = render_lidar_reference(*params, lidar)
    assert float((whole.hit_prob > 1 - 2e-4).double().mean()) > 0.5, "most rays must stop on T_MIN"
    for f in FIELDS:
        torch.testing.assert_close(getattr(chunked, f), getattr(whole, f), atol=1e-12, rtol=1e-12, msg=f)
        torch.testing.assert_close(getattr(chunked, f), ref[f], atol=1e-12, rtol=1e-12, msg=f)
    g = torch.Generator().manual_seed(3)
    weights = [torch.randn(C, W, generator=g, dtype=torch.float64) for _ in FIELDS]
    grads_ref = torch.autograd.grad(_weighted_loss(ref, weights), params, retain_graph=True)
    for out in (whole, chunked):
        _assert_grads_close(torch.autograd.grad(_weighted_loss(out, weights), params), grads_ref, 1e-10)


@pytest.mark.parametrize("rotation, start_deg, gaussian_deg", [
    ("counterclockwise", 0.0, 0.0),  # the sweep's wrap straight ahead
    ("clockwise", 180.0, 180.0),  # the wrap on the lidar frame's own +-180 degree seam
    ("counterclockwise", 0.0, 180.0),  # the +-180 degree seam in mid-sweep
])
def test_seam(rotation, start_deg, gaussian_deg):
    """A Gaussian on a seam renders symmetrically on both sides of it (on both ends of the sweep
    when it sits on the wrap), and matches the twin."""
    lidar = make_lidar(torch.float64, moving=False, rotation=rotation, start_azimuth_deg=start_deg, band_rows=8)
    lidar = LidarBatch.create(lidar.elevation.rad2deg(), columns=W, rotation=rotation, scan_rate_hz=10.0,
                              min_range_m=0.5, max_range_m=50.0, T_lidar_world_start=torch.eye(4, dtype=torch.float64),
                              start_azimuth_deg=start_deg, band_rows=8)
    a = math.radians(gaussian_deg)
    # two Gaussians just either side of the azimuth, so that atan2's branch cut is crossed
    means = torch.tensor([[8 * math.cos(a + 1e-6), 8 * math.sin(a + 1e-6), 0.0],
                          [8 * math.cos(a - 1e-6), 8 * math.sin(a - 1e-6), 0.0]], dtype=torch.float64)
    quats = torch.tensor([[1.0, 0, 0, 0]] * 2, dtype=torch.float64)
    scales = torch.full((2, 3), 0.4, dtype=torch.float64)
    opacities = torch.full((2,), 0.5, dtype=torch.float64)
    intensities = torch.tensor([0.2, 0.7], dtype=torch.float64)
    out = render_lidar(means, quats, scales, opacities, intensities, lidar)
    ref = render_lidar_reference(means, quats, scales, opacities, intensities, lidar)
    for f in FIELDS:
        torch.testing.assert_close(getattr(out, f), ref[f], atol=1e-12, rtol=1e-12, msg=f)
    k = round((lidar.sign * (a - lidar.start_azimuth) / (2 * math.pi) * W)) % W  # the column on the Gaussians
    ch = int(torch.argmin(lidar.elevation.abs()))
    left, right = out.hit_prob[ch, (k - 1) % W], out.hit_prob[ch, (k + 1) % W]
    assert float(left) > 0.2 and float(left) == pytest.approx(float(right), abs=1e-9)
    if gaussian_deg == start_deg:  # on the wrap: the splat reaches tiles at both ends of the sweep
        lengths = (out.tile_ranges[:, 1] - out.tile_ranges[:, 0]).tolist()
        band0 = lidar.tiles.bands[0]
        n_tiles = -(-W // band0[2])
        assert lengths[0] > 0 and lengths[n_tiles - 1] > 0
        assert float(out.hit_prob[ch, W - 1]) > 0.2 and float(out.hit_prob[ch, 1]) > 0.2


def _room(spacing: float, half: float = 8.0, height: float = 2.0, dtype=torch.float64):
    """Flat Gaussians tiling the four walls of a square room |x|, |y| = half, |z| <= height."""
    s = torch.arange(-half, half + 1e-9, spacing, dtype=torch.float64)
    z = torch.arange(-height, height + 1e-9, spacing, dtype=torch.float64)
    u, v = torch.meshgrid(s, z, indexing="ij")
    u, v = u.reshape(-1), v.reshape(-1)
    walls, quats = [], []
    h = torch.full_like(u, half)
    for sign in (1.0, -1.0):
        walls += [torch.stack((sign * h, u, v), -1), torch.stack((u, sign * h, v), -1)]
        # thin axis (z of the Gaussian) along the wall normal: rotate z to x, and z to y
        quats += [torch.tensor([math.cos(math.pi / 4), 0, math.sin(math.pi / 4), 0]).expand(len(u), 4),
                  torch.tensor([math.cos(math.pi / 4), -math.sin(math.pi / 4), 0, 0]).expand(len(u), 4)]
    means = torch.cat(walls)
    n = len(means)
    scales = torch.tensor([0.6 * spacing, 0.6 * spacing, 0.01], dtype=torch.float64).expand(n, 3)
    return [t.to(dtype).contiguous() for t in (means, torch.cat(quats).double(), scales,
                                                torch.full((n,), 0.95, dtype=torch.float64),
                                                torch.full((n,), 0.5, dtype=torch.float64))]


def _room_distance(origins: torch.Tensor, dirs: torch.Tensor, half: float = 8.0) -> torch.Tensor:
    """Distance along each ray (origins, dirs [..., 3], world) to the walls of the room."""
    t = torch.full(dirs.shape[:-1], float("inf"), dtype=dirs.dtype)
    for axis in (0, 1):
        d = dirs[..., axis]
        for wall in (half, -half):
            s = (wall - origins[..., axis]) / torch.where(d.abs() > 1e-12, d, torch.full_like(d, 1e-12))
            t = torch.where((s > 0) & (s < t), s, t)
    return t


def _room_lidar(T_start: torch.Tensor, T_end: torch.Tensor) -> LidarBatch:
    """The rolling-shutter tests' lidar (float32): 8 channels x 256 columns at 10 Hz, with a narrow
    beam footprint (a small rendering bias)."""
    channels, columns = 8, 256
    step = 2 * math.pi / columns
    eps = (0.02 * step ** 2, 0.02 * math.radians(16 / 7) ** 2)
    return LidarBatch.create(torch.linspace(-8, 8, channels), columns=columns, rotation="counterclockwise",
                             scan_rate_hz=10.0, min_range_m=0.5, max_range_m=50.0, T_lidar_world_start=T_start,
                             T_lidar_world_end=T_end, start_azimuth_deg=-90.0, beam_eps=eps).to(torch.float32)


def _assert_ranges_at_firing_times(lidar: LidarBatch, out, still, lidar_x: torch.Tensor,  # [W] metres
                                   naive_min: float) -> None:
    """``out`` must report the distances to the room's walls from x = lidar_x[k] (in the room's
    frame) when column k fires, as well as ``still`` (the room and the lidar at its centre, neither
    moving) reports them from the centre; ``still`` taken for ``out`` must be off by more than
    ``naive_min`` (median)."""
    zero = torch.zeros_like(lidar_x)
    origins = torch.stack((lidar_x, zero, zero), -1)[None].expand(lidar.channels, -1, 3)
    dirs = lidar.ray_directions().double()
    truth = _room_distance(origins, dirs)
    truth_still = _room_distance(torch.zeros_like(origins), dirs)
    ok = (out.hit_prob > 0.9) & (still.hit_prob > 0.9)
    assert ok.float().mean() > 0.9
    err = (out.range.double() - truth)[ok]
    err_still = (still.range.double() - truth_still)[ok]  # the rendering's own bias
    err_naive = (still.range.double() - truth)[ok]  # one place and pose for the whole sweep
    assert float(err.abs().median()) < 0.04, f"median range error {float(err.abs().median()):.3f} m"
    assert float(err.abs().quantile(0.95)) < 0.1
    assert abs(float(err.median()) - float(err_still.median())) < 0.01, "motion must add no error"
    assert abs(float(err.abs().quantile(0.95)) - float(err_still.abs().quantile(0.95))) < 0.02
    assert float(err_naive.abs().median()) > naive_min, "a render without the motion must be off by about it"
    assert float((out.median_range.double() - truth)[ok].abs().median()) < 0.04


def test_rolling_shutter_moving_lidar_sees_static_walls_where_they_are():
    """The lidar moves 2 m along x during its sweep, inside a room of static walls. Each ray must
    report the distance from where the lidar was when its column fired: as well as a lidar
    standing still does. A render with one (mid-sweep) pose is wrong by up to the motion.

    Rendering a surface of Gaussians has a bias of its own: the range is the weighted mean of
    the Gaussians' distances over the beam's footprint, weighted front to back, so at oblique
    incidence the nearer side of the footprint counts more (measured here: -1 cm head-on to
    -5 cm at 45 degrees, with a narrow beam footprint). The test bounds that, and requires the
    moving lidar's errors to match the standing lidar's.
    """
    start, end, mid = (torch.eye(4, dtype=torch.float64) for _ in range(3))
    start[0, 3], end[0, 3] = 1.0, -1.0  # T_lidar_world: the lidar goes from x = -1 to x = +1
    params = _room(0.08, height=1.7, dtype=torch.float32)
    lidar = _room_lidar(start, end)
    out = render_lidar(*params, lidar)
    still = render_lidar(*params, _room_lidar(mid, mid))
    a = lidar.firing_fractions().double()  # [W]
    _assert_ranges_at_firing_times(lidar, out, still, -1.0 + 2.0 * a, naive_min=0.3)


def test_rolling_shutter_still_lidar_sees_a_moving_room_where_it_is():
    """A standing lidar inside a room that moves 2 m along x during the sweep (an actor: its
    Gaussians placed for the sweep's middle, with their motion). Each ray must report the distance
    to the walls where they were when its column fired, as well as for a room standing still;
    without the motion the render is wrong by up to half the motion."""
    eye = torch.eye(4, dtype=torch.float64)
    lidar = _room_lidar(eye, eye)
    params = _room(0.08, height=1.7, dtype=torch.float32)
    motion = torch.tensor([2.0, 0.0, 0.0]).expand(len(params[0]), 3)  # the room: x = -1 at the start, +1 at the end
    out = render_lidar(*params, lidar, motion=motion)
    still = render_lidar(*params, lidar)  # every wall where it is at mid-sweep
    a = lidar.firing_fractions().double()  # [W]
    # in the room's frame the lidar is at x = 1 - 2a when column a fires
    _assert_ranges_at_firing_times(lidar, out, still, 1.0 - 2.0 * a, naive_min=0.2)


def test_with_poses_is_a_new_sweep_of_the_same_lidar():
    lidar = make_lidar(torch.float64)
    moved = make_lidar(torch.float64, moving=False)
    T0 = torch.eye(4, dtype=torch.float64)
    T0[:3, 3] = torch.tensor([0.2, -0.1, 0.05], dtype=torch.float64)
    again = lidar.with_poses(T0)
    params = make_gaussians(200, torch.float64)
    a, b = render_lidar(*params, again), render_lidar(*params, moved)
    for f in FIELDS:
        torch.testing.assert_close(getattr(a, f), getattr(b, f), atol=1e-12, rtol=0, msg=f)
    assert again.tiles is lidar.tiles


def test_culling_and_range_limits():
    lidar = LidarBatch.create([-10.0, -5.0, 0.0, 5.0, 10.0], columns=64, rotation="counterclockwise",
                              scan_rate_hz=10.0, min_range_m=1.0, max_range_m=30.0,
                              T_lidar_world_start=torch.eye(4))
    means = torch.tensor([[0.5, 0.0, 0.0],  # inside the minimum range
                          [40.0, 0.0, 0.0],  # beyond the maximum range
                          [2.0, 0.0, 8.0],  # far above the highest beam
                          [0.0, 3.0, 0.0],  # the sensor would sit inside it (3 sigma = 3.6 m)
                          [0.0, -6.0, 0.0],  # too faint to reach alpha 1/255 anywhere
                          [6.0, 0.0, 0.0]])  # visible, straight ahead
    n = len(means)
    quats = torch.tensor([[1.0, 0, 0, 0]] * n)
    scales = torch.full((n, 3), 0.1)
    scales[3] = 1.2
    opacities = torch.full((n,), 0.9)
    opacities[4] = 0.003
    out = render_lidar(means, quats, scales, opacities, torch.ones(n), lidar)
    ref = render_lidar_reference(means, quats, scales, opacities, torch.ones(n), lidar)
    assert (out.extents[:, 0] > 0).tolist() == [False] * 5 + [True]
    assert (ref["extents"][:, 0] > 0).tolist() == [False] * 5 + [True]
    # column 0 looks straight ahead; channel 2 is level: the Gaussian's centre sits on that ray
    assert float(out.hit_prob[2, 0]) == pytest.approx(0.9, abs=1e-5)
    assert float(out.range[2, 0]) == pytest.approx(6.0, abs=1e-5)
    assert float(out.median_range[2, 0]) == pytest.approx(6.0, abs=1e-5)
    assert float(out.hit_prob[2, 32]) == 0.0 and float(out.range[2, 32]) == 0.0


def test_capacity_overflow_is_reported_not_silent():
    params = make_gaussians(300, torch.float32)
    lidar = make_lidar()
    exact = render_lidar(*params, lidar)
    wanted = int(exact.intersections)
    roomy = render_lidar(*params, lidar, settings=LidarRenderSettings(capacity=wanted + 100))
    assert not bool(roomy.overflow)
    for f in FIELDS:
        torch.testing.assert_close(getattr(roomy, f), getattr(exact, f), atol=0, rtol=0)
    short = render_lidar(*params, lidar, settings=LidarRenderSettings(capacity=wanted // 2))
    assert bool(short.overflow) and int(short.intersections) == wanted


def test_bad_inputs_are_refused():
    params = make_gaussians(10, torch.float32)
    lidar = make_lidar()
    with pytest.raises(ValueError, match="quats"):
        render_lidar(params[0], params[1][:, :3], *params[2:], lidar)
    with pytest.raises(ValueError, match="intensities"):
        render_lidar(*params[:4], params[4][:5], lidar)
    with pytest.raises(ValueError, match="opacities"):
        render_lidar(*params[:3], params[3].double(), params[4], lidar)
    with pytest.raises(ValueError, match="capacity"):
        render_lidar(*params, lidar, settings=LidarRenderSettings(capacity=0))
    for _ in range(2):  # the kernel table is cached per dtype: the refusal is not
        with pytest.raises(ValueError, match="float32 or float64"):
            render_lidar(*[p.half() for p in params], lidar)
    with pytest.raises(ValueError, match="band_rows"):
        make_lidar(band_rows=5)
    with pytest.raises(ValueError, match="rotation"):
        make_lidar(rotation="sideways")
    with pytest.raises(ValueError, match="T_lidar_world_start"):
        LidarBatch.create([0.0], columns=8, rotation="clockwise", scan_rate_hz=10, min_range_m=0, max_range_m=1,
                          T_lidar_world_start=torch.eye(3))


def test_tile_mask_twin_matches_the_binning():
    """The twin's dense tile membership counts exactly the kernel's (tile, Gaussian) keys."""
    lidar = make_lidar(torch.float64, band_rows="auto")
    params = make_gaussians(400, torch.float64, size=0.8)
    out = render_lidar(*params, lidar)
    ref = render_lidar_reference(*params, lidar)
    mask = lidar_tile_mask_reference(ref["splats"], ref["extents"], lidar)  # [N, C, W]
    # one key per (Gaussian, tile): count the tiles each Gaussian's mask touches
    tiles = lidar.tiles
    band_of_channel = tiles.slot_band.long()[tiles.channel_rank.long()]
    cols = tiles.band_i[band_of_channel, 2].long()
    tile_of_ray = tiles.band_i[band_of_channel, 3].long()[:, None] + torch.arange(W)[None] // cols[:, None]
    keys = set()
    for i, c, k in mask.nonzero().tolist():
        keys.add((i, int(tile_of_ray[c, k])))
    assert len(keys) == int(out.intersections)
    lengths = out.tile_ranges[:, 1] - out.tile_ranges[:, 0]
    per_tile = torch.zeros(tiles.num_tiles, dtype=torch.long)
    for _, t in keys:
        per_tile[t] += 1
    assert torch.equal(per_tile, lengths.long())


# --------------------------------------------------------------------------------------------
# A street around the lidar: the distribution of the benchmark (benchmarks/raster_lidar.py)


def realistic_elevations(channels: int = 128) -> torch.Tensor:
    """Channel elevations in degrees from -25 to +15: ~0.1 degree apart at the horizon, ~0.4 at the ends."""
    up = max(1, round(channels * 15 / 40 * 0.95))
    down = channels - up
    el_up = 15.0 * (torch.arange(1, up + 1, dtype=torch.float64) / up) ** 1.3
    el_down = -25.0 * (torch.arange(0, down, dtype=torch.float64) / max(1, down - 1)) ** 1.3
    return torch.cat((el_down.flip(0), el_up))


def street_scene(n: int, seed: int = 0, dtype: torch.dtype = torch.float32, half_length: float = 60.0) -> list:
    """Gaussians distributed like a street around a lidar at the origin, 1.8 m above the road:
    the road and sidewalks (45%), building facades at y = +-10 m (35%), parked cars, poles and
    tree crowns (20%); flat Gaussians lying in their surfaces, their standard deviations 0.5-1x
    the spacing of the road's Gaussians so that surfaces are closed, as in a trained scene
    (a few centimetres: 4-7 cm at 1M Gaussians, 2-3 cm at 5M).

    Returns [means [N, 3], quats [N, 4], scales [N, 3], opacities [N], intensities [N]].
    """
    g = torch.Generator().manual_seed(seed)

    def U(m, lo, hi):
        return torch.rand(m, generator=g, dtype=torch.float64) * (hi - lo) + lo

    def signs(m):
        return torch.where(torch.rand(m, generator=g) < 0.5, -1.0, 1.0).double()

    z0 = -1.8
    n_ground, n_wall = int(0.45 * n), int(0.35 * n)
    n_obj = n - n_ground - n_wall
    n_car, n_pole = n_obj // 2, n_obj // 5
    n_tree = n_obj - n_car - n_pole
    zero = torch.zeros(1, dtype=torch.float64)
    pts, normals = [], []
    pts.append(torch.stack((U(n_ground, -half_length, half_length), U(n_ground, -10, 10),
                            z0 + U(n_ground, -0.01, 0.01)), -1))
    normals.append(torch.tensor([0.0, 0, 1], dtype=torch.float64).expand(n_ground, 3))
    side = signs(n_wall)
    pts.append(torch.stack((U(n_wall, -half_length, half_length), side * (10 + U(n_wall, 0, 0.3)),
                            U(n_wall, z0, 10)), -1))
    normals.append(torch.stack((zero.expand(n_wall), -side, zero.expand(n_wall)), -1))
    # cars: boxes 4.5 x 1.8 x 1.5 m every 8 m on both sides (sides and roofs)
    slots = torch.arange(-half_length + 4, half_length - 4, 8.0, dtype=torch.float64)
    k = torch.randint(0, 2 * len(slots), (n_car,), generator=g)
    centre = torch.stack((slots[k // 2], torch.where(k % 2 == 0, -6.0, 6.0).double(),
                          torch.full((n_car,), z0 + 0.75, dtype=torch.float64)), -1)
    face, s, u, v = torch.randint(0, 3, (n_car,), generator=g), signs(n_car), U(n_car, -1, 1), U(n_car, -1, 1)
    local = torch.stack((torch.where(face == 0, s, u), torch.where(face == 1, s, torch.where(face == 0, u, v)),
                         torch.where(face == 2, s.abs(), v)), -1)
    pts.append(centre + local * torch.tensor([2.25, 0.9, 0.75], dtype=torch.float64))
    normals.append(torch.stack(((face == 0) * s, (face == 1) * s, (face == 2) * 1.0), -1).double())
    # poles: radius 0.1 m, 6 m tall, every 15 m
    slots = torch.arange(-half_length + 7, half_length, 15.0, dtype=torch.float64)
    k = torch.randint(0, 2 * len(slots), (n_pole,), generator=g)
    th = U(n_pole, 0, 2 * math.pi)
    pts.append(torch.stack((slots[k // 2] + 0.1 * th.cos(), torch.where(k % 2 == 0, -8.5, 8.5).double()
                            + 0.1 * th.sin(), U(n_pole, z0, z0 + 6)), -1))
    normals.append(torch.stack((th.cos(), th.sin(), 0 * th), -1))
    # tree crowns: balls of radius 2 m at 4 m, every 12 m
    slots = torch.arange(-half_length + 3, half_length, 12.0, dtype=torch.float64)
    k = torch.randint(0, 2 * len(slots), (n_tree,), generator=g)
    d = torch.nn.functional.normalize(torch.randn(n_tree, 3, generator=g, dtype=torch.float64), dim=-1)
    r = 2.0 * U(n_tree, 0, 1) ** (1 / 3)
    pts.append(torch.stack((slots[k // 2], torch.where(k % 2 == 0, -8.0, 8.0).double(),
                            torch.full_like(r, 4.0)), -1) + d * r[:, None])
    normals.append(d)
    means, nrm = torch.cat(pts), torch.cat(normals)
    # rotation taking z to the normal: the thin axis of each Gaussian across its surface
    zax = torch.tensor([0.0, 0, 1], dtype=torch.float64).expand_as(nrm)
    axis = torch.cross(zax, nrm, dim=-1)
    sin, cos = axis.norm(dim=-1, keepdim=True), (zax * nrm).sum(-1, keepdim=True)
    ang = torch.atan2(sin, cos)
    axis = torch.where(sin > 1e-9, axis / sin.clamp_min(1e-12), torch.tensor([1.0, 0, 0], dtype=torch.float64))
    quats = torch.cat(((ang / 2).cos(), axis * (ang / 2).sin()), -1)
    spacing = math.sqrt(2 * half_length * 20.0 / max(n_ground, 1))
    size = U(n, 0.5, 1.0) * spacing
    scales = torch.stack((size, size * U(n, 0.6, 1.0), size * 0.15), -1)
    return [t.to(dtype).contiguous() for t in (means, quats, scales, U(n, 0.3, 1.0), U(n, 0.0, 1.0))]


def street_lidar(channels: int = 128, columns: int = 2048, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", band_rows: int | str = "auto") -> LidarBatch:
    """A 10 Hz lidar with realistic elevations, at the origin of ``street_scene``, driving at 10 m/s along x."""
    end = torch.eye(4, dtype=torch.float64)
    end[0, 3] = -1.0  # T_lidar_world: the lidar is 1 m further along x at the sweep's end
    return LidarBatch.create(realistic_elevations(channels), columns=columns, rotation="counterclockwise",
                             scan_rate_hz=10.0, min_range_m=0.5, max_range_m=120.0,
                             T_lidar_world_start=torch.eye(4, dtype=torch.float64), T_lidar_world_end=end,
                             band_rows=band_rows).to(dtype=dtype, device=device)


@wp.kernel
def _lane_layout(cols: int, rows_out: wp.array(dtype=int), cols_out: wp.array(dtype=int),
                 lanes_back: wp.array(dtype=int)):
    lane = wp.tid()
    r, c = kbin.ray_of_lane(lane, cols)
    rows_out[lane] = r
    cols_out[lane] = c
    lanes_back[lane] = kbin.lane_of_ray(r, c, cols)


@pytest.mark.parametrize("rows", [4, 8, 16, 32])
def test_lane_layout_warp_blocks(rows):
    """Every tile shape: the kernels' lane -> (row, column) map is a bijection onto the tile, its
    inverse undoes it, the host's copy (which the work counts use) agrees, and each CUDA warp
    holds a block of (rows / 2) x (cols / WARP_BLOCK_COLS) rays, not a strip of 32 along a row."""
    from nurec_usd.ops.lidar import lane_rays

    cols = kbin.TILE_RAYS // rows
    out = [wp.zeros(kbin.TILE_RAYS, dtype=int) for _ in range(3)]
    wp.launch(_lane_layout, kbin.TILE_RAYS, [cols, *out])
    r, c, back = (torch.from_numpy(a.numpy()).long() for a in out)
    assert torch.equal(back, torch.arange(kbin.TILE_RAYS))
    assert sorted((r * cols + c).tolist()) == list(range(kbin.TILE_RAYS))
    assert int(r.max()) == rows - 1 and int(c.max()) == cols - 1
    hr, hc = lane_rays(cols)
    assert torch.equal(hr, r) and torch.equal(hc, c)
    for w in range(kbin.WARPS):
        wr, wc = r[32 * w:32 * (w + 1)], c[32 * w:32 * (w + 1)]
        assert int(wr.max() - wr.min()) + 1 == rows // 2
        assert int(wc.max() - wc.min()) + 1 == cols // kbin.WARP_BLOCK_COLS


@wp.kernel
def _band_tiles(k0: wp.array(dtype=int), k1: wp.array(dtype=int), cols: int, columns: int,
                out: wp.array2d(dtype=int)):
    i = wp.tid()
    t0, n1, n2 = kbin.band_tiles(k0[i], k1[i], cols, columns)
    out[i, 0] = t0
    out[i, 1] = n1
    out[i, 2] = n2


@pytest.mark.parametrize("cols, columns", [(64, 2048), (8, 2048), (16, 1000), (32, 100), (8, 7)])
def test_band_tiles_are_the_tiles_of_the_wrapped_columns(cols, columns):
    """``band_tiles`` (shifts for the divisions by cols, a modulo only for a first column outside
    the sweep) names exactly the tiles holding columns k0..k1 modulo ``columns``, once each: first
    columns before 0, inside, and past the sweep, spans across the wrap, spans of the whole sweep,
    and tile counts that do not divide the columns."""
    g = torch.Generator().manual_seed(0)
    k0 = torch.randint(-3 * columns, 3 * columns, (600,), generator=g)
    span = torch.randint(0, columns + 3, (600,), generator=g)
    span[:50] = 0
    span[50:100] = columns - 2  # one short of the whole sweep
    k0 = torch.cat([k0, torch.tensor([-1, 0, columns - 1, columns, -columns])])
    span = torch.cat([span, torch.tensor([0, columns - 1, 1, 0, 2])])
    k1 = k0 + span
    k1[-3] = k0[-3] - 1  # an empty span
    out = wp.zeros((len(k0), 3), dtype=int)
    wp.launch(_band_tiles, len(k0), [wp.from_torch(k0.int()), wp.from_torch(k1.int()), cols, columns, out])
    got = torch.from_numpy(out.numpy())
    n_tiles = -(-columns // cols)
    for a, b, (t0, n1, n2) in zip(k0.tolist(), k1.tolist(), got.tolist()):
        want = sorted({(k % columns) // cols for k in range(a, b + 1)}) if b >= a else []
        named = list(range(t0, t0 + n1)) + list(range(n2))
        assert sorted(named) == want and len(set(named)) == len(named), (a, b, t0, n1, n2)
        assert all(0 <= t < n_tiles for t in named)


def test_tile_work_is_balanced_on_a_street():
    """Looking down a street, a few horizon tiles hold many times the mean work; the work items
    cut every list into chunks of L: (num, den) the device's fraction of the mean list, rounded
    up to whole batches (BATCH) and at least CHUNK_MIN, so no rasterizer work item gets more
    than L / (the mean tile's list) of its work, and the launch order takes them longest first.
    Both devices' fractions run here (on the CPU)."""
    from warp_kernels import lidar_binning as kbin

    lidar = street_lidar(32, 4 * kbin.TILE_RAYS)  # lists long enough that they, not CHUNK_MIN, set L
    params = street_scene(300_000)
    for fraction in sorted(set(kbin.CHUNK_OF_MEAN.values())):
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(kbin.CHUNK_OF_MEAN, "cpu", fraction)
            bins = bin_lidar(*params, lidar, LidarRenderSettings())
        stats = tile_work(lidar, bins.tile_ranges, bins.items, bins.num_items)
        assert stats["max_tile_ratio"] > 4, "the street should overload some tiles (else this test shows nothing)"
        tiles, total = lidar.tiles.num_tiles, int(bins.total)
        num, den = fraction
        L = int(bins.chunk)
        assert L == kbin.chunk_length(total, tiles, fraction), fraction
        assert L % kbin.BATCH == 0 and L >= num * total / (den * tiles), fraction  # whole batches, >= the share
        assert L > kbin.CHUNK_MIN, "the list lengths should set L here (else this test shows only the floor)"
        assert stats["max_item_ratio"] <= L / (total / tiles) * 1.01, fraction
        assert int(bins.num_items) <= kbin.max_work_items(tiles, total, 0, fraction)
        # the items cover each tile's list exactly, in order
        items = bins.items[: int(bins.num_items)].long()
        covered = torch.zeros(tiles, dtype=torch.long).index_add_(0, items[:, 0], items[:, 2] - items[:, 1])
        assert torch.equal(covered, (bins.tile_ranges[:, 1] - bins.tile_ranges[:, 0]).long())
        first = items[:, 3] == 0
        assert torch.equal(items[first, 1].sort().values, bins.tile_ranges[items[first, 0], 0].long().sort().values)
        # the launch order takes every item once, longest first by length class, a tile's chunks in order
        order = bins.order[: int(bins.num_items)].long()
        assert torch.equal(order.sort().values, torch.arange(len(items)))
        lengths = items[order, 2] - items[order, 1]
        classes = (kbin.ORDER_BUCKETS * lengths - 1) // L
        assert classes[0] == kbin.ORDER_BUCKETS - 1 and bool((classes[1:] <= classes[:-1]).all())
        # exactly: a stable sort of the items (tile-major, front to back) by class, longest first
        item_classes = (kbin.ORDER_BUCKETS * (items[:, 2] - items[:, 1]) - 1) // L
        assert torch.equal(order, torch.sort(-item_classes, stable=True).indices)
        slot = torch.empty_like(order)
        slot[order] = torch.arange(len(order))
        same_tile = items[1:, 0] == items[:-1, 0]
        assert bool((slot[1:][same_tile] > slot[:-1][same_tile]).all()), "a tile's chunks launch front to back"


def test_plan_bands_follows_beam_density():
    el = torch.deg2rad(realistic_elevations(128)).tolist()
    bands = plan_bands(el, 2048)
    assert sum(n for n, _ in bands) == 128 and all(r in BAND_ROWS and n <= r for n, r in bands)
    rows = [r for _, r in bands]
    assert max(rows[len(rows) // 3: 2 * len(rows) // 3]) > rows[0], "denser bands near the horizon"
    assert plan_bands(el[:10], 64, 8) == [(8, 8), (2, 8)]


def test_sweep_of_a_capture(handmade_capture):
    """Gaussians placed on the points of a recorded sweep (each at its firing time's pose) render
    back those ranges through LidarBatch.for_sweep: channel order, rotation, start azimuth,
    mounting and the rig's motion during the sweep all have to agree with the capture (the
    capture's moving boxes are frozen at the times their points were recorded, which is what
    the rays that saw them see)."""
    from nurec_usd.capture.loader import load_capture
    from nurec_usd.sensors.se3 import PoseTrajectory

    cap = load_capture(handmade_capture)
    lid = cap.lidars["top"]
    sweep = lid.load_sweep(0)
    # a narrow beam footprint and small Gaussians, so that each ray sees its own point
    step = 2 * math.pi / lid.columns
    lidar = LidarBatch.for_sweep(cap, "top", 0, dtype=torch.float64, beam_eps=(0.05 * step ** 2, 0.05 * step ** 2))
    rig = PoseTrajectory(torch.as_tensor(cap.seconds(cap.rig.timestamps_us)),
                         torch.as_tensor(cap.rig.T_world_rig, dtype=torch.float64))
    T_world_lidar = rig.at(torch.as_tensor(cap.seconds(sweep.timestamps_us))) @ torch.as_tensor(lid.T_rig_lidar)
    pts = torch.as_tensor(sweep.points, dtype=torch.float64)
    means = (T_world_lidar[:, :3, :3] @ pts[:, :, None])[..., 0] + T_world_lidar[:, :3, 3]
    rng = pts.norm(dim=-1)
    n = len(means)
    scales = (0.3 * rng * step)[:, None].expand(n, 3).contiguous()
    out = render_lidar(means, torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64).expand(n, 4).contiguous(), scales,
                       torch.full((n,), 0.9, dtype=torch.float64), torch.as_tensor(sweep.intensity).double(), lidar)
    column = torch.round(torch.as_tensor(cap.seconds(sweep.timestamps_us) - cap.seconds(lid.sweeps[0].timestamp_us))
                         * lid.scan_rate_hz * lid.columns).long() % lid.columns
    channel = torch.as_tensor(sweep.channel).long()
    err = (out.median_range[channel, column] - rng).abs()
    # measured: median 1 mm, all within 5 cm; a static rig, the wrong rotation or a start
    # azimuth one column off leave 30-40% of the rays within 5 cm
    assert float(err.median()) < 0.01, f"median error {float(err.median()):.3f} m"
    assert float((err < 0.05).double().mean()) > 0.97


# --------------------------------------------------------------------------------------------
# CUDA code generation (no GPU needed: Warp bundles NVRTC)


def cubin_resources(path: Path) -> dict[str, dict[str, int]]:
    """Per kernel of an sm_XX cubin: registers (REGCOUNT), stack frame bytes (FRAME_SIZE, spills
    included), as the compiler recorded them in the ELF's .nv.info attributes (what
    ``cuobjdump --dump-resource-usage`` prints)."""
    data = path.read_bytes()
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def cstr(off: int) -> str:
        return data[off:data.index(b"\0", off)].decode()

    names = [cstr(secs[shstrndx][4] + s[0]) for s in secs]
    symtab = next(s for s in secs if s[1] == 2)  # SHT_SYMTAB
    strtab = secs[symtab[6]]
    symbols = [cstr(strtab[4] + struct.unpack_from("<I", data, symtab[4] + 24 * k)[0])
               for k in range(symtab[5] // 24)]
    wanted = {0x2F: "REGCOUNT", 0x11: "FRAME_SIZE"}  # EIATTR codes
    out: dict[str, dict[str, int]] = {}
    for name, s in zip(names, secs):
        if not name.startswith(".nv.info"):
            continue
        p, end = s[4], s[4] + s[5]
        while p < end:
            fmt, attr = data[p], data[p + 1]
            if fmt == 0x04:  # EIFMT_SVAL: a 16-bit size, then (symbol, value) for these attributes
                size = struct.unpack_from("<H", data, p + 2)[0]
                if attr in wanted and size >= 8:
                    sym, val = struct.unpack_from("<II", data, p + 4)
                    out.setdefault(symbols[sym], {})[wanted[attr]] = val
                p += 4 + size
            else:  # EIFMT_NVAL (2 bytes), EIFMT_BVAL / EIFMT_HVAL (4 bytes)
                p += 2 if fmt == 0x01 else 4
    return out


@pytest.mark.parametrize("python_module, module_name", [
    ("lidar_project", "lidar_project"), ("lidar_project", "lidar_project_backward"), ("lidar_binning", "lidar_binning"),
    ("lidar_binning", "lidar_binning_masks"), ("lidar_raster", "lidar_raster"), ("lidar_project", "lidar_project_f64"),
    ("lidar_project", "lidar_project_backward_f64"), ("lidar_binning", "lidar_binning_f64"),
    ("lidar_binning", "lidar_binning_masks_f64"), ("lidar_raster", "lidar_raster_f64"),
    ("lidar_project", "lidar_project_backward_moving"), ("lidar_project", "lidar_project_backward_moving_f64")])
def test_cuda_code_generation(python_module, module_name, tmp_path):
    import importlib

    import warp as wp

    from nurec_usd.ops.warp_torch import init_warp

    init_warp()
    module = importlib.import_module(f"warp_kernels.{python_module}")
    target = f"warp_kernels.{module_name}"  # _f64, _backward: Warp modules of their own (warp_kernels.modules)
    assert wp.get_module(target).kernels, f"{target} holds no kernels"
    try:
        paths = wp.compile_aot_module(target, arch=90, module_dir=tmp_path)
    except Exception as exc:  # pragma: no cover - environments without NVRTC
        if "nvrtc" in str(exc).lower():
            pytest.skip(f"no NVRTC here: {exc}")
        raise
    cubins = [p for p in paths if p.suffix == ".cubin" and "sm90" in p.name]
    assert cubins and all(p.stat().st_size > 0 for p in cubins)
    if module_name in ("lidar_project_backward", "lidar_project_backward_moving"):
        # the launch bound holds the float32 projection backwards to BACKWARD_MIN_BLOCKS blocks per SM
        kernel = module.project_lidar_backward_f32 if module_name == "lidar_project_backward" else \
            module.project_lidar_backward_moving_f32
        r = cubin_resources(cubins[0])[kernel.get_mangled_name() + "_cuda_kernel_forward"]
        assert r["REGCOUNT"] <= 65536 // (module.BACKWARD_BLOCK * module.BACKWARD_MIN_BLOCKS), r
    if module_name == "lidar_raster" and "NUREC_LIDAR_MIN_BLOCKS" not in os.environ:
        # the register budgets hold without a spill, under the default launch bounds
        # (warp_kernels.lidar_raster): 56 registers for the forward's two passes (36 warps per SM), 64
        # for the backward (32)
        res = cubin_resources(cubins[0])
        for kernel, regs in ((module.lidar_forward_f32, 56), (module.lidar_backward_f32, 64)):
            r = res[kernel.get_mangled_name() + "_cuda_kernel_forward"]
            assert r["REGCOUNT"] <= regs, (kernel.key, r)
            assert r.get("FRAME_SIZE", 0) == 0, f"{kernel.key} spills: {r}"
