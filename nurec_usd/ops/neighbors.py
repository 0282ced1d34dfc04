"""Nearest-neighbour distances of point clouds (Gaussian initialisation, outlier removal).

:func:`knn_distances` gives every point's distances to its k nearest other points, exactly
(the same float32 distances as the brute-force twin
``nurec_usd.ops.reference.knn_distances_reference``), for clouds of millions of points,
on the CPU or a CUDA device. It runs ``warp_kernels.point_neighbors`` over a ``wp.HashGrid``
in rounds of growing radius ``r_j = r_0 * 2**j``; round j builds a grid of cell width r_j:

* A point queried at radius r that finds at least k other points within r has its k nearest
  exactly. The others are queried again in the next round, at twice the radius.
* Each point starts at the round whose radius is just below its own estimated k-th neighbour
  distance, so dense and sparse parts of a lidar cloud (spacings 100x apart) each need about
  two queries, with a bounded number of candidates each. The estimate comes from the number
  of points in the point's voxel (voxels split where they hold many points), read as a
  surface density (``d_k ~ h * sqrt(k / (pi * count))``): on volumes this errs small, which
  costs a cheap extra round rather than too many candidates. With ``radius`` given, every
  point starts at that radius instead.
* Once so few points remain that brute force is cheap (``remaining * N <= BRUTE_FORCE_PAIRS``),
  or the radius reaches across the whole cloud, the rest get brute-force torch distances.

Duplicated points are each other's neighbours at distance 0. A point with fewer than k other
points in the cloud (N <= k) gets +inf in the missing slots; N = 0 gives an empty result.

:func:`statistical_outliers` flags points whose mean distance to their k nearest neighbours is
far above the cloud's average (statistical outlier removal, as in PCL / Open3D).

Both synchronise with the device between rounds (their work is data-dependent):
initialisation only, never inside a training step.
"""

from __future__ import annotations

import math

import torch

__all__ = ["knn_distances", "statistical_outliers", "KNN_MAX", "BRUTE_FORCE_PAIRS"]

KNN_MAX = 8  # = warp_kernels.point_neighbors.KNN_MAX (not imported: Warp loads on first use)
BRUTE_FORCE_PAIRS = 1 << 22  # finish by brute force once (remaining points) * N is at most this
_PAIRS_PER_CHUNK = 1 << 22  # brute force: (queries in a chunk) * N distances at a time
_VOXEL_POINTS = 16  # density voxels of the bounding box hold about this many points on average
_VOXEL_SPLIT = 64  # points in a density voxel above which it is split (edge / 4)
_EXTENT_SAMPLE = 1 << 13  # points sampled for the robust extent
_CELL_BUDGET_MAX = 1 << 23  # hash-grid cells at most (two int32 per cell: 64 MiB)
_LAST_ROUND = (1 << 31) - 1  # "every point is due": the round at a radius that reaches everything


def knn_distances(points: torch.Tensor, k: int = 3, radius: float | None = None,
                  max_radius: float | None = None) -> torch.Tensor:
    """Distances from every point to its k nearest other points, ascending.

    Args:
        points: float32 positions, on the CPU or a CUDA device.  # [N, 3]
        k: neighbours per point, 1 <= k <= KNN_MAX (8).
        radius: search radius (metres) of the first round for every point; it grows as
            needed, so it only affects speed. None: each point starts near its own spacing.
        max_radius: neighbours farther than this are not searched for: their distances are
            +inf (the rounds stop there; a caller that only needs near neighbours saves the
            rounds that isolated points would take). None: no limit.

    Returns:
        float32 distances on ``points.device``, each row ascending; +inf where the cloud has
        fewer than k other points (N <= k) and past ``max_radius``.  # [N, k]

    Raises:
        ValueError: wrong shape, dtype, k, radius or max_radius, or non-finite coordinates.
    """
    _check_points(points)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= KNN_MAX:
        raise ValueError(f"k must be an int in [1, {KNN_MAX}], got {k!r}")
    if radius is not None and not (math.isfinite(radius) and radius > 0):
        raise ValueError(f"radius must be a positive finite number, got {radius!r}")
    if max_radius is not None and not max_radius > 0:
        raise ValueError(f"max_radius must be a positive number, got {max_radius!r}")
    n = points.shape[0]
    dist = torch.full((n, k), math.inf, dtype=torch.float32, device=points.device)  # [N, k]
    if n <= 1:
        return dist
    points = points.contiguous()
    need = min(k, n - 1)  # neighbours a point must find within the radius to be resolved

    lo = points.amin(0)  # [3]
    full_extent = (points.amax(0) - lo).tolist()  # host sync (so do the rounds)
    diag = math.sqrt(sum(e * e for e in full_extent))
    extent = _robust_extent(points)
    scale = max(diag, float(points.abs().max()))
    r_floor = 1e-6 * scale if scale > 0 else 1.0  # keeps cell coordinates well inside int32
    r_all = max(diag * (1 + 1e-3), r_floor)  # a radius that reaches every other point

    if radius is not None:
        r0 = min(max(radius, r_floor), r_all)
        first_round = torch.zeros(n, dtype=torch.int32, device=points.device)  # [N]
    else:
        r0, first_round = _start_rounds(points, lo, extent, full_extent, need, r_floor, r_all)

    count = torch.zeros(n, dtype=torch.int32, device=points.device)  # [N]
    j = int(first_round.min())
    limit = r_all if max_radius is None else min(r_all, max(max_radius, r_floor))
    while True:
        r = r0 * 2.0**j
        if r >= limit:  # the last round: every point still unresolved is due
            r, j = limit, _LAST_ROUND
        grid = _query_round(points, extent, full_extent, r, j, k, need, first_round, dist, count)
        remaining = torch.nonzero(count < need).squeeze(1)  # [M]; waits for the kernel
        del grid  # only now: the kernel has finished with it
        m = remaining.numel()
        if m == 0:
            break
        if j == _LAST_ROUND and limit < r_all:  # what lies past max_radius stays +inf
            break
        if m * n <= BRUTE_FORCE_PAIRS or j == _LAST_ROUND:
            dist[remaining] = _brute_force(points, remaining, k)
            break
        j = max(j + 1, int(first_round[remaining].min()))
    if max_radius is not None:  # the brute-force finish and a last round at r_floor may reach past it
        dist = torch.where(dist <= max_radius, dist, torch.full_like(dist, math.inf))
    return dist


