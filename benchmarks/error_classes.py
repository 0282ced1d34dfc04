"""Where a build's held-out image error lies: its squared error split by what each pixel sees,
from a synthetic capture's ground truth (moving actors, the static scene near and far, the sky).

    python -m nurec_usd synth --preset drive30 --out CAPTURE     # writes CAPTURE_groundtruth beside it
    python -m nurec_usd build CAPTURE -o RUN
    python benchmarks/error_classes.py RUN CAPTURE [--groundtruth GT] [--device cuda:0] [--json OUT]

Renders every held-out frame of ``RUN/scene.pt`` at full resolution (as ``build`` evaluates them,
the cameras of one instant per call) and adds each pixel's squared error (the mean over RGB of
the clamped render against the image) to its class, by the ground truth's actor index and ray
distance at the pixel centre: an actor or the static scene, nearer than ``--near-m``, between
that and ``--far-m``, or beyond; the sky where no surface is hit. Pixels the build does not
score (ego masks, outside a lens) are left out. Prints, per class, its pixels, its share of the
pixels and of the squared error, its PSNR and the pooled PSNR of the whole set were it perfect
(what fixing that class alone would be worth), then the pooled PSNR per camera.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CLASSES = ("actors, near", "actors, middle", "actors, far", "static, near", "static, middle", "static, far", "sky")


def pixel_classes(actor: torch.Tensor,  # [H, W] int, ground truth: actor index, -1 for the static scene
                  distance: torch.Tensor,  # [H, W] metres along the ray, 0 where no surface is hit
                  near_m: float, far_m: float) -> torch.Tensor:  # [H, W] int64 index into CLASSES
    """Each pixel's class (``CLASSES``)."""
    band = (distance >= near_m).long() + (distance >= far_m).long()  # 0 near, 1 middle, 2 far
    cls = torch.where(actor >= 0, band, 3 + band)
    return torch.where((actor < 0) & (distance <= 0), torch.full_like(cls, 6), cls)


def error_by_class(data, truth, render: Callable, near_m: float = 15.0, far_m: float = 50.0) -> dict:
    """Squared error and pixel counts per class and per camera over ``data``'s held-out frames.

    Args:
        data: a ``CaptureData`` of the capture (full resolution: the ground truth's).
        truth: its ``GroundTruth`` (``nurec_usd.synth.groundtruth.load_groundtruth``).
        render: ``render(group) -> [C, H, W, 3]`` images of a ``FrameGroup``'s frames.
    Returns:
        ``{"classes": {name: {"pixels", "squared_error"}}, "cameras": {id: {...}}}`` (sums, not means).
    """
    if data.downscale != 1:
        raise ValueError(f"error_by_class needs full-size frames (the ground truth's), got downscale {data.downscale}")
    n = len(CLASSES)
    sq = torch.zeros(n, dtype=torch.float64, device=data.device)
    count = torch.zeros(n, dtype=torch.float64, device=data.device)
    cameras: dict[str, list] = {}  # id -> [squared error (a tensor on the device), pixels]
    with torch.no_grad():
        for group in data.eval_groups:
            target, mask = data.target_images(group)  # [C, H, W, 3], [C, H, W] or None
            image = render(group).clamp(0, 1)
            for c, ref in enumerate(group.frames):
                cam = data.cameras[ref.camera]
                t_us = int(data.capture.cameras[cam.id].frames[ref.frame].timestamp_us)
                distance, actor = truth.camera_frame(cam.id, t_us)
                if distance.shape != (cam.height, cam.width):
                    raise ValueError(f"{truth.root}: camera {cam.id} at {t_us} us: ground truth of shape "
                                     f"{distance.shape}, frames of {(cam.height, cam.width)}")
                cls = pixel_classes(torch.as_tensor(actor.astype("int64"), device=data.device),
                                    torch.as_tensor(distance, device=data.device), near_m, far_m)
                keep = torch.ones_like(cls, dtype=torch.bool)
                if mask is not None:
                    keep &= mask[c]
                if cam.lens is not None:
                    keep &= cam.lens
                err = ((image[c] - target[c]).double() ** 2).mean(-1)[keep]  # [P]
                sq += torch.bincount(cls[keep], weights=err, minlength=n)
                count += torch.bincount(cls[keep], minlength=n).double()
                per = cameras.setdefault(cam.id, [0.0, 0])
                per[0] = per[0] + err.sum()
                per[1] += int(err.numel())
    sq_l, count_l = sq.tolist(), count.tolist()
    return {"classes": {name: {"pixels": int(count_l[i]), "squared_error": sq_l[i]} for i, name in enumerate(CLASSES)},
            "cameras": {k: {"pixels": v[1], "squared_error": float(v[0])} for k, v in cameras.items()}}


