"""Where the lidar rasterizer's work goes: (ray, Gaussian) pairs on the benchmark's street.

    python benchmarks/lidar_work.py [--device cuda:0] [--sizes 1000000,5000000]
    python benchmarks/lidar_work.py --device cpu --small        # seconds

Bins the ``raster-lidar`` street (``benchmarks/raster_lidar.py``) with the renderer's own
kernels, cutting lists as on CUDA (``lidar_binning.chunk_length``) on any
device, then evaluates every (ray, Gaussian) pair of every tile densely in torch (float64)
and counts, per ray:

* list: the tile's whole list (what a tile-per-block walk without masks would evaluate);
* marked: pairs whose warp's ray mask is not empty (what a warp that walks each such entry
  on all 32 rays, as the kernels did before the per-thread walks, would evaluate);
* masked: pairs whose own ray's bit is set in the ray masks (the candidates of the three
  passes' per-thread walks; never fewer than the hits: ``missed`` counts hits without it, 0);
* hit: pairs where alpha >= ALPHA_MIN (the ray really meets the splat);
* needed: hits before the ray stops (T <= T_MIN): what a perfect walk evaluates;
* forward: the forward's steps. Each thread walks its own masked entries up to its stop,
  32 entries (a window) at a time, and a CUDA warp takes as many steps in a window as its
  busiest thread: the sum over windows of that maximum, times 32 lanes;
* forward_pairs: the pairs the forward's threads evaluate in those steps (their masked entries
  up to and with their stop): forward_pairs / forward is the share of a warp's lanes at work;
* forward_batch: the forward's steps if a warp walked a whole batch (BATCH entries) as one window:
  how much wider windows alone would give;
* transmittance: the same for the walks that only multiply (1 - alpha), in the forward's first
  launch: every chunk but the first and the last of its tile (a first chunk's product comes from
  its composited walk), each chunk on its own until its rays stop within it, and the part of it in
  warps whose rays had all stopped in the chunks before (work a pass that knew the chunks in front
  could skip);
* transmittance_two_waves: those walks with the rays that their tile's first chunk stopped already
  done (a ray-level skip that needs the first chunks finished: the walks in a launch of their own,
  or flags between blocks; each was timed on an H200, and was no faster or slower: the last wave of
  a launch of equal-length chunks sets its time; benchmarks/RESULTS.md, raster-lidar, twenty-first
  and twenty-second);
* forward_blocks, transmittance_blocks: the lane-steps for which the passes' blocks (the
  renderer's ``lidar_raster.BLOCK_WARPS`` warps each) hold their warps: a block lasts as long as
  its busiest warp, and its SM starts no other block until then.

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
from nurec_usd.ops.lidar import LidarBatch, LidarRenderSettings, bin_lidar, lane_rays  # noqa: E402
from warp_kernels.compositing import ALPHA_MAX, ALPHA_MIN, T_MIN  # noqa: E402
from warp_kernels.lidar_binning import BATCH, CHUNK_OF_MEAN, TILE_RAYS, WARPS, chunk_length  # noqa: E402
from warp_kernels.lidar_raster import BLOCK_WARPS  # noqa: E402

KEYS = ("list", "marked", "masked", "hit", "needed", "forward", "forward_pairs", "forward_batch", "forward_blocks",
        "transmittance", "transmittance_blocks", "transmittance_after_stop", "transmittance_two_waves", "missed")


def _first_stop(P: torch.Tensor) -> torch.Tensor:  # [L, R] running products -> [R]
    """Index of the first entry whose running product is <= T_MIN (the walk stops before it); L if none."""
    stops = P <= T_MIN
    return torch.where(stops.any(0), stops.double().argmax(0), torch.full_like(stops[0], P.shape[0], dtype=torch.long))


def _warp_steps(walk: torch.Tensor, window: int = 32) -> torch.Tensor:  # [L, R] bool -> [WARPS]
    """Lane-steps of per-thread walks in windows of ``window`` entries: per window, each CUDA warp steps as
    often as its busiest lane; summed over the windows, times 32 lanes."""
    pad = -walk.shape[0] % window
    w = torch.nn.functional.pad(walk, (0, 0, 0, pad)).view(-1, window, WARPS, 32)  # [windows, entry, warp, lane]
    return w.sum(1).amax(-1).sum(0) * 32


def _block_steps(steps: torch.Tensor) -> int:  # [WARPS] a work item's lane-steps per warp
    """Lane-steps for which the item's blocks of BLOCK_WARPS warps hold their warps: each block
    as long as its busiest warp."""
    return int(steps.view(-1, BLOCK_WARPS).amax(1).sum()) * BLOCK_WARPS


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
        words = bins.ray_masks[s:e].long() & 0xFFFFFFFF  # [L, WARPS]
        lane_words = words[:, warp]  # [L, R] each lane's warp's word
        masked = ((lane_words >> (torch.arange(TILE_RAYS, device=device) % 32)[None, :]) & 1).bool() & ray[None, :]
        marked = (lane_words != 0) & ray[None, :]
        counts["list"] += (e - s) * int(ray.sum())
        counts["marked"] += int(marked.sum())
        counts["masked"] += int(masked.sum())
        counts["missed"] += int((hit & ~masked).sum())
        counts["hit"] += int(hit.sum())
        counts["needed"] += int((hit & (idx < stop[None, :])).sum())
        counts["rays"] += int(ray.sum())
        tile_items = items[items[:, 0] == t]
        for m in range(tile_items.shape[0]):
            cs, ce = int(tile_items[m, 1]) - s, int(tile_items[m, 2]) - s
            # a thread evaluates its masked entries up to and with the one that stops it; windows start at the chunk's
            walk = masked[cs:ce] & (idx[cs:ce] <= stop[None, :])
            steps = _warp_steps(walk)  # [WARPS]
            counts["forward"] += int(steps.sum())
            counts["forward_pairs"] += int(walk.sum())
            counts["forward_batch"] += int(_warp_steps(walk, BATCH).sum())
            counts["forward_blocks"] += _block_steps(steps)
            if m == 0 or m == tile_items.shape[0] - 1:
                continue  # a tile's first chunk gives its product from its composited walk; its last has none
            # each lane stops within the chunk once its own product is <= T_MIN (with that entry)
            local = _first_stop(torch.cumprod(one_minus[cs:ce], 0))
            walk = masked[cs:ce] & (idx[: ce - cs] <= local[None, :])
            steps = _warp_steps(walk)  # [WARPS]
            stopped_warp = (stop <= cs).view(WARPS, 32).all(1)  # [WARPS] all the warp's rays stopped before
            counts["transmittance"] += int(steps.sum())
            counts["transmittance_blocks"] += _block_steps(steps)
            counts["transmittance_after_stop"] += int(steps[stopped_warp].sum())
            # the rays whose product fell to T_MIN within the tile's first chunk are done
            walk = walk & (stop >= int(tile_items[0, 2]) - s)[None, :]
            counts["transmittance_two_waves"] += int(_warp_steps(walk).sum())
    return counts


def main() -> None:
    from ops.test_lidar_render import street_lidar, street_scene

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
