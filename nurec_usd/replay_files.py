"""Files written by ``python -m nurec_usd render``: camera PNGs, lidar sweeps as ``.ply`` with a
range-image PNG, sequences as numbered frames or a video.

Every output appears complete or not at all: single files are written under a temporary name
and moved into place; a sequence folder is staged and moved into place when its last frame is done.
Missing parent folders of the output are created (a parent that is a file is refused, named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from nurec_usd.capture.staging import OutputExistsError, StagedDirectory, ensure_folder
from nurec_usd.io_errors import naming
from nurec_usd.render.lidar import LidarRender
from nurec_usd.replay import Replay, ReplayError, StageCamera, StageLidar
from nurec_usd.scene.pictures import range_picture, to_uint8

__all__ = ["lidar_points", "write_points_ply", "render_one", "render_sequence", "sequence_times", "VIDEO_SUFFIXES"]

VIDEO_SUFFIXES = (".mp4", ".avi")
# A ray returns when its modelled hit probability passes this (as in evaluation).
HIT = 0.5
POINT_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4"), ("range", "<f4"),
                        ("channel", "<u2"), ("column", "<u4")])
_PLY_TYPES = {"<f4": "float", "<u2": "ushort", "<u4": "uint"}


def lidar_points(render: LidarRender, lidar: StageLidar) -> np.ndarray:
    """The returns of a rendered sweep as a structured array (``POINT_DTYPE``): points in the lidar
    frame at each column's firing time, intensity in the capture's units, channel and column."""
    hit = (render.hit_prob > HIT) & (render.range > 0)  # [C, W]
    dirs = lidar.model.ray_directions().to(render.range.device)  # [C, W, 3]
    ch, col = torch.nonzero(hit, as_tuple=True)
    r = render.range[hit]
    xyz = (dirs[ch, col] * r[:, None].to(dirs.dtype)).float()
    out = np.empty(int(r.numel()), POINT_DTYPE)
    host = lambda t: t.detach().cpu().numpy()  # noqa: E731
    out["x"], out["y"], out["z"] = (host(xyz[:, i]) for i in range(3))
    out["intensity"] = host(render.intensity[hit] * lidar.intensity_scale)
    out["range"] = host(r)
    out["channel"], out["column"] = host(ch), host(col)
    return out


def write_points_ply(points: np.ndarray, path: str | Path, comment: str = "") -> Path:
    """A binary little-endian PLY of a structured point array (one ``vertex`` element)."""
    path = Path(path)
    header = ["ply", "format binary_little_endian 1.0"]
    header += [f"comment {line}" for line in comment.splitlines() if line]
    header.append(f"element vertex {len(points)}")
    header += [f"property {_PLY_TYPES[points.dtype[name].str]} {name}" for name in points.dtype.names]
    header.append("end_header")
    _atomic_bytes(path, ("\n".join(header) + "\n").encode("ascii") + np.ascontiguousarray(points).tobytes())
    return path


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with naming(path):
            tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _save_png(array: np.ndarray, path: Path) -> None:
    from PIL import Image

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with naming(path):  # PIL's write errors carry no file name
            Image.fromarray(array).save(tmp, format="PNG")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _range_png(render: LidarRender, lidar: StageLidar) -> np.ndarray:
    order = torch.argsort(lidar.model.elevation_deg, descending=True).to(render.range.device)  # highest on top
    pred = torch.where(render.hit_prob > HIT, render.range, torch.zeros_like(render.range))
    return range_picture(pred[order], lidar.model.max_range_m)


def _picture(replay: Replay, sensor: StageCamera | StageLidar, t_s: float, downscale: int) -> np.ndarray:
    if isinstance(sensor, StageCamera):
        return to_uint8(replay.render_camera(sensor.id, t_s, downscale))
    return _range_png(replay.render_lidar(sensor.id, t_s), sensor)


def render_one(replay: Replay, sensor_name: str, t_s: float, out: str | Path, downscale: int = 1) -> list[Path]:
    """Render one frame (camera: ``out`` .png) or sweep (lidar: ``out`` .ply and ``<stem>_range.png``)."""
    out = Path(out)
    sensor = replay.sensor(sensor_name)
    if isinstance(sensor, StageCamera):
        if out.suffix.lower() != ".png":
            raise ReplayError(f"{out}: a camera renders to a .png file")
        ensure_folder(out.parent)  # as build and export do for their output folders
        _save_png(to_uint8(replay.render_camera(sensor.id, t_s, downscale)), out)
        return [out]
    if out.suffix.lower() != ".ply":
        raise ReplayError(f"{out}: a lidar renders to a .ply file (a range-image PNG is written beside it)")
    ensure_folder(out.parent)
    render = replay.render_lidar(sensor.id, t_s)
    comment = (f"nurec_usd replay of lidar {sensor.id} at {t_s:.6f} s\n"
               "points in the lidar frame at each column's firing time; intensity in capture units")
    write_points_ply(lidar_points(render, sensor), out, comment)
    picture = out.with_name(f"{out.stem}_range.png")
    _save_png(_range_png(render, sensor), picture)
    return [out, picture]


def sequence_times(start_s: float, end_s: float, fps: float) -> np.ndarray:
    """Frame times from ``start_s`` to ``end_s`` (inclusive where it falls on the grid) at ``fps``."""
    if fps <= 0:
        raise ReplayError(f"--fps must be > 0, got {fps}")
    if end_s < start_s:
        raise ReplayError(f"--end ({end_s}) is before --start ({start_s})")
    count = int(np.floor((end_s - start_s) * fps + 1e-9)) + 1
    return start_s + np.arange(count) / fps


def render_sequence(replay: Replay, sensor_name: str, times: np.ndarray, out: str | Path, downscale: int = 1,
                    fps: float = 10.0, overwrite: bool = False,
                    progress: Callable[[], None] | None = None) -> list[Path]:
    """Render a sequence into folder ``out`` (camera: ``<sensor>_<i>.png``; lidar: ``<sensor>_<i>.ply``
    and ``<sensor>_<i>_range.png``), or into a video when ``out`` ends in .mp4 / .avi (camera frames or
    lidar range images; needs OpenCV)."""
    out = Path(out)
    sensor = replay.sensor(sensor_name)
    for t in times:  # fail before rendering anything
        replay.check_time(float(t))
    if out.suffix.lower() in VIDEO_SUFFIXES:
        return [_video(replay, sensor, times, out, downscale, fps, overwrite, progress)]
    staged = StagedDirectory(out, overwrite=overwrite)
    try:
        name = Path(sensor.path).name
        for i, t in enumerate(times):
            suffix = ".png" if isinstance(sensor, StageCamera) else ".ply"
            render_one(replay, sensor.id, float(t), staged.path / f"{name}_{i:05d}{suffix}", downscale)
            if progress:
                progress()
    except BaseException:
        staged.abort()
        raise
    final = staged.commit()
    return sorted(final.iterdir())


def _video(replay: Replay, sensor, times: np.ndarray, out: Path, downscale: int, fps: float, overwrite: bool,
           progress: Callable[[], None] | None) -> Path:
    try:
        import cv2
    except ImportError as err:
        raise ReplayError(f"{out}: writing a video needs OpenCV (pip install opencv-python-headless); "
                          "or give a folder to get numbered frames") from err
    if out.exists() and not overwrite:
        raise OutputExistsError(out)
    ensure_folder(out.parent)
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    writer = None
    try:
        for t in times:
            frame = _picture(replay, sensor, float(t), downscale)
            if writer is None:
                fourcc = cv2.VideoWriter_fourcc(*("mp4v" if out.suffix.lower() == ".mp4" else "MJPG"))
                writer = cv2.VideoWriter(str(tmp), fourcc, float(fps), (frame.shape[1], frame.shape[0]))
                if not writer.isOpened():
                    raise ReplayError(f"{out}: OpenCV could not open a video writer for this format")
            writer.write(np.ascontiguousarray(frame[..., ::-1]))  # OpenCV wants BGR
            if progress:
                progress()
        writer.release()
        writer = None
        tmp.replace(out)
    finally:
        if writer is not None:
            writer.release()
        tmp.unlink(missing_ok=True)
    return out
