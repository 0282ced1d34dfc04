"""Lidar sweep files.

``.nrl`` is the capture format's own compact binary sweep (little-endian):

    offset  size      field
    0       8         magic b"NRLIDAR\\0"
    8       4         uint32 version (1)
    12      4         uint32 point_count N
    16      8         int64  base_timestamp_us (the sweep's timestamp)
    24      8         reserved (zeros)
    32      12 N      float32 xyz [N, 3], metres, lidar frame
    ..      4 N       float32 intensity [N]
    ..      4 N       int32   time_offset_us [N], each point's firing time - base
    ..      2 N       uint16  channel [N]

Columns are stored one after the other (not interleaved) so each loads as one array.
``.ply`` and ``.pcd`` sweeps are read through open3d (see ``read_point_cloud_sweep``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nurec_usd.capture.cloud_files import check_ascii_rows, check_cloud_file
from nurec_usd.capture.errors import SweepFormatError

if TYPE_CHECKING:
    from nurec_usd.capture.model import Lidar

NRL_MAGIC = b"NRLIDAR\0"
NRL_VERSION = 1
_HEADER = struct.Struct("<8sIIq8x")  # 32 bytes
NRL_HEADER_BYTES = _HEADER.size
NRL_BYTES_PER_POINT = 12 + 4 + 4 + 2
SWEEP_SUFFIXES = (".nrl", ".ply", ".pcd")


@dataclass(frozen=True)
class LidarSweep:
    """The points of one sweep, in the lidar's own frame (x forward, y left, z up)."""

    points: np.ndarray  # [N, 3] float32, metres, sensor frame
    intensity: np.ndarray  # [N] float32
    timestamps_us: np.ndarray  # [N] int64, each point's own firing time
    channel: np.ndarray  # [N] int32, index into the lidar's channels
    dropped_nonfinite: int = 0  # points with NaN / infinite coordinates left out when it was read

    def __len__(self) -> int:
        return int(self.points.shape[0])


