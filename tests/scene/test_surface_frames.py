"""``flat_on_surfaces``: discs on planar patches of points, balls elsewhere."""

from __future__ import annotations

import math

import pytest
import torch

from nurec_usd.scene.surface_frames import flat_on_surfaces, frame_about, null_direction, symmetric3_eigenvalues
from nurec_usd.sensors.se3 import quat_to_matrix


def _covariances(scales: torch.Tensor, quats: torch.Tensor) -> torch.Tensor:  # [N, 3, 3]
    """The Gaussians' covariances as the renderer builds them: R diag(s)^2 R^T."""
    M = quat_to_matrix(quats) * scales[:, None, :]
    return M @ M.transpose(-1, -2)


def _tilted_plane(n: int, normal: torch.Tensor, gen: torch.Generator, noise: float = 0.002) -> torch.Tensor:
    """Points on the plane through (1, 2, 3) with this normal, in a 4 m square, with a little noise."""
    normal = normal / normal.norm()
    a = torch.linalg.cross(normal, torch.tensor([0.3, 0.5, 0.8], dtype=torch.float64))
    a = a / a.norm()
    b = torch.linalg.cross(normal, a)
    uv = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 4 - 2
    offset = torch.randn(n, generator=gen, dtype=torch.float64) * noise
    return torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) + uv[:, :1] * a + uv[:, 1:] * b + offset[:, None] * normal


@pytest.mark.parametrize("normal", [(0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.4, -0.7, 0.6)])
def test_a_plane_gets_discs_across_its_normal(normal):
    """On a tilted plane the points become discs (all but those of the few cells the plane only
    clips, with under 6 points): a disc's thinnest direction is the plane's normal, with
    ``thickness`` times the ball's scale; the other two keep the ball's."""
    gen = torch.Generator().manual_seed(1)
    normal = torch.tensor(normal, dtype=torch.float64)
    pts = _tilted_plane(4000, normal, gen)
    balls = torch.full((4000,), 0.05, dtype=torch.float64)
    scales, quats = flat_on_surfaces(pts, balls, cell=0.5, thickness=0.2)
    assert scales.shape == (4000, 3) and quats.shape == (4000, 4) and scales.dtype == torch.float64
    torch.testing.assert_close(quats.norm(dim=-1), torch.ones(4000, dtype=torch.float64))
    disc = scales[:, 2] < scales[:, 0]
    assert int(disc.sum()) >= 0.97 * 4000
    values, vectors = torch.linalg.eigh(_covariances(scales[disc], quats[disc]))
    thin = vectors[:, :, 0]  # [n, 3] the smallest eigenvalue's direction
    assert float((thin @ (normal / normal.norm())).abs().min()) > 0.99
    torch.testing.assert_close(values.sqrt(), torch.tensor([0.01, 0.05, 0.05], dtype=torch.float64).expand(len(thin), 3))
    assert torch.equal(scales[~disc], balls[~disc, None].expand(-1, 3))


def test_a_ball_of_points_and_sparse_cells_stay_balls():
    """Points filling a volume (no plane) and cells of fewer than 6 points keep the ball and
    the identity rotation."""
    gen = torch.Generator().manual_seed(2)
    blob = torch.rand(3000, 3, generator=gen, dtype=torch.float64)  # a 1 m cube, cells of 0.5 m
    sparse = torch.rand(40, 3, generator=gen, dtype=torch.float64) * 1000 + 10  # about one point a cell
    pts = torch.cat([blob, sparse])
    balls = torch.rand(pts.shape[0], generator=gen, dtype=torch.float64) * 0.1 + 0.01
    scales, quats = flat_on_surfaces(pts, balls, cell=0.5, thickness=0.2)
    assert torch.equal(scales, balls[:, None].expand(-1, 3))
    assert torch.equal(quats, torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64).expand(pts.shape[0], 4))


def test_each_cell_fits_its_own_plane():
    """A floor and a wall meeting at a corner, cells of 0.5 m: points of floor-only cells get the
    floor's normal, of wall-only cells the wall's; the cells that hold both are not planar."""
    gen = torch.Generator().manual_seed(3)
    floor = torch.cat([torch.rand(3000, 2, generator=gen, dtype=torch.float64) * 3,
                       torch.zeros(3000, 1, dtype=torch.float64) + 0.25], 1)  # z = 0.25: mid-cell
    wall = torch.cat([torch.zeros(3000, 1, dtype=torch.float64) + 0.25,
                      torch.rand(3000, 2, generator=gen, dtype=torch.float64) * 3], 1)  # x = 0.25
    pts = torch.cat([floor, wall])
    scales, quats = flat_on_surfaces(pts, torch.full((6000,), 0.04, dtype=torch.float64), 0.5, 0.25)
    _, vectors = torch.linalg.eigh(_covariances(scales, quats))
    thin = vectors[:, :, 0].abs()
    cell = torch.floor(pts / 0.5).long()
    corner = (cell[:, 0] == 0) & (cell[:, 2] == 0)  # the cells on the corner's line hold both
    on_floor = torch.arange(6000) < 3000
    assert bool((thin[on_floor & ~corner, 2] > 0.999).all()) and bool((thin[~on_floor & ~corner, 0] > 0.999).all())
    assert bool((scales[corner] == 0.04).all())


