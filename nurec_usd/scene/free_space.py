"""Space a lidar saw through: points nearer than a sweep's return in their direction.

A spinning lidar's return at range R along a beam says the beam crossed empty space up to R.
Points placed by guesswork (``points_above_lidar`` puts camera pixels at a guessed distance)
can land in that space; a Gaussian there is a floater the lidar loss has to remove again.
``seen_through`` finds such points against a lidar's training sweeps, given as the range
images the training uses (nearest return per channel and column, 0 for none).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nurec_usd.sensors.lidar import SpinningLidarModel
from nurec_usd.sensors.se3 import quat_slerp, quat_to_matrix


@dataclass
class SweepRanges:
    """One lidar's sweeps as range images with the sensor's pose over each revolution."""

    model: SpinningLidarModel
    rot_start: torch.Tensor  # [S, 4] T_lidar_world rotation (w, x, y, z) at the sweep's start
    trans_start: torch.Tensor  # [S, 3]
    rot_end: torch.Tensor  # [S, 4] ... one revolution later (equal to the start for compensated sweeps)
    trans_end: torch.Tensor  # [S, 3]
    ranges: torch.Tensor  # [S, C, W] nearest return per ray in metres; 0 (no return) or -1 (left out) carve nothing
    # [S'] long: the sweeps to judge against (default: all), so that a capture's training sweeps
    # need no copy of its range images
    use: torch.Tensor | None = None

    def __post_init__(self) -> None:
        s = self.ranges.shape[0]
        shapes = {"rot_start": (s, 4), "trans_start": (s, 3), "rot_end": (s, 4), "trans_end": (s, 3)}
        for name, shape in shapes.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"SweepRanges.{name} has shape {tuple(getattr(self, name).shape)}, expected {shape} "
                                 f"for {s} sweeps")
        if self.ranges.dim() != 3 or tuple(self.ranges.shape[1:]) != (self.model.channels, self.model.columns):
            raise ValueError(f"SweepRanges.ranges has shape {tuple(self.ranges.shape)}, expected (S, "
                             f"{self.model.channels}, {self.model.columns}) for the lidar's channels and columns")
        if self.use is not None and (self.use.dim() != 1 or self.use.dtype != torch.long
                                     or bool(((self.use < 0) | (self.use >= s)).any())):
            raise ValueError(f"SweepRanges.use must be a 1-D long tensor of indices below {s} (the sweeps), "
                             f"got {self.use.dtype} of shape {tuple(self.use.shape)}")

    @property
    def count(self) -> int:
        """The sweeps judged against."""
        return self.ranges.shape[0] if self.use is None else self.use.numel()


def _half_gaps(elevation: torch.Tensor) -> torch.Tensor:  # [C] radians -> [C]
    """Half the angle to each channel's nearest neighbour in elevation: how far from its beam a
    direction still counts as that channel's (a lone channel: half a degree)."""
    if elevation.numel() == 1:
        return torch.full_like(elevation, 0.5 * torch.pi / 180)
    order = torch.argsort(elevation)
    e = elevation[order]
    gap = e[1:] - e[:-1]
    near = torch.minimum(torch.cat([gap[:1], gap]), torch.cat([gap, gap[-1:]]))
    half = torch.empty_like(elevation)
    half[order] = 0.5 * near
    return half


def nearest_around(ranges: torch.Tensor,  # [S, C, W] metres, <= 0: no return
                   elevation: torch.Tensor,  # [C] the channels' elevations (any order)
                   ) -> torch.Tensor:  # [S, C, W]
    """Each ray's nearest return among itself and its 8 neighbours (the channels next to it in
    elevation, the columns next to it, wrapping around); 0 where the ray itself has none.

    A beam that grazes a surface (the road, far off) returns from farther than a point just
    beside it on the same surface; the nearest of the neighbours' returns does not.
    """
    order = torch.argsort(elevation.to(ranges.device))
    r = ranges[:, order]
    far = torch.where(r > 0, r, torch.full_like(r, float("inf")))
    padded = torch.cat([far[..., -1:], far, far[..., :1]], dim=-1)  # columns wrap around
    padded = torch.nn.functional.pad(padded, (0, 0, 1, 1), value=float("inf"))
    nearest = -torch.nn.functional.max_pool2d(-padded[:, None], 3, stride=1)[:, 0]
    out = torch.empty_like(r)
    out[:, order] = torch.where(r > 0, nearest, torch.zeros_like(r))
    return out


