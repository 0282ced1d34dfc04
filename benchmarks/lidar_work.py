"""Where the lidar rasterizer's work goes: (ray, Gaussian) pairs on the benchmark's street.

    python benchmarks/lidar_work.py [--device cuda:0] [--sizes 1000000,5000000]
    python benchmarks/lidar_work.py --device cpu --small        # seconds

Bins the ``raster-lidar`` street (``benchmarks/raster_lidar.py``) with the renderer's own
kernels, cutting lists as on CUDA (``lidar_binning.chunk_length``) on any
device, then evaluates every (ray, Gaussian) pair of every tile densely in torch (float64)
and counts, per ray:

* list: the tile's whole list (what a tile-per-block walk without masks would evaluate);
* marked: pairs whose warp is marked by the warp masks (the rasterizer's candidates);
* hit: pairs where alpha >= ALPHA_MIN (the ray really meets the splat);
* needed: hits before the ray stops (T <= T_MIN): what a perfect walk evaluates;
* forward: marked pairs before the last stop among the warp's 32 rays (a CUDA warp walks
  until all its rays have stopped), as the forward kernel evaluates them;
* transmittance: the pass over every chunk but the last of its tile, each chunk on its own
  until its rays stop within it, and the part of it in warps whose rays had all stopped in
  the chunks before (work a pass that knew the chunks in front could skip).

Counts are of evaluations by lanes (a warp evaluating one entry counts 32), not times.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks.raster_lidar import add_street_options  # noqa: E402
from nurec_usd.render.lidar import LidarBatch, LidarRenderSettings, bin_lidar, lane_rays  # noqa: E402
from warp_kernels.compositing import ALPHA_MAX, ALPHA_MIN, T_MIN  # noqa: E402
from warp_kernels.lidar_binning import CHUNK_OF_MEAN, TILE_RAYS, WARPS, chunk_length  # noqa: E402

KEYS = ("list", "marked", "hit", "needed", "forward", "transmittance", "transmittance_after_stop")


def _first_stop(P: torch.Tensor) -> torch.Tensor:  # [L, R] running products -> [R]
    """Index of the first entry whose running product is <= T_MIN (the walk stops before it); L if none."""
    stops = P <= T_MIN
    return torch.where(stops.any(0), stops.double().argmax(0), torch.full_like(stops[0], P.shape[0], dtype=torch.long))


def work_counts(params: list, lidar: LidarBatch, chunk: int | None = None) -> dict:
    """Pair counts (see the module docstring) of one sweep, summed over rays, and ``rays``, ``items``,
    ``chunk``. ``chunk``: the work items' length; None: CUDA's rule (``CHUNK_OF_MEAN``)."""
    device = params[0].device
    # the intersections, to size the buffer and set L as CUDA would: binning alone (no raster)
    isect = int(bin_lidar(*params, lidar, LidarRenderSettings()).total)
    tiles = lidar.tiles
    if chunk is None:
        chunk = chunk_length(isect, tiles.num_tiles, CHUNK_OF_MEAN["cuda"])
    bins = bin_lidar(*params, lidar, LidarRenderSettings(capacity=isect + 1, chunk=chunk))
    ranges = bins.tile_ranges.cpu()
    items = bins.items[: int(bins.num_items)].cpu()
    channel_f = lidar.channel_f.double().cpu()
    order = tiles.channel_order.cpu().long()
    counts = dict.fromkeys(KEYS, 0)
    counts.update(rays=0, items=int(items.shape[0]), chunk=chunk)
    warp = torch.arange(TILE_RAYS, device=device) // 32  # [R] the CUDA warp of each lane
    for t in range(tiles.num_tiles):
        s, e = int(ranges[t, 0]), int(ranges[t, 1])
        if e <= s:
            continue
        first_slot, rows, cols, first_tile = (int(v) for v in tiles.band_i[int(tiles.tile_band[t])])
        row, col = lane_rays(cols)
        k = (t - first_tile) * cols + col
        ray = ((row < rows) & (k < lidar.columns)).to(device)  # [R] lanes with a ray
        ch = order[first_slot + row.clamp(max=rows - 1)]
        az = torch.remainder(2 * math.pi * k.double() / lidar.columns + channel_f[ch, 0], 2 * math.pi).to(device)
        el = channel_f[ch, 1].to(device)
        rec = bins.splats[bins.ids[s:e].long()].double()  # [L, 8]
        da = torch.remainder(rec[:, 0:1] - az[None, :] + math.pi, 2 * math.pi) - math.pi  # [L, R]
        de = rec[:, 1:2] - el[None, :]
        sigma = 0.5 * (rec[:, 2:3] * da * da + rec[:, 4:5] * de * de) + rec[:, 3:4] * da * de
        alpha = torch.clamp(rec[:, 6:7] * torch.exp(-sigma), max=ALPHA_MAX)
        hit = (sigma >= 0) & (alpha >= ALPHA_MIN) & ray[None, :]
        one_minus = torch.where(hit, 1 - alpha, torch.ones_like(alpha))
        stop = torch.where(ray, _first_stop(torch.cumprod(one_minus, 0)), torch.zeros_like(warp))  # [R]
        idx = torch.arange(e - s, device=device)[:, None]
        marked = ((bins.warp_masks[s:e].long()[:, None] >> warp[None, :]) & 1).bool() & ray[None, :]  # [L, R]
        warp_stop = stop.view(WARPS, 32).amax(1)[warp]  # [R] the warp walks until its last ray stops
        counts["list"] += (e - s) * int(ray.sum())
        counts["marked"] += int(marked.sum())
        counts["hit"] += int(hit.sum())
        counts["needed"] += int((hit & (idx < stop[None, :])).sum())
        counts["forward"] += int((marked & (idx < warp_stop[None, :])).sum())
        counts["rays"] += int(ray.sum())
        tile_items = items[items[:, 0] == t]
        for m in range(tile_items.shape[0] - 1):  # the last chunk of a tile has no transmittance pass
            cs, ce = int(tile_items[m, 1]) - s, int(tile_items[m, 2]) - s
            # each lane stops within the chunk once its own product is <= T_MIN (+1: that entry was evaluated)
            local = torch.clamp(_first_stop(torch.cumprod(one_minus[cs:ce], 0)) + 1, max=ce - cs)
            lane_end = torch.where(ray, local, torch.zeros_like(local)).view(WARPS, 32).amax(1)[warp]
            evaluated = marked[cs:ce] & (idx[: ce - cs] < lane_end[None, :])
            stopped_warp = (stop <= cs).view(WARPS, 32).all(1)[warp]  # all the warp's rays stopped before
            counts["transmittance"] += int(evaluated.sum())
            counts["transmittance_after_stop"] += int((evaluated & stopped_warp[None, :]).sum())
    return counts


def main() -> None:
    from render.test_lidar_render import street_lidar, street_scene

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_street_options(ap)
    ap.add_argument("--small", action="store_true", help="smoke mode: 32 x 512 rays, 20k Gaussians")
    args = ap.parse_args()
    if args.small:
        args.sizes, args.channels, args.columns = "20000", 32, 512
    device = torch.device(args.device)
    print(f"(ray, Gaussian) pairs per ray, {args.channels} x {args.columns} rays, lists cut as on CUDA")
    print("| Gaussians | chunk L | items | " + " | ".join(KEYS) + " |")
    print("|" + "---|" * (3 + len(KEYS)))
    for n in [int(v) for v in args.sizes.split(",")]:
        lidar = street_lidar(args.channels, args.columns, device=device)
        c = work_counts([p.to(device) for p in street_scene(n, seed=0)], lidar)
        print(f"| {n:,} | {c['chunk']:,} | {c['items']:,} | "
              + " | ".join(f"{c[key] / c['rays']:.1f}" for key in KEYS) + " |", flush=True)


if __name__ == "__main__":
    main()