def psnr_of(squared_error: float, pixels: int) -> float:
    """PSNR (images in [0, 1]) of ``squared_error`` summed over ``pixels`` pixels; inf for none, nan
    for no pixels."""
    if pixels == 0:
        return math.nan
    return math.inf if squared_error <= 0 else -10.0 * math.log10(squared_error / pixels)


def format_table(split: dict) -> str:
    """The class table and the per-camera PSNRs, as Markdown."""
    classes = split["classes"]
    total_sq = sum(v["squared_error"] for v in classes.values())
    total_px = sum(v["pixels"] for v in classes.values())
    lines = [f"held-out pixels: {total_px:,}, pooled PSNR {psnr_of(total_sq, total_px):.2f} dB", "",
             "| class | pixels | share of pixels | share of squared error | PSNR | pooled PSNR were it perfect |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, v in classes.items():
        if v["pixels"] == 0:
            continue
        lines.append(f"| {name} | {v['pixels']:,} | {v['pixels'] / total_px:.1%} | "
                     f"{v['squared_error'] / total_sq if total_sq > 0 else 0.0:.1%} | "
                     f"{psnr_of(v['squared_error'], v['pixels']):.2f} dB | "
                     f"{psnr_of(total_sq - v['squared_error'], total_px):.2f} dB |")
    lines.append("")
    lines.append("pooled PSNR per camera: " + ", ".join(
        f"{k} {psnr_of(v['squared_error'], v['pixels']):.2f} dB" for k, v in split["cameras"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a build's run folder (its scene.pt and config.json)")
    parser.add_argument("capture", type=Path, help="the synthetic capture it was built from")
    parser.add_argument("--groundtruth", type=Path, default=None, help="ground-truth folder (default: CAPTURE_groundtruth)")
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--near-m", type=float, default=15.0, help="nearer than this: the near classes (default 15)")
    parser.add_argument("--far-m", type=float, default=50.0, help="this or further: the far classes (default 50)")
    parser.add_argument("--json", type=Path, default=None, help="also write the sums here")
    args = parser.parse_args(argv)
    if not 0 < args.near_m < args.far_m:
        parser.error(f"need 0 < --near-m < --far-m, got {args.near_m} and {args.far_m}")

    from nurec_usd.capture import load_capture
    from nurec_usd.render.scene_renderer import SceneRenderer
    from nurec_usd.scene.gaussians import Scene
    from nurec_usd.synth.groundtruth import default_groundtruth_dir, load_groundtruth
    from nurec_usd.train import ego
    from nurec_usd.train.data import CaptureData

    for path, what in ((args.run / "scene.pt", "the run's scene"), (args.run / "config.json", "the run's config")):
        if not path.is_file():
            parser.error(f"{path}: not found ({what}; RUN must be a build's run folder)")
    gt_dir = args.groundtruth or default_groundtruth_dir(args.capture)
    try:
        truth = load_groundtruth(gt_dir)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    train = json.loads((args.run / "config.json").read_text())["train"]
    device = torch.device(args.device)
    scene = Scene.load(args.run / "scene.pt", device=device)
    capture = load_capture(args.capture)
    data = CaptureData(capture, device, eval_every=train["eval_every"])
    # the ego's pixels as the build masked them (its ego_mask options), so that they are not scored here either
    try:
        given = ego.given_masks(capture, train["ego_mask_dir"])
    except ValueError as err:
        parser.error(f"{args.run / 'config.json'}: ego_mask_dir: {err}")
    ego.mask_cameras(capture, data, train["ego_mask"], given)
    renderer = SceneRenderer(scene)
    split = error_by_class(data, truth, lambda group: renderer.cameras(data.camera_views(group)).image,
                           args.near_m, args.far_m)
    print(format_table(split))
    if args.json:
        args.json.write_text(json.dumps({"near_m": args.near_m, "far_m": args.far_m, **split}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
