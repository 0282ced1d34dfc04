"""Files written by ``python -m nurec_usd render``: camera PNGs, lidar sweeps as ``.ply`` with a
range-image PNG, sequences as numbered frames or a video; and, through
:class:`~nurec_usd.replay.renderer.Renderer` (novel trajectories, edited actors, several sensors),
camera frames with 16-bit depth PNGs (:func:`depth_png`) and lidar sweeps (:func:`render_frames`).

Every output appears complete or not at all: single files are written under a temporary name
and moved into place; a sequence folder is staged and moved into place when its last frame is done.
Missing parent folders of the output are created (a parent that is a file is refused, named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch
from PIL import Image

from nurec_usd.ops.lidar import LidarRender
from nurec_usd.replay.stage import Replay, ReplayError, StageCamera, StageLidar
from nurec_usd.replay.trajectory import write_trajectory_csv
from nurec_usd.util.io_errors import naming
from nurec_usd.util.pictures import range_picture, to_uint8
from nurec_usd.util.staging import OutputExistsError, StagedDirectory, atomic_bytes, atomic_file, ensure_folder

__all__ = ["lidar_points", "sweep_points", "write_points_ply", "render_one", "render_sequence", "sequence_times",
           "render_frames", "depth_png", "write_video", "save_png", "VIDEO_SUFFIXES", "DEPTH_PNG_MAX_M"]

VIDEO_SUFFIXES = (".mp4", ".avi")
# A ray returns when its modelled hit probability passes this (as in evaluation).
HIT = 0.5
POINT_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4"), ("range", "<f4"),
                        ("channel", "<u2"), ("column", "<u4")])
_PLY_TYPES = {"<f4": "float", "<u2": "ushort", "<u4": "uint"}


def lidar_points(render: LidarRender, lidar: StageLidar) -> np.ndarray:
    """The returns of a rendered sweep as a structured array (``POINT_DTYPE``): points in the lidar
    frame at each column's firing time, intensity in the capture's units, channel and column."""
    return sweep_points(render.range, render.hit_prob, render.intensity * lidar.intensity_scale, lidar)


def sweep_points(ranges: torch.Tensor,  # [C, W] metres
                 hit_prob: torch.Tensor,  # [C, W]
                 intensity: torch.Tensor,  # [C, W] in the capture's units
                 lidar: StageLidar) -> np.ndarray:
    """The returns (hit probability above ``HIT``) of a sweep as a structured array (``POINT_DTYPE``)."""
    hit = (hit_prob > HIT) & (ranges > 0)  # [C, W]
    dirs = lidar.model.ray_directions().to(ranges.device)  # [C, W, 3]
    ch, col = torch.nonzero(hit, as_tuple=True)
    r = ranges[hit]
    xyz = (dirs[ch, col] * r[:, None].to(dirs.dtype)).float()
    out = np.empty(int(r.numel()), POINT_DTYPE)
    host = lambda t: t.detach().cpu().numpy()  # noqa: E731
    out["x"], out["y"], out["z"] = (host(xyz[:, i]) for i in range(3))
    out["intensity"] = host(intensity[hit])
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
    atomic_bytes(path, ("\n".join(header) + "\n").encode("ascii") + np.ascontiguousarray(points).tobytes())
    return path


def save_png(array: np.ndarray, path: Path) -> None:
    """A PNG of an ``[H, W, 3]`` uint8 or ``[H, W]`` uint16 array, written under a temporary name first."""
    with atomic_file(path) as tmp, naming(path):  # PIL's write errors carry no file name
        Image.fromarray(array).save(tmp, format="PNG")


def _range_png(render: LidarRender, lidar: StageLidar) -> np.ndarray:
    return _range_picture(render.range, render.hit_prob, lidar)


def _range_picture(ranges: torch.Tensor, hit_prob: torch.Tensor, lidar: StageLidar) -> np.ndarray:
    order = torch.argsort(lidar.model.elevation_deg, descending=True).to(ranges.device)  # highest on top
    pred = torch.where(hit_prob > HIT, ranges, torch.zeros_like(ranges))
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
        save_png(to_uint8(replay.render_camera(sensor.id, t_s, downscale)), out)
        return [out]
    if out.suffix.lower() != ".ply":
        raise ReplayError(f"{out}: a lidar renders to a .ply file (a range-image PNG is written beside it)")
    ensure_folder(out.parent)
    render = replay.render_lidar(sensor.id, t_s)
    comment = (f"nurec_usd replay of lidar {sensor.id} at {t_s:.6f} s\n"
               "points in the lidar frame at each column's firing time; intensity in capture units")
    write_points_ply(lidar_points(render, sensor), out, comment)
    picture = out.with_name(f"{out.stem}_range.png")
    save_png(_range_png(render, sensor), picture)
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
    return write_video((_picture(replay, sensor, float(t), downscale) for t in times), out, fps, overwrite, progress)


def write_video(frames: Iterable[np.ndarray], out: str | Path, fps: float, overwrite: bool = False,
                progress: Callable[[], None] | None = None) -> Path:
    """A video of ``[H, W, 3]`` uint8 RGB frames (``.mp4``: MPEG-4 part 2; ``.avi``: Motion JPEG), written
    under a temporary name and moved into place when its last frame is in; needs OpenCV."""
    out = Path(out)
    try:
        import cv2
    except ImportError as err:
        raise ReplayError(f"{out}: writing a video needs OpenCV (pip install opencv-python-headless); "
                          "or give a folder to get numbered frames") from err
    if out.exists() and not overwrite:
        raise OutputExistsError(out)
    ensure_folder(out.parent)
    writer = None
    with atomic_file(out, keep_suffix=True) as tmp:  # OpenCV picks the container by the suffix
        try:
            for frame in frames:
                if writer is None:
                    fourcc = cv2.VideoWriter_fourcc(*("mp4v" if out.suffix.lower() == ".mp4" else "MJPG"))
                    writer = cv2.VideoWriter(str(tmp), fourcc, float(fps), (frame.shape[1], frame.shape[0]))
                    if not writer.isOpened():
                        raise ReplayError(f"{out}: OpenCV could not open a video writer for this format")
                writer.write(np.ascontiguousarray(frame[..., ::-1]))  # OpenCV wants BGR
                if progress:
                    progress()
            if writer is None:
                raise ReplayError(f"{out}: no frames to write")
        finally:
            if writer is not None:
                writer.release()  # finishes the file before it is moved into place
    return out


# ---------------------------------------------------------------------------------------------
# Renders through nurec_usd.replay.renderer.Renderer: novel trajectories, edited actors, several sensors

# Depth PNGs: 16-bit grey, millimetres along the camera's z axis; 0 where there is no depth.
DEPTH_PNG_MAX_M = 65.535
DEPTH_PNG_MIN_ALPHA = 0.5  # pixels less opaque than this show no surface (as the collision mesh's depth maps)


def depth_png(depth: torch.Tensor,  # [H, W] expected camera-z depth, metres
              alpha: torch.Tensor,  # [H, W]
              ) -> np.ndarray:  # [H, W] uint16
    """A depth image as 16-bit millimetres: round(1000 * depth), and 0 (no data) where the pixel is
    less opaque than ``DEPTH_PNG_MIN_ALPHA`` or deeper than ``DEPTH_PNG_MAX_M``."""
    mm = torch.round(depth.double() * 1000.0)
    keep = (alpha >= DEPTH_PNG_MIN_ALPHA) & (mm > 0) & (mm <= 65535)
    return torch.where(keep, mm, torch.zeros_like(mm)).to(torch.int32).cpu().numpy().astype(np.uint16)


def render_frames(renderer, times: np.ndarray, out: str | Path, cameras: list[str], lidars: list[str],
                  rig=None, rig_offset: torch.Tensor | None = None, depth: bool = True, downscale: int = 1,
                  fps: float = 10.0, overwrite: bool = False, actor_time: str = "readout",
                  progress: Callable[[], None] | None = None) -> list[Path]:
    """Render sensors at ``times`` through a :class:`~nurec_usd.replay.renderer.Renderer` (its actor
    edits applied; ``rig`` and ``rig_offset`` as for ``Renderer.render``) into ``out``:

    * a folder: per time index i, ``<camera>_<i>.png`` (and ``<camera>_<i>_depth.png`` with
      ``depth``), ``<lidar>_<i>.ply`` and ``<lidar>_<i>_range.png``, and ``trajectory.csv``: the
      rig pose of every time, in the layout ``render --trajectory`` reads;
    * ``FILE.png``: one camera at one time (and ``FILE_depth.png``); ``FILE.ply``: one lidar at
      one time (and ``FILE_range.png``);
    * ``FILE.mp4`` / ``FILE.avi``: a video of one sensor (camera frames or lidar range images).
    """
    out = Path(out)
    suffix = out.suffix.lower()
    sensors = [*cameras, *lidars]
    names = {s: Path(renderer.replay.sensor(s).path).name for s in sensors}

    def frame(t: float):
        return renderer.render([t], cameras=cameras, lidars=lidars, rig=rig, rig_offset=rig_offset,
                               depth=depth and suffix not in VIDEO_SUFFIXES, downscale=downscale,
                               actor_time=actor_time, retry_overflow=True)  # files: complete renders

    def write(r, folder: Path, stem: dict[str, str]) -> None:
        for c in cameras:
            f = r.cameras[c]
            save_png(to_uint8(f.rgb[0]), folder / f"{stem[c]}.png")
            if f.depth is not None:
                save_png(depth_png(f.depth[0], f.alpha[0]), folder / f"{stem[c]}_depth.png")
        for name in lidars:
            s, lid = r.lidars[name], renderer.lidars[name]
            comment = (f"nurec_usd render of lidar {name} at {float(r.times[0]):.6f} s\n"
                       "points in the lidar frame at each column's firing time; intensity in capture units")
            write_points_ply(sweep_points(s.range[0], s.hit_prob[0], s.intensity[0], lid),
                             folder / f"{stem[name]}.ply", comment)
            save_png(_range_picture(s.range[0], s.hit_prob[0], lid), folder / f"{stem[name]}_range.png")

    if suffix in VIDEO_SUFFIXES:
        if len(sensors) != 1:
            raise ReplayError(f"{out}: a video shows one sensor; {len(sensors)} were asked for "
                              "(give a folder for several)")

        def pictures():
            for t in times:
                r = frame(float(t))
                if cameras:
                    yield to_uint8(r.cameras[cameras[0]].rgb[0])
                else:
                    s = r.lidars[lidars[0]]
                    yield _range_picture(s.range[0], s.hit_prob[0], renderer.lidars[lidars[0]])

        return [write_video(pictures(), out, fps, overwrite, progress)]
    if suffix in (".png", ".ply"):
        want = "camera" if suffix == ".png" else "lidar"
        given = cameras if suffix == ".png" else lidars
        if len(times) != 1 or len(sensors) != 1 or len(given) != 1:
            raise ReplayError(f"{out}: a {suffix} file holds one {want} at one time; give a folder for several "
                              "sensors or times")
        if out.exists() and not overwrite:
            raise OutputExistsError(out)
        ensure_folder(out.parent)
        r = frame(float(times[0]))
        write(r, out.parent, {given[0]: out.stem})
        extra = f"{out.stem}_depth.png" if suffix == ".png" else f"{out.stem}_range.png"
        written = [out] + ([out.with_name(extra)] if (out.parent / extra).exists() else [])
        if progress:
            progress()
        return written
    if suffix:
        raise ReplayError(f"{out}: render writes a folder, a .png (one camera), a .ply (one lidar) or a video "
                          f"({', '.join(VIDEO_SUFFIXES)}); not {out.suffix}")
    staged = StagedDirectory(out, overwrite=overwrite)
    try:
        for i, t in enumerate(times):
            write(frame(float(t)), staged.path, {s: f"{names[s]}_{i:05d}" for s in sensors})
            if progress:
                progress()
        poses = renderer.rig_pose(np.asarray(times, dtype=np.float64), rig=rig, rig_offset=rig_offset)
        write_trajectory_csv(staged.path / "trajectory.csv", np.asarray(times), poses.cpu().numpy())
    except BaseException:
        staged.abort()
        raise
    final = staged.commit()
    return sorted(final.iterdir())