def statistical_outliers(points: torch.Tensor, k: int = 8, std_ratio: float = 2.0) -> torch.Tensor:
    """Flag statistical outliers: mean distance to the k nearest neighbours above
    ``mean + std_ratio * std`` of that statistic over all points.

    Args:
        points: float32 positions.  # [N, 3]
        k: neighbours in the mean distance, 1 <= k <= KNN_MAX; clouds with N <= k use N - 1.
        std_ratio: threshold in standard deviations (sample standard deviation over the points).

    Returns:
        True where the point is an outlier; all False when N < 3.  # [N] bool
    """
    _check_points(points)
    n = points.shape[0]
    if n < 3:
        return torch.zeros(n, dtype=torch.bool, device=points.device)
    mean_dist = knn_distances(points, min(k, n - 1)).mean(1)  # [N]
    return mean_dist > mean_dist.mean() + std_ratio * mean_dist.std()


# ---------------------------------------------------------------------------------------------
# Internals


def _check_points(points: torch.Tensor) -> None:
    if not isinstance(points, torch.Tensor) or points.ndim != 2 or points.shape[1] != 3:
        shape = tuple(points.shape) if isinstance(points, torch.Tensor) else type(points).__name__
        raise ValueError(f"points must be a [N, 3] tensor, got {shape}")
    if points.dtype != torch.float32:
        raise ValueError(f"points must be float32, got {points.dtype}")
    if points.numel() and not bool(torch.isfinite(points).all()):
        raise ValueError("points must be finite (found inf or nan coordinates)")


def _robust_extent(points: torch.Tensor) -> list[float]:
    """Per-axis extent of the bulk of the cloud (0.1% to 99.9% quantiles of a fixed random
    sample): sizes the grids and density voxels without letting far outliers inflate them."""
    n = points.shape[0]
    gen = torch.Generator().manual_seed(0)
    sample = points[torch.randint(n, (min(n, _EXTENT_SAMPLE),), generator=gen).to(points.device)]  # [S, 3]
    q = torch.quantile(sample, torch.tensor([1e-3, 1 - 1e-3], device=points.device), dim=0)  # [2, 3]
    return (q[1] - q[0]).tolist()


def _start_rounds(
    points: torch.Tensor,  # [N, 3]
    lo: torch.Tensor,  # [3] bounding-box minimum
    extent: list[float],
    full_extent: list[float],
    need: int,
    r_floor: float,
    r_all: float,
) -> tuple[float, torch.Tensor]:
    """The first round's radius r0 and each point's first round j (radius r0 * 2**j just below
    its estimated k-th neighbour distance).

    The estimate reads the point count c of the point's voxel of edge h as a surface density,
    ``d_k ~ h * sqrt(k / (pi * c))``. Voxels start at about _VOXEL_POINTS points each over the
    bounding box; points in voxels of more than _VOXEL_SPLIT points (dense regions, or a box
    inflated by far outliers) are counted again in voxels a quarter the size, until none is.
    Counts are per hash bucket (2 buckets per point counted): a collision only raises a count,
    so it can only start a point earlier (slower, never wrong).

    Returns:
        r0, and the int32 first rounds.  # [N]
    """
    n = points.shape[0]
    ext = [max(e, 1e-2 * max(extent)) for e in extent]  # a flat cloud is a surface, not an empty volume
    h = (_VOXEL_POINTS * ext[0] * ext[1] * ext[2] / n) ** (1 / 3)
    h_min = max(r_floor, max(full_extent) / (1 << 20))  # voxel coordinates < 2^20
    h = max(h, h_min)
    estimate = torch.empty(n, dtype=torch.float32, device=points.device)  # [N]
    active = torch.arange(n, device=points.device)  # [A] points still to estimate
    while active.numel():
        vox = torch.floor((points[active] - lo) / h).long()  # [A, 3]
        key = (vox[:, 0] * 73856093) ^ (vox[:, 1] * 19349663) ^ (vox[:, 2] * 83492791)  # [A]
        buckets = 2 * active.numel()
        slot = key.remainder(buckets)  # [A]
        c = torch.bincount(slot, minlength=buckets)[slot]  # [A] points in the voxel (itself included)
        final = (c <= _VOXEL_SPLIT) | (h / 4 < h_min)  # [A]
        estimate[active[final]] = h * torch.sqrt(need / (math.pi * c[final].float()))
        active = active[~final]
        h /= 4
    r0 = min(max(float(estimate.min()), r_floor), r_all)
    first = torch.floor(torch.log2(estimate / r0)).clamp_(0, 62).to(torch.int32)  # [N]
    return r0, first


