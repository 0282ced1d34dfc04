"""Nearest-neighbour distances (Warp hash grid) against the brute-force torch twin, on the CPU.

Tolerance: the kernel and the twin compute the same float32 differences, so distances agree to
1e-5 relative (only the rounding of the squared sum may differ); zeros (duplicates) and +inf
(too few points) are exact.
"""

from __future__ import annotations

import math

import pytest
import torch

from nurec_usd.ops import neighbors
from nurec_usd.ops.neighbors import knn_distances, statistical_outliers
from nurec_usd.ops.reference import knn_distances_reference

wp = pytest.importorskip("warp")


def assert_same(points: torch.Tensor, k: int, **kwargs) -> torch.Tensor:
    got = knn_distances(points, k, **kwargs)
    want = knn_distances_reference(points, k)
    assert got.shape == (points.shape[0], k) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0.0)
    return got


def uniform(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, generator=g) * torch.tensor([40.0, 30.0, 5.0]) - 10.0


def clustered(seed: int = 1) -> torch.Tensor:
    """Clusters whose spacings differ by ~1000x, a sparse background, a flat patch."""
    g = torch.Generator().manual_seed(seed)
    parts = [
        torch.randn(1000, 3, generator=g) * 0.01 + torch.tensor([1.0, 2.0, 0.5]),  # very dense
        torch.randn(500, 3, generator=g) * 1.0 + torch.tensor([20.0, -5.0, 3.0]),
        torch.randn(300, 3, generator=g) * 30.0,  # sparse
        torch.cat([torch.rand(400, 2, generator=g) * 8.0, torch.zeros(400, 1)], 1),  # z = 0 exactly
    ]
    return torch.cat(parts)


def with_duplicates(seed: int = 2) -> torch.Tensor:
    base = uniform(1000, seed)
    cloud = torch.cat([base, base[:200], base[:100], base[:100], base[:100], base[:100]])  # up to 6 copies
    return cloud[torch.randperm(len(cloud), generator=torch.Generator().manual_seed(seed))]


def with_far_outliers(seed: int = 3) -> torch.Tensor:
    """A dense cloud and a few isolated points 100 m to 20 km away (radius growth)."""
    g = torch.Generator().manual_seed(seed)
    far = torch.randn(12, 3, generator=g)
    far = far / far.norm(dim=1, keepdim=True) * torch.logspace(2, 4.3, 12)[:, None]
    return torch.cat([torch.rand(2000, 3, generator=g) * 10.0, far])


CLOUDS = {
    "uniform": lambda: uniform(2000),
    "clustered": clustered,
    "duplicates": with_duplicates,
    "far_outliers": with_far_outliers,
    "offset": lambda: uniform(1000) + torch.tensor([3000.0, -2000.0, 50.0]),  # far from the origin
}


@pytest.mark.parametrize("name", sorted(CLOUDS))
@pytest.mark.parametrize("k", [1, 3, 8])
def test_matches_brute_force(name, k):
    assert_same(CLOUDS[name](), k)


@pytest.mark.parametrize("name", ["clustered", "far_outliers", "duplicates"])
def test_radius_growth_alone_matches_brute_force(name, monkeypatch):
    """Without the brute-force finish, the rounds of doubling radius resolve every point."""
    monkeypatch.setattr(neighbors, "BRUTE_FORCE_PAIRS", 0)
    calls = []
    real_round = neighbors._query_round
    monkeypatch.setattr(neighbors, "_query_round", lambda *a: calls.append(a[3]) or real_round(*a))
    assert_same(CLOUDS[name](), 3)
    assert len(calls) > 1 and calls == sorted(calls)  # several rounds, radius growing


@pytest.mark.parametrize("radius", [1e-4, 0.05, 1e3])
def test_given_radius_only_changes_speed(radius, monkeypatch):
    monkeypatch.setattr(neighbors, "BRUTE_FORCE_PAIRS", 0)
    assert_same(clustered(), 3, radius=radius)


def test_duplicates_are_neighbours_at_zero():
    p = torch.tensor([[1.0, 2.0, 3.0]] * 4 + [[1.5, 2.0, 3.0]])
    d = assert_same(p, 3)
    assert torch.equal(d[:4], torch.zeros(4, 3))
    assert torch.allclose(d[4], torch.full((3,), 0.5))
    same = torch.full((50, 3), 7.0)  # every point the same: a zero-size bounding box
    assert torch.equal(knn_distances(same, 8), torch.zeros(50, 8))


