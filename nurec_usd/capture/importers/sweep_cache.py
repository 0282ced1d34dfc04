"""Lidar sweeps that an importer converts once to ``.nrl``, and the spinning model it describes them with.

The DGP and KITTI importers convert a lidar's sweeps into one cache folder,
``cache_root()/<key>/`` (``key``: a hash of the inputs; ``lookup`` finds a finished one), holding the
``.nrl`` files and a ``lidar.json`` (``SPEC_NAME``): the estimated spinning model
(``elevation_deg``, ``columns``, ``rotation``, ``scan_rate_hz``, ``start_azimuth_deg``,
``min_range_m``, ``max_range_m``), ``sweeps`` (``timestamp_us`` and ``file`` each) and the
importer's notes (``method``, ``note``, ``intensity_scale``, ``cache``). The folder is built
in a staged sibling and renamed into place whole (``staged_folder`` and ``publish_spec``),
so a folder that is there is complete; ``cached_spec`` still checks every sweep header.
The NCore importer caches a whole converted capture in ``cache_root()`` the same way.

The channel helpers (``spherical``, ``nearest_channel``, ``ring_columns``, ...) are the
pieces of the model estimation that the importers share.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from nurec_usd.capture.model import Lidar, LidarSweepFile
from nurec_usd.capture.staging import StagedDirectory
from nurec_usd.capture.sweep_io import SweepFormatError, read_nrl_header

SPEC_NAME = "lidar.json"
TABLE_SAMPLE_SWEEPS = 16  # sweeps read to estimate a channel table (evenly spaced)
# What an importer reports about its estimate, kept out of the Lidar itself.
SPEC_INFO = ("method", "note", "intensity_scale", "cache")


# --------------------------------------------------------------------------------------
# The cache folder


def cache_root() -> Path:
    """Where imported sweeps are cached: ``$XDG_CACHE_HOME/nurec_usd/imports`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nurec_usd" / "imports"


def inputs_key(header: str, files: Iterable[tuple[str, Path, str]],
               error: Callable[[str, str, str], Exception]) -> str:
    """The cache key of some input files: the sha256 of ``header`` then, per file, its
    ``tag`` and its bytes (32 hex digits).

    ``files`` yields ``(tag, path, rel)``; a file that cannot be read raises
    ``error(rel, "", message)``.
    """
    h = hashlib.sha256(header.encode())
    for tag, path, rel in files:
        h.update(tag.encode())
        try:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as exc:
            raise error(rel, "", f"cannot read the file ({exc})") from None
    return h.hexdigest()[:32]


def lookup(header: str, files: Iterable[tuple[str, Path, str]],
           error: Callable[[str, str, str], Exception]) -> tuple[str, Path, dict[str, Any] | None]:
    """The cache key of some input files (``inputs_key``), its folder, and the lidar already
    converted there (None: convert it)."""
    key = inputs_key(header, files, error)
    folder = cache_root() / key
    return key, folder, cached_spec(folder)


def cached_spec(folder: Path) -> dict[str, Any] | None:
    """The converted lidar in ``folder`` (its ``lidar.json`` plus ``folder``), or None when
    absent or incomplete."""
    try:
        spec = json.loads((folder / SPEC_NAME).read_text(encoding="utf-8"))
        for s in spec["sweeps"]:
            _, base = read_nrl_header(folder / s["file"])
            if base != s["timestamp_us"]:
                return None
    except (OSError, ValueError, KeyError, TypeError, SweepFormatError):
        return None
    spec["folder"] = str(folder)
    return spec


@contextmanager
def staged_folder(folder: Path) -> Iterator[StagedDirectory]:
    """A ``StagedDirectory`` for ``folder`` (replacing a damaged one on commit), dropped when
    the block raises."""
    stage = StagedDirectory(folder, overwrite=folder.exists())
    try:
        yield stage
    except BaseException:
        stage.abort()
        raise


def publish_spec(stage: StagedDirectory, spec: dict[str, Any]) -> dict[str, Any]:
    """Write ``spec`` as the stage's ``lidar.json`` and move the stage into place.

    Returns ``spec`` with its ``folder``; when another process converted the same inputs
    meanwhile, theirs (this stage is dropped).
    """
    (stage.path / SPEC_NAME).write_text(json.dumps(spec, indent=1), encoding="utf-8")
    try:
        stage.commit()
    except FileExistsError:  # another process converted the same inputs meanwhile: use theirs
        stage.abort()
        theirs = cached_spec(stage.out_dir)
        if theirs is not None:
            return theirs
        raise
    spec["folder"] = str(stage.out_dir)
    return spec


def lidar_from_spec(spec: dict[str, Any], lidar_id: str, T_rig_lidar: np.ndarray) -> tuple[Lidar, dict[str, Any]]:
    """The ``Lidar`` of a converted (cached) spec, and what the importer noted about it (``SPEC_INFO``)."""
    folder = Path(spec["folder"])
    lidar = Lidar(
        id=lidar_id, T_rig_lidar=T_rig_lidar.copy(),
        elevation_deg=np.asarray(spec["elevation_deg"], dtype=np.float64),
        azimuth_offset_deg=np.zeros(len(spec["elevation_deg"])), columns=int(spec["columns"]),
        rotation=spec["rotation"], scan_rate_hz=float(spec["scan_rate_hz"]),
        start_azimuth_deg=float(spec["start_azimuth_deg"]), min_range_m=float(spec["min_range_m"]),
        max_range_m=float(spec["max_range_m"]),
        sweeps=tuple(LidarSweepFile(int(s["timestamp_us"]), folder / s["file"]) for s in spec["sweeps"]))
    return lidar, {k: spec[k] for k in SPEC_INFO}


# --------------------------------------------------------------------------------------
# Estimating the spinning model


def sample_indices(count: int, most: int = TABLE_SAMPLE_SWEEPS) -> np.ndarray:
    """Up to ``most`` evenly spaced indices into ``count`` sweeps (first and last included)."""
    return np.unique(np.linspace(0, count - 1, min(count, most)).round().astype(int))


def spherical(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(azimuth deg, elevation deg, range m) of lidar-frame points, azimuth from +x toward +y (float64)."""
    p = np.asarray(xyz, dtype=np.float64)
    rho = np.hypot(p[:, 0], p[:, 1])
    return np.degrees(np.arctan2(p[:, 1], p[:, 0])), np.degrees(np.arctan2(p[:, 2], rho)), np.hypot(rho, p[:, 2])


def nearest_channel(elevation_deg: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index into ``table`` (any order) of the elevation nearest to each point's. ``[N]`` -> ``[N]`` int64."""
    table = np.asarray(table, dtype=np.float64)
    if len(table) == 1 or len(elevation_deg) == 0:
        return np.zeros(len(elevation_deg), dtype=np.int64)
    order = np.argsort(table, kind="stable")
    ascending = table[order]
    i = np.clip(np.searchsorted(ascending, elevation_deg), 1, len(ascending) - 1)
    nearest = np.where(np.abs(elevation_deg - ascending[i - 1]) <= np.abs(ascending[i] - elevation_deg), i - 1, i)
    return order[nearest].astype(np.int64)


def ring_columns(xyz: np.ndarray, table: np.ndarray) -> int | None:
    """Firings per revolution of a spinning lidar's sweep (lidar-frame points, channel
    elevation ``table``): from the median azimuth step between neighbouring points of a
    channel; None when no channel has 50 such steps."""
    azimuth_deg, elevation_deg, _ = spherical(xyz)
    channel = nearest_channel(elevation_deg, table)
    steps = []
    for c in np.unique(channel):
        d = np.diff(np.sort(azimuth_deg[channel == c]))
        d = d[d > 1e-4]
        if len(d) >= 50:
            steps.append(np.median(d))
    return int(np.clip(round(360.0 / float(np.median(steps))), 16, 16384)) if steps else None


def columns_from_counts(point_counts: list[int], channels: int) -> int:
    """Firings per revolution assuming every firing of every channel returns a point."""
    return int(np.clip(round(float(np.median(point_counts)) / channels), 16, 16384))


def intensity_scale(max_intensity: float) -> float:
    """Raw 8-bit intensities become [0, 1], the format's convention; already-normalised ones stay."""
    return 1.0 if max_intensity <= 1.0 else (1 / 255 if max_intensity <= 255 else 1 / max_intensity)


def range_limits(r_min: float, r_max: float) -> tuple[float, float]:
    """The model's (min_range_m, max_range_m) from the nearest and farthest points seen
    (``r_min`` infinite: no point at all)."""
    if not math.isfinite(r_min):
        r_min, r_max = 0.0, 1.0
    min_range = max(0.0, math.floor(r_min * 10) / 10)
    return min_range, float(max(math.ceil(r_max), min_range + 1.0))
