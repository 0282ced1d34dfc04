"""Camera tile binning: every tile a splat is drawn in is binned (so the image is exact), and
the exact per-row spans bin thin, tilted splats to far fewer tiles than their square box."""

from __future__ import annotations

import math

import pytest
import torch

from nurec_usd.ops import reference
from nurec_usd.ops.camera import CameraBatch, render_cameras
from warp_kernels.compositing import ALPHA_MIN
from warp_kernels.tile_binning import TILE_SIZE

W, H = 96, 80


def needles(n: int, dtype, seed: int = 0):
    """Long thin splats at random orientations, some reaching past the image's edges."""
    g = torch.Generator().manual_seed(seed)
    means = torch.cat([torch.rand(n, 2, generator=g) * 3.0 - 1.5, torch.full((n, 1), 4.0)], -1).to(dtype)
    quats = torch.randn(n, 4, generator=g).to(dtype)
    scales = torch.tensor([0.6, 0.01, 0.01]).repeat(n, 1).to(dtype)
    opacities = (torch.rand(n, generator=g) * 0.9 + 0.05).to(dtype)
    colors = torch.rand(n, 3, generator=g).to(dtype)
    return [means, quats, scales, opacities, colors]


def camera(dtype) -> CameraBatch:
    K = torch.tensor([[[60.0, 0, 47.5], [0, 60.0, 39.5], [0, 0, 1]]], dtype=dtype)
    return CameraBatch.pinhole(torch.eye(4, dtype=dtype)[None], K, W, H)


def drawn_pairs(params, cams) -> tuple[torch.Tensor, torch.Tensor]:
    """Per Gaussian and pixel, dense and without tiles: alpha >= ALPHA_MIN ([P, N] bool), and the
    pixels' tile ids [P]."""
    means, quats, scales, opacities, colors = params
    m2d, conics, _, radii, _ = reference.project_gaussians_reference(
        means, quats, scales, colors[:, None], -1, opacities, cams, 0.01, 1e4)
    v, u = torch.meshgrid(torch.arange(H, dtype=means.dtype), torch.arange(W, dtype=means.dtype), indexing="ij")
    dx = m2d[0, None, :, 0] - u.reshape(-1, 1)
    dy = m2d[0, None, :, 1] - v.reshape(-1, 1)
    q = conics[0]
    sigma = 0.5 * (q[None, :, 0] * dx * dx + q[None, :, 2] * dy * dy) + q[None, :, 1] * dx * dy
    drawn = (opacities[None] * torch.exp(-sigma) >= ALPHA_MIN) & (radii[0, None] > 0)
    tile = (v.reshape(-1) // TILE_SIZE) * math.ceil(W / TILE_SIZE) + u.reshape(-1) // TILE_SIZE
    return drawn, tile.long()


def test_kernel_image_equals_a_dense_render_without_tiles(monkeypatch):
    """The Warp renderer (binned) against the twin with every Gaussian in every tile: equal, so
    no binned-out tile held a drawn pixel."""
    params = needles(60, torch.float64)
    cams = camera(torch.float64)
    ours = render_cameras(*params, cams)
    monkeypatch.setattr(reference, "tile_membership",
                        lambda m, *_: torch.ones(H * W, m.shape[0], dtype=torch.bool))
    rgb, alpha, depth = reference.rasterize_reference(
        *_projected(params, cams), params[3], torch.zeros(1, 3, dtype=torch.float64), W, H)
    assert float(alpha.max()) > 0.5
    torch.testing.assert_close(ours.rgb, rgb, atol=1e-10, rtol=0)
    torch.testing.assert_close(ours.depth, depth, atol=1e-10, rtol=0)


def _projected(params, cams):
    means, quats, scales, opacities, colors = params
    m2d, conics, depths, radii, rgbs = reference.project_gaussians_reference(
        means, quats, scales, colors[:, None], -1, opacities, cams, 0.01, 1e4)
    return m2d, conics, rgbs, depths, radii


def test_twin_membership_holds_every_drawn_pixel_and_little_else():
    params = needles(200, torch.float64, seed=1)
    cams = camera(torch.float64)
    m2d, conics, _, _, radii = _projected(params, cams)
    drawn, tile = drawn_pairs(params, cams)
    tiles_x, tiles_y = math.ceil(W / TILE_SIZE), math.ceil(H / TILE_SIZE)
    v, u = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    member = reference.tile_membership(m2d[0], conics[0], params[3], u.reshape(-1) // TILE_SIZE,
                                       v.reshape(-1) // TILE_SIZE, tiles_x, tiles_y)
    assert drawn.any()
    assert not (drawn & ~member).any(), "a drawn pixel's tile is not binned"
    # binned (Gaussian, tile) pairs against those holding a drawn pixel: the spans are tight
    tiles = tiles_x * tiles_y
    def pairs(mask: torch.Tensor) -> int:  # (tile, Gaussian) pairs with a pixel in mask
        per_tile = torch.zeros(tiles, mask.shape[1], dtype=torch.float64).index_add_(0, tile, mask.double())
        return int(((per_tile > 0) & (radii[0] > 0)).sum())

    assert pairs(member) <= 1.05 * pairs(drawn), (pairs(member), pairs(drawn))


def test_thin_tilted_splats_bin_to_fewer_tiles_than_their_square_box():
    params = needles(200, torch.float32, seed=2)
    cams = camera(torch.float32)
    out = render_cameras(*params, cams)
    tiles_x, tiles_y = math.ceil(W / TILE_SIZE), math.ceil(H / TILE_SIZE)
    r = out.radii[0].float()
    uv = out.means2d[0]
    # the square box of the splat's radius, as binned before the row spans
    x0 = torch.clamp(torch.floor((uv[:, 0] - r) / TILE_SIZE), 0, tiles_x)
    x1 = torch.clamp(torch.floor((uv[:, 0] + r) / TILE_SIZE) + 1, 0, tiles_x)
    y0 = torch.clamp(torch.floor((uv[:, 1] - r) / TILE_SIZE), 0, tiles_y)
    y1 = torch.clamp(torch.floor((uv[:, 1] + r) / TILE_SIZE) + 1, 0, tiles_y)
    boxes = int(((x1 - x0) * (y1 - y0) * (r > 0)).sum())
    binned = int(out.intersections)
    assert 0 < binned < 0.5 * boxes, f"{binned} binned against {boxes} in square boxes"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_matches_twin_on_needles(dtype):
    params = needles(80, dtype, seed=3)
    cams = camera(dtype)
    ours = render_cameras(*params, cams)
    rgb, alpha, depth, _, _ = reference.render_cameras_reference(*params, cams)
    tol = 2e-5 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(ours.rgb, rgb, atol=tol, rtol=0)
    torch.testing.assert_close(ours.alpha, alpha, atol=tol, rtol=0)
