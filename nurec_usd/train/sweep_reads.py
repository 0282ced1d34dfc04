"""A capture's lidar sweeps read onto the training device.

An ``.nrl`` sweep travels as its file's bytes (read into a pinned buffer, one copy) and is
decoded, checked and split (the returns ``keep`` refuses) on the device: in numpy those steps
were most of a sweep's host time, several times that of reading the file. Other formats (``.ply``, ``.pcd``) are read and
checked on the host. A sweep the device finds wrong is read again on the host, whose checks raise
the error that names the file and the field."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from nurec_usd.capture.model import Lidar
from nurec_usd.capture.sweep_io import NRL_BYTES_PER_POINT, NRL_HEADER_BYTES, SweepFormatError, read_nrl_header

# (lidar id, points [N, 3] lidar frame) -> [N] bool: the returns to use
KeepFn = Callable[[str, torch.Tensor], torch.Tensor]


@dataclass
class DeviceSweep:
    """One sweep on the device: its kept returns, the returns ``keep`` refused, and its flags."""

    points: torch.Tensor  # [N, 3] float32, lidar frame
    intensity: torch.Tensor  # [N] float32
    channel: torch.Tensor  # [N] int64
    times_s: torch.Tensor  # [N] float64, each point's firing time, seconds since the capture start
    dropped: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # (points, intensity, channel); None: none
    compensated: bool  # every point carries the sweep's timestamp (compensated by the source)
    nonfinite: int  # points dropped for non-finite coordinates


@dataclass
class _Columns:
    """A sweep's columns on the device, not yet checked or split."""

    points: torch.Tensor  # [N, 3] float32
    intensity: torch.Tensor  # [N] float32
    channel: torch.Tensor  # [N] int64
    times_us: torch.Tensor  # [N] int64, absolute firing times
    checked: bool  # read and checked on the host (non-finite points already dropped)
    nonfinite: int  # points the host dropped for non-finite coordinates


_pinned = threading.local()  # per reading thread: a pinned buffer the file is read into


def _pinned_buffer(size: int) -> torch.Tensor:
    buf = getattr(_pinned, "buffer", None)
    if buf is None or buf.numel() < size:
        buf = _pinned.buffer = torch.empty(max(size, 1 << 20), dtype=torch.uint8, pin_memory=True)
    return buf[:size]


def _nrl_columns(path, device: torch.device) -> _Columns:
    """An ``.nrl`` file's columns on ``device``, decoded there from the file's bytes."""
    n, base = read_nrl_header(path)
    size = NRL_HEADER_BYTES + n * NRL_BYTES_PER_POINT
    if device.type == "cuda":
        host = _pinned_buffer(size)
    else:
        host = torch.empty(size, dtype=torch.uint8)
    with open(path, "rb") as f:
        got = f.readinto(memoryview(host.numpy()))
    if got != size:  # the file changed since its header was checked
        raise SweepFormatError(path, "header.point_count", f"file truncated: {n} points need {size} bytes, read {got}")
    raw = host.to(device) if device.type == "cuda" else host  # synchronous: the pinned buffer is free again
    o = NRL_HEADER_BYTES
    points = raw[o:o + 12 * n].view(torch.float32).view(n, 3)
    o += 12 * n
    intensity = raw[o:o + 4 * n].view(torch.float32)
    o += 4 * n
    times_us = raw[o:o + 4 * n].view(torch.int32).long() + base
    o += 4 * n
    channel = raw[o:o + 2 * n].view(torch.int16).long() & 0xFFFF  # stored as uint16
    return _Columns(points, intensity, channel, times_us, checked=False, nonfinite=0)


def read_columns(lidar: Lidar, index: int, device: torch.device) -> _Columns:
    """Sweep ``index`` of ``lidar`` read onto ``device`` (the part a read-ahead thread does)."""
    path = lidar.sweeps[index].path
    if path.suffix.lower() == ".nrl" and sys.byteorder == "little":  # the file is little-endian
        return _nrl_columns(path, device)
    sweep = lidar.load_sweep(index)  # other formats: read and checked on the host

    def put(a: np.ndarray, dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=dtype)).to(device)

    return _Columns(put(sweep.points, np.float32), put(sweep.intensity, np.float32), put(sweep.channel, np.int64),
                    put(sweep.timestamps_us, np.int64), checked=True, nonfinite=sweep.dropped_nonfinite)


def checked_sweep(columns: _Columns, lidar: Lidar, index: int, keep: KeepFn | None, start_us: int) -> DeviceSweep:
    """The sweep's columns checked as ``Lidar.load_sweep`` checks them, without its non-finite
    points, split by ``keep``; one read-back. A problem found here raises the host's error."""
    c = columns
    timestamp_us = lidar.sweeps[index].timestamp_us
    finite = torch.isfinite(c.points).all(1)  # [N]
    problem = torch.zeros((), dtype=torch.bool, device=c.points.device)
    if not c.checked:
        problem = (~torch.isfinite(c.intensity) & finite).any() | (c.channel < 0).any() \
            | (c.channel >= lidar.channels).any()
        if lidar.time_range_us is not None:
            lo, hi = lidar.time_range_us
            problem = problem | (c.times_us < lo).any() | (c.times_us > hi).any()
    use = finite if keep is None else finite & keep(lidar.id, c.points)
    compensated = finite.any() & (~finite | (c.times_us == timestamp_us)).all()
    flags = torch.stack([problem.long(), compensated.long(), (~finite).sum(), finite.sum() - use.sum()]).tolist()
    if flags[0]:
        lidar.load_sweep(index)  # raises SweepFormatError naming the file and the field
        raise SweepFormatError(lidar.sweeps[index].path, "", "the device's checks found a problem the host's do not")
    nonfinite, dropped_count = flags[2], flags[3]
    points, intensity, channel, times_us = c.points, c.intensity, c.channel, c.times_us
    dropped = None
    if dropped_count:
        out = finite & ~use
        dropped = (points[out], intensity[out], channel[out])
    if nonfinite or dropped_count:
        points, intensity, channel, times_us = points[use], intensity[use], channel[use], times_us[use]
    times_s = (times_us - start_us).double() * 1e-6  # as Capture.seconds
    return DeviceSweep(points.contiguous(), intensity.contiguous(), channel, times_s, dropped, bool(flags[1]),
                       c.nonfinite + nonfinite)
