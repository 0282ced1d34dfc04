"""How often a shorter lidar sort key ties: runs of equal (tile, quantised range) keys on the benchmark's street.

    python benchmarks/lidar_key_runs.py [--device cuda:0] [--sizes 1000000,5000000] [--range-bits 13,16,19]
    python benchmarks/lidar_key_runs.py --device cpu --small        # seconds

The binning sorts (tile, Gaussian) entries by a 32-bit key, ``tile << range_bits | quantised
range`` (``warp_kernels.lidar_binning``); entries with equal keys keep their Gaussian-index
order. A key of 24 bits (11 tile bits and 13 range bits on the benchmark's 2,048 tiles) would
sort in three radix passes instead of four, with a range quantum of max_range / 8192. This bins
the ``raster-lidar`` street (``benchmarks/raster_lidar.py``) with the renderer's kernels and, for
each number of range bits, cuts the renderer's sorted list into runs of equal keys: the entries
whose order the shorter key would leave to their index. Per size and range bits it prints the
quantum, the runs, the length of the run an entry sits in (mean, median, 99th percentile, longest)
and the share of entries in runs of more than 32. A fix-up that restored the exact order within
runs (each entry ranking itself among its run) would do about the mean run length in work per
entry.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks.raster_lidar import add_street_options  # noqa: E402
from nurec_usd.ops.lidar import LidarBatch, LidarBins, LidarRenderSettings, bin_lidar  # noqa: E402


def key_runs(bins: LidarBins, lidar: LidarBatch, range_bits: int) -> dict:
    """Runs of equal ``tile << range_bits | quantised range`` keys in the renderer's sorted list
    (``range_bits`` at most the renderer's own, so that the list is sorted by that key too)."""
    rb = lidar.range_bits
    if not 1 <= range_bits <= rb:
        raise ValueError(f"range bits must be 1 .. {rb} (the renderer's key) on this lidar, got {range_bits}")
    total = int(bins.total)
    ranges = bins.tile_ranges.long().cpu()  # [T, 2]
    tile = torch.repeat_interleave(torch.arange(ranges.shape[0]), ranges[:, 1] - ranges[:, 0])  # [total]
    rng = bins.splats[bins.ids[:total].long(), 5].cpu()  # [total] the entries' ranges, m
    # the renderer's quantised range (emit_keys, in the records' float type), then its top range_bits bits
    scale = torch.tensor(float(1 << rb) / lidar.max_range, dtype=rng.dtype)
    q = torch.clamp(torch.floor(rng * scale).long(), 0, (1 << rb) - 1) >> (rb - range_bits)
    key = tile * (1 << range_bits) + q
    starts = torch.nonzero(torch.cat([torch.ones(1, dtype=torch.bool), key[1:] != key[:-1]])).squeeze(1)
    runs = torch.diff(torch.cat([starts, torch.tensor([total])]))  # [runs] lengths
    sits_in = runs.repeat_interleave(runs).double()  # [total] the run length of each entry
    sample = sits_in[:: max(1, total // 1_000_000)]  # (quantile's input size limit)
    return {"entries": total, "runs": int(runs.numel()), "mean": float(sits_in.mean()),
            "median": float(sample.median()), "p99": float(torch.quantile(sample, 0.99)),
            "longest": int(runs.max()), "over_32": float((sits_in > 32).double().mean()),
            "quantum_mm": 1e3 * lidar.max_range / (1 << range_bits)}


def main() -> None:
    from ops.test_lidar_render import street_lidar, street_scene

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_street_options(ap)
    ap.add_argument("--range-bits", default="13,16,19", help="range bits of the keys to count, comma-separated")
    ap.add_argument("--small", action="store_true", help="smoke mode: 32 x 512 rays, 20k Gaussians")
    args = ap.parse_args()
    if args.small:
        args.sizes, args.channels, args.columns = "20000", 32, 512
    device = torch.device(args.device)
    print(f"runs of equal sort keys, {args.channels} x {args.columns} rays (an entry's run: the length of the run "
          "it sits in)")
    print("| Gaussians | range bits | quantum | entries | runs | entry's run: mean | median | 99% | longest | "
          "entries in runs > 32 |")
    print("|" + "---|" * 10)
    for n in [int(v) for v in args.sizes.split(",")]:
        lidar = street_lidar(args.channels, args.columns, device=device)
        bins = bin_lidar(*[p.to(device) for p in street_scene(n, seed=0)], lidar, LidarRenderSettings())
        for bits in [int(v) for v in args.range_bits.split(",")]:
            r = key_runs(bins, lidar, bits)
            print(f"| {n:,} | {bits} | {r['quantum_mm']:.2f} mm | {r['entries']:,} | {r['runs']:,} | "
                  f"{r['mean']:.1f} | {r['median']:.0f} | {r['p99']:.0f} | {r['longest']:,} | "
                  f"{100 * r['over_32']:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