def test_bad_arguments_are_refused():
    pts = torch.zeros(3, 3, dtype=torch.float64)
    for cell, thickness in ((0.0, 0.5), (1.0, 0.0), (1.0, 1.5), (math.nan, 0.5)):
        with pytest.raises(ValueError, match="cell > 0 and 0 < thickness <= 1"):
            flat_on_surfaces(pts, torch.ones(3, dtype=torch.float64), cell, thickness)


def test_the_closed_form_eigenproblem_matches_torch():
    """``symmetric3_eigenvalues`` and ``null_direction`` against ``torch.linalg.eigh`` on random
    covariances, flat ones (one eigenvalue 1e-6 of the others), discs with two equal eigenvalues,
    and multiples of the identity; ``frame_about`` gives rotations about the normal."""
    gen = torch.Generator().manual_seed(4)
    rot = torch.linalg.qr(torch.randn(400, 3, 3, generator=gen, dtype=torch.float64)).Q  # [400, 3, 3]
    spreads = torch.rand(400, 3, generator=gen, dtype=torch.float64) + 0.1
    spreads[100:200, 0] *= 1e-6  # flat
    spreads[200:300, 2] = spreads[200:300, 1]  # a disc: the two in-plane spreads equal
    spreads[200:300, 0] *= 0.01
    spreads[300:] = spreads[300:, :1]  # a ball: a multiple of the identity
    cov = rot @ torch.diag_embed(spreads) @ rot.transpose(-1, -2) * 0.3
    values = symmetric3_eigenvalues(cov)
    expected, vectors = torch.linalg.eigh(cov)
    # the angle's arccos loses half the digits where two eigenvalues meet: 1e-7 on values of 0.03-0.33
    torch.testing.assert_close(values, expected, rtol=0, atol=1e-7)
    normal = null_direction(cov[:300] - values[:300, 0, None, None] * torch.eye(3, dtype=torch.float64))
    torch.testing.assert_close(normal.norm(dim=-1), torch.ones(300, dtype=torch.float64))
    assert float((normal * vectors[:300, :, 0]).sum(-1).abs().min()) > 1 - 1e-9
    frame = frame_about(normal)
    torch.testing.assert_close(frame @ frame.transpose(-1, -2), torch.eye(3, dtype=torch.float64).expand(300, 3, 3))
    torch.testing.assert_close(torch.linalg.det(frame), torch.ones(300, dtype=torch.float64))
    torch.testing.assert_close(frame[:, :, 2], normal)
    assert torch.equal(null_direction(torch.zeros(2, 3, 3, dtype=torch.float64)),
                       torch.tensor([[0.0, 0.0, 1.0]] * 2, dtype=torch.float64))


def test_the_initial_scene_starts_discs_on_the_lidar_surfaces(handmade_capture):
    """``initial_scene`` on the hand-made street (a road and facades): by default some static
    Gaussians start as discs, as many as its log line says, each with its third scale at 0.2 of
    the others; ``flat_start_thickness=1`` keeps every one a ball and says nothing of discs."""
    import re

    from nurec_usd.capture.importers import load_any
    from nurec_usd.pipeline import initial_scene
    from nurec_usd.train.config import make_config
    from nurec_usd.train.data import CaptureData

    cap = load_any(handmade_capture)
    data = CaptureData(cap, "cpu")
    for thickness in (0.2, 1.0):
        messages: list[str] = []
        # cells of 4 voxels (1 m) span several of its lidar rings on the road: a cell of one ring is a line
        config = make_config("fast", voxel_m=0.25, flat_start_thickness=thickness)
        static = initial_scene(cap, data, config.init, log=messages.append).static
        scales = static.log_scales.exp()  # [N, 3]
        disc = scales[:, 2] < scales[:, 0] * 0.999
        said = [m for m in messages if m.startswith("flat starting discs")]
        if thickness == 1.0:
            assert not bool(disc.any()) and not said
            continue
        assert said, messages
        count, total = (int(x.replace(",", "")) for x in re.search(r"([\d,]+) of ([\d,]+)", said[0]).groups())
        assert total == scales.shape[0] and count == int(disc.sum()) and count > 0.2 * total
        torch.testing.assert_close(scales[disc, 2], 0.2 * scales[disc, 0], rtol=1e-5, atol=0)
        torch.testing.assert_close(scales[disc, 1], scales[disc, 0], rtol=1e-5, atol=0)