def write_nrl(path: Path, timestamp_us: int,
              points: np.ndarray,  # [N, 3] float, lidar frame
              intensity: np.ndarray,  # [N] float
              timestamps_us: np.ndarray,  # [N] int, absolute firing times
              channel: np.ndarray,  # [N] int
              ) -> None:
    """Write one sweep as ``.nrl``. Point times must lie within ±35 minutes of ``timestamp_us``."""
    n = int(points.shape[0])
    if points.shape != (n, 3) or intensity.shape != (n,) or timestamps_us.shape != (n,) or channel.shape != (n,):
        raise ValueError(f"{path}: sweep arrays disagree in length: points {points.shape}, "
                         f"intensity {intensity.shape}, timestamps {timestamps_us.shape}, channel {channel.shape}")
    offsets = np.asarray(timestamps_us, dtype=np.int64) - int(timestamp_us)
    if n and (offsets.min() < np.iinfo(np.int32).min or offsets.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{path}: point timestamps too far from the sweep timestamp for int32 offsets")
    if n and (channel.min() < 0 or channel.max() > np.iinfo(np.uint16).max):
        raise ValueError(f"{path}: channel indices must lie in [0, 65535]")
    with open(path, "wb") as f:
        f.write(_HEADER.pack(NRL_MAGIC, NRL_VERSION, n, int(timestamp_us)))
        f.write(np.ascontiguousarray(points, dtype="<f4").tobytes())
        f.write(np.ascontiguousarray(intensity, dtype="<f4").tobytes())
        f.write(offsets.astype("<i4").tobytes())
        f.write(np.asarray(channel).astype("<u2").tobytes())


def read_nrl_header(path: Path) -> tuple[int, int]:
    """Check an ``.nrl`` file's header against its size. Returns (point_count, base_timestamp_us).

    Raises ``SweepFormatError`` naming the header field that is wrong (a truncated file
    shows as a size that disagrees with ``header.point_count``).
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise SweepFormatError(path, "header", f"file is {size} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, count, base = _HEADER.unpack(head)
    if magic != NRL_MAGIC:
        raise SweepFormatError(path, "header.magic", f"not an .nrl sweep (magic {magic!r}, expected {NRL_MAGIC!r})")
    if version != NRL_VERSION:
        raise SweepFormatError(path, "header.version", f"unsupported .nrl version {version} (this reader knows {NRL_VERSION})")
    expected = _HEADER.size + count * NRL_BYTES_PER_POINT
    if size != expected:
        what = "truncated" if size < expected else "has trailing bytes"
        raise SweepFormatError(path, "header.point_count",
                               f"file {what}: {count} points need {expected} bytes, the file has {size}")
    return count, base


def read_nrl(path: Path) -> LidarSweep:
    """Read an ``.nrl`` sweep."""
    n, base = read_nrl_header(path)
    data = path.read_bytes()
    o = _HEADER.size
    points = np.frombuffer(data, "<f4", 3 * n, o).reshape(n, 3).astype(np.float32)
    o += 12 * n
    intensity = np.frombuffer(data, "<f4", n, o).astype(np.float32)
    o += 4 * n
    times = np.frombuffer(data, "<i4", n, o).astype(np.int64) + base
    o += 4 * n
    channel = np.frombuffer(data, "<u2", n, o).astype(np.int32)
    return LidarSweep(points=points, intensity=intensity, timestamps_us=times, channel=channel)


def read_point_cloud_sweep(path: Path, timestamp_us: int, lidar: "Lidar | None") -> LidarSweep:
    """Read a ``.ply`` / ``.pcd`` sweep through open3d.

    Per-point attributes used when present: ``intensity``, ``time_offset_us`` (relative
    to the sweep timestamp) and ``channel`` (or ``ring``). Missing times and channels
    are derived from the lidar's spinning model: the firing time of the column each
    point falls in and the channel of the nearest elevation. Missing intensity is 0.
    """
    import open3d as o3d  # CPU-side point-cloud I/O only; imported where needed

    header = check_cloud_file(path)  # open3d fills a truncated binary body with zeros
    check_ascii_rows(path, header)
    pcd = o3d.t.io.read_point_cloud(str(path))
    attrs = pcd.point
    if "positions" not in attrs or len(attrs["positions"]) == 0:
        if header.points == 0:
            return LidarSweep(points=np.zeros((0, 3), np.float32), intensity=np.zeros(0, np.float32),
                              timestamps_us=np.zeros(0, np.int64), channel=np.zeros(0, np.int32))
        raise SweepFormatError(path, "positions", "no points could be read (empty or not a point cloud)")
    points = attrs["positions"].numpy().astype(np.float32).reshape(-1, 3)
    n = points.shape[0]
    if n != header.points:
        raise SweepFormatError(path, "positions", f"{n:,} points could be read; the header declares "
                                                  f"{header.points:,} (a damaged file)")

    def column(*names: str) -> np.ndarray | None:
        for name in names:
            if name in attrs:
                return attrs[name].numpy().reshape(n)
        return None

    intensity = column("intensity", "intensities")
    offsets = column("time_offset_us")
    channel = column("channel", "ring")
    if (offsets is None or channel is None) and lidar is None:
        raise SweepFormatError(path, "time_offset_us", "point times/channels are missing and no lidar model was given to derive them")
    if offsets is None or channel is None:
        import torch

        model = lidar.sensor_model(dtype=torch.float64)
        p = torch.from_numpy(points.astype(np.float64))
        if channel is None:
            channel = model.channel_and_column(p)[0].numpy()
        if offsets is None:
            offsets = np.round(model.time_offset_of_points(p).numpy() * 1e6)
    return LidarSweep(
        points=points,
        intensity=(np.zeros(n, np.float32) if intensity is None else intensity.astype(np.float32)),
        timestamps_us=offsets.astype(np.int64) + int(timestamp_us),
        channel=channel.astype(np.int32),
    )


def read_sweep(path: Path, timestamp_us: int, lidar: "Lidar | None" = None) -> LidarSweep:
    """Read a sweep file of any supported kind (by suffix)."""
    suffix = path.suffix.lower()
    if suffix == ".nrl":
        return read_nrl(path)
    if suffix in (".ply", ".pcd"):
        return read_point_cloud_sweep(path, timestamp_us, lidar)
    raise SweepFormatError(path, "", f"unknown sweep file type {suffix!r} (expected one of {SWEEP_SUFFIXES})")


def sweep_problems(sweep: LidarSweep, channels: int, time_range_us: tuple[int, int] | None = None
                   ) -> list[tuple[str, str]]:
    """(field, message) for each thing wrong with a decoded sweep: non-finite intensities of
    finite points, channel indices outside the lidar's table, point times outside
    ``time_range_us`` (the rig poses' range). Non-finite points are not a problem: they are
    dropped (:func:`checked_sweep`); lidars write NaN for rays without a return."""
    problems = []
    finite = np.isfinite(sweep.points).all(axis=1)
    if not np.all(np.isfinite(sweep.intensity[finite])):
        problems.append(("intensity", "non-finite intensity values"))
    if len(sweep) and (sweep.channel.min() < 0 or sweep.channel.max() >= channels):
        problems.append(("channel", f"channel indices must lie in [0, {channels - 1}] (the lidar's "
                                    f"elevation_deg table), found {int(sweep.channel.min())}.."
                                    f"{int(sweep.channel.max())}"))
    if len(sweep) and time_range_us is not None:
        lo, hi = int(sweep.timestamps_us.min()), int(sweep.timestamps_us.max())
        if lo < time_range_us[0] or hi > time_range_us[1]:
            problems.append(("time_offset_us", f"point times {lo}..{hi} us lie outside the rig poses' range "
                                               f"{time_range_us[0]}..{time_range_us[1]} us"))
    return problems


def checked_sweep(path: Path, sweep: LidarSweep, channels: int, time_range_us: tuple[int, int] | None = None
                  ) -> LidarSweep:
    """``sweep`` without its non-finite points (their count in ``dropped_nonfinite``), or
    ``SweepFormatError`` naming the first of :func:`sweep_problems`."""
    problems = sweep_problems(sweep, channels, time_range_us)
    if problems:
        raise SweepFormatError(path, *problems[0])
    finite = np.isfinite(sweep.points).all(axis=1)
    if finite.all():
        return sweep
    return LidarSweep(points=sweep.points[finite], intensity=sweep.intensity[finite],
                      timestamps_us=sweep.timestamps_us[finite], channel=sweep.channel[finite],
                      dropped_nonfinite=int((~finite).sum()))
