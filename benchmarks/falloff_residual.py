"""Brightness left unexplained by a build, by each pixel's angle off its camera's axis.

    python benchmarks/falloff_residual.py CAPTURE RUN [--downscale N] [--device cpu]

Renders every frame of the capture with RUN's scene and prints, per camera, the ratio of the
captured image's mean brightness to the render's in bins of u = 1 - cos(theta), theta the angle
of the pixel's ray off the optical axis (u = 1 at 90 degrees). A ratio that falls from the
centre to the edge is lens falloff the scene does not model (``Scene.vignetting``); flat ratios
near 1 mean none is left. Dark pixels are left out (their ratios are noise).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nurec_usd.capture.importers import load_any  # noqa: E402
from nurec_usd.render.scene_renderer import SceneRenderer  # noqa: E402
from nurec_usd.scene.gaussians import Scene  # noqa: E402
from nurec_usd.train.data import CaptureData  # noqa: E402

BINS = np.linspace(0.0, 1.6, 9)  # u bins (0.2 wide)
MIN_PIXELS = 50  # a bin with fewer pixels is not printed


@torch.no_grad()
def residual_by_angle(capture: Path, run: Path, downscale: int, device: str) -> dict[str, dict[int, tuple]]:
    """Per camera id, per bin index: (captured brightness sum, rendered brightness sum, pixels)."""
    data = CaptureData(load_any(capture), device, eval_every=8, downscale=downscale)
    renderer = SceneRenderer(Scene.load(run / "scene.pt", device=device))
    sums: dict[str, dict[int, list]] = {}
    for group in data.groups(data.frames):
        views = data.camera_views(group)
        target, mask = data.target_images(group)  # [C, H, W, 3] in [0, 1]
        image = renderer.cameras(views).image.clamp(0, 1)
        u = 1.0 - views.rays_camera[..., 2]  # [C, H, W]
        for c, ref in enumerate(group.frames):
            got, want = image[c].mean(-1), target[c].float().mean(-1)  # [H, W] brightness
            keep = (got > 0.05) & (want > 0.02)
            if mask is not None:
                keep &= mask[c]
            if views.lens is not None:
                keep &= views.lens[c]
            per_bin = sums.setdefault(data.cameras[ref.camera].id, {})
            for b in range(len(BINS) - 1):
                sel = keep & (u[c] >= BINS[b]) & (u[c] < BINS[b + 1])
                acc = per_bin.setdefault(b, [0.0, 0.0, 0])
                acc[0] += float(want[sel].sum())
                acc[1] += float(got[sel].sum())
                acc[2] += int(sel.sum())
    return {cam: {b: tuple(v) for b, v in bins.items() if v[2] >= MIN_PIXELS} for cam, bins in sums.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("run", type=Path, help="a build's run folder (its scene.pt)")
    ap.add_argument("--downscale", type=int, default=1, help="the build's image downscale")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    table = residual_by_angle(args.capture, args.run, args.downscale, args.device)
    print("captured / rendered brightness, by u = 1 - cos(angle off the axis) (thousands of pixels)")
    for cam, bins in table.items():
        cells = [f"{BINS[b]:.1f}-{BINS[b + 1]:.1f}: {t / r:.3f} ({n // 1000}k)"
                 for b, (t, r, n) in sorted(bins.items())]
        print(f"{cam:>14}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
