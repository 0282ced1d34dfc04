"""Points grouped by the cubic cell (voxel) they fall in."""

from __future__ import annotations

import torch


def voxel_cells(points: torch.Tensor,  # [N, 3], N > 0
                voxel: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each point's cell ``[N]`` (long, in [0, M)) and each cell's point count ``[M]``, for cells
    of edge ``voxel``. Cells are numbered in the order of their integer coordinates (x, then y,
    then z), one flat key per point so that one 1-D ``unique`` groups them."""
    key = torch.floor(points / voxel).long()
    key = key - key.min(0).values
    dims = key.max(0).values + 1
    flat = (key[:, 0] * dims[1] + key[:, 1]) * dims[2] + key[:, 2]
    _, inverse, counts = torch.unique(flat, return_inverse=True, return_counts=True)
    return inverse, counts
