"""Evaluation on held-out frames and sweeps: metrics and pictures people can look at."""

from __future__ import annotations

import contextlib
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image, ImageDraw

from nurec_usd.capture.prefetch import default_workers
from nurec_usd.capture.staging import atomic_file
from nurec_usd.scene.gaussians import Scene
from nurec_usd.scene.init import spread_evenly
from nurec_usd.scene.pictures import range_picture, to_uint8
from nurec_usd.scene.render import SceneRenderer
from nurec_usd.train.data import CaptureData
from nurec_usd.train.fused_ssim import fast_ssim
from nurec_usd.train.metrics import lidar_error_row, lidar_error_tensor, psnr


def _lpips_status() -> str:
    try:
        import lpips  # noqa: F401
    except ImportError:
        return "not computed: the lpips package (with its network weights) is not installed"
    return "not computed: LPIPS needs pretrained network weights that are not shipped with a package here"


@torch.no_grad()
def evaluate(scene: Scene, data: CaptureData, out_dir: Path | None = None, max_sheet_rows: int = 8,
             progress: Callable[[int], None] | None = None,
             clock: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Held-out metrics (PSNR, SSIM, a mean-colour baseline; lidar range error and hit accuracy).

    Frames render group by group (``CaptureData.eval_groups``: the cameras of one instant in one
    call). With ``out_dir``: writes ``eval/<camera>_<frame>.png`` (render | ground truth) and a
    ``eval_sheet.png`` of up to ``max_sheet_rows`` of them, and range images of held-out sweeps.
    ``progress`` is called with the number of views done since its last call; ``clock`` times
    the parts (``nurec_usd.profiling.StageClock``).
    """
    part = clock or (lambda _name: contextlib.nullcontext())
    renderer = SceneRenderer(scene)
    baseline_colours = data.mean_colors()
    per_frame, rows = [], []
    if out_dir is not None:
        (out_dir / "eval").mkdir(parents=True, exist_ok=True)
    # PNG encoding (zlib releases the GIL) runs in threads while the next views render
    writer = ThreadPoolExecutor(max_workers=default_workers())
    pending = []

    def save(array: np.ndarray, path: Path) -> None:
        # PNG at compress_level 1 (about twice the bytes of the default, a fraction of its time);
        # JPEG for the render | image pairs, which a build writes by the hundred
        options = {"quality": 90} if path.suffix == ".jpg" else {"compress_level": 1}
        pending.append(writer.submit(lambda: Image.fromarray(array).save(path, **options)))

    try:
        order = [ref for group in data.eval_groups for ref in group.frames]
        on_sheet = set(spread_evenly(list(range(len(order))), max_sheet_rows))  # keep only those in memory
        done = 0
        with part("frames"):
            for group in data.eval_groups:
                views = data.camera_views(group)
                target, mask = data.target_images(group)  # [C, H, W, 3], [C, H, W]
                image = renderer.cameras(views).image.clamp(0, 1)
                if mask is not None:  # masked-out pixels count as perfect, in SSIM as in PSNR
                    image = torch.where(mask[..., None], image, target)
                baseline = baseline_colours[views.camera_indices][:, None, None, :].expand_as(target)
                cams = range(len(group.frames))
                pick = (lambda m, c: None) if mask is None else (lambda m, c: m[c])  # noqa: E731
                scores = torch.stack([torch.stack((psnr(image[c], target[c], pick(mask, c)), fast_ssim(image[c], target[c]),
                                                   psnr(baseline[c], target[c], pick(mask, c)))) for c in cams])
                pairs = to_uint8(torch.cat((image, target), dim=2)) if out_dir is not None else None
                for c, (ref, (p, ss, bp)) in enumerate(zip(group.frames, scores.tolist())):
                    cam = data.cameras[ref.camera]
                    row = {"camera": cam.id, "frame": ref.frame, "time_s": round(ref.time_s, 6),
                           "psnr": p, "ssim": ss, "baseline_psnr": bp}
                    per_frame.append(row)
                    if pairs is not None:
                        save(pairs[c], out_dir / "eval" / f"{cam.id}_{ref.frame:05d}.jpg")
                        if done + c in on_sheet:
                            rows.append((f"{cam.id} #{ref.frame}  {row['psnr']:.1f} dB", pairs[c]))
                done += len(group.frames)
                if progress:
                    progress(len(group.frames))
        if out_dir is not None and rows:  # written while the sweeps render
            pending.append(writer.submit(contact_sheet, rows, out_dir / "eval_sheet.png"))
        with part("sweeps"):
            errors = []  # [5] on the device per sweep: read back once, after the last
            for ref in data.eval_sweeps:
                batch, t = data.lidar_batch(ref)
                true_range, _ = data.lidar_target(ref)
                lid = renderer.lidar(batch, t)
                pred = torch.where(lid.hit_prob > 0.5, lid.range, torch.zeros_like(lid.range))
                errors.append(lidar_error_tensor(lid.range, lid.hit_prob, true_range))
                if out_dir is not None:
                    lidar = data.lidars[ref.lidar]
                    order = torch.argsort(lidar.template.elevation, descending=True)  # highest channel on top
                    both = torch.cat((pred[order], true_range[order]), 0)
                    save(range_picture(both, lidar.template.max_range),
                         out_dir / "eval" / f"{lidar.id}_{ref.sweep:05d}_range.png")
                if progress:
                    progress(1)
            values = torch.stack(errors).tolist() if errors else []
            lidar_rows = [{"lidar": data.lidars[ref.lidar].id, "sweep": ref.sweep, **lidar_error_row(v)}
                          for ref, v in zip(data.eval_sweeps, values)]
        with part("pictures (after rendering)"):
            for job in pending:
                job.result()  # re-raises a failed write
    finally:
        writer.shutdown(wait=True)  # no write may outlive the call (the folder may be removed next)
    return summarise(per_frame, lidar_rows)


@torch.no_grad()
def replay_agreement(usd_root: Path, scene: Scene, data: CaptureData) -> dict[str, float | None]:
    """How closely the USD export replays the scene: PSNR between the replay (``nurec_usd.replay``,
    reading the USD alone) and the in-memory render of the first held-out frame and sweep (lidar:
    range / max range). None where there is no such view."""
    from nurec_usd.replay import Replay

    replay = Replay(usd_root, device=data.device)
    renderer = SceneRenderer(scene)
    out: dict[str, float | None] = {"usd_replay_camera_psnr": None, "usd_replay_lidar_psnr": None}
    if data.eval_frames:
        ref = data.eval_frames[0]
        want = renderer.camera(data.camera_view(ref)).image.clamp(0, 1)
        got = replay.render_camera(data.cameras[ref.camera].id, ref.time_s, data.downscale).clamp(0, 1)
        out["usd_replay_camera_psnr"] = float(psnr(got, want))
    if data.eval_sweeps:
        ref = data.eval_sweeps[0]
        lidar = data.lidars[ref.lidar]
        batch, t = data.lidar_batch(ref)
        want = (renderer.lidar(batch, t).range / lidar.template.max_range).clamp(0, 1)
        got = (replay.render_lidar(lidar.id, ref.time_s).range / lidar.template.max_range).clamp(0, 1)
        out["usd_replay_lidar_psnr"] = float(psnr(got, want))
    return out


def summarise(per_frame: list[dict[str, Any]], lidar_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over the held-out frames and medians over the held-out sweeps."""
    def mean(key: str, rows: list[dict[str, Any]]) -> float:
        values = [r[key] for r in rows if not math.isnan(r[key])]
        return float(np.mean(values)) if values else math.nan

    out: dict[str, Any] = {
        "held_out_frames": len(per_frame),
        "psnr": mean("psnr", per_frame), "ssim": mean("ssim", per_frame),
        "baseline_psnr": mean("baseline_psnr", per_frame),
        "lpips": None, "lpips_note": _lpips_status(),
        "frames": per_frame,
        "held_out_sweeps": len(lidar_rows),
    }
    if lidar_rows:
        errs = [r["median_range_error_m"] for r in lidar_rows if not math.isnan(r["median_range_error_m"])]
        out.update({"lidar_median_range_error_m": float(np.median(errs)) if errs else math.nan,
                    "lidar_hit_accuracy": mean("hit_accuracy", lidar_rows), "sweeps": lidar_rows})
    return out


def contact_sheet(rows: list[tuple[str, np.ndarray]], path: Path) -> None:
    """Stack ``(label, [H, 2W, 3] render | truth)`` rows into one PNG with a header per row."""
    width = max(img.shape[1] for _, img in rows)
    head = 16
    height = sum(img.shape[0] + head for _, img in rows)
    sheet = Image.new("RGB", (width, height), (24, 24, 24))
    draw = ImageDraw.Draw(sheet)
    y = 0
    for label, img in rows:
        draw.text((4, y + 2), f"{label}   (left: render, right: held-out image)", fill=(230, 230, 230))
        sheet.paste(Image.fromarray(img), (0, y + head))
        y += img.shape[0] + head
    with atomic_file(path, keep_suffix=True) as tmp:  # PIL picks the format by the suffix
        sheet.save(tmp, compress_level=1)
