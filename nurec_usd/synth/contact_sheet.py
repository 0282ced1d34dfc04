"""A contact sheet: one PNG that shows what a (synthetic) capture looks like.

One row per camera: the first, middle and last frames, and, when ground truth is given, the
middle frame's depth (colour-mapped, log scale) and its actor ids (moving actors tinted over the
image). A last row shows the middle lidar sweep from above (points by intensity, actor points in
their actor's colour, the tracked boxes outlined) and the sweep as a range image.

    python -m nurec_usd synth --preset tiny --out out/tiny --contact-sheet sheet.png
    python -c "from nurec_usd.synth.contact_sheet import write_contact_sheet as w; w('out/tiny', 'sheet.png')"
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from nurec_usd.capture import load_capture
from nurec_usd.synth.groundtruth import load_groundtruth

_ACTOR_COLOURS = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
                           [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [250, 190, 212],
                           [0, 128, 128], [220, 190, 255], [170, 110, 40], [255, 250, 200]], dtype=np.float64)


def turbo(x: np.ndarray  # [...] in [0, 1]
          ) -> np.ndarray:
    """A turbo-like colour map (polynomial fit). Returns uint8 [..., 3]."""
    x = np.clip(x, 0.0, 1.0)
    r = 0.13572138 + x * (4.6153926 + x * (-42.66032258 + x * (132.13108234 + x * (-152.94239396 + x * 59.28637943))))
    g = 0.09140261 + x * (2.19418839 + x * (4.84296658 + x * (-14.18503333 + x * (4.27729857 + x * 2.82956604))))
    b = 0.1066733 + x * (12.64194608 + x * (-60.58204836 + x * (110.36276771 + x * (-89.90310912 + x * 27.34824973))))
    return (np.clip(np.stack([r, g, b], -1), 0, 1) * 255 + 0.5).astype(np.uint8)


def _label(img: Image.Image, text: str) -> Image.Image:
    draw = ImageDraw.Draw(img)
    box = draw.textbbox((3, 2), text)
    draw.rectangle((box[0] - 2, box[1] - 1, box[2] + 2, box[3] + 1), fill=(0, 0, 0))
    draw.text((3, 2), text, fill=(255, 255, 255))
    return img


def _tile(rgb: np.ndarray, size: tuple[int, int], text: str) -> Image.Image:
    return _label(Image.fromarray(rgb).resize(size, Image.BILINEAR), text)


def _depth_tile(depth: np.ndarray, size: tuple[int, int], text: str) -> Image.Image:
    valid = depth > 0
    x = np.zeros_like(depth)
    x[valid] = (np.log(depth[valid]) - np.log(1.0)) / (np.log(200.0) - np.log(1.0))
    rgb = turbo(1.0 - x)
    rgb[~valid] = 0
    return _label(Image.fromarray(rgb).resize(size, Image.NEAREST), text)


def _actor_tile(rgb: np.ndarray, actor: np.ndarray, size: tuple[int, int], text: str) -> Image.Image:
    out = rgb.astype(np.float64) * 0.45
    mask = actor >= 0
    colours = _ACTOR_COLOURS[np.maximum(actor, 0) % len(_ACTOR_COLOURS)]
    out[mask] = 0.35 * rgb[mask] + 0.65 * colours[mask]
    return _label(Image.fromarray(out.astype(np.uint8)).resize(size, Image.NEAREST), text)


def _bev_tile(points: np.ndarray, intensity: np.ndarray, actor: np.ndarray | None, boxes: list, size: tuple[int, int],
              extent: float, text: str) -> Image.Image:
    """Top view of lidar-frame points: x (forward) to the right, y (left) up, +-extent metres across."""
    w, h = size
    scale = w / (2.0 * extent)
    img = np.zeros((h, w, 3), dtype=np.uint8)
    u = (w / 2 + points[:, 0] * scale).astype(int)
    v = (h / 2 - points[:, 1] * scale).astype(int)
    keep = (u >= 0) & (u < w) & (v >= 0) & (v < h)
    grey = (np.clip(0.3 + 1.4 * intensity, 0, 1) * 255).astype(np.uint8)
    col = np.repeat(grey[:, None], 3, 1)
    order = np.arange(len(points))
    if actor is not None:
        mask = actor >= 0
        col[mask] = _ACTOR_COLOURS[actor[mask] % len(_ACTOR_COLOURS)].astype(np.uint8)
        order = np.argsort(mask, kind="stable")  # actor points drawn last, on top
    sel = order[keep[order]]
    img[v[sel], u[sel]] = col[sel]
    pil = Image.fromarray(img)
    draw = ImageDraw.Draw(pil)
    for corners, idx in boxes:
        pts = [(w / 2 + c[0] * scale, h / 2 - c[1] * scale) for c in corners]
        draw.polygon(pts, outline=tuple(int(c) for c in _ACTOR_COLOURS[idx % len(_ACTOR_COLOURS)]))
    return _label(pil, text)


def _range_tile(points: np.ndarray, channel: np.ndarray, elevation: np.ndarray, columns: int,
                size: tuple[int, int], text: str) -> Image.Image:
    """The sweep as a range image: rows = channels (top = highest), columns = azimuth (rear, left, front, right)."""
    rows = np.argsort(np.argsort(-elevation))  # channel -> row, highest elevation first
    img = np.zeros((len(elevation), columns, 3), dtype=np.uint8)
    az = np.arctan2(points[:, 1], points[:, 0])
    col = np.clip(((np.pi - az) / (2 * np.pi) * columns).astype(int), 0, columns - 1)
    rng = np.linalg.norm(points, axis=1)
    img[rows[channel], col] = turbo(1.0 - np.log(np.maximum(rng, 1.0)) / np.log(200.0))
    return _label(Image.fromarray(img).resize(size, Image.NEAREST), text)


def write_contact_sheet(capture_dir: str | Path, out_png: str | Path, groundtruth_dir: str | Path | None = None,
                        tile_width: int = 320, max_colors: int | None = None) -> Path:
    """Write the contact sheet of a capture (see the module docstring). Returns the PNG's path.

    ``max_colors`` quantises the sheet to a palette (a much smaller PNG, for committing one).
    """
    cap = load_capture(capture_dir)
    gt = None
    if groundtruth_dir is not None and Path(groundtruth_dir).exists():
        gt = load_groundtruth(groundtruth_dir)
    cams = list(cap.cameras.values())
    first = cams[0]
    th = int(round(tile_width * first.height / first.width))
    size = (tile_width, th)
    rows = []
    for cam in cams:
        n = len(cam.frames)
        picks = sorted({0, n // 2, n - 1})
        tiles = []
        for k in picks:
            f = cam.frames[k]
            tiles.append(_tile(f.load_image(), size, f"{cam.id} {cam.model} t={cap.seconds(f.timestamp_us):.2f}s"))
        if gt is not None:
            f = cam.frames[n // 2]
            depth, actor = gt.camera_frame(cam.id, f.timestamp_us)
            tiles.append(_depth_tile(depth, size, "depth (ground truth)"))
            tiles.append(_actor_tile(f.load_image(), actor, size, "actor ids (ground truth)"))
        rows.append(tiles)
    if cap.lidars:
        lidar = next(iter(cap.lidars.values()))
        i = len(lidar.sweeps) // 2
        sweep = lidar.load_sweep(i)
        t_us = lidar.sweeps[i].timestamp_us
        actor = gt.sweep(lidar.id, t_us)["actor"] if gt is not None else None
        boxes = _boxes_in_lidar(cap, lidar, t_us)
        lidar_tiles = [_bev_tile(sweep.points, sweep.intensity, actor, boxes, size, 40.0,
                                 f"{lidar.id} from above (80 m), {len(sweep)} points"),
                       _range_tile(sweep.points, sweep.channel.astype(int), lidar.elevation_deg, lidar.columns,
                                   (2 * tile_width, th), f"{lidar.id} range image")]
        rows.append(lidar_tiles)
    width = max(sum(t.width for t in r) for r in rows)
    sheet = Image.new("RGB", (width, sum(max(t.height for t in r) for r in rows)), (20, 20, 20))
    y = 0
    for r in rows:
        x = 0
        for t in r:
            sheet.paste(t, (x, y))
            x += t.width
        y += max(t.height for t in r)
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    if max_colors:
        sheet = sheet.quantize(colors=max_colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    sheet.save(out_png, format="PNG", optimize=True)
    return out_png


def _boxes_in_lidar(cap, lidar, t_us: int) -> list:
    """Footprints (4 corners, lidar frame xy) of the tracks alive at ``t_us``, with their index."""
    import torch

    from nurec_usd.sensors import interpolate_poses

    t = torch.tensor([float(cap.seconds(t_us))], dtype=torch.float64)
    rig = interpolate_poses(torch.from_numpy(cap.seconds(cap.rig.timestamps_us)), torch.from_numpy(cap.rig.T_world_rig),
                            t)[0].numpy()
    T_lidar_world = np.linalg.inv(rig @ lidar.T_rig_lidar)
    out = []
    for idx, track in enumerate(cap.tracks.values()):
        if not track.timestamps_us[0] <= t_us <= track.timestamps_us[-1]:
            continue
        T = interpolate_poses(torch.from_numpy(cap.seconds(track.timestamps_us)), torch.from_numpy(track.T_world_box),
                              t)[0].numpy()
        l, w, _ = track.size_m
        corners = np.array([[l / 2, w / 2, 0, 1], [l / 2, -w / 2, 0, 1], [-l / 2, -w / 2, 0, 1], [-l / 2, w / 2, 0, 1]])
        out.append(((T_lidar_world @ T @ corners.T).T[:, :2], idx))
    return out
