"""Check ``knn_distances`` on a CUDA device against its brute-force twin, and time it.

    python benchmarks/check_neighbors_cuda.py --device cuda:0

Exits 1 when the CUDA result differs from the twin (relative 1e-5, infinities exact).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import torch

    from benchmarks.timing import median_ms
    from nurec_usd.ops.neighbors import knn_distances
    from nurec_usd.ops.reference import knn_distances_reference

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    ok = True
    # a lidar-like cloud: ground disc (density ~ 1/r^2) + walls + a few far outliers
    r = torch.rand(60_000, generator=gen) ** 2 * 80 + 1
    a = torch.rand(60_000, generator=gen) * 6.283
    ground = torch.stack((r * a.cos(), r * a.sin(), torch.rand(60_000, generator=gen) * 0.05), -1)
    wall = torch.rand(30_000, 3, generator=gen) * torch.tensor([60.0, 0.05, 8.0]) + torch.tensor([-30.0, 12.0, 0.0])
    far = torch.randn(50, 3, generator=gen) * 500
    cloud = torch.cat((ground, wall, far)).float()
    for k in (1, 3, 8):
        got = knn_distances(cloud.to(dev), k=k).cpu()
        want = knn_distances_reference(cloud, k=k)
        same_inf = torch.equal(torch.isinf(got), torch.isinf(want))
        fin = torch.isfinite(want)
        close = torch.allclose(got[fin], want[fin], rtol=1e-5, atol=1e-6)
        print(f"k={k}: {'PASSED' if same_inf and close else 'FAILED'} "
              f"(max abs diff {float((got[fin] - want[fin]).abs().max()):.3g})")
        ok &= same_inf and close
    for n in (1_000_000, 10_000_000):
        pts = (torch.rand(n, 3, generator=gen) * torch.tensor([200.0, 200.0, 10.0])).to(dev)
        ms = median_ms(lambda: knn_distances(pts, k=3), device=dev, reps=3, warmup=1)
        print(f"knn_distances k=3, {n:,} uniform points: {ms:.1f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
