"""Lidar sweeps that an importer converts once to ``.nrl``, and the spinning model it describes them with.

The DGP, KITTI and nuScenes importers convert a lidar's sweeps into one cache folder,
``cache_root()/<key>/`` (``key``: a hash of the inputs; ``lookup`` finds a finished one), holding the
``.nrl`` files and a ``lidar.json`` (``SPEC_NAME``): the estimated spinning model
(``elevation_deg``, ``columns``, ``rotation``, ``scan_rate_hz``, ``start_azimuth_deg``,
``min_range_m``, ``max_range_m``, ``origin_m``: where the model's origin sits in the points' own
frame, zero unless raised off the road), ``sweeps`` (``timestamp_us`` and ``file`` each) and the
importer's notes (``method``, ``note``, ``intensity_scale``, ``cache``). The folder is built
in a staged sibling and renamed into place whole (``staged_folder`` and ``publish_spec``),
so a folder that is there is complete; ``cached_spec`` still checks every sweep header.
The NCore importer caches a whole converted capture in ``cache_root()`` the same way.

The channel helpers (``spherical``, ``nearest_channel``, ``ring_columns``,
``estimate_channel_table``, ``ring_channel_table``, ...) are the pieces of the model estimation
that the importers share; ``convert_compensated_sweeps`` is the whole conversion of formats
whose points are all relative to the sweep's one pose (DGP, nuScenes).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from nurec_usd.capture.model import Lidar, LidarSweepFile
from nurec_usd.capture.sweep_io import SweepFormatError, read_nrl_header, write_nrl
from nurec_usd.util.staging import StagedDirectory

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
    mount = np.eye(4)
    mount[:3, 3] = spec.get("origin_m", (0.0, 0.0, 0.0))  # the points are relative to the model's origin
    lidar = Lidar(
        id=lidar_id, T_rig_lidar=T_rig_lidar @ mount,
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


GROUND_BAND_M = (3.0, 15.0)  # horizontal distances whose lowest returns tell where the ground is
ON_GROUND_M = 0.5  # an origin within this height of the ground is on it (no spinning lidar is mounted there)


def ground_below(xyz: np.ndarray) -> float | None:
    """The ground's height in the points' frame (z up): the 5th percentile of the heights of the
    returns 3 to 15 m away horizontally, where a vehicle's sensors see mostly road. None when
    fewer than 100 returns lie there."""
    p = np.asarray(xyz, dtype=np.float64)
    rho = np.hypot(p[:, 0], p[:, 1])
    z = p[(rho >= GROUND_BAND_M[0]) & (rho <= GROUND_BAND_M[1]) & np.isfinite(p[:, 2]), 2]
    return float(np.percentile(z, 5)) if len(z) >= 100 else None


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


def ring_columns(xyz: np.ndarray, table: np.ndarray, channel: np.ndarray | None = None) -> int | None:
    """Firings per revolution of a spinning lidar's sweep (lidar-frame points, channel
    elevation ``table``, or each point's ``channel`` when known): from the median azimuth step
    between neighbouring points of a channel; None when no channel has 50 such steps."""
    azimuth_deg, elevation_deg, _ = spherical(xyz)
    if channel is None:
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


# --------------------------------------------------------------------------------------
# Channel tables of lidars whose format has none (DGP, KITTI, NCore without a model, nuScenes)

RING_BIN_DEG = 0.02  # histogram bin: finer than the closest ring spacings (~0.1 deg)
RING_HALF_WIDTH_DEG = 0.1  # a point belongs to a ring within this of its elevation
RING_MIN_COVERAGE = 0.8  # share of points that must sit on rings to call the cloud ring-like
RING_MIN_RANGE_M = 5.0  # near points smear rings (beam origins are offset from the sensor origin)
QUANTILE_CHANNELS = 64
MAX_RING_ID = 4096  # ring ids beyond this are not a channel index


def _window(h: np.ndarray, half: int, fn) -> np.ndarray:
    padded = np.pad(h, half, mode="constant")
    return fn(np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1), axis=1)


def estimate_channel_table(elevation_deg: np.ndarray, range_m: np.ndarray) -> tuple[np.ndarray, str]:
    """An approximate channel table (elevations, degrees, ascending) for points without one.

    * ``"rings"``: a spinning lidar seen from its own origin puts its points on a few
      sharp elevations. Peaks of a fine elevation histogram (0.02 deg bins) that stand well
      above their surroundings are taken as channels when at least 80 % of the points lie
      within 0.1 deg of one (near points are left out: beam origins sit off the sensor
      origin, which smears elevations at short range).
    * ``"elevation-quantiles"``: otherwise (several merged lidars, a non-spinning scanner,
      points not seen from the sensor origin), 64 channels at evenly spaced quantiles of
      the elevations, so that channels are dense where the points are.

    Returns (elevation_deg ``[C]``, method).
    """
    el = elevation_deg[np.isfinite(elevation_deg)]
    if len(el) == 0:
        return np.array([0.0]), "elevation-quantiles"
    far = el[range_m[np.isfinite(elevation_deg)] >= RING_MIN_RANGE_M]
    sample = far if len(far) >= 1000 else el
    lo = float(sample.min())
    bins = np.floor((sample - lo) / RING_BIN_DEG).astype(np.int64)
    h = np.bincount(bins).astype(np.float64)
    background = _window(h, int(round(0.5 / RING_BIN_DEG)), np.median)  # +-0.5 deg
    local_max = h >= _window(h, 3, np.max)  # +-0.06 deg
    peaks = np.nonzero(local_max & (h >= 4 * background + 5))[0]
    if len(peaks):
        peaks = peaks[np.concatenate([[True], np.diff(peaks) > 3])]  # one per plateau
    if 2 <= len(peaks) <= 1024:
        centres = lo + (peaks + 0.5) * RING_BIN_DEG
        refined = []
        for c in centres:  # the mean elevation of each ring's points, not the bin centre
            on = sample[np.abs(sample - c) <= RING_HALF_WIDTH_DEG]
            refined.append(float(on.mean()) if len(on) else float(c))
        table = np.unique(np.round(np.array(refined), 6))
        near = np.abs(sample - table[nearest_channel(sample, table)])
        if np.mean(near <= RING_HALF_WIDTH_DEG) >= RING_MIN_COVERAGE:
            return table, "rings"
    q = (np.arange(QUANTILE_CHANNELS) + 0.5) / QUANTILE_CHANNELS
    return np.unique(np.round(np.quantile(el, q), 6)), "elevation-quantiles"


SCAN_ORDER_MIN_RINGS = 16
SCAN_ORDER_MAX_RINGS = 256
SCAN_ORDER_BACKSTEP_DEG = 0.05  # azimuth steps backwards up to this are rounding, not a new ring
SCAN_ORDER_MAX_SPREAD_DEG = 0.1  # median spread of a ring's far elevations when the rings are real
SCAN_ORDER_FAR_M = 20.0  # near points are seen off their laser's elevation (beam origins are offset)


def rings_from_scan_order(xyz: np.ndarray) -> np.ndarray | None:
    """Each point's ring (laser) index, for a sweep stored laser by laser, each laser's points
    in azimuth order over one revolution (KITTI's velodyne scans): the file order then winds
    round once per laser. ``[N, 3]`` lidar-frame points in file order -> int64 ``[N]``, or None
    when the points are not stored so.

    Every step from one point to the next is taken as a turn forward (mod 360; backward steps
    of rounding size as none); the turns the points wind through are the rings. Where one laser
    hands over to the next is the same azimuth for all of them, somewhere between where the
    last laser stops and (one turn on) where the first begins: the one that keeps the points
    of that stretch nearest their ring's elevation. There must be 16 to 256 rings, and their
    far points (beyond ``SCAN_ORDER_FAR_M``) must keep to their ring's elevation (median
    absolute spread at most ``SCAN_ORDER_MAX_SPREAD_DEG``): points in another order wind round
    far more often, or mix elevations within a turn. A laser without any return has no turn:
    ring indices count the lasers that returned points.
    """
    if len(xyz) < 100:
        return None
    azimuth, elevation, rng = spherical(xyz)
    step = np.mod(np.diff(azimuth) + SCAN_ORDER_BACKSTEP_DEG, 360.0) - SCAN_ORDER_BACKSTEP_DEG
    unwound = np.concatenate([[0.0], np.cumsum(np.maximum(step, 0.0))])  # degrees turned since the first point
    rings = int(math.ceil(unwound[-1] / 360.0 + 1e-9))
    if not SCAN_ORDER_MIN_RINGS <= rings <= SCAN_ORDER_MAX_RINGS:
        return None
    gap = rings * 360.0 - unwound[-1]  # from where the last laser stops round to where the first starts
    # The hand-over lies ``lead`` degrees before the first point, 0 <= lead <= gap; only the
    # points of each turn's last ``gap`` degrees change ring with it.
    ambiguous = np.mod(unwound, 360.0) >= 360.0 - gap
    sure = np.floor(unwound / 360.0).astype(np.int64)
    usable = rng >= SCAN_ORDER_FAR_M / 2
    median = np.full(rings + 1, np.nan)
    for r in range(rings):
        e = elevation[(sure == r) & ~ambiguous & usable]
        median[r] = np.median(e) if len(e) else np.nan
    lead = gap / 2
    test = ambiguous & usable
    if test.any() and gap > 0:
        costs = []
        candidates = np.linspace(0.0, gap, int(min(241, max(3, gap / 0.1))))
        for c in candidates:
            ring = np.floor((unwound[test] + c) / 360.0).astype(np.int64)
            costs.append(np.nansum(np.abs(elevation[test] - median[np.clip(ring, 0, rings)])))
        best = np.flatnonzero(np.isclose(costs, min(costs)))
        lead = float(candidates[best[len(best) // 2]])
    ring = np.clip(np.floor((unwound + lead) / 360.0).astype(np.int64), 0, rings - 1)
    far = rng >= SCAN_ORDER_FAR_M
    spreads = [np.median(np.abs(e - np.median(e))) for r in range(rings)
               if len(e := elevation[far & (ring == r)]) >= 10]
    if len(spreads) < SCAN_ORDER_MIN_RINGS // 2 or float(np.median(spreads)) > SCAN_ORDER_MAX_SPREAD_DEG:
        return None
    return ring


def ring_channel_table(ring_ids: np.ndarray, elevation_deg: np.ndarray) -> np.ndarray | None:
    """The channel table of points that carry their sensor's ring (laser) index: ring ``r``'s
    elevation is the median of its points' (rings without points: between their neighbours).
    ``[N]``, ``[N]`` -> ``[max ring + 1]``; None when the ids are not usable channel indices."""
    ids = np.asarray(ring_ids).astype(np.int64)
    if len(ids) == 0 or ids.min() < 0 or ids.max() >= MAX_RING_ID:
        return None
    n = int(ids.max()) + 1
    med = np.full(n, np.nan)
    for r in np.unique(ids):
        med[r] = np.median(elevation_deg[ids == r])
    seen = np.isfinite(med)
    if not seen.any():
        return None
    return np.interp(np.arange(n), np.nonzero(seen)[0], med[seen])


# --------------------------------------------------------------------------------------
# Converting sweeps whose points are all relative to one pose at the sweep's timestamp


@dataclass(frozen=True)
class CompensatedSweep:
    """One sweep to convert: its time, its file, how messages name it, and ``tag`` (what else
    than the file's bytes changes the conversion, for the cache key)."""

    timestamp_us: int
    path: Path
    rel: str
    tag: str


def convert_compensated_sweeps(header: str, sweeps: list[CompensatedSweep],
                               read: Callable[[CompensatedSweep], dict[str, np.ndarray]],
                               error: Callable[[str, str, str], Exception], *, rotation: str,
                               default_scan_rate_hz: float, max_spacing_s: float = 0.2,
                               raised_origin_m: float | None = None) -> dict[str, Any]:
    """Convert sweeps whose points are motion-compensated to the sweep's timestamp (DGP, nuScenes)
    to ``.nrl`` in the cache (``lookup``), with an estimated spinning model.

    ``read(sweep)`` returns the sweep's columns by name: ``X Y Z`` (lidar frame, float64),
    optionally ``INTENSITY`` and ``RING`` (the laser index). The channel table comes from the
    ring ids when every sampled sweep has them (``"ring-field"``), else from the points
    (``estimate_channel_table``). Every point gets the sweep's timestamp (time offset 0): its
    coordinates are relative to that one pose, and firing times from a spinning model would
    move it by up to a sweep's worth of ego motion. The spin rate is the sweeps' own when
    they are at most ``max_spacing_s`` apart, else ``default_scan_rate_hz``; ``rotation``,
    the start azimuth (0) and the columns are nominal.

    ``raised_origin_m``: when the points' origin lies on the ground (``ground_below``), as in
    clouds merged from several sensors into a vehicle frame on the road (DDAD), the model's
    origin is put this high above the ground and the points are re-expressed from there
    (``origin_m`` in the description; ``lidar_from_spec`` moves the lidar's mount with it). Seen
    from the road itself, every ground return lies at elevation 0 whatever its distance: the
    ground falls into a few channels and the model's rays graze it. None: the origin stays.

    Returns the cached description (see the module docstring), with its ``folder``.
    """
    key, folder, spec = lookup(header, ((s.tag, s.path, s.rel) for s in sweeps), error)
    if spec is not None:
        return spec

    # Pass 1: the model's origin, the channel table and the intensity scale from a sample of the sweeps.
    pick = sample_indices(len(sweeps))
    first = read(sweeps[pick[0]])
    origin = np.zeros(3)
    if raised_origin_m is not None:  # the first sweep tells where the ground is
        ground = ground_below(np.stack([first["X"], first["Y"], first["Z"]], axis=1))
        if ground is not None and abs(ground) <= ON_GROUND_M:
            origin[2] = ground + raised_origin_m
    els, rngs, rings, intensity_max, counts = [], [], [], 0.0, []
    first_xyz = None
    for k, i in enumerate(pick):
        cols = first if k == 0 else read(sweeps[i])
        xyz = np.stack([cols["X"], cols["Y"], cols["Z"]], axis=1) - origin
        _, el, rng = spherical(xyz)
        step = max(1, len(el) // 200_000)  # bounded memory for the histogram
        els.append(el[::step])
        rngs.append(rng[::step])
        counts.append(len(el))
        if "RING" in cols:
            rings.append((cols["RING"][::step], el[::step]))
        if "INTENSITY" in cols and len(cols["INTENSITY"]):
            intensity_max = max(intensity_max, float(np.nanmax(cols["INTENSITY"])))
        if first_xyz is None:
            first_xyz = xyz
    el_all, rng_all = np.concatenate(els), np.concatenate(rngs)
    ring_table = None
    if rings and len(rings) == len(pick):
        ring_table = ring_channel_table(np.concatenate([r for r, _ in rings]), np.concatenate([e for _, e in rings]))
    if ring_table is not None:
        table, method = ring_table, "ring-field"
    else:
        table, method = estimate_channel_table(el_all, rng_all)
    # the azimuth step between neighbouring points of one ring, unless there are no rings
    columns = ring_columns(first_xyz, table) if method != "elevation-quantiles" else None
    if columns is None:
        columns = columns_from_counts(counts, len(table))
    times = np.array([s.timestamp_us for s in sweeps], dtype=np.int64)
    # Consecutive sweeps give the spin rate, unless the log keeps only some sweeps (spacing
    # over max_spacing_s, slower than any driving lidar spins): then the nominal rate.
    spacing_s = float(np.median(np.diff(times))) * 1e-6 if len(times) > 1 else math.inf
    scan_rate = 1.0 / spacing_s if spacing_s <= max_spacing_s else default_scan_rate_hz
    scale = intensity_scale(intensity_max)

    # Pass 2: every sweep to .nrl, in a staged folder moved into place whole.
    with staged_folder(folder) as stage:
        entries, r_min, r_max = [], math.inf, 0.0
        for s in sweeps:
            cols = read(s)
            xyz = np.stack([cols["X"], cols["Y"], cols["Z"]], axis=1) - origin
            _, el, rng = spherical(xyz)
            channel = nearest_channel(el, table)
            if method == "ring-field" and "RING" in cols:  # the sensor's own channel where it is usable
                ring = cols["RING"].astype(np.int64)
                ok = (ring >= 0) & (ring < len(table))
                channel[ok] = ring[ok]
            intensity = cols.get("INTENSITY", np.zeros(len(xyz))) * scale
            intensity = np.where(np.isfinite(intensity), intensity, 0.0)
            name = f"{s.timestamp_us}.nrl"
            # every point at the sweep time: the points are relative to the sweep's single pose
            write_nrl(stage.path / name, s.timestamp_us, xyz.astype(np.float32), intensity.astype(np.float32),
                      np.full(len(xyz), s.timestamp_us, dtype=np.int64), channel)
            entries.append({"timestamp_us": s.timestamp_us, "file": name})
            if len(rng):
                r_min, r_max = min(r_min, float(rng.min())), max(r_max, float(rng.max()))
        min_range, max_range = range_limits(r_min, r_max)
        spec = {
            "elevation_deg": [float(e) for e in table], "columns": columns, "rotation": rotation,
            "scan_rate_hz": scan_rate, "start_azimuth_deg": 0.0, "min_range_m": min_range,
            "max_range_m": max_range, "sweeps": entries, "method": method, "intensity_scale": scale,
            "note": ("channel table estimated from the points (" + method + "); rotation, start azimuth and columns "
                     "are nominal; every point carries its sweep's timestamp (time offset 0)"
                     + (f"; the points' origin lies on the ground: the model's origin raised {origin[2]:.2f} m"
                        if origin.any() else "")),
            "cache": key, "origin_m": [float(v) for v in origin],
        }
        return publish_spec(stage, spec)
