"""Flat starting Gaussians on the surfaces a lidar cloud samples.

Lidar points lie on surfaces (road, facades, cars), but a Gaussian started from a point is a
ball: training spends its first steps flattening it onto the surface. ``flat_on_surfaces``
fits a plane to the points of each cell of a coarse grid (the covariance's eigenvectors) and,
where the cell is planar, turns its points' balls into discs in that plane.
"""

from __future__ import annotations

import torch

from nurec_usd.sensors.se3 import matrix_to_quat

PLANAR_RATIO = 0.1  # a cell is planar when its thinnest spread is under this fraction of the middle one
MIN_CELL_POINTS = 6  # fewer points in a cell: no plane is fitted


def flat_on_surfaces(points: torch.Tensor,  # [N, 3]
                     scales: torch.Tensor,  # [N] isotropic scales
                     cell: float, thickness: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-point scales ``[N, 3]`` and rotations ``[N, 4]`` (w, x, y, z): in cells of edge ``cell``
    whose points are planar (the covariance's smallest eigenvalue under ``PLANAR_RATIO`` of the
    middle one, at least ``MIN_CELL_POINTS`` points), a point's third axis is the plane's normal and
    its scale there ``thickness`` times the ball's; elsewhere the ball stays (identity rotation).

    The eigenvectors' frame is made right-handed (a rotation). Returns tensors in the points' dtype.
    """
    if not cell > 0 or not 0 < thickness <= 1:
        raise ValueError(f"flat_on_surfaces needs cell > 0 and 0 < thickness <= 1, got cell={cell}, "
                         f"thickness={thickness}")
    n, dtype, device = points.shape[0], points.dtype, points.device
    out_scales = scales[:, None].expand(n, 3).clone()
    quats = torch.zeros(n, 4, dtype=dtype, device=device)
    quats[:, 0] = 1.0
    if n == 0:
        return out_scales, quats
    p = points.double()
    _, which = torch.unique(torch.floor(p / cell).long(), dim=0, return_inverse=True)  # [N]
    cells = int(which.max()) + 1
    count = torch.zeros(cells, dtype=torch.float64, device=device).index_add_(0, which, torch.ones_like(p[:, 0]))
    mean = torch.zeros(cells, 3, dtype=torch.float64, device=device).index_add_(0, which, p) / count[:, None]
    centred = p - mean[which]  # [N, 3]: about the cell's mean (better conditioned than E[pp^T] - mm^T)
    outer = (centred[:, :, None] * centred[:, None, :]).reshape(n, 9)
    cov = torch.zeros(cells, 9, dtype=torch.float64, device=device).index_add_(0, which, outer)
    cov = cov.view(cells, 3, 3) / count[:, None, None]
    values, vectors = torch.linalg.eigh(cov)  # ascending; columns are the eigenvectors
    planar = (count >= MIN_CELL_POINTS) & (values[:, 0] < PLANAR_RATIO * values[:, 1]) & (values[:, 1] > 0)
    # axes: the largest spread, the middle one, the normal; a rotation needs det +1
    frame = vectors.flip(-1)
    frame[:, :, 2] *= torch.linalg.det(frame).sign()[:, None]
    q = matrix_to_quat(frame).to(dtype)  # [cells, 4]
    flat = planar[which]  # [N]
    quats = torch.where(flat[:, None], q[which], quats)
    out_scales[:, 2] = torch.where(flat, scales * thickness, scales)
    return out_scales, quats