def _grid_dims(extent: list[float], full_extent: list[float], r: float, n: int) -> tuple[int, int, int]:
    """Hash-grid cells per axis for cells of width r, within a budget of about 2 cells per point.

    Cells farther apart than the dims share buckets (correct, only slower). The bulk of the
    cloud (``extent``) gets distinct buckets first; spare budget then grows the axes towards
    the whole bounding box (``full_extent``), so that queries around far outliers at large radii
    do not land in buckets shared with the bulk."""
    budget = min(max(2 * n, 1 << 12), _CELL_BUDGET_MAX)
    full = [max(1, min(1 << 20, math.ceil(e / r) + 1)) for e in full_extent]
    dims = [min(f, max(1, math.ceil(e / r) + 1)) for e, f in zip(extent, full)]
    while dims[0] * dims[1] * dims[2] > budget:
        a = max(range(3), key=lambda i: dims[i])
        dims[a] = (dims[a] + 1) // 2
    grown = True
    while grown:
        grown = False
        for a in sorted(range(3), key=lambda i: dims[i]):
            bigger = min(2 * dims[a], full[a])
            if bigger > dims[a] and dims[0] * dims[1] * dims[2] // dims[a] * bigger <= budget:
                dims[a] = bigger
                grown = True
    return dims[0], dims[1], dims[2]


def _query_round(
    points: torch.Tensor,  # [N, 3]
    extent: list[float],
    full_extent: list[float],
    r: float,
    j: int,
    k: int,
    need: int,
    first_round: torch.Tensor,  # [N] int32
    dist: torch.Tensor,  # [N, k] updated for the points queried
    count: torch.Tensor,  # [N] int32, updated for the points queried
) -> object:
    """Round j: a grid of cell width r, and the kernel over every unresolved point due by round j.

    Returns the ``wp.HashGrid``: the caller keeps it alive until the launch has finished."""
    import warp as wp

    from nurec_usd.ops.warp_torch import to_wp, warp_device
    from warp_kernels.point_neighbors import knn_within_radius

    n = points.shape[0]
    wdev = warp_device(points.device)
    pts = to_wp(points, wp.vec3)
    grid = wp.HashGrid(*_grid_dims(extent, full_extent, r, n), device=wdev)
    grid.build(pts, r)
    wp.launch(
        knn_within_radius, dim=n, device=wdev,
        inputs=[grid.id, pts, float(r), k, need, to_wp(first_round), j, to_wp(dist), to_wp(count)],
    )  # fmt: skip
    return grid


def _brute_force(points: torch.Tensor, idx: torch.Tensor, k: int) -> torch.Tensor:
    """Distances from points[idx] to their k nearest other points, by brute force (the
    kernel's float32 arithmetic); +inf past N - 1 neighbours.

    Args:
        points: all points.  # [N, 3]
        idx: int64 indices of the query points.  # [M]
    Returns:
        ascending distances.  # [M, k]
    """
    n = points.shape[0]
    out = torch.full((idx.numel(), k), math.inf, dtype=points.dtype, device=points.device)  # [M, k]
    kk = min(k, n)  # the point itself (at +inf) fills a slot when k > N - 1
    chunk = max(1, _PAIRS_PER_CHUNK // n)
    px, py, pz = points[:, 0], points[:, 1], points[:, 2]  # [N] each
    for s in range(0, idx.numel(), chunk):
        qi = idx[s : s + chunk]  # [c]
        q = points[qi]  # [c, 3]
        dx = px[None, :] - q[:, 0:1]  # [c, N]
        dy = py[None, :] - q[:, 1:2]
        dz = pz[None, :] - q[:, 2:3]
        d2 = dx * dx + dy * dy + dz * dz  # [c, N]
        d2[torch.arange(qi.numel(), device=points.device), qi] = math.inf  # not itself
        out[s : s + chunk, :kk] = torch.topk(d2, kk, dim=1, largest=False, sorted=True).values.sqrt()
    return out
