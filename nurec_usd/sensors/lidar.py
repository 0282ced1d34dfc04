"""Spinning lidar model: beam directions, firing times, and which beam/column saw a point.

Lidar frame: x forward, y left, z up. Azimuth is measured from +x toward +y (about +z);
elevation is positive above the xy plane. Column k of a sweep fires ``k / (columns * scan_rate_hz)``
seconds after the sweep start, at azimuth ``start_azimuth + s * 360 * k / columns`` degrees
(s = +1 counterclockwise, -1 clockwise seen from above). Channel c's ray at column k has azimuth
``column_azimuth + azimuth_offset[c]`` and elevation ``elevation[c]``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

__all__ = ["SpinningLidarModel"]


def _as_1d(name: str, values, dtype: torch.dtype, device) -> torch.Tensor:
    t = torch.as_tensor(values, dtype=dtype, device=device)
    if t.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite")
    return t


def _number(name: str, value) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


class SpinningLidarModel:
    """A rotating multi-channel lidar.

    Args (all but elevation_deg keyword-only, named as in the capture manifest):
        elevation_deg: per-channel elevation in degrees, in [-90, 90]; any order.  # [C]
        columns: firings per revolution.
        rotation: "clockwise" (azimuth decreases with time) or "counterclockwise", seen from above.
        scan_rate_hz: revolutions per second.
        min_range_m, max_range_m: valid range interval, 0 <= min < max.
        azimuth_offset_deg: per-channel azimuth offset in degrees; zeros when None.  # [C]
        start_azimuth_deg: azimuth of column 0 in degrees.
        dtype, device: of the stored channel tables; methods follow their inputs' dtype/device.

    Raises:
        ValueError: naming the offending field.
    """

    def __init__(
        self,
        elevation_deg: Sequence[float] | torch.Tensor,
        *,
        columns: int,
        rotation: str,
        scan_rate_hz: float,
        min_range_m: float,
        max_range_m: float,
        azimuth_offset_deg: Sequence[float] | torch.Tensor | None = None,
        start_azimuth_deg: float = 0.0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        elevation = _as_1d("elevation_deg", elevation_deg, torch.float64, "cpu")
        if elevation.numel() == 0:
            raise ValueError("elevation_deg must have at least one channel")
        if bool((elevation.abs() > 90).any()):
            raise ValueError("elevation_deg must lie in [-90, 90]")
        if azimuth_offset_deg is None:
            offset = torch.zeros_like(elevation)
        else:
            offset = _as_1d("azimuth_offset_deg", azimuth_offset_deg, torch.float64, "cpu")
            if offset.shape != elevation.shape:
                raise ValueError(
                    f"azimuth_offset_deg has {offset.numel()} entries but elevation_deg has {elevation.numel()}"
                )
        if isinstance(columns, bool) or not isinstance(columns, int) or columns <= 0:
            raise ValueError(f"columns must be a positive int, got {columns!r}")
        if rotation not in ("clockwise", "counterclockwise"):
            raise ValueError(f"rotation must be 'clockwise' or 'counterclockwise', got {rotation!r}")
        scan_rate_hz = _number("scan_rate_hz", scan_rate_hz)
        if scan_rate_hz <= 0:
            raise ValueError(f"scan_rate_hz must be > 0, got {scan_rate_hz}")
        start_azimuth_deg = _number("start_azimuth_deg", start_azimuth_deg)
        min_range_m = _number("min_range_m", min_range_m)
        max_range_m = _number("max_range_m", max_range_m)
        if min_range_m < 0:
            raise ValueError(f"min_range_m must be >= 0, got {min_range_m}")
        if max_range_m <= min_range_m:
            raise ValueError(f"max_range_m must be > min_range_m ({min_range_m}), got {max_range_m}")

        self.columns = columns
        self.rotation = rotation
        self.scan_rate_hz = float(scan_rate_hz)
        self.start_azimuth_deg = float(start_azimuth_deg)
        self.min_range_m = float(min_range_m)
        self.max_range_m = float(max_range_m)
        self.elevation_deg = elevation.to(dtype=dtype, device=device)
        self.azimuth_offset_deg = offset.to(dtype=dtype, device=device)
        # Radians, computed in float64 before the cast.
        self._elevation = torch.deg2rad(elevation).to(dtype=dtype, device=device)
        self._offset = torch.deg2rad(offset).to(dtype=dtype, device=device)

    @property
    def channels(self) -> int:
        """Number of channels (beams)."""
        return self._elevation.shape[0]

    @property
    def sign(self) -> float:
        """+1 for counterclockwise (azimuth grows with time), -1 for clockwise."""
        return 1.0 if self.rotation == "counterclockwise" else -1.0

    @property
    def sweep_duration_s(self) -> float:
        """Duration of one revolution in seconds."""
        return 1.0 / self.scan_rate_hz

    def column_azimuths(self) -> torch.Tensor:
        """Azimuth of each column in radians (not wrapped).  Returns: [columns]"""
        k = torch.arange(self.columns, dtype=torch.float64)
        az = math.radians(self.start_azimuth_deg) + self.sign * 2 * math.pi * k / self.columns
        return az.to(dtype=self._elevation.dtype, device=self._elevation.device)

    def ray_directions(self) -> torch.Tensor:
        """Unit ray direction of every (channel, column) in the lidar frame.

        Returns:
            Directions (cos el cos az, cos el sin az, sin el).  # [C, columns, 3]
        """
        az = self.column_azimuths()[None, :] + self._offset[:, None]  # [C, columns]
        el = self._elevation[:, None].expand_as(az)
        return torch.stack((torch.cos(el) * torch.cos(az), torch.cos(el) * torch.sin(az), torch.sin(el)), dim=-1)

    def firing_time_offsets(self) -> torch.Tensor:
        """Firing time of each column after the sweep start, in seconds (float64).

        Returns:
            ``k / (columns * scan_rate_hz)``, spanning [0, 1 / scan_rate_hz).  # [columns]
        """
        k = torch.arange(self.columns, dtype=torch.float64, device=self._elevation.device)
        return k / (self.columns * self.scan_rate_hz)

    @staticmethod
    def spherical(points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Spherical coordinates of lidar-frame points.

        Args:
            points: points in the lidar frame.  # [..., 3]

        Returns:
            azimuth: radians from +x toward +y, wrapped to (-pi, pi].  # [...]
            elevation: radians above the xy plane, in [-pi/2, pi/2].  # [...]
            range: distance from the origin in metres.  # [...]
        """
        x, y, z = points.unbind(-1)
        az = torch.atan2(y, x)
        # atan2 returns -pi for y = -0.0, x < 0; map it to +pi to keep the interval half-open.
        az = torch.where(az <= -math.pi, az + 2 * math.pi, az)
        rho_sq = x * x + y * y
        r_sq = rho_sq + z * z
        # Dummy values at the origin / on the z axis keep sqrt's gradient finite.
        rho = torch.sqrt(torch.where(rho_sq > 0, rho_sq, torch.ones_like(rho_sq)))
        rho = torch.where(rho_sq > 0, rho, torch.zeros_like(rho))
        rng = torch.sqrt(torch.where(r_sq > 0, r_sq, torch.ones_like(r_sq)))
        rng = torch.where(r_sq > 0, rng, torch.zeros_like(rng))
        el = torch.atan2(z, rho)
        return az, el, rng

    def channel_and_column(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Channel and continuous column index of lidar-frame points.

        Args:
            points: points in the lidar frame.  # [..., 3]

        Returns:
            channel: the channel with the nearest elevation (long).  # [...]
            column: continuous column index in [0, columns): column k fires at exactly k, taking
                the rotation direction, start azimuth, the channel's azimuth offset and the
                wrap-around into account.  # [...]
        """
        az, el, _ = self.spherical(points)
        elevation = self._elevation.to(dtype=points.dtype, device=points.device)
        offset = self._offset.to(dtype=points.dtype, device=points.device)
        channel = (el[..., None] - elevation).abs().argmin(dim=-1)
        az_column = az - offset[channel]  # azimuth of the column the channel's beam belongs to
        turns = self.sign * (az_column - math.radians(self.start_azimuth_deg)) / (2 * math.pi)
        column = torch.remainder(turns * self.columns, self.columns)
        # remainder can round up to exactly `columns` for tiny negative inputs.
        column = torch.where(column >= self.columns, column - self.columns, column)
        return channel, column

    def time_offset_of_points(self, points: torch.Tensor) -> torch.Tensor:
        """Firing time after the sweep start of the column whose beam a point falls in.

        The point is assigned to the nearest column (column k covers [k - 0.5, k + 0.5), wrapping).

        Args:
            points: points in the lidar frame.  # [..., 3]

        Returns:
            Seconds after the sweep start, in [0, 1 / scan_rate_hz), float64.  # [...]
        """
        _, column = self.channel_and_column(points)
        k = torch.remainder(torch.round(column), self.columns)
        return k.to(torch.float64) / (self.columns * self.scan_rate_hz)

    def __repr__(self) -> str:
        return (
            f"SpinningLidarModel(channels={self.channels}, columns={self.columns}, rotation={self.rotation!r}, "
            f"scan_rate_hz={self.scan_rate_hz}, start_azimuth_deg={self.start_azimuth_deg}, "
            f"range=[{self.min_range_m}, {self.max_range_m}] m)"
        )
