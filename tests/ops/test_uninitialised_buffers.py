"""The renderers and the interpolation never read memory they did not write.

Their scratch buffers come from ``torch.empty``: only what the kernels write is read (the camera
forward, for one, leaves a culled splat's rows unwritten). On the CPU a fresh allocation is
often zero-filled by the system, which would hide a read of an unwritten row. Here every
``torch.empty`` / ``torch.empty_like`` of the call is filled with poison first (NaN for floats;
for integers small valid indices that differ from slot to slot, so that a stray read gives a
wrong result rather than a crash, and an unwritten [start, end) pair is not empty),
and the outputs and gradients must equal those of an ordinary call exactly.
"""

from __future__ import annotations

import pytest
import torch
from test_camera_render import make_cameras, pinhole_cameras
from test_camera_render import make_gaussians as camera_gaussians
from test_interpolate import make_corrections, make_tracks, time
from test_interpolate import make_gaussians as interp_gaussians
from test_lidar_render import make_gaussians as lidar_gaussians
from test_lidar_render import make_lidar

from nurec_usd.ops.camera import RenderSettings, render_cameras
from nurec_usd.ops.interpolate import interpolate_gaussians
from nurec_usd.ops.lidar import LidarRenderSettings, render_lidar

# Integers: 1, 2, .., _POISON_INTS, 1, 2, .. (indices into every array here: a stray read is
# wrong, not out of bounds). Not one value: an unwritten [start, end) pair must not look empty.
_POISON_INTS = 5


def _poison(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    if t.dtype in (torch.int32, torch.int64):
        pattern = torch.arange(t.numel(), dtype=t.dtype, device=t.device) % _POISON_INTS + 1
        return t.copy_(pattern.view(t.shape))
    return t


def _run(fn, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    """Outputs of fn(*leaves) and the gradients of a fixed weighting of them."""
    outs = [o for o in fn(*leaves) if o.is_floating_point()]
    weights = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view(o.shape) for o in outs]
    loss = sum((o * w).sum() for o, w in zip(outs, weights) if o.requires_grad)
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return [o.detach() for o in outs] + [g for g in grads if g is not None]


def _compare_poisoned(fn, inputs: list[torch.Tensor], monkeypatch) -> None:
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    plain = _run(fn, leaves)
    real_empty, real_empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _poison(real_empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: _poison(real_empty_like(*a, **k)))
    poisoned = _run(fn, leaves)
    monkeypatch.undo()
    assert len(plain) == len(poisoned)
    for k, (a, b) in enumerate(zip(plain, poisoned)):
        assert torch.equal(a, b), f"tensor {k} differs when scratch memory starts as poison"


def _with_culled_gaussians(params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The camera Gaussians, a quarter of them moved behind the cameras (culled by every one)."""
    means = params[0].clone()
    means[::4, 2] = -3.0
    return [means, *params[1:]]


@pytest.mark.parametrize("pinhole, spare", [(True, False), (False, False), (True, True)])
def test_camera_render_reads_only_what_it_wrote(pinhole, spare, monkeypatch):
    """``spare``: a fixed capacity with room to spare (the key slots past the total are padded by
    the key emission, the tile ranges zeroed by the tile count: no fill of their own)."""
    cams = pinhole_cameras(torch.float32) if pinhole else make_cameras(torch.float32)
    params = _with_culled_gaussians(camera_gaussians(200, torch.float32))
    settings = None
    if spare:
        wanted = int(render_cameras(*params, cams, sh_degree=3).intersections)
        settings = RenderSettings(capacity=2 * wanted + 37)

    def render(*p):
        out = render_cameras(*p, cams, sh_degree=3, settings=settings)
        return out.rgb, out.alpha, out.depth, out.means2d

    _compare_poisoned(render, params, monkeypatch)


@pytest.mark.parametrize("spare", [False, True])
def test_lidar_render_reads_only_what_it_wrote(spare, monkeypatch):
    """``spare``: a fixed capacity with room to spare (the key slots past the total are padded by
    the key emission). The Gaussians lie in a narrow sector ahead, so most tiles are empty (their
    ranges are zeroed by the tile count: no fill of their own); the tile ranges are compared too."""
    lidar = make_lidar(torch.float32, columns=512)
    # near 0.3 m: some Gaussians inside the lidar's minimum range (culled)
    params = lidar_gaussians(300, torch.float32, near=0.3, far=60.0)
    means = params[0].clone()
    means[:, 0] = means[:, 0].abs() + 2.0
    means[:, 1] *= 0.1
    params = [means, *params[1:]]
    ranges = render_lidar(*params, lidar).tile_ranges
    assert int((ranges[:, 0] == ranges[:, 1]).sum()) > ranges.shape[0] // 3, "the test needs empty tiles"
    capacity = None
    if spare:
        capacity = 2 * int(render_lidar(*params, lidar).intersections) + 37
    # several work items per tile: the merge and the chunk passes
    settings = LidarRenderSettings(chunk=7, capacity=capacity)

    def render(*p):
        out = render_lidar(*p, lidar, settings=settings)
        return out.range_sum, out.intensity_sum, out.hit_prob, out.median_range, out.tile_ranges.double()

    _compare_poisoned(render, params, monkeypatch)


def test_interpolation_reads_only_what_it_wrote(monkeypatch):
    tracks = make_tracks(torch.float32)
    g = interp_gaussians(tracks, ns=10, per_actor=6, dtype=torch.float32)
    corr = make_corrections(tracks)
    t = time(tracks, 2.25)

    def interpolate(sm, sq, am, aq, ct, cw):
        return interpolate_gaussians(t, sm, sq, am, aq, g["actor_index"], tracks, pose_corrections=(ct, cw))

    inputs = [g["static_means"], g["static_quats"], g["actor_means"], g["actor_quats"], *corr]
    _compare_poisoned(interpolate, inputs, monkeypatch)
