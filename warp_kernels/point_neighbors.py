"""The k nearest other points of every point within a search radius, over a ``wp.HashGrid``.

Used to initialise Gaussians (scale from the mean distance to the nearest neighbours) and to
find statistical outliers; ``nurec_usd.ops.neighbors`` drives it (radius choice, rounds of
growing radius, brute-force fallback).

One launch visits the points in the grid's cell order (``hash_grid_point_id``: neighbouring
threads query neighbouring points, so their candidate cells are shared in cache) and skips
points already resolved by an earlier round (``count >= need``) or not yet due
(``first_round[i] > this_round``: the caller starts each point near its own spacing). A query
examines every grid point within ``radius`` of its point, other than itself (by index: a
duplicate point is a neighbour at distance 0), and keeps the k smallest squared distances in
a sorted list of ``K_MAX`` registers (insertion by a branch-free min/max bubble, unrolled).
Candidates farther than the current k-th distance are only counted, not inserted.

Outputs, per queried point i: ``dist[i, :k]`` the distances (not squared) to the k nearest
other points within the radius, ascending, ``+inf`` in the slots beyond the number found; and
``count[i]`` the number of other points within the radius (all of them, not capped at k).
Because every point within the radius is examined, the distances are exact whenever
``count[i] >= k``; otherwise the caller queries again with a larger radius.

Distances are float32 and computed as ``sqrt(dx*dx + dy*dy + dz*dz)`` of the float32
coordinate differences, as the torch twin does (``knn_distances_reference``).
"""

import warp as wp

# initialisation only: no gradients
wp.set_module_options({"enable_backward": False})

KNN_MAX = 8  # most neighbours a query can keep (size of the register list)
K_MAX = wp.constant(KNN_MAX)

vec_kmax = wp.types.vector(length=KNN_MAX, dtype=wp.float32)  # the sorted list of squared distances


@wp.func
def kth_smallest(best: vec_kmax, k: int):
    """best[k - 1] without a run-time vector index (a chain of selects: the list stays in registers)."""
    v = best[0]
    for j in range(1, K_MAX):
        if j < k:
            v = best[j]
    return v


@wp.kernel
def knn_within_radius(
    grid: wp.uint64,  # HashGrid over `points` (any cell width is correct; ~radius is fastest)
    points: wp.array(dtype=wp.vec3),  # [N] the grid's points
    radius: float,  # search radius, metres
    k: int,  # neighbours to keep, 1 <= k <= K_MAX
    need: int,  # a point with count >= need is resolved and skipped (need = min(k, N - 1))
    first_round: wp.array(dtype=wp.int32),  # [N] round from which each point is queried
    this_round: int,  # the round being run
    dist: wp.array2d(dtype=wp.float32),  # [N, k] out: ascending distances, +inf past count
    count: wp.array(dtype=wp.int32),  # [N] in/out: other points within radius (0 before the first round)
):
    tid = wp.tid()
    i = wp.hash_grid_point_id(grid, tid)
    if i < 0:
        return
    if count[i] >= need or first_round[i] > this_round:
        return
    p = points[i]
    r2 = radius * radius
    best = vec_kmax(wp.inf)
    thr = r2  # insert only candidates closer than this (the radius, then the k-th distance)
    found = int(0)
    query = wp.hash_grid_query(grid, p, radius)
    j = int(0)
    while wp.hash_grid_query_next(query, j):
        if j != i:
            d = points[j] - p
            d2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
            if d2 <= r2:
                found += 1
                if d2 <= thr:
                    v = d2
                    for s in range(K_MAX):
                        b = best[s]
                        best[s] = wp.min(b, v)
                        v = wp.max(b, v)
                    thr = wp.min(r2, kth_smallest(best, k))
    for s in range(K_MAX):
        if s < k:
            dist[i, s] = wp.sqrt(best[s])
    count[i] = found
