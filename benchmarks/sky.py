"""Benchmark the sky lookup: ``sky_lookup`` (Warp) against its torch twin (``grid_sample``).

Directions: a 1280x720 pinhole camera (90 degrees wide) looking at the horizon, as drive30's
cameras do, and as many random directions. For each, the colours and the map's gradient
against the twin's on the device (this checks the backward's warp-level sums, which only run
on CUDA), then the median time of a forward and of a forward + backward (CUDA events).

    PYTHONPATH=. python benchmarks/sky.py                               # cuda:0
    PYTHONPATH=. python benchmarks/sky.py --device cpu --size 64x36 --reps 3   # smoke test
"""

from __future__ import annotations

import argparse
import math

import torch

from benchmarks.timing import median_ms
from nurec_usd.ops.reference import sky_colors_reference
from nurec_usd.ops.sky import sky_lookup


def camera_directions(w: int, h: int, device: torch.device) -> torch.Tensor:  # [h, w, 3]
    """World directions of a pinhole camera's pixels, looking along +x, 90 degrees wide, z up."""
    f = 0.5 * w / math.tan(math.radians(45))
    v, u = torch.meshgrid(torch.arange(h) + 0.5 - h / 2, torch.arange(w) + 0.5 - w / 2, indexing="ij")
    d = torch.stack((torch.full_like(u, f), -u, -v), -1)
    return torch.nn.functional.normalize(d, dim=-1).to(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--size", default="1280x720", help="camera image size, WxH")
    p.add_argument("--map", default="16x64", help="sky map size, rows x columns")
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    device = torch.device(args.device)
    w, h = (int(v) for v in args.size.lower().split("x"))
    rows, cols = (int(v) for v in args.map.lower().split("x"))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"sky lookup on {device} ({name}), torch {torch.__version__}, float32, map 3 x {rows} x {cols}")
    g = torch.Generator().manual_seed(0)
    sky = (torch.randn(3, rows, cols, generator=g) * 2).to(device).requires_grad_()
    cases = {
        f"camera {w}x{h}": camera_directions(w, h, device),
        f"random x {w * h}": torch.nn.functional.normalize(torch.randn(w * h, 3, generator=g), dim=-1).to(device),
    }
    print("| directions | max |colour - twin| | max |grad - twin| / max |grad| | twin fwd | twin fwd+bwd | "
          "ours fwd | ours fwd+bwd | speed-up fwd+bwd |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, d in cases.items():
        upstream = torch.randn(d.shape, generator=g).to(device)
        ours, ref = sky_lookup(sky, d), sky_colors_reference(sky, d)
        (g_ours,) = torch.autograd.grad(ours, sky, upstream)
        (g_ref,) = torch.autograd.grad(ref, sky, upstream)
        d_col = (ours - ref).abs().max().item()
        d_grad = ((g_ours - g_ref).abs().max() / g_ref.abs().max()).item()

        def fwd(fn, d=d):
            return lambda: fn(sky, d)

        def fwd_bwd(fn, d=d, upstream=upstream):
            return lambda: torch.autograd.grad(fn(sky, d), sky, upstream)

        t = {k: median_ms(call, device, args.reps, warmup=5) for k, call in (
            ("twin fwd", fwd(sky_colors_reference)), ("twin fwd+bwd", fwd_bwd(sky_colors_reference)),
            ("ours fwd", fwd(sky_lookup)), ("ours fwd+bwd", fwd_bwd(sky_lookup)))}
        print(f"| {label} | {d_col:.1e} | {d_grad:.1e} | {t['twin fwd']:.3f} ms | {t['twin fwd+bwd']:.3f} ms | "
              f"{t['ours fwd']:.3f} ms | {t['ours fwd+bwd']:.3f} ms | {t['twin fwd+bwd'] / t['ours fwd+bwd']:.1f}x |")


if __name__ == "__main__":
    main()
