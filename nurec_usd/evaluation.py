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

from nurec_usd.ops.ssim import fast_ssim
from nurec_usd.render.scene_renderer import SceneRenderer
from nurec_usd.replay.stage import Replay
from nurec_usd.scene.gaussians import Scene
from nurec_usd.scene.init import spread_evenly
from nurec_usd.train.data import CaptureData
from nurec_usd.train.metrics import lidar_error_row, lidar_error_tensor, psnr
from nurec_usd.util.pictures import encode_jpeg, quantise, range_picture
from nurec_usd.util.prefetch import default_workers
from nurec_usd.util.staging import atomic_file

IN_FLIGHT_GROUPS = 4  # groups of pictures on their way to files at once (their pinned host buffers)


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
    call). With ``out_dir``: writes ``eval/<camera>_<frame>.jpg`` (render | ground truth) and an
    ``eval_sheet.png`` of up to ``max_sheet_rows`` of them, and range images of held-out sweeps.
    ``progress`` is called with the number of views done since its last call; ``clock`` times
    the parts (``nurec_usd.util.profiling.StageClock``).
    """
    part = clock or (lambda _name: contextlib.nullcontext())
    renderer = SceneRenderer(scene)
    baseline_colours = data.mean_colors()
    if out_dir is not None:
        (out_dir / "eval").mkdir(parents=True, exist_ok=True)
    # Pictures are copied to the host and encoded in threads (the encoders release Python's
    # lock), one per thread, while the next views render: the loop itself never waits for the GPU.
    workers = default_workers()
    writer = ThreadPoolExecutor(max_workers=workers)
    pending: list = []

    def save(array: np.ndarray, path: Path) -> None:  # PNG at compress_level 1: a fraction of the default's time
        pending.append(writer.submit(lambda: Image.fromarray(array).save(path, compress_level=1)))

    def save_pair(pairs: torch.Tensor,  # [C, H, 2W, 3] uint8 (render | truth) on the host
                  ready: torch.cuda.Event | None, c: int, path: Path, index: int) -> dict[int, np.ndarray]:
        if ready is not None:
            ready.synchronize()  # the group's copy to the host is done: only this thread waits
        pair = pairs[c].numpy()
        path.write_bytes(encode_jpeg(pair))  # JPEG: a build writes them by the hundred
        return {index: pair.copy()} if index in on_sheet else {}  # a copy: the pinned buffer is reused

    def write_sheet(per_frame: list[dict[str, Any]]) -> None:
        sheet: dict[int, np.ndarray] = {}
        for job in (job for group in saved for job in group):
            sheet.update(job.result())  # re-raises a failed write
        rows = [(f"{per_frame[i]['camera']} #{per_frame[i]['frame']}  {per_frame[i]['psnr']:.1f} dB", sheet[i])
                for i in sorted(sheet)]
        if rows:
            contact_sheet(rows, out_dir / "eval_sheet.png")

    try:
        order = [ref for group in data.eval_groups for ref in group.frames]
        on_sheet = set(spread_evenly(list(range(len(order))), max_sheet_rows))  # keep only those in memory
        scores = []  # [C, 3] (PSNR, SSIM, baseline PSNR) per group on the device, read back once
        saved: list[list] = []  # per group, a future per frame: its picture written
        done = 0
        with part("frames"):
            for group in data.eval_groups:
                views = data.camera_views(group)
                target, mask = data.target_images(group)  # [C, H, W, 3], [C, H, W]
                image = renderer.cameras(views).image.clamp(0, 1)
                if mask is not None:  # masked-out pixels count as perfect, in SSIM as in PSNR
                    image = torch.where(mask[..., None], image, target)
                baseline = baseline_colours[views.camera_indices][:, None, None, :].expand_as(target)
                pick = (lambda m, c: None) if mask is None else (lambda m, c: m[c])  # noqa: E731
                scores.append(torch.stack([torch.stack((psnr(image[c], target[c], pick(mask, c)),
                                                        fast_ssim(image[c], target[c]),
                                                        psnr(baseline[c], target[c], pick(mask, c))))
                                           for c in range(len(group.frames))]))
                if out_dir is not None:
                    if len(saved) >= IN_FLIGHT_GROUPS:  # bounds the pinned buffers in use
                        for job in saved[-IN_FLIGHT_GROUPS]:
                            job.result()
                    pairs = quantise(torch.cat((image, target), dim=2))  # [C, H, 2W, 3]
                    ready = None
                    if pairs.is_cuda:  # to pinned memory at the copy engine's speed, the loop not waiting
                        pairs = torch.empty(pairs.shape, dtype=pairs.dtype, pin_memory=True).copy_(pairs,
                                                                                                   non_blocking=True)
                        ready = torch.cuda.Event()
                        ready.record()
                    paths = [out_dir / "eval" / f"{data.cameras[ref.camera].id}_{ref.frame:05d}.jpg"
                             for ref in group.frames]
                    saved.append([writer.submit(save_pair, pairs, ready, c, path, done + c)
                                  for c, path in enumerate(paths)])
                done += len(group.frames)
                if progress:
                    progress(len(group.frames))
            values = torch.cat(scores).tolist() if scores else []
            per_frame = []
            for ref, (p, ss, bp) in zip(order, values):
                per_frame.append({"camera": data.cameras[ref.camera].id, "frame": ref.frame,
                                  "time_s": round(ref.time_s, 6), "psnr": p, "ssim": ss, "baseline_psnr": bp})
        if out_dir is not None:  # once the pairs are written, while the sweeps render (queued after them)
            pending.append(writer.submit(write_sheet, per_frame))
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
                    rows = torch.argsort(lidar.template.elevation, descending=True)  # highest channel on top
                    both = torch.cat((pred[rows], true_range[rows]), 0)
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
    """How closely the USD export replays the scene: PSNR between the replay (``nurec_usd.replay.stage``,
    reading the USD alone) and the in-memory render of the first held-out frame and sweep (lidar:
    range / max range). None where there is no such view."""
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


def contact_sheet(rows: list[tuple[str, np.ndarray]], path: Path, max_width: int = 1600) -> None:
    """Stack ``(label, [H, 2W, 3] render | truth)`` rows into one PNG with a header per row.

    Rows wider than ``max_width`` are shrunk by an integer factor (area averaging): the sheet is
    a preview (the pairs are in full in ``eval/``), and a PNG of full-size rows of a 1280-wide
    camera takes seconds to encode.
    """
    pictures = []
    for label, img in rows:
        im = Image.fromarray(img)
        k = -(-im.width // max_width)
        pictures.append((label, im.reduce(k) if k > 1 else im))
    width = max(im.width for _, im in pictures)
    head = 16
    height = sum(im.height + head for _, im in pictures)
    sheet = Image.new("RGB", (width, height), (24, 24, 24))
    draw = ImageDraw.Draw(sheet)
    y = 0
    for label, im in pictures:
        draw.text((4, y + 2), f"{label}   (left: render, right: held-out image)", fill=(230, 230, 230))
        sheet.paste(im, (0, y + head))
        y += im.height + head
    with atomic_file(path, keep_suffix=True) as tmp:  # PIL picks the format by the suffix
        sheet.save(tmp, compress_level=1)