def test_small_clouds():
    assert knn_distances(torch.zeros(0, 3), 3).shape == (0, 3)
    assert torch.equal(knn_distances(torch.ones(1, 3), 3), torch.full((1, 3), math.inf))
    two = torch.tensor([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]])
    assert torch.equal(assert_same(two, 3), torch.tensor([[5.0, math.inf, math.inf]] * 2))
    three = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(assert_same(three, 2), torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 1.0]]))
    assert_same(uniform(9), 8)  # N = k + 1: every other point
    assert_same(uniform(6), 8)  # N <= k: +inf past N - 1


def test_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\[N, 3\]"):
        knn_distances(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="float32"):
        knn_distances(torch.zeros(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="k must be"):
        knn_distances(torch.zeros(4, 3), k=9)
    with pytest.raises(ValueError, match="radius"):
        knn_distances(torch.zeros(4, 3), radius=0.0)
    with pytest.raises(ValueError, match="finite"):
        knn_distances(torch.tensor([[0.0, 0.0, math.nan]]))


def test_statistical_outliers_finds_planted_points():
    g = torch.Generator().manual_seed(5)
    ground = torch.cat([torch.rand(4000, 2, generator=g) * 20.0, 0.02 * torch.randn(4000, 1, generator=g)], 1)
    planted = torch.tensor([[5.0, 5.0, 4.0], [15.0, 2.0, -3.0], [-6.0, 10.0, 0.0], [30.0, 30.0, 9.0]])
    cloud = torch.cat([ground, planted])
    outlier = statistical_outliers(cloud, k=8, std_ratio=2.0)
    assert outlier.shape == (4004,) and outlier.dtype == torch.bool
    assert outlier[4000:].all()
    assert int(outlier[:4000].sum()) <= 40  # at most 1% of the ground
    # the statistic is the twin's mean distance
    mean_dist = knn_distances_reference(cloud, 8).mean(1)
    assert torch.equal(outlier, mean_dist > mean_dist.mean() + 2.0 * mean_dist.std())
    assert not statistical_outliers(torch.zeros(2, 3)).any()


def test_cuda_code_generation(tmp_path):
    """The kernel module compiles for CUDA (NVRTC, sm_90) on a machine without a GPU."""
    from nurec_usd.ops.warp_torch import init_warp
    from warp_kernels import point_neighbors

    init_warp()
    try:
        paths = wp.compile_aot_module(point_neighbors, arch=90, module_dir=tmp_path)
    except Exception as exc:  # pragma: no cover - Warp builds without NVRTC
        if "nvrtc" in str(exc).lower():
            pytest.skip(f"no NVRTC here: {exc}")
        raise
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)


@pytest.mark.parametrize("name", ["clustered", "far_outliers", "uniform"])
@pytest.mark.parametrize("max_radius", [0.05, 0.7, 40.0])
def test_max_radius_is_the_brute_force_cut_there(name, max_radius, monkeypatch):
    """With ``max_radius``, every distance up to it is the twin's and every one past it +inf,
    with the brute-force finish and without; the rounds stop there (fewer of them on a cloud
    with isolated points)."""
    cloud = CLOUDS[name]()
    want = knn_distances_reference(cloud, 3)
    want = torch.where(want <= max_radius, want, torch.full_like(want, math.inf))
    torch.testing.assert_close(knn_distances(cloud, 3, max_radius=max_radius), want, rtol=1e-5, atol=0.0)
    monkeypatch.setattr(neighbors, "BRUTE_FORCE_PAIRS", 0)
    radii = []
    real_round = neighbors._query_round
    monkeypatch.setattr(neighbors, "_query_round", lambda *a: radii.append(a[3]) or real_round(*a))
    torch.testing.assert_close(knn_distances(cloud, 3, max_radius=max_radius), want, rtol=1e-5, atol=0.0)
    assert max(radii) <= max(max_radius, 1e-6 * 3e4)
    if name == "far_outliers":
        capped = len(radii)
        radii.clear()
        knn_distances(cloud, 3)
        assert capped < len(radii)


def test_max_radius_is_checked():
    with pytest.raises(ValueError, match="max_radius"):
        knn_distances(torch.zeros(4, 3), max_radius=0.0)
