"""Benchmark the training loss's SSIM: ``fused_ssim`` (Warp) against its torch twin.

For each image size: the value and the gradient against the twin's (on the device), then the
median time of a forward and of a forward + backward (CUDA events, after warm-up). drive30
trains on one 1280x720 camera image per step.

    PYTHONPATH=. python benchmarks/ssim.py                        # cuda:0
    PYTHONPATH=. python benchmarks/ssim.py --device cpu --sizes 64x48 --reps 3   # smoke test
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.timing import median_ms
from nurec_usd.ops.ssim import fused_ssim
from nurec_usd.train.metrics import ssim


def make_pair(h: int, w: int, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A smooth image and a noisy, shifted copy of it, [h, w, 3] in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    v, u = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    image = torch.stack((u, v, 0.5 + 0.5 * torch.sin(30 * u + 20 * v)), -1)
    target = (torch.roll(image, 2, dims=1) + 0.05 * torch.randn(image.shape, generator=g)).clamp(0, 1)
    return image.to(device), target.to(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--sizes", default="1280x720,1920x1080", help="image sizes, WxH, comma-separated")
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"ssim on {device} ({name}), torch {torch.__version__}, float32, window 11, sigma 1.5")
    print("| image | |value - twin| | max |grad - twin| / max |grad| | twin fwd | twin fwd+bwd | fused fwd | "
          "fused fwd+bwd | speed-up fwd+bwd |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes.split(","):
        w, h = (int(v) for v in size.lower().split("x"))
        image, target = make_pair(h, w, device)
        x = image.clone().requires_grad_()
        ours, ref = fused_ssim(x, target), ssim(x, target)
        (g_ours,) = torch.autograd.grad(ours, x)
        (g_ref,) = torch.autograd.grad(ref, x)
        d_value = abs(ours.item() - ref.item())
        d_grad = ((g_ours - g_ref).abs().max() / g_ref.abs().max()).item()

        def fwd(fn):
            return lambda: fn(x, target)

        def fwd_bwd(fn):
            return lambda: torch.autograd.grad(fn(x, target), x)

        t = {label: median_ms(call, device, args.reps, warmup=5) for label, call in (
            ("twin fwd", fwd(ssim)), ("twin fwd+bwd", fwd_bwd(ssim)),
            ("fused fwd", fwd(fused_ssim)), ("fused fwd+bwd", fwd_bwd(fused_ssim)))}
        print(f"| {w}x{h} | {d_value:.1e} | {d_grad:.1e} | {t['twin fwd']:.3f} ms | {t['twin fwd+bwd']:.3f} ms | "
              f"{t['fused fwd']:.3f} ms | {t['fused fwd+bwd']:.3f} ms | "
              f"{t['twin fwd+bwd'] / t['fused fwd+bwd']:.1f}x |")


if __name__ == "__main__":
    main()