def _in_sensor(points: torch.Tensor,  # [M, 3] world
               q: torch.Tensor,  # [S, 4] or [S, M, 4] T_lidar_world rotations
               t: torch.Tensor,  # [S, 3] or [S, M, 3]
               ) -> torch.Tensor:  # [S, M, 3]
    R = quat_to_matrix(q)
    if R.dim() == 3:  # one pose per sweep
        return torch.einsum("sij,mj->smi", R, points) + t[:, None]
    return torch.einsum("smij,mj->smi", R, points) + t


def seen_through(points: torch.Tensor,  # [M, 3] world
                 sweeps: SweepRanges, margin_m: float = 0.3, margin_fraction: float = 0.05,
                 chunk: int = 1_000_000) -> torch.Tensor:  # [M] bool
    """Points that some sweep's beam passed on its way to a farther return.

    Each point goes into every sweep's lidar frame (with the pose at its column's firing time:
    the column from the pose at the start, then once more from the pose it gives), takes the
    channel nearest in elevation (within half the gap to the next channel: points above or
    below the lidar's field of view, or between beams, are not judged) and the nearest column,
    and counts as seen through when it is nearer than the nearest return of that ray and its
    eight neighbours (``nearest_around``) by more than ``max(margin_m, margin_fraction *
    return)``. Rays without a return carve nothing: a miss may be sky or a surface that sent
    nothing back.

    ``chunk``: point-sweep pairs per pass (memory). Returns ``[M]`` bool on the points' device.
    """
    if margin_m < 0 or margin_fraction < 0:
        raise ValueError(f"seen_through needs non-negative margins, got margin_m={margin_m}, "
                         f"margin_fraction={margin_fraction}")
    model = sweeps.model
    device = points.device
    out = torch.zeros(points.shape[0], dtype=torch.bool, device=device)
    n_sweeps = sweeps.count
    if points.shape[0] == 0 or n_sweeps == 0:
        return out
    p = points.double()
    elevation = torch.deg2rad(model.elevation_deg.to(device=device, dtype=torch.float64))  # [C]
    half_gap = _half_gaps(elevation)
    columns = model.columns
    per = max(1, chunk // points.shape[0])
    for s0 in range(0, n_sweeps, per):
        s1 = min(n_sweeps, s0 + per)
        pick = slice(s0, s1) if sweeps.use is None else sweeps.use[s0:s1]
        q0 = sweeps.rot_start[pick].to(device=device, dtype=torch.float64)
        t0 = sweeps.trans_start[pick].to(device=device, dtype=torch.float64)
        q1 = sweeps.rot_end[pick].to(device=device, dtype=torch.float64)
        t1 = sweeps.trans_end[pick].to(device=device, dtype=torch.float64)
        _, column = model.channel_and_column(_in_sensor(p, q0, t0))  # [s, M]
        alpha = column / columns  # [s, M]: the revolution's fraction when that column fires
        q = quat_slerp(q0[:, None].expand(-1, p.shape[0], -1), q1[:, None].expand(-1, p.shape[0], -1), alpha)
        local = _in_sensor(p, q, t0[:, None] + alpha[..., None] * (t1 - t0)[:, None])  # [s, M, 3]
        channel, column = model.channel_and_column(local)
        _, el, rng = model.spherical(local)
        on_beam = (el - elevation[channel]).abs() <= half_gap[channel]
        col = torch.remainder(torch.round(column).long(), columns)
        which = torch.arange(s1 - s0, device=device)[:, None]
        measured = nearest_around(sweeps.ranges[pick].to(device), elevation)[which, channel, col].double()
        margin = torch.clamp(measured * margin_fraction, min=margin_m)
        out |= (on_beam & (measured > 0) & (rng < measured - margin)).any(0)
    return out
