"""Flat starting Gaussians on the surfaces a lidar cloud samples.

Lidar points lie on surfaces (road, facades, cars), but a Gaussian started from a point is a
ball: training spends its first steps flattening it onto the surface. ``flat_on_surfaces``
fits a plane to the points of each cell of a coarse grid (the covariance's thinnest direction)
and, where the cell is planar, turns its points' balls into discs in that plane.

The 3x3 eigenproblems are solved in closed form, elementwise on the points' device: CUDA's
batched eigensolver (``torch.linalg.eigh`` on 10^5 matrices) failed with an internal cuSOLVER
error on an H100, and on the CPU it costs about half a second per 200,000 cells.
"""

from __future__ import annotations

import math

import torch

from nurec_usd.scene.voxels import voxel_cells
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

    A disc's two axes in the plane have the same scale, so only the normal is fitted; the axes
    in the plane are any two that make a rotation with it. Returns tensors in the points' dtype.
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
    which, counts = voxel_cells(p, cell)  # [N], [cells]
    cells = counts.shape[0]
    count = counts.double()
    mean = torch.zeros(cells, 3, dtype=torch.float64, device=device).index_add_(0, which, p) / count[:, None]
    centred = p - mean[which]  # [N, 3]: about the cell's mean (better conditioned than E[pp^T] - mm^T)
    outer = (centred[:, :, None] * centred[:, None, :]).reshape(n, 9)
    cov = torch.zeros(cells, 9, dtype=torch.float64, device=device).index_add_(0, which, outer)
    cov = cov.view(cells, 3, 3) / count[:, None, None]
    values = symmetric3_eigenvalues(cov)  # [cells, 3] ascending
    planar = (count >= MIN_CELL_POINTS) & (values[:, 0] < PLANAR_RATIO * values[:, 1]) & (values[:, 1] > 0)
    normal = null_direction(cov - values[:, 0, None, None] * torch.eye(3, dtype=torch.float64, device=device))
    q = matrix_to_quat(frame_about(normal)).to(dtype)  # [cells, 4]
    flat = planar[which]  # [N]
    quats = torch.where(flat[:, None], q[which], quats)
    out_scales[:, 2] = torch.where(flat, scales * thickness, scales)
    return out_scales, quats


def symmetric3_eigenvalues(a: torch.Tensor  # [M, 3, 3] symmetric
                           ) -> torch.Tensor:  # [M, 3] ascending
    """Eigenvalues of symmetric 3x3 matrices in closed form (the trigonometric solution of the
    characteristic cubic): the spread about the mean eigenvalue, ``p``, scales the matrix to one
    whose half determinant is the cosine of three times an angle."""
    q = a.diagonal(dim1=-2, dim2=-1).sum(-1) / 3  # [M] mean eigenvalue
    off = a[:, 0, 1] ** 2 + a[:, 0, 2] ** 2 + a[:, 1, 2] ** 2
    diag = (a.diagonal(dim1=-2, dim2=-1) - q[:, None]) ** 2
    p = torch.sqrt((diag.sum(-1) + 2 * off) / 6)  # [M]; 0 when the matrix is a multiple of I
    eye = torch.eye(3, dtype=a.dtype, device=a.device)
    b = (a - q[:, None, None] * eye) / torch.where(p > 0, p, 1.0)[:, None, None]
    det = (b[:, 0, 0] * (b[:, 1, 1] * b[:, 2, 2] - b[:, 1, 2] * b[:, 2, 1])
           - b[:, 0, 1] * (b[:, 1, 0] * b[:, 2, 2] - b[:, 1, 2] * b[:, 2, 0])
           + b[:, 0, 2] * (b[:, 1, 0] * b[:, 2, 1] - b[:, 1, 1] * b[:, 2, 0]))  # by hand: no LU solver
    half_det = (det / 2).clamp(-1.0, 1.0)
    phi = torch.acos(half_det) / 3  # [M] in [0, pi/3]
    largest = q + 2 * p * torch.cos(phi)
    smallest = q + 2 * p * torch.cos(phi + 2 * math.pi / 3)
    middle = 3 * q - largest - smallest
    return torch.stack([smallest, middle, largest], dim=-1)


def null_direction(m: torch.Tensor  # [M, 3, 3] symmetric of rank 2
                   ) -> torch.Tensor:  # [M, 3] unit
    """The unit vector a rank-2 symmetric matrix sends to zero: the longest cross product of two
    of its rows (each row is orthogonal to it). Where every row is zero, (0, 0, 1)."""
    rows = m.unbind(1)
    crosses = torch.stack([torch.linalg.cross(rows[0], rows[1]), torch.linalg.cross(rows[0], rows[2]),
                           torch.linalg.cross(rows[1], rows[2])], dim=1)  # [M, 3, 3]
    norms = crosses.norm(dim=-1)  # [M, 3]
    best = norms.argmax(dim=1)  # [M]
    picked = crosses[torch.arange(m.shape[0], device=m.device), best]  # [M, 3]
    length = norms.gather(1, best[:, None])  # [M, 1]
    up = torch.tensor([0.0, 0.0, 1.0], dtype=m.dtype, device=m.device).expand_as(picked)
    return torch.where(length > 0, picked / torch.where(length > 0, length, 1.0), up)


def frame_about(normal: torch.Tensor  # [M, 3] unit
                ) -> torch.Tensor:  # [M, 3, 3] rotations
    """Rotations whose third column is ``normal``: the first column is the normal crossed with the
    coordinate axis least aligned with it, the second completes a right-handed frame."""
    axis = torch.nn.functional.one_hot(normal.abs().argmin(dim=1), 3).to(normal.dtype)  # [M, 3]
    first = torch.linalg.cross(normal, axis)
    first = first / first.norm(dim=-1, keepdim=True)
    second = torch.linalg.cross(normal, first)
    return torch.stack([first, second, normal], dim=-1)
