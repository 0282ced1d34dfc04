"""Lidar rendering of 3D Gaussians: the torch-facing API over the Warp lidar kernels.

``render_lidar`` renders one sweep of a spinning lidar: it projects the Gaussians into the
lidar's (azimuth, elevation) angle space with rolling shutter
(``warp_kernels.lidar_project``), bins them into elevation-band x column tiles and sorts
them by range (``warp_kernels.lidar_binning`` + Warp's radix sort), cuts long tile lists
into work items, and composites every ray front to back (``warp_kernels.lidar_raster``).
It is differentiable in every Gaussian parameter: the rasterizer's and the projection's
backward passes are hand-written.
``nurec_usd.ops.reference.render_lidar_reference`` is its slow pure-torch twin.

A sweep's rays are the grid (channel c, column k); outputs are ``[C, W]`` in the lidar's
own channel order. Ray (c, k) looks along azimuth ``start + s (2 pi k / W) + offset[c]``
and elevation ``elevation[c]`` in the lidar frame (x forward, y left, z up; azimuth from
+x toward +y; s = +1 counterclockwise, -1 clockwise) and fires at fraction ``k / W`` of
the sweep, when the lidar's pose is interpolated between ``T_lidar_world`` at the sweep's
start and end. The caller places the Gaussians for the sweep's middle (see
``nurec_usd.ops.interpolate``); with ``motion`` (each Gaussian's position at the sweep's end
minus at its start) a moving actor's Gaussian is also seen where it is when its column fires.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import warp as wp

from nurec_usd.ops.autograd_apply import direct_apply
from nurec_usd.ops.warp_torch import aligned16, launch, warp_device, warp_view
from nurec_usd.sensors.lidar import SpinningLidarModel
from nurec_usd.sensors.se3 import invert_transform, matrix_to_quat
from warp_kernels import lidar_binning as kbin
from warp_kernels import lidar_project as kproj
from warp_kernels import lidar_raster as kraster

TILE_RAYS = kbin.TILE_RAYS
BAND_ROWS = (4, 8, 16, 32)  # channels per band the automatic layout chooses from (cols = TILE_RAYS / rows)
# tiles are a power of two columns wide: the binning divides by cols with shifts (lidar_binning.band_tiles)
assert all(TILE_RAYS % r == 0 and (TILE_RAYS // r) & (TILE_RAYS // r - 1) == 0 for r in BAND_ROWS)
MIN_RANGE_BITS = 16  # the sort key's range quantum is at most max_range / 2^16


@dataclass
class LidarTiles:
    """The sweep's rays cut into tiles (each chunk of a tile's list a rasterizer work item); built on the host.

    Channels are sorted by elevation ("slots") and grouped into bands of consecutive slots;
    a band of ``rows`` channels is cut into tiles of ``TILE_RAYS / rows`` columns.
    """

    bands: list[tuple[int, int, int]]  # per band: (first slot, rows, cols)
    channel_order: torch.Tensor  # [C] int32: channel of each slot (ascending elevation)
    channel_rank: torch.Tensor  # [C] int32: slot of each channel
    slot_band: torch.Tensor  # [C] int32: band of each slot
    band_i: torch.Tensor  # [B, 4] int32: (first slot, rows, cols, first tile)
    band_f: torch.Tensor  # [B, 4] float: (elevation lo, hi, s*offset lo, hi) of the band's channels, rad
    tile_band: torch.Tensor  # [T] int32: band of each tile
    slot_f: torch.Tensor  # [C, 2] float: (s * azimuth offset, elevation) of each slot (``channel_f`` by slot)
    num_tiles: int

    def to(self, device: torch.device | str, dtype: torch.dtype) -> "LidarTiles":
        """On ``device``, with the float tables in ``dtype`` (the kernels read them as they are)."""
        def i(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device)

        def f(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype).contiguous()

        return LidarTiles(self.bands, i(self.channel_order), i(self.channel_rank), i(self.slot_band), i(self.band_i),
                          f(self.band_f), i(self.tile_band), f(self.slot_f), self.num_tiles)


def plan_bands(elevation_sorted: Sequence[float], columns: int,
               band_rows: int | str = "auto") -> list[tuple[int, int]]:
    """Bands for channel elevations sorted ascending (radians): (channels, block rows) each, bottom to top.

    Every tile holds TILE_RAYS rays (``rows`` channels x ``TILE_RAYS / rows`` columns)
    whatever its band, so tiles carry the same ray count by construction; a band may hold
    fewer channels than its block has rows (the last one), leaving threads idle.
    ``"auto"`` picks each band's shape (rows in BAND_ROWS) so that its tiles are about as tall as
    they are wide in angle: where the beams are dense (near the horizon) a band takes more channels
    and fewer columns. A splat is binned into every tile its bounding box touches, and square tiles
    are touched by the fewest splats per unit of area, which keeps the duplicated (tile, Gaussian)
    keys down. A fixed int uses that many channels per band. Measured on the benchmark's street (128
    x 2048 rays, 1M Gaussians, tiles of 256 rays), as keys to sort / ray evaluations in the warps
    whose box the splat's met (the ray masks' test then): auto 1.44M / 114M, 4 rows 1.91M / 160M,
    8 rows 1.52M / 161M, 16 rows 1.41M / 108M, 32 rows 1.59M / 89M; which of the two costs weighs
    more is for GPU timing to say (benchmarks/raster_lidar.py --band-rows).
    """
    c = len(elevation_sorted)
    if isinstance(band_rows, int) and not isinstance(band_rows, bool):
        if band_rows not in BAND_ROWS:
            raise ValueError(f"band_rows must be 'auto' or one of {BAND_ROWS}, got {band_rows}")
        return [(min(band_rows, c - i), band_rows) for i in range(0, c, band_rows)]
    if band_rows != "auto":
        raise ValueError(f"band_rows must be 'auto' or one of {BAND_ROWS}, got {band_rows!r}")
    el = list(elevation_sorted)
    az_step = 2 * math.pi / columns
    spacing = (el[-1] - el[0]) / (c - 1) if c > 1 else az_step
    bands = []
    i = 0
    while i < c:
        left = c - i
        best, best_cost = BAND_ROWS[0], math.inf
        for rows in BAND_ROWS:
            n = min(rows, left)
            # angular height of n channels: n gaps, the last one to the next channel (or a mean gap)
            height = max((el[i + n] if i + n < c else el[c - 1] + spacing) - el[i], 1e-9)
            width = (TILE_RAYS // rows) * az_step
            cost = abs(math.log(height / width)) + math.log(rows / n)  # idle rows cost too
            if cost < best_cost:
                best, best_cost = rows, cost
        bands.append((min(best, left), best))
        i += min(best, left)
    return bands


def build_tiles(elevation: torch.Tensor,  # [C] rad
                azimuth_offset: torch.Tensor,  # [C] rad
                sign: float, columns: int, band_rows: int | str = "auto") -> LidarTiles:
    """The tile layout of a lidar (see ``LidarTiles``), on the device of ``elevation``."""
    device = elevation.device
    el = elevation.detach().double().cpu()
    off = azimuth_offset.detach().double().cpu() * sign
    order = torch.argsort(el, stable=True)
    bands, band_i, band_f, slot_band, tile_band = [], [], [], [], []
    slot, tile = 0, 0
    for rows, shape_rows in plan_bands(el[order].tolist(), columns, band_rows):
        cols = TILE_RAYS // shape_rows
        chans = order[slot:slot + rows]
        n_tiles = -(-columns // cols)
        bands.append((slot, rows, cols))
        band_i.append([slot, rows, cols, tile])
        band_f.append([float(el[chans].min()), float(el[chans].max()),
                       float(off[chans].min()), float(off[chans].max())])
        slot_band += [len(bands) - 1] * rows
        tile_band += [len(bands) - 1] * n_tiles
        slot += rows
        tile += n_tiles
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    i32 = dict(dtype=torch.int32, device=device)
    return LidarTiles(bands, order.to(**i32), rank.to(**i32), torch.tensor(slot_band, **i32),
                      torch.tensor(band_i, **i32), torch.tensor(band_f, dtype=torch.float64, device=device),
                      torch.tensor(tile_band, **i32),
                      torch.stack((off[order], el[order]), -1).to(device), tile)


def lane_rays(cols: int) -> tuple[torch.Tensor, torch.Tensor]:  # [TILE_RAYS] each
    """(row, column) in its tile of each thread (lane) of a rasterizer work item, for tiles ``cols`` wide:
    ``warp_kernels.lidar_binning.ray_of_lane`` for all lanes at once."""
    cw = cols // kbin.WARP_BLOCK_COLS
    lane = torch.arange(TILE_RAYS)
    w, lw = lane // 32, lane % 32
    wr, wc = w // kbin.WARP_BLOCK_COLS, w % kbin.WARP_BLOCK_COLS
    return wr * (32 // cw) + lw // cw, wc * cw + lw % cw


@dataclass
class LidarBatch:
    """One sweep of a spinning lidar: its C x W rays, laid out as the lidar kernels read them.

    Angles are radians. Poses are ``T_lidar_world`` at the sweep's start (column 0 fires)
    and end (one revolution later), as quaternions (w, x, y, z) and translations, each [1, ...].
    """

    elevation: torch.Tensor  # [C] rad, in the lidar's channel order
    azimuth_offset: torch.Tensor  # [C] rad
    columns: int
    sign: float  # +1 counterclockwise (azimuth grows with time), -1 clockwise
    start_azimuth: float  # rad, azimuth of column 0
    scan_rate_hz: float
    min_range: float
    max_range: float
    rot_start: torch.Tensor  # [1, 4] (w, x, y, z)
    trans_start: torch.Tensor  # [1, 3]
    rot_end: torch.Tensor  # [1, 4], same hemisphere as rot_start
    trans_end: torch.Tensor  # [1, 3]
    eps: tuple[float, float]  # rad^2 added to the (azimuth, elevation) variances: the beam footprint
    tiles: LidarTiles
    channel_f: torch.Tensor  # [C, 2] (s * azimuth offset, elevation) per channel, as the rasterizer reads them
    elevation_range: tuple[float, float]  # rad, lowest and highest channel (host floats: no device read per render)

    @property
    def channels(self) -> int:
        return int(self.elevation.shape[0])

    @property
    def device(self) -> torch.device:
        return self.elevation.device

    @property
    def dtype(self) -> torch.dtype:
        return self.elevation.dtype

    @property
    def range_bits(self) -> int:
        """Bits of the quantised range in the 32-bit sort key (the rest hold the tile)."""
        return 31 - max(1, self.tiles.num_tiles.bit_length())

    @property
    def elevation_clamp(self) -> tuple[float, float]:
        """Elevation interval (rad) where the projection's Jacobian is evaluated (channels plus a margin)."""
        lo = self.elevation_range[0] - kproj.ELEVATION_MARGIN
        hi = self.elevation_range[1] + kproj.ELEVATION_MARGIN
        return max(lo, -kproj.ELEVATION_LIMIT), min(hi, kproj.ELEVATION_LIMIT)

    @classmethod
    def create(
        cls,
        elevation_deg: Sequence[float] | torch.Tensor,  # [C]
        *,
        columns: int,
        rotation: str,
        scan_rate_hz: float,
        min_range_m: float,
        max_range_m: float,
        T_lidar_world_start: torch.Tensor,  # [4, 4]
        T_lidar_world_end: torch.Tensor | None = None,  # [4, 4]; None: the lidar does not move
        azimuth_offset_deg: Sequence[float] | torch.Tensor | None = None,  # [C]; zeros when None
        start_azimuth_deg: float = 0.0,
        band_rows: int | str = "auto",
        beam_eps: tuple[float, float] | None = None,
    ) -> "LidarBatch":
        """From the fields of a capture's lidar (``nurec_usd.capture.model.Lidar``), in degrees.

        ``beam_eps`` (rad^2, azimuth and elevation) defaults to BEAM_EPS times the squared
        beam spacing: the column step 2 pi / W in azimuth and the median gap between
        adjacent channel elevations (dense near the horizon, where most returns are).
        """
        # SpinningLidarModel validates every field and names the offending one
        model = SpinningLidarModel(elevation_deg, columns=columns, rotation=rotation, scan_rate_hz=scan_rate_hz,
                                   min_range_m=min_range_m, max_range_m=max_range_m,
                                   azimuth_offset_deg=azimuth_offset_deg, start_azimuth_deg=start_azimuth_deg,
                                   dtype=torch.float64)
        return cls.from_model(model, T_lidar_world_start, T_lidar_world_end, band_rows=band_rows, beam_eps=beam_eps)

    @classmethod
    def from_model(
        cls,
        model: Any,  # nurec_usd.sensors.lidar.SpinningLidarModel
        T_lidar_world_start: torch.Tensor,  # [4, 4]
        T_lidar_world_end: torch.Tensor | None = None,  # [4, 4]
        band_rows: int | str = "auto",
        beam_eps: tuple[float, float] | None = None,
    ) -> "LidarBatch":
        """From a ``SpinningLidarModel`` and the lidar's poses at the sweep's start and end.

        The batch takes the dtype and device of ``T_lidar_world_start``.
        """
        T0 = T_lidar_world_start
        if T0.shape != (4, 4):
            raise ValueError(f"T_lidar_world_start must have shape (4, 4), got {tuple(T0.shape)}")
        T1 = T0 if T_lidar_world_end is None else T_lidar_world_end
        if T1.shape != (4, 4):
            raise ValueError(f"T_lidar_world_end must have shape (4, 4), got {tuple(T1.shape)}")
        device, dtype = T0.device, T0.dtype
        T1 = T1.to(device=device, dtype=dtype)
        elevation = torch.deg2rad(model.elevation_deg.double()).to(device=device, dtype=dtype)
        offset = torch.deg2rad(model.azimuth_offset_deg.double()).to(device=device, dtype=dtype)
        q0 = matrix_to_quat(T0[:3, :3])
        q1 = matrix_to_quat(T1[:3, :3])
        q1 = torch.where((q0 * q1).sum() < 0, -q1, q1)
        if beam_eps is None:
            el_sorted = torch.sort(torch.deg2rad(model.elevation_deg.double().cpu())).values
            gaps = el_sorted[1:] - el_sorted[:-1]
            az_step = 2 * math.pi / model.columns
            el_step = float(gaps.median()) if len(gaps) else az_step
            beam_eps = (kproj.BEAM_EPS * az_step ** 2, kproj.BEAM_EPS * max(el_step, 1e-6) ** 2)
        if not (beam_eps[0] > 0 and beam_eps[1] > 0):
            raise ValueError(f"beam_eps must be two positive variances (rad^2), got {beam_eps}")
        tiles = build_tiles(elevation, offset, model.sign, model.columns, band_rows)
        if 31 - max(1, tiles.num_tiles.bit_length()) < MIN_RANGE_BITS:
            raise ValueError(f"columns x channels gives {tiles.num_tiles} tiles: too many for the 32-bit sort key")
        el64 = torch.deg2rad(model.elevation_deg.double().cpu())
        return cls(elevation=elevation, azimuth_offset=offset, columns=model.columns, sign=model.sign,
                   start_azimuth=math.radians(model.start_azimuth_deg), scan_rate_hz=model.scan_rate_hz,
                   min_range=model.min_range_m, max_range=model.max_range_m,
                   rot_start=q0[None].contiguous(), trans_start=T0[:3, 3][None].contiguous(),
                   rot_end=q1[None].contiguous(), trans_end=T1[:3, 3][None].contiguous(),
                   eps=(float(beam_eps[0]), float(beam_eps[1])), tiles=tiles.to(device, dtype),
                   channel_f=torch.stack((offset * model.sign, elevation), -1).contiguous(),
                   elevation_range=(float(el64.min()), float(el64.max())))

    @classmethod
    def from_capture(
        cls,
        lidar: Any,  # nurec_usd.capture.model.Lidar
        T_world_rig_start: torch.Tensor,  # [4, 4] rig pose when the sweep starts
        T_world_rig_end: torch.Tensor | None = None,  # [4, 4] ... when it ends (one revolution later)
        band_rows: int | str = "auto",
        beam_eps: tuple[float, float] | None = None,
    ) -> "LidarBatch":
        """From a capture's ``Lidar`` (its channel table and mounting) and the rig's poses over the sweep."""
        T_rig_lidar = torch.as_tensor(lidar.T_rig_lidar, dtype=T_world_rig_start.dtype, device=T_world_rig_start.device)
        end = T_world_rig_start if T_world_rig_end is None else T_world_rig_end
        T0 = invert_transform(T_world_rig_start @ T_rig_lidar)
        T1 = invert_transform(end.to(T_rig_lidar) @ T_rig_lidar)
        return cls.from_model(lidar.sensor_model(dtype=torch.float64), T0, T1, band_rows=band_rows, beam_eps=beam_eps)

    @classmethod
    def for_sweep(cls, capture: Any, lidar_id: str, index: int, dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None, band_rows: int | str = "auto",
                  beam_eps: tuple[float, float] | None = None) -> "LidarBatch":
        """Sweep ``index`` of lidar ``lidar_id`` of a ``Capture``, with the rig poses at its start and end."""
        if lidar_id not in capture.lidars:
            raise ValueError(f"lidar_id {lidar_id!r} is not a lidar of the capture; known: {sorted(capture.lidars)}")
        lidar = capture.lidars[lidar_id]
        if not 0 <= index < len(lidar.sweeps):
            raise ValueError(f"index {index} is out of range for lidar {lidar_id!r} with {len(lidar.sweeps)} sweeps")
        rig = capture.rig_trajectory()
        t0 = float(capture.seconds(lidar.sweeps[index].timestamp_us))
        T = rig.at(torch.tensor([t0, t0 + 1.0 / lidar.scan_rate_hz], dtype=torch.float64))
        batch = cls.from_capture(lidar, T[0], T[1], band_rows=band_rows, beam_eps=beam_eps)
        return batch.to(dtype=dtype, device=device)

    def with_poses(self, T_lidar_world_start: torch.Tensor,  # [4, 4]
                   T_lidar_world_end: torch.Tensor | None = None,  # [4, 4]; None: the lidar does not move
                   ) -> "LidarBatch":
        """Another sweep of the same lidar: new poses, the same channel table and tiles (nothing
        is rebuilt on the host, and the poses stay on the device: use it once per training step)."""
        T0 = T_lidar_world_start.to(device=self.device, dtype=self.dtype)
        T1 = T0 if T_lidar_world_end is None else T_lidar_world_end.to(device=self.device, dtype=self.dtype)
        if T0.shape != (4, 4) or T1.shape != (4, 4):
            raise ValueError(f"T_lidar_world_start and _end must have shape (4, 4), got {tuple(T0.shape)} "
                             f"and {tuple(T1.shape)}")
        q0, q1 = matrix_to_quat(T0[:3, :3]), matrix_to_quat(T1[:3, :3])
        q1 = torch.where((q0 * q1).sum() < 0, -q1, q1)
        return dataclasses.replace(self, rot_start=q0[None].contiguous(), trans_start=T0[:3, 3][None].contiguous(),
                                   rot_end=q1[None].contiguous(), trans_end=T1[:3, 3][None].contiguous())

    def to(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> "LidarBatch":
        """The same sweep with its float tensors in ``dtype`` and everything on ``device``."""
        dtype = dtype or self.dtype
        device = device if device is not None else self.device

        def f(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype).contiguous()

        return LidarBatch(f(self.elevation), f(self.azimuth_offset), self.columns, self.sign, self.start_azimuth,
                          self.scan_rate_hz, self.min_range, self.max_range, f(self.rot_start), f(self.trans_start),
                          f(self.rot_end), f(self.trans_end), self.eps, self.tiles.to(device, dtype),
                          f(self.channel_f), self.elevation_range)

    def ray_directions(self) -> torch.Tensor:
        """Unit direction of every ray in the lidar frame.  Returns: [C, W, 3]"""
        k = torch.arange(self.columns, dtype=torch.float64, device=self.device)
        az = self.start_azimuth + self.sign * 2 * math.pi * k / self.columns
        az = az[None, :] + self.azimuth_offset.double()[:, None]
        el = self.elevation.double()[:, None].expand_as(az)
        d = torch.stack((el.cos() * az.cos(), el.cos() * az.sin(), el.sin()), -1)
        return d.to(self.dtype)

    def firing_fractions(self) -> torch.Tensor:
        """Sweep fraction k / W at which each column fires (0: sweep start, 1: its end).  Returns: [W]"""
        return torch.arange(self.columns, dtype=self.dtype, device=self.device) / self.columns


@dataclass
class LidarRenderSettings:
    """Options of ``render_lidar``."""

    capacity: int | None = None  # (tile, Gaussian) intersections buffer; None: sized exactly (one host sync)
    min_hit: float = 1e-3  # rays with a smaller hit probability report range and intensity 0
    chunk: int | None = None  # Gaussians per work item; None: a fraction of the mean tile's list (CHUNK_OF_MEAN)


@dataclass
class LidarRender:
    """What ``render_lidar`` returns. Per-ray outputs are [C, W] in the lidar's channel order."""

    range: torch.Tensor  # [C, W] expected range of the return: range_sum / hit_prob (0 where hit_prob <= min_hit)
    hit_prob: torch.Tensor  # [C, W] 1 - final transmittance: probability of a return
    intensity: torch.Tensor  # [C, W] expected intensity of the return: intensity_sum / hit_prob
    median_range: torch.Tensor  # [C, W] range where 1 - T reaches 0.5 (a first-surface return); 0: none
    range_sum: torch.Tensor  # [C, W] sum_i w_i range_i
    intensity_sum: torch.Tensor  # [C, W] sum_i w_i intensity_i
    angles: torch.Tensor  # [N, 2] (sweep azimuth, elevation) of each Gaussian, rad (no gradient)
    extents: torch.Tensor  # [N, 2] half-widths of each splat in angle space; 0 where culled
    intersections: torch.Tensor  # [1] int32 on the device: (tile, Gaussian) pairs wanted
    overflow: torch.Tensor  # [1] bool on the device: more intersections than the capacity
    tile_ranges: torch.Tensor  # [T, 2] int32: each tile's slice of the sorted list (work statistics)
    work_items: torch.Tensor  # [I, 4] int32: (tile, start, end, chunk) of each rasterizer work item (rows < num_items)
    num_items: torch.Tensor  # [1] int32 on the device: valid rows of work_items


@functools.lru_cache(maxsize=None)  # looked up three times per forward + backward: host time (read only)
def _kernels(dtype: torch.dtype) -> dict:
    """The lidar kernels for the Gaussians' float type, by role."""
    if dtype == torch.float32:
        s = "f32"
    elif dtype == torch.float64:
        s = "f64"
    else:
        raise ValueError(f"Gaussians must be float32 or float64, got {dtype}")
    return {"project": getattr(kproj, f"project_lidar_{s}"), "project_bwd": getattr(kproj, f"project_lidar_backward_{s}"),
            "project_bwd_moving": getattr(kproj, f"project_lidar_backward_moving_{s}"),
            "count": getattr(kbin, f"count_tiles_{s}"),
            "emit": getattr(kbin, f"emit_keys_{s}"), "masks": getattr(kbin, f"ray_masks_{s}"),
            "fwd": getattr(kraster, f"lidar_forward_{s}"),
            "merge": getattr(kraster, f"lidar_merge_{s}"), "out_grads": getattr(kraster, f"lidar_output_grads_{s}"),
            "bwd": getattr(kraster, f"lidar_backward_{s}")}


def project_lidar_splats(means: torch.Tensor, quats: torch.Tensor, scales: torch.Tensor, opacities: torch.Tensor,
                        intensities: torch.Tensor, lidar: LidarBatch,
                        motion: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Queue the projection (``warp_kernels.lidar_project.project_lidar``): splats [N, 8] and extents [N, 2]."""
    n = means.shape[0]
    quats = aligned16(quats)  # read 16 bytes at a time
    splats = torch.empty(n, 8, dtype=means.dtype, device=means.device)  # the projection writes every entry
    extents = torch.empty(n, 2, dtype=means.dtype, device=means.device)
    launch(_kernels(means.dtype)["project"], n,
           _project_args(means, quats, scales, opacities, intensities, motion, lidar), [splats, extents],
           device=warp_device(means.device))
    return splats, extents


def _project_args(means, quats, scales, opacities, intensities, motion, lidar: LidarBatch) -> list:
    """The projection kernel's inputs (see ``warp_kernels.lidar_project.project_lidar``; motion None: none)."""
    lo, hi = lidar.elevation_clamp
    return [means, quats, scales, opacities, intensities, motion, lidar.rot_start, lidar.trans_start, lidar.rot_end,
            lidar.trans_end, float(lidar.sign), float(lidar.start_azimuth), float(lidar.min_range),
            float(lidar.max_range), float(lo), float(hi), float(lidar.elevation_range[0]),
            float(lidar.elevation_range[1]), float(lidar.eps[0]), float(lidar.eps[1])]


@dataclass
class LidarBins:
    """Projected, binned and sorted Gaussians of one sweep, cut into work items (``bin_lidar``)."""

    splats: torch.Tensor  # [N, 8] (alpha, elev, conic a, b, c, range, opacity, intensity); zeros where culled
    extents: torch.Tensor  # [N, 2] half-widths in (alpha, elev); 0 where culled
    ids: torch.Tensor  # [2 * capacity] int32: Gaussian indices sorted by (tile, range); the first `total` valid
    tile_ranges: torch.Tensor  # [T, 2] int32: each tile's [start, end) in ids
    ray_masks: torch.Tensor  # [capacity, WARPS] int32: word w of sorted entry k, bit l = lane l of the tile's
    # CUDA warp w may see it
    items: torch.Tensor  # [I, 4] int32: (tile, start, end, chunk index) of each work item
    tile_items: torch.Tensor  # [T, 2] int32: (first item, number of items) of each tile
    num_items: torch.Tensor  # [1] int32: valid rows of items
    order: torch.Tensor  # [I] int32: the rasterizer's launch order (block slot -> item); the first num_items valid
    chunk: torch.Tensor  # [1] int32: the chunk length L used
    total: torch.Tensor  # [1] int32: intersections wanted
    overflow: torch.Tensor  # [1] bool: more intersections wanted than the capacity
    capacity: int


def bin_lidar(
    means: torch.Tensor,  # [N, 3]
    quats: torch.Tensor,  # [N, 4]
    scales: torch.Tensor,  # [N, 3]
    opacities: torch.Tensor,  # [N]
    intensities: torch.Tensor,  # [N]
    lidar: LidarBatch,  # of the Gaussians' dtype and device
    settings: LidarRenderSettings,
    projected: tuple[torch.Tensor, torch.Tensor] | None = None,
    grad_buffer: torch.Tensor | None = None,
    motion: torch.Tensor | None = None,  # [N, 3] world, over the sweep (see render_lidar)
) -> LidarBins:
    """The first half of ``render_lidar`` (no gradient): projection, binning, sort, work items.

    Also useful alone for work statistics (``tile_work``) without rasterizing. ``projected``:
    the projection's (splats, extents) when already queued (``project_lidar_splats``).
    ``grad_buffer``: a tensor of the Gaussians' dtype (``render_lidar``'s backward buffer for the
    records' gradients) that the ray-mask pass zeroes on its way, 16 bytes at a time (a multiple of
    four elements, 16-byte aligned).
    """
    dtype, device = means.dtype, means.device
    k = _kernels(dtype)
    n = means.shape[0]
    W = lidar.columns
    tiles = lidar.tiles
    T = tiles.num_tiles
    band_f = tiles.band_f
    rb = lidar.range_bits

    if projected is None:
        projected = project_lidar_splats(means, quats, scales, opacities, intensities, lidar, motion)
    splats, extents = projected
    wdev = warp_device(device)
    counts = torch.empty(n, dtype=torch.int32, device=device)
    offsets = torch.empty(n, dtype=torch.int32, device=device)
    # No fills where a kernel writes anyway (each is host time): the key emission writes the
    # total and pads the keys past it, the tile count zeroes the tile ranges; only the sorted
    # entries below the total, and the work items below their count, are ever read.
    total = torch.empty(1, dtype=torch.int32, device=device)
    ranges = torch.empty(T, 2, dtype=torch.int32, device=device)
    if not n:  # (the kernels that write these do not run)
        total.zero_()
        ranges.zero_()
    launch(k["count"], n, [splats, extents, tiles.band_i, band_f, W], [counts, ranges], device=wdev)
    if n:
        torch.cumsum(counts, 0, dtype=torch.int32, out=offsets)
    capacity = settings.capacity
    if capacity is None:  # exact size: the one host synchronisation of this mode
        capacity = int(offsets[-1].item()) if n else 0
    capacity = max(int(capacity), 1)
    fixed_chunk = int(settings.chunk or 0)
    chunk_of_mean = kbin.CHUNK_OF_MEAN["cuda" if device.type == "cuda" else "cpu"]
    max_items = kbin.max_work_items(T, capacity, fixed_chunk, chunk_of_mean)
    keys = torch.empty(2 * capacity, dtype=torch.int32, device=device)
    ids = torch.empty(2 * capacity, dtype=torch.int32, device=device)
    masks = torch.empty(capacity, kbin.WARPS, dtype=torch.int32, device=device)
    item_counts = torch.empty(1 + kbin.ORDER_BUCKETS, T, dtype=torch.int32, device=device)
    item_offsets = torch.empty(1 + kbin.ORDER_BUCKETS, T, dtype=torch.int32, device=device)
    chunk = torch.empty(1, dtype=torch.int32, device=device)
    items = torch.empty(max_items, 4, dtype=torch.int32, device=device)
    tile_items = torch.empty(T, 2, dtype=torch.int32, device=device)
    num_items = torch.empty(1, dtype=torch.int32, device=device)
    if n:
        launch(k["emit"], n, [splats, extents, tiles.band_i, band_f, W, offsets, counts, rb,
                              float(1 << rb) / lidar.max_range, capacity], [keys, ids, total], device=wdev)
    wp.utils.radix_sort_pairs(warp_view(keys), warp_view(ids), capacity, end_bit=31)
    overflow = torch.empty(1, dtype=torch.bool, device=device)
    zeroed = grad_buffer.view(-1, 4) if grad_buffer is not None else torch.empty(0, 4, dtype=dtype, device=device)
    launch(k["masks"], capacity, [keys, ids, total, capacity, rb, splats, extents, tiles.tile_band,
                                   tiles.band_i, tiles.slot_f, W], [masks.view(-1), ranges, overflow, zeroed],
           device=wdev)
    launch(kbin.count_items, T, [ranges, total, capacity, fixed_chunk, *chunk_of_mean], [chunk, item_counts],
           device=wdev)
    torch.cumsum(item_counts, 1, dtype=torch.int32, out=item_offsets)
    order = torch.empty(max_items, dtype=torch.int32, device=device)
    launch(kbin.emit_items, T, [ranges, chunk, item_offsets, item_counts], [items, tile_items, num_items, order],
           device=wdev)
    return LidarBins(splats, extents, ids, ranges, masks, items, tile_items, num_items, order, chunk, total,
                     overflow, capacity)


def tile_work(lidar: LidarBatch, tile_ranges: torch.Tensor,  # [T, 2] int32
              work_items: torch.Tensor | None = None,  # [I, 4] int32
              num_items: torch.Tensor | None = None,  # [1] int32
              ) -> dict[str, float]:
    """Work statistics in Gaussian-ray evaluations (synchronises with the device: not for a hot loop).

    A tile's work is its list length times its rays; a work item's, its chunk's length times
    the tile's rays. Returns the mean and the maximum tile work, ``max_tile_ratio`` (busiest
    tile / mean tile), and with work items ``max_item_ratio`` (busiest work item / mean tile) and
    ``items``.
    """
    tiles = lidar.tiles
    rays = torch.zeros(tiles.num_tiles, dtype=torch.float64)
    for b, (first_slot, rows, cols) in enumerate(tiles.bands):
        first_tile = int(tiles.band_i[b, 3])
        n = -(-lidar.columns // cols)
        widths = torch.clamp(lidar.columns - torch.arange(n) * cols, max=cols)
        rays[first_tile:first_tile + n] = rows * widths.double()
    length = (tile_ranges[:, 1] - tile_ranges[:, 0]).double().cpu()
    work = length * rays
    out = {"mean_tile": float(work.mean()), "max_tile": float(work.max()),
           "max_tile_ratio": float(work.max() / work.mean()) if work.sum() > 0 else 0.0}
    if work_items is not None and num_items is not None:
        it = work_items[: int(num_items.item())].cpu().long()
        item_work = (it[:, 2] - it[:, 1]).double() * rays[it[:, 0]]
        out["items"] = int(it.shape[0])
        out["max_item"] = float(item_work.max()) if len(it) else 0.0
        out["max_item_ratio"] = out["max_item"] / out["mean_tile"] if out["mean_tile"] > 0 else 0.0
    return out


class _RenderLidar(torch.autograd.Function):
    @staticmethod
    def forward(ctx, means, quats, scales, opacities, intensities, lidar: LidarBatch, settings: LidarRenderSettings,
                splats: torch.Tensor, extents: torch.Tensor, motion: torch.Tensor | None):
        dtype, device = means.dtype, means.device
        k = _kernels(dtype)
        C, W = lidar.channels, lidar.columns
        tiles = lidar.tiles
        channel_f = lidar.channel_f
        # the backward's buffer for the records' gradients, zeroed by the binning (no fill of its own)
        ctx.g_splats = torch.empty_like(splats) if any(ctx.needs_input_grad[:5]) else None
        bins = bin_lidar(means, quats, scales, opacities, intensities, lidar, settings, projected=(splats, extents),
                         grad_buffer=ctx.g_splats)
        values, ranges, items, tile_items, num_items, total, overflow = (
            bins.ids, bins.tile_ranges, bins.items, bins.tile_items, bins.num_items, bins.total, bins.overflow)
        max_items = items.shape[0]
        chunk_P = torch.empty(max_items, TILE_RAYS, dtype=dtype, device=device)
        part_T = torch.empty(max_items, TILE_RAYS, dtype=dtype, device=device)
        part_range = torch.empty(max_items, TILE_RAYS, dtype=dtype, device=device)
        part_int = torch.empty(max_items, TILE_RAYS, dtype=dtype, device=device)
        part_last = torch.empty(max_items, TILE_RAYS, dtype=torch.int32, device=device)
        median_id = torch.full((C, W), -1, dtype=torch.int32, device=device)
        range_sum = torch.empty(C, W, dtype=dtype, device=device)
        int_sum = torch.empty(C, W, dtype=dtype, device=device)
        hit = torch.empty(C, W, dtype=dtype, device=device)
        T_final = torch.empty(C, W, dtype=dtype, device=device)
        median = torch.empty(C, W, dtype=dtype, device=device)
        range_, intensity = torch.empty(C, W, dtype=dtype, device=device), torch.empty(C, W, dtype=dtype, device=device)
        wdev = warp_device(device)
        layout = [bins.order, items, num_items, tiles.tile_band, tiles.band_i, tiles.channel_order, channel_f, W,
                  values, splats, bins.ray_masks]
        blocks = [max_items * kraster.SPLIT]  # SPLIT blocks of BLOCK_RAYS rays per work item
        parts = [chunk_P, part_T, part_range, part_int, part_last, median_id]
        for phase in (0, 1):
            launch(k["fwd"], blocks, [phase] + layout, parts, device=wdev, block_dim=kraster.BLOCK_RAYS, tiled=True)
        launch(k["merge"], (C, W), [tile_items, tiles.channel_rank, tiles.slot_band, tiles.band_i, part_T,
                                    part_range, part_int, median_id, splats, float(settings.min_hit)],
               [range_sum, int_sum, hit, T_final, median, range_, intensity], device=wdev, block_dim=TILE_RAYS)

        ctx.save_for_backward(means, quats, scales, opacities, intensities, splats, extents, values, bins.ray_masks,
                              bins.order, items, num_items, tile_items, part_T, part_range, part_int, part_last,
                              median_id, T_final, range_sum, int_sum)
        ctx.lidar, ctx.channel_f, ctx.min_hit = lidar, channel_f, float(settings.min_hit)
        ctx.motion = motion  # no gradient (render_lidar detaches it): kept on ctx, not saved
        ctx.mark_non_differentiable(total, overflow, ranges, items, num_items)
        # Outputs without a gradient arrive as None, not as zeros: autograd would otherwise fill
        # one tensor per output.
        ctx.set_materialize_grads(False)
        return range_sum, int_sum, hit, median, range_, intensity, total, overflow, ranges, items, num_items

    @staticmethod
    def backward(ctx, g_range_sum, g_int_sum, g_hit, g_median, g_range, g_intensity, *_):
        (means, quats, scales, opacities, intensities, splats, extents, values, ray_masks, order, items, num_items,
         tile_items, part_T, part_range, part_int, part_last, median_id, T_final, range_sum,
         int_sum) = ctx.saved_tensors
        lidar, channel_f = ctx.lidar, ctx.channel_f
        dtype, device = means.dtype, means.device
        k = _kernels(dtype)
        C, W = lidar.channels, lidar.columns
        tiles = lidar.tiles
        wdev = warp_device(device)
        # dL / d (range_sum, intensity_sum, hit) in full (through the expected range and
        # intensity too), and the median range's gradient on its Gaussian's record
        grads = [torch.empty(C, W, dtype=dtype, device=device) for _ in range(3)]
        g_splats, ctx.g_splats = ctx.g_splats, None  # zeroed in the forward; a second backward zeroes its own
        if g_splats is None:
            g_splats = torch.zeros_like(splats)
        given = [None if g is None else g.contiguous() for g in (g_range_sum, g_int_sum, g_hit, g_median, g_range,
                                                                    g_intensity)]
        launch(k["out_grads"], (C, W), [range_sum, int_sum, T_final, median_id, ctx.min_hit, *given],
               [*grads, g_splats.view(-1)], device=wdev)
        n = means.shape[0]
        # the projection's backward writes every Gaussian's gradient
        g_means, g_quats, g_scales = torch.empty_like(means), torch.empty_like(quats), torch.empty_like(scales)
        g_opacities, g_intensities = torch.empty_like(opacities), torch.empty_like(intensities)
        launch(k["bwd"], [items.shape[0] * kraster.SPLIT],
               [order, items, num_items, tiles.tile_band, tiles.band_i, tiles.channel_order, channel_f, W, values,
                splats, ray_masks, tile_items, part_T, part_range, part_int, part_last, T_final, *grads],
               [g_splats.view(-1)], device=wdev, block_dim=kraster.BLOCK_RAYS, tiled=True)
        if n:  # the projection's hand-written backward, fed the records' gradients
            lo, hi = lidar.elevation_clamp
            launch(k["project_bwd" if ctx.motion is None else "project_bwd_moving"], n,
                   [means, quats, scales, ctx.motion, lidar.rot_start, lidar.trans_start, lidar.rot_end,
                    lidar.trans_end, float(lidar.sign), float(lidar.start_azimuth), float(lo), float(hi),
                    float(lidar.eps[0]), float(lidar.eps[1]), extents, g_splats],
                   [g_means, g_quats, g_scales, g_opacities, g_intensities], device=wdev,
                   block_dim=kproj.BACKWARD_BLOCK)
        return g_means, g_quats, g_scales, g_opacities, g_intensities, None, None, None, None, None


_apply_render_lidar = direct_apply(_RenderLidar)


def render_lidar(
    means: torch.Tensor,  # [N, 3] world, placed for the sweep
    quats: torch.Tensor,  # [N, 4] (w, x, y, z), any norm
    scales: torch.Tensor,  # [N, 3] linear standard deviations
    opacities: torch.Tensor,  # [N] in [0, 1]
    intensities: torch.Tensor,  # [N] return intensity of each Gaussian (any activation is the caller's)
    lidar: LidarBatch,
    settings: LidarRenderSettings | None = None,
    motion: torch.Tensor | None = None,  # [N, 3] world: each Gaussian's position at the sweep's end minus at its start
) -> LidarRender:
    """Render one lidar sweep; differentiable in every Gaussian parameter.

    The Gaussians are placed for the sweep's middle. With ``motion`` (moving actors' Gaussians;
    zeros for the static ones) each Gaussian is seen at ``mean + (a - 1/2) motion`` when its
    column fires at sweep fraction ``a``: a straight line through the sweep. The motion gets
    no gradient. Without it every Gaussian stays where it is placed.

    With ``settings.capacity`` set there is no host synchronisation: check ``overflow``
    (on the device) when convenient; an overflowing render drops the intersections past
    the capacity.
    """
    settings = settings or LidarRenderSettings()
    dtype, device = means.dtype, means.device
    n = means.shape[0]
    if means.dim() != 2 or means.shape[1] != 3:
        raise ValueError(f"means must have shape (N, 3), got {tuple(means.shape)}")
    for name, t, shape in (("quats", quats, (n, 4)), ("scales", scales, (n, 3)), ("opacities", opacities, (n,)),
                           ("intensities", intensities, (n,))):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
        if t.dtype != dtype or t.device != device:
            raise ValueError(f"{name} must be {dtype} on {device} like means, got {t.dtype} on {t.device}")
    if motion is not None:
        if tuple(motion.shape) != (n, 3):
            raise ValueError(f"motion must have shape {(n, 3)}, got {tuple(motion.shape)}")
        if motion.dtype != dtype or motion.device != device:
            raise ValueError(f"motion must be {dtype} on {device} like means, got {motion.dtype} on {motion.device}")
        motion = motion.detach().contiguous()
    if lidar.device != device:
        raise ValueError(f"lidar is on {lidar.device} but the Gaussians are on {device}: use lidar.to(device=...)")
    if settings.capacity is not None and settings.capacity < 1:
        raise ValueError(f"settings.capacity must be a positive int or None, got {settings.capacity}")
    if settings.chunk is not None and settings.chunk < 1:
        raise ValueError(f"settings.chunk must be a positive int or None, got {settings.chunk}")
    lid = lidar.to(dtype) if lidar.dtype != dtype else lidar  # (a batch made in the Gaussians' dtype skips this)
    gaussians = (means.contiguous(), aligned16(quats.contiguous()), scales.contiguous(), opacities.contiguous(),
                 intensities.contiguous())
    # the projection first, ahead of the autograd node: the device starts on it while the host sets the node
    # up (a call's first launch waits on all its host time before it)
    splats, extents = project_lidar_splats(*gaussians, lid, motion)
    (range_sum, int_sum, hit, median, range_, intensity, total, overflow, ranges, items,
     num_items) = _apply_render_lidar(*gaussians, lid, settings, splats, extents, motion)
    return LidarRender(range=range_, hit_prob=hit, intensity=intensity, median_range=median,
                       range_sum=range_sum, intensity_sum=int_sum, angles=splats[:, :2], extents=extents,
                       intersections=total, overflow=overflow, tile_ranges=ranges, work_items=items,
                       num_items=num_items)
