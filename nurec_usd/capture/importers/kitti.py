"""KITTI raw recordings (the synced + rectified ``*_sync`` drives) read into a ``Capture``.

One drive is a folder ``<date>/<date>_drive_<nnnn>_sync/`` holding one folder per sensor
stream, each with ``data/`` (one file per frame, named by its 10-digit index) and
``timestamps.txt`` (one line per index)::

    2011_09_26/
      calib_cam_to_cam.txt  calib_velo_to_cam.txt  calib_imu_to_velo.txt
      2011_09_26_drive_0001_sync/
        image_00/ image_01/            rectified grayscale stereo pair (left, right)
        image_02/ image_03/            rectified colour stereo pair (left, right)
        velodyne_points/data/*.bin     + timestamps.txt, timestamps_start.txt, timestamps_end.txt
        oxts/data/*.txt                + timestamps.txt

``load`` accepts the drive folder (calibration files are looked for in it, then in its
parent, the date folder) or a date folder holding exactly one drive. Facts of the format
relied on (KITTI's raw-data devkit readme and its ``convertOxtsToPose`` description, the
IJRR 2013 paper "Vision meets Robotics: The KITTI Dataset"):

* ``timestamps*.txt``: one ``YYYY-MM-DD HH:MM:SS.fffffffff`` per line, line ``i`` for
  ``data/<i>.*``. No time zone is given; they are read as UTC (any epoch will do, only
  differences matter). Nanoseconds are rounded to the nearest microsecond. A drive may
  lack some data files (their lines are skipped). Copies often drop ``timestamps.txt``: a
  stream without one takes the times of another stream's by index (the ``_sync`` streams are
  synchronised frame by frame: velodyne, then the cameras, then oxts, first present), and when no
  stream has one, frame ``i`` is at ``i x 0.1 s`` (KITTI's nominal 10 Hz); either way with a
  warning that says so;
* calibration files are ``key: values`` lines, matrices row-major. ``calib_velo_to_cam``
  ``R|T`` maps velodyne points into the (unrectified) camera 0 frame; ``calib_imu_to_velo``
  ``R|T`` maps GPS/IMU points into the velodyne frame; ``calib_cam_to_cam`` has
  ``R_rect_00`` (rotation of unrectified camera 0 into the rectified frame) and
  ``P_rect_0i`` (3x4 projection of rectified camera ``i``, valid for the ``_sync`` images),
  so a velodyne point projects as ``P_rect_0i R_rect_00 T_cam0_velo x``. Writing
  ``P_rect_0i = K_i [I | t_i]`` gives each rectified camera's intrinsics ``K_i`` and its
  offset ``t_i = K_i^-1 P_rect_0i[:, 3]`` from rectified camera 0 (the stereo baseline):
  ``x_cam_i = R_rect_00 T_cam0_velo x + t_i``, axes as OpenCV's (x right, y down, z forward);
* images are rectified, undistorted and taken by global-shutter CCD cameras: ``pinhole``
  cameras with a global shutter. Pixel coordinates are taken as OpenCV's (centre of the
  top-left pixel at (0, 0)), as the common KITTI tools use them;
* velodyne scans (HDL-64E: 64 channels, ~10 Hz) are ``float32 x, y, z, reflectance``
  rows in the velodyne frame (x forward, y left, z up; our lidar frame). In the raw data
  they are *not* motion compensated (unlike the odometry benchmark's copies): each point
  sits where the sensor was when it fired. ``timestamps_start`` / ``timestamps_end`` bound
  each revolution and the cameras are triggered when the scanner faces forward, half-way
  through it; the head turns counterclockwise seen from above, so a revolution starts and
  ends facing backwards (azimuth 180 deg);
* oxts files hold 30 values: ``lat lon alt`` (deg, deg, m), ``roll pitch yaw`` (rad;
  roll positive = left side up, pitch positive = front down, yaw 0 = east, positive
  counterclockwise), then velocities, accelerations, rates and status fields (read but
  unused). The devkit turns them into poses with a Mercator projection scaled by the
  cosine of the *first* latitude (``mx = s R lon``, ``my = s R ln tan((90 + lat) / 2)``,
  ``R = 6378137 m``) and the rotation ``Rz(yaw) Ry(pitch) Rx(roll)``. That rotation makes
  the oxts frame x forward, y left, z up (the readme's table says "y right, z down", but
  the conversion and the near-identity ``calib_imu_to_velo`` rotation say otherwise).

How it maps to a ``Capture``:

* rig: the oxts (GPS/IMU) frame, posed by the oxts records (world: Mercator east, north,
  altitude up, re-centred on the first rig pose; ``metadata["geodetic_origin"]`` is that
  pose's latitude, longitude and altitude). Without an ``oxts`` folder the rig is the
  velodyne frame and its trajectory is *estimated* from the scans (below); the world is
  then the velodyne frame at the middle of the first revolution.
  ``metadata["rig_frame"]`` says which. The sensors' data reach beyond the rig's keys
  (the first revolution starts ~50 ms before the first oxts record, the last ends after
  the last), so the trajectory is extended at both ends by constant-velocity
  extrapolation from its first / last two keys (``metadata["kitti"]["rig_extrapolated_s"]``);
* cameras ``image_00`` ... ``image_03`` (those present): pinhole, from ``P_rect_0i``;
  ``T_rig_camera`` through ``R_rect_00``, ``calib_velo_to_cam`` (and ``calib_imu_to_velo``
  for the oxts rig). The PNGs stay where they are;
* lidar ``velodyne``: counterclockwise, starting at azimuth 180 deg, one revolution per
  ``timestamps_start .. timestamps_end`` (sweep timestamp = the start). Each point's time
  comes from its azimuth within that span. Without the start / end files the revolution
  is centred on ``timestamps.txt`` with the median spacing of the scans as its length.
  The scans store their points laser by laser, each laser's in azimuth order over one
  revolution; that order gives each point its laser (``sweep_cache.rings_from_scan_order``),
  so channel i is the file's i-th laser, at the median elevation of its points. Scans that
  are not stored so get a table estimated from the points' elevations
  (``sweep_cache.estimate_channel_table``: rings when they are sharp, else 64 elevation
  quantiles, which mix neighbouring lasers: the HDL-64E's beams start off the sensor's
  origin, which blurs its rings). Scans are converted once to
  ``.nrl`` in a cache folder (``$XDG_CACHE_HOME/nurec_usd/imports/<sha256 of the inputs>/``,
  written whole, then renamed into place);
* without oxts, the trajectory comes from lidar odometry with open3d: each scan, deskewed
  to the middle of its revolution with a constant-velocity model, is registered by
  point-to-plane ICP (robust Tukey kernel, coarse to fine voxel grids) to a small local
  map of the previous scans; the relative poses are chained. The result is cached with
  the converted scans, flagged in ``metadata["poses_estimated"]`` and
  ``metadata["warnings"]``: it drifts with the distance travelled and is not gravity
  aligned.

Every file is read from inside the drive folder (calibration: the folder it is found in),
symlinks included (``nurec_usd.capture.paths``). Files missing from a ``data/`` folder are gaps,
always skipped with a warning (``skip_missing`` changes nothing here).

Unsupported: ``*_extract`` drives (unrectified images, text scans), tracklet labels.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.images import IMAGE_SUFFIXES, image_size
from nurec_usd.capture.importers import sweep_cache
from nurec_usd.capture.importers.common import invert_rigid
from nurec_usd.capture.importers.sweep_cache import estimate_channel_table
from nurec_usd.capture.model import Camera, CameraFrame, Capture, Lidar, RigTrajectory, RollingShutter
from nurec_usd.capture.paths import ensure_inside
from nurec_usd.capture.sweep_io import write_nrl

__all__ = [
    "KITTIWarning", "detect", "load", "parse_timestamp_us", "read_calibration", "read_velodyne",
    "mercator_scale", "latlon_to_mercator", "mercator_to_latlon", "oxts_rotation", "oxts_poses",
    "rectified_camera", "sweep_time_offsets", "extend_trajectory", "POSES_ESTIMATED",
]

# Bump when the conversion of scans, the cached lidar description or the odometry changes.
CACHE_VERSION = 2  # 2: channels from the scans' laser-by-laser order
CALIB_CAM_TO_CAM = "calib_cam_to_cam.txt"
CALIB_VELO_TO_CAM = "calib_velo_to_cam.txt"
CALIB_IMU_TO_VELO = "calib_imu_to_velo.txt"
CALIB_FILES = (CALIB_CAM_TO_CAM, CALIB_VELO_TO_CAM, CALIB_IMU_TO_VELO)
CAMERAS = {"image_00": "left grayscale", "image_01": "right grayscale",
           "image_02": "left colour", "image_03": "right colour"}
LIDAR_ID = "velodyne"
LIDAR_FOLDER = "velodyne_points"
OXTS_FOLDER = "oxts"
OXTS_VALUES = 30
EARTH_RADIUS_M = 6378137.0  # the devkit's Mercator radius (WGS84 equatorial)
SWEEP_START_AZIMUTH_DEG = 180.0  # a revolution starts and ends facing backwards
NOMINAL_SCAN_RATE_HZ = 10.0
NOMINAL_FRAME_US = 100_000  # frame i of a drive without any timestamps.txt is at i x 0.1 s (10 Hz)
MAX_SWEEP_SPACING_S = 0.2  # spacing beyond this: scans were dropped; use the nominal rate
EXTRAPOLATION_WARN_S = 0.15  # extending the rig further than this is reported as a warning
POSES_ESTIMATED = "lidar ICP (open3d)"

# Lidar odometry (see _LidarOdometry); tuned on 16- and 64-channel spinning lidars.
ICP_MIN_RANGE_M = 2.5  # the vehicle's own returns
ICP_MAX_RANGE_M = 80.0
ICP_MAX_POINTS = 60_000  # per scan, before voxel downsampling (evenly strided)
ICP_SCALES = ((1.0, 2.0), (0.4, 0.8))  # (voxel size, max correspondence distance), metres
ICP_NORMAL_RADIUS = 6.0  # in voxels: wide enough to span neighbouring rings on the ground
ICP_MAP_SWEEPS = 5  # previous scans in the local map
ICP_ITERATIONS = 2  # register, re-deskew with the new velocity, register again
ICP_MIN_FITNESS = 0.3  # share of source points with a correspondence; below is reported

_DRIVE_NAME = re.compile(r".*_drive_\d+_(sync|extract)$")
_TIMESTAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")
_INDEX_NAME = re.compile(r"\d+")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class KITTIWarning(UserWarning):
    """Something in a KITTI drive was approximated or skipped; the capture still loaded."""


class _FileError(Exception):
    """A problem with one file (turned into a ``Problem``)."""

    def __init__(self, file: str, field: str, message: str):
        super().__init__(f"{file}: {field}: {message}")
        self.problem = Problem(file, field, message)


# --------------------------------------------------------------------------------------
# Detection


def _has_stream(folder: Path, name: str) -> bool:
    return (folder / name / "data").is_dir()


def _is_drive(path: Path) -> bool:
    try:
        streams = any(_has_stream(path, n) for n in (*CAMERAS, LIDAR_FOLDER, OXTS_FOLDER))
    except OSError:
        return False
    if not streams:
        return False
    return bool(_DRIVE_NAME.match(path.name)) or any(
        (d / c).is_file() for d in (path, path.parent) for c in CALIB_FILES)


def _drives_in(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and _DRIVE_NAME.match(p.name) and _is_drive(p))
    except OSError:
        return []


def detect(path: Path) -> bool:
    """Whether ``path`` is a KITTI raw drive folder, or a date folder (calibration + drives)."""
    path = Path(path)
    if not path.is_dir():
        return False
    if _is_drive(path):
        return True
    return any((path / c).is_file() for c in CALIB_FILES) and bool(_drives_in(path))


# --------------------------------------------------------------------------------------
# Readers: every failure names its file (relative to the date folder) and field


def parse_timestamp_us(text: str) -> int:
    """A KITTI timestamp (``2011-09-26 13:02:25.964389445``, read as UTC) as integer microseconds."""
    m = _TIMESTAMP.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"expected 'YYYY-MM-DD HH:MM:SS.fffffffff', got {text.strip()!r}")
    try:
        dt = datetime(*(int(m.group(i)) for i in range(1, 7)), tzinfo=timezone.utc)
    except ValueError as exc:
        raise ValueError(f"not a valid date/time ({exc}): {text.strip()!r}") from None
    ns = int((m.group(7) or "").ljust(9, "0"))
    return int((dt - _EPOCH) // timedelta(microseconds=1) + (ns + 500) // 1000)


def _read_text(path: Path, rel: str) -> str:
    if not path.is_file():
        raise _FileError(rel, "", "file does not exist")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _FileError(rel, "", f"cannot read the file ({exc})") from None


def read_timestamps(path: Path, rel: str) -> np.ndarray:
    """Timestamps, one per line (line ``i`` belongs to data file ``i``). Returns int64 ``[N]`` microseconds."""
    lines = _read_text(path, rel).splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise _FileError(rel, "", "no timestamps (the file is empty)")
    out = np.empty(len(lines), dtype=np.int64)
    for i, line in enumerate(lines):
        try:
            out[i] = parse_timestamp_us(line)
        except ValueError as exc:
            raise _FileError(rel, f"line {i + 1}", str(exc)) from None
    return out


def read_calibration(path: Path, rel: str) -> dict[str, Any]:
    """A KITTI calibration file: ``key: values`` per line. Numeric values become float64 arrays.

    A value that is not all numbers is kept as text (``calib_time``); ``_calib_matrix``
    complains when a needed key is text or has the wrong count.
    """
    out: dict[str, Any] = {}
    for i, line in enumerate(_read_text(path, rel).splitlines()):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not key or " " in key:
            raise _FileError(rel, f"line {i + 1}", f"expected 'key: values', got {line.strip()!r}")
        try:
            out[key] = np.array([float(v) for v in value.split()], dtype=np.float64)
        except ValueError:
            out[key] = value.strip()
    return out


def _calib_matrix(calib: dict[str, Any], key: str, shape: tuple[int, ...], rel: str) -> np.ndarray:
    if key not in calib:
        raise _FileError(rel, key, "is missing")
    value = calib[key]
    size = int(np.prod(shape))
    if isinstance(value, str):
        raise _FileError(rel, key, f"must be {size} numbers, got {value!r}")
    if value.size != size:
        raise _FileError(rel, key, f"must be {size} numbers ({'x'.join(map(str, shape))}), got {value.size}")
    if not np.all(np.isfinite(value)):
        raise _FileError(rel, key, "contains non-finite numbers")
    return value.reshape(shape)


def _rigid(R: np.ndarray, t: np.ndarray, rel: str, key: str) -> np.ndarray:
    """``R|t`` as a 4x4 transform; the rotation is re-orthonormalised (files print 7 digits)."""
    u, s, vt = np.linalg.svd(R)
    if np.abs(s - 1).max() > 1e-3 or np.linalg.det(R) <= 0:
        raise _FileError(rel, key, f"is not a rotation (singular values {np.round(s, 6).tolist()}, "
                                   f"det {np.linalg.det(R):.6g})")
    T = np.eye(4)
    T[:3, :3] = u @ vt
    T[:3, 3] = t.reshape(3)
    return T


def _calib_transform(calib: dict[str, Any], rel: str) -> np.ndarray:
    return _rigid(_calib_matrix(calib, "R", (3, 3), rel), _calib_matrix(calib, "T", (3,), rel), rel, "R")


def read_velodyne(path: Path, rel: str) -> np.ndarray:
    """A velodyne scan: float32 ``[N, 4]`` (x, y, z, reflectance), rows with non-finite or all-zero xyz dropped."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _FileError(rel, "", f"cannot read the file ({exc})") from None
    if len(data) % 16:
        raise _FileError(rel, "", f"truncated: {len(data)} bytes is not a whole number of 16-byte points "
                                  "(float32 x, y, z, reflectance)")
    pts = np.frombuffer(data, dtype="<f4").reshape(-1, 4).astype(np.float32)
    keep = np.all(np.isfinite(pts[:, :3]), axis=1) & np.any(pts[:, :3] != 0, axis=1)
    return pts[keep]


def _read_oxts(path: Path, rel: str) -> np.ndarray:
    text = _read_text(path, rel)
    try:
        values = np.array([float(v) for v in text.split()], dtype=np.float64)
    except ValueError as exc:
        raise _FileError(rel, "", f"not a list of numbers ({exc})") from None
    if values.size != OXTS_VALUES:
        raise _FileError(rel, "", f"must hold {OXTS_VALUES} values (lat lon alt roll pitch yaw ...), got {values.size}")
    if not np.all(np.isfinite(values[:6])):
        raise _FileError(rel, "", "lat, lon, alt, roll, pitch and yaw must be finite")
    if abs(values[0]) >= 90:
        raise _FileError(rel, "lat", f"latitude {values[0]} is out of range")
    return values


# --------------------------------------------------------------------------------------
# Geometry


def mercator_scale(lat_deg: float) -> float:
    """The devkit's Mercator scale: cos of the (first) latitude."""
    return math.cos(math.radians(lat_deg))


def latlon_to_mercator(lat_deg: np.ndarray, lon_deg: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Scaled Mercator coordinates (metres east, north) of latitudes / longitudes in degrees."""
    lat, lon = np.asarray(lat_deg, dtype=np.float64), np.asarray(lon_deg, dtype=np.float64)
    mx = scale * EARTH_RADIUS_M * np.radians(lon)
    my = scale * EARTH_RADIUS_M * np.log(np.tan(np.radians(90.0 + lat) / 2))
    return mx, my


def mercator_to_latlon(mx: np.ndarray, my: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of ``latlon_to_mercator``: (latitude, longitude) in degrees."""
    lon = np.degrees(np.asarray(mx, dtype=np.float64) / (scale * EARTH_RADIUS_M))
    lat = 2 * np.degrees(np.arctan(np.exp(np.asarray(my, dtype=np.float64) / (scale * EARTH_RADIUS_M)))) - 90.0
    return lat, lon


def oxts_rotation(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """oxts (x forward, y left, z up) to world (east, north, up): ``Rz(yaw) Ry(pitch) Rx(roll)``."""
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def oxts_poses(oxts: np.ndarray, scale: float | None = None) -> tuple[np.ndarray, float]:
    """oxts records ``[K, >=6]`` as poses ``[K, 4, 4]`` (oxts frame -> Mercator world), and the scale used."""
    if scale is None:
        scale = mercator_scale(float(oxts[0, 0]))
    mx, my = latlon_to_mercator(oxts[:, 0], oxts[:, 1], scale)
    T = np.repeat(np.eye(4)[None], len(oxts), axis=0)
    for k, rec in enumerate(oxts):
        T[k, :3, :3] = oxts_rotation(rec[3], rec[4], rec[5])
    T[:, 0, 3], T[:, 1, 3], T[:, 2, 3] = mx, my, oxts[:, 2]
    return T, scale


def rectified_camera(P: np.ndarray, R_rect_00: np.ndarray, T_cam0_velo: np.ndarray,
                     rel: str = "", key: str = "P") -> tuple[dict[str, float], np.ndarray]:
    """Pinhole intrinsics and ``T_velo_camera`` of a rectified camera from ``P_rect_0i = K [I | t]``.

    Raises ``_FileError`` when ``P`` has skew or is not of that form.
    """
    P = np.asarray(P, dtype=np.float64)
    if abs(P[2, 2]) < 1e-12:
        raise _FileError(rel, key, "is not a projection matrix (P[2, 2] = 0)")
    P = P / P[2, 2]
    K = P[:, :3]
    fx, fy = K[0, 0], K[1, 1]
    if not (fx > 0 and fy > 0):
        raise _FileError(rel, key, f"focal lengths must be positive, got fx={fx}, fy={fy}")
    off = max(abs(K[1, 0]), abs(K[2, 0]), abs(K[2, 1]))
    if off > 1e-9 * fx:
        raise _FileError(rel, key, "the left 3x3 block is not an upper-triangular camera matrix")
    if abs(K[0, 1]) > 1e-6 * fx:
        raise _FileError(rel, key, f"skew {K[0, 1]} is not supported (pinhole cameras have none)")
    t = np.linalg.solve(K, P[:, 3])  # rectified camera 0 -> this camera
    T_cam_rect0 = np.eye(4)
    T_cam_rect0[:3, 3] = t
    R = np.eye(4)
    R[:3, :3] = R_rect_00
    T_cam_velo = T_cam_rect0 @ R @ T_cam0_velo
    intrinsics = {"fx": float(fx), "fy": float(fy), "cx": float(K[0, 2]), "cy": float(K[1, 2])}
    return intrinsics, invert_rigid(T_cam_velo)


def _hat(w: np.ndarray) -> np.ndarray:
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])


def _so3_exp(w: np.ndarray) -> np.ndarray:
    theta = float(np.linalg.norm(w))
    K = _hat(w)
    if theta < 1e-10:
        return np.eye(3) + K
    return np.eye(3) + math.sin(theta) / theta * K + (1 - math.cos(theta)) / theta**2 * K @ K


def _so3_log(R: np.ndarray) -> np.ndarray:
    cos = min(1.0, max(-1.0, (np.trace(R) - 1) / 2))
    theta = math.acos(cos)
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / 2
    if theta < 1e-8:
        return w
    if theta > math.pi - 1e-6:  # 180 degrees: the axis from R + I
        M = (R + np.eye(3)) / 2
        axis = M[int(np.argmax(np.diag(M)))]
        return theta * axis / np.linalg.norm(axis)
    return w * theta / math.sin(theta)


def _rotate(points: np.ndarray, rotvec: np.ndarray) -> np.ndarray:
    """Rotate each point by its own rotation vector (Rodrigues). ``[N, 3]``, ``[N, 3]`` -> ``[N, 3]``."""
    theta = np.linalg.norm(rotvec, axis=1, keepdims=True)
    k = rotvec / np.maximum(theta, 1e-15)
    c, s = np.cos(theta), np.sin(theta)
    return points * c + np.cross(k, points) * s + k * np.sum(k * points, axis=1, keepdims=True) * (1 - c)


def extend_trajectory(times_us: np.ndarray, T: np.ndarray, lo_us: int, hi_us: int
                      ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Add keys at ``lo_us`` / ``hi_us`` when they lie outside the keys, by constant-velocity
    extrapolation from the two nearest keys (a single key is held).

    Returns (times ``[K']``, poses ``[K', 4, 4]``, (microseconds added before, after)).
    """
    times, T = list(np.asarray(times_us, dtype=np.int64)), list(T)

    def extrapolate(a: int, b: int, t: int) -> np.ndarray:
        Ta, Tb = T[a], T[b]
        if times[a] == times[b]:
            return Tb.copy()
        f = (t - times[b]) / (times[b] - times[a])
        out = np.eye(4)
        out[:3, :3] = Tb[:3, :3] @ _so3_exp(f * _so3_log(Ta[:3, :3].T @ Tb[:3, :3]))
        out[:3, 3] = Tb[:3, 3] + f * (Tb[:3, 3] - Ta[:3, 3])
        return out

    before = after = 0
    if lo_us < times[0]:
        before = int(times[0] - lo_us)
        pose = extrapolate(min(1, len(times) - 1), 0, lo_us)
        times.insert(0, int(lo_us))
        T.insert(0, pose)
    if hi_us > times[-1]:
        after = int(hi_us - times[-1])
        pose = extrapolate(max(len(times) - 2, 0), len(times) - 1, hi_us)
        times.append(int(hi_us))
        T.append(pose)
    return np.array(times, dtype=np.int64), np.stack(T), (before, after)


def sweep_time_offsets(xyz: np.ndarray, duration_us: float) -> np.ndarray:
    """Each point's firing time after the start of its revolution (counterclockwise from 180 deg).

    ``[N, 3]`` velodyne-frame points -> int64 ``[N]`` microseconds in ``[0, duration_us)``.
    """
    az = np.degrees(np.arctan2(xyz[:, 1].astype(np.float64), xyz[:, 0].astype(np.float64)))
    phase = np.mod(az - SWEEP_START_AZIMUTH_DEG, 360.0) / 360.0
    off = np.floor(phase * duration_us + 0.5).astype(np.int64)
    return np.minimum(off, max(int(math.ceil(duration_us)) - 1, 0))


# --------------------------------------------------------------------------------------
# Lidar odometry (when there are no oxts poses)


def _twist(T_rel: np.ndarray, dt_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Angular and linear velocity (per second) of a relative motion over ``dt_s``."""
    return _so3_log(T_rel[:3, :3]) / dt_s, T_rel[:3, 3] / dt_s


class _LidarOdometry:
    """Scan-to-local-map ICP with open3d, chaining relative motions from scan to scan.

    Each scan is deskewed to the middle of its revolution with the current velocity
    estimate (the motion from the previous scan), then registered (point-to-plane, Tukey
    kernel, coarse to fine) to the union of the previous ``ICP_MAP_SWEEPS`` deskewed scans
    placed with their estimated poses; the registration is repeated once with the scan
    re-deskewed at the velocity it implies. Poses are of the lidar at each scan's middle,
    in the frame of the first scan's middle.
    """

    def __init__(self) -> None:
        import open3d as o3d  # only needed here

        self.o3d = o3d
        self.times_us: list[int] = []
        self.poses: list[np.ndarray] = []
        self.map: deque = deque(maxlen=ICP_MAP_SWEEPS)  # per scan: {voxel: world-frame points}
        self.raw: list[tuple[np.ndarray, np.ndarray]] = []  # the first scan, until a velocity is known
        self.velocity = (np.zeros(3), np.zeros(3))
        self.notes: list[str] = []

    @staticmethod
    def _deskew(points: np.ndarray, dt_s: np.ndarray, velocity: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        w, v = velocity
        return _rotate(points, dt_s[:, None] * w[None]) + dt_s[:, None] * v[None]

    def _down(self, points: np.ndarray, voxel: float):
        pc = self.o3d.geometry.PointCloud(self.o3d.utility.Vector3dVector(points))
        return pc.voxel_down_sample(voxel)

    def _map_entry(self, points: np.ndarray, T_world: np.ndarray) -> dict[float, np.ndarray]:
        world = points @ T_world[:3, :3].T + T_world[:3, 3]
        return {voxel: np.asarray(self._down(world, voxel).points) for voxel, _ in ICP_SCALES}

    def _register(self, points: np.ndarray, init: np.ndarray) -> tuple[np.ndarray, float]:
        reg = self.o3d.pipelines.registration
        T, fitness = init, 0.0
        for voxel, dist in ICP_SCALES:
            target = self._down(np.concatenate([m[voxel] for m in self.map]), voxel)
            if len(target.points) < 100:  # nothing to register to (empty scans before this one)
                return T, 0.0
            target.estimate_normals(self.o3d.geometry.KDTreeSearchParamHybrid(radius=ICP_NORMAL_RADIUS * voxel,
                                                                             max_nn=30))
            source = self._down(points, voxel)
            result = reg.registration_icp(source, target, dist, T,
                                          reg.TransformationEstimationPointToPlane(reg.TukeyLoss(k=dist / 2)),
                                          reg.ICPConvergenceCriteria(max_iteration=50))
            T, fitness = np.asarray(result.transformation), float(result.fitness)
        return T, fitness

    def add(self, xyz: np.ndarray, times_us: np.ndarray, mid_us: int, label: str) -> None:
        """One scan: velodyne-frame points at their own times, and the time its pose is wanted at."""
        r = np.linalg.norm(xyz, axis=1)
        keep = (r > ICP_MIN_RANGE_M) & (r < ICP_MAX_RANGE_M)
        points = xyz[keep].astype(np.float64)
        dt = (times_us[keep] - mid_us) * 1e-6
        if len(points) > ICP_MAX_POINTS:
            step = math.ceil(len(points) / ICP_MAX_POINTS)
            points, dt = points[::step], dt[::step]
        if not self.poses:
            self.times_us.append(int(mid_us))
            self.poses.append(np.eye(4))
            self.raw = [(points, dt)]
            self.map.append(self._map_entry(points, np.eye(4)))
            return
        prev_T, span_s = self.poses[-1], (mid_us - self.times_us[-1]) * 1e-6
        if len(points) < 100 or span_s <= 0:
            self.notes.append(f"{label}: too few points for ICP; the pose follows the previous velocity")
            T = prev_T.copy()
            T[:3, :3] = prev_T[:3, :3] @ _so3_exp(self.velocity[0] * span_s)
            T[:3, 3] = prev_T[:3, 3] + prev_T[:3, :3] @ (self.velocity[1] * span_s)
        else:
            w, v = self.velocity
            guess = np.eye(4)
            guess[:3, :3], guess[:3, 3] = _so3_exp(w * span_s), v * span_s
            T = prev_T @ guess
            fitness = 0.0
            for _ in range(ICP_ITERATIONS):
                T, fitness = self._register(self._deskew(points, dt, self.velocity), T)
                self.velocity = _twist(invert_rigid(prev_T) @ T, span_s)
                if self.raw:  # the first scan was deskewed without a velocity: again, with this one
                    first, first_dt = self.raw[0]
                    self.map.clear()
                    self.map.append(self._map_entry(self._deskew(first, first_dt, self.velocity), np.eye(4)))
            self.raw = []
            if fitness < ICP_MIN_FITNESS:
                self.notes.append(f"{label}: ICP matched only {fitness:.0%} of the points; its pose may be wrong")
            points = self._deskew(points, dt, self.velocity)
        self.times_us.append(int(mid_us))
        self.poses.append(T)
        self.map.append(self._map_entry(points, T))


# --------------------------------------------------------------------------------------
# Scans -> .nrl (cached)


def _scan_order_table(rings: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray | None:
    """The channel table of scans stored laser by laser (``sweep_cache.rings_from_scan_order``):
    channel i is the i-th laser of the file, its elevation the median of its points' over the
    sampled scans. (Each laser's beam starts off the sensor's origin, by about 0.2 m on KITTI's
    HDL-64E, so its near points are seen up to a few degrees off its far ones; the spinning
    model has one origin, and the median of all points gave the sweeps' own points, binned
    with the table, the more consistent ranges: benchmarks/lidar_real_sweeps.py.) None unless
    every sampled scan has the same number of lasers (a laser without returns in some scan
    would shift the later ones' indices)."""
    counts = {int(r.max()) + 1 for r, _ in rings}
    if len(counts) != 1:
        return None
    return sweep_cache.ring_channel_table(np.concatenate([r for r, _ in rings]), np.concatenate([e for _, e in rings]))


def _channels(xyz: np.ndarray, elevation_deg: np.ndarray, table: np.ndarray, method: str) -> np.ndarray:
    """Each point's channel: its laser in the file's order when the table came from it and
    this scan has all of its lasers; else (and for lasers of a scan that lacks some) the
    channel nearest in elevation (for a laser: nearest to its points' median)."""
    if method != "scan-order rings":
        return sweep_cache.nearest_channel(elevation_deg, table)
    ring = sweep_cache.rings_from_scan_order(xyz)
    if ring is None:
        return sweep_cache.nearest_channel(elevation_deg, table)
    if int(ring.max()) + 1 == len(table):
        return ring
    medians = np.array([np.median(elevation_deg[ring == r]) if np.any(ring == r) else 0.0
                        for r in range(int(ring.max()) + 1)])
    return sweep_cache.nearest_channel(medians, table)[ring]


@dataclass(frozen=True)
class _Scan:
    index: int
    path: Path
    rel: str
    start_us: int
    duration_us: int


def convert_scans(scans: list[_Scan], odometry: bool) -> dict[str, Any]:
    """Convert velodyne scans to ``.nrl`` (cached) and describe the lidar; with ``odometry``
    also estimate the lidar's trajectory. Returns the cached description (see the module doc)."""
    key, folder, spec = sweep_cache.lookup(
        f"nurec_usd kitti velodyne v{CACHE_VERSION} odometry={odometry}\n",
        ((f"{s.index} {s.start_us} {s.duration_us} ", s.path, s.rel) for s in scans), _FileError)
    if spec is not None:
        return spec

    # Pass 1: channel table, columns and intensity scale from a sample of scans.
    pick = sweep_cache.sample_indices(len(scans))
    els, rngs, counts, reflect_max, table_xyz = [], [], [], 0.0, None
    rings: list[tuple[np.ndarray, np.ndarray]] | None = []  # per sampled scan: ring, elevation [N] each
    for i in pick:
        pts = read_velodyne(scans[i].path, scans[i].rel)
        _, el, rng = sweep_cache.spherical(pts[:, :3])
        ring = sweep_cache.rings_from_scan_order(pts[:, :3]) if rings is not None else None
        rings = None if ring is None else rings + [(ring, el)]
        step = max(1, len(el) // 200_000)
        els.append(el[::step])
        rngs.append(rng[::step])
        counts.append(len(pts))
        if len(pts):
            reflect_max = max(reflect_max, float(np.nanmax(pts[:, 3])))
            if table_xyz is None or len(pts) > len(table_xyz):
                table_xyz = pts[:, :3]
    el_all, rng_all = np.concatenate(els), np.concatenate(rngs)
    if len(el_all) == 0:
        raise _FileError(scans[0].rel, "", f"none of the {len(pick)} velodyne scans sampled for the channel "
                                           "table has any point")
    table = _scan_order_table(rings) if rings else None
    if table is not None:  # channel i is the file's i-th laser: its own elevation, not the nearest ring's
        method = "scan-order rings"
        table_rings = sweep_cache.rings_from_scan_order(table_xyz)
        columns = sweep_cache.ring_columns(table_xyz, table, table_rings) if table_rings is not None else None
    else:
        table, method = estimate_channel_table(el_all, rng_all)
        table = np.sort(table)
        columns = sweep_cache.ring_columns(table_xyz, table) if method == "rings" else None
    if columns is None:
        columns = sweep_cache.columns_from_counts(counts, len(table))
    durations = np.array([s.duration_us for s in scans], dtype=np.float64)
    scan_rate = 1e6 / float(np.median(durations))
    # KITTI's reflectance is in [0, 1] already; other writers' 8-bit values are scaled.
    scale = sweep_cache.intensity_scale(reflect_max)

    # Pass 2: every scan to .nrl (and the odometry), in a staged folder moved into place whole.
    odo = _LidarOdometry() if odometry else None
    with sweep_cache.staged_folder(folder) as stage:
        entries, r_min, r_max = [], math.inf, 0.0
        for s in scans:
            pts = read_velodyne(s.path, s.rel)
            xyz = pts[:, :3]
            times = s.start_us + sweep_time_offsets(xyz, s.duration_us)
            _, el, rng = sweep_cache.spherical(xyz)
            channel = _channels(xyz, el, table, method)
            intensity = np.where(np.isfinite(pts[:, 3]), pts[:, 3] * scale, 0.0).astype(np.float32)
            name = f"{s.start_us}.nrl"
            write_nrl(stage.path / name, s.start_us, xyz, intensity, times, channel)
            entries.append({"timestamp_us": s.start_us, "file": name, "index": s.index})
            if len(rng):
                r_min, r_max = min(r_min, float(rng.min())), max(r_max, float(rng.max()))
            if odo is not None:
                odo.add(xyz, times, s.start_us + s.duration_us // 2, s.rel)
        min_range, max_range = sweep_cache.range_limits(r_min, r_max)
        spec = {
            "elevation_deg": [float(e) for e in table], "columns": columns, "rotation": "counterclockwise",
            "scan_rate_hz": scan_rate, "start_azimuth_deg": SWEEP_START_AZIMUTH_DEG, "min_range_m": min_range,
            "max_range_m": max_range, "sweeps": entries, "method": method, "intensity_scale": scale,
            "note": (f"channel table estimated from the points ({method}); columns estimated; counterclockwise "
                     "from 180 deg, each point timed by its azimuth within its revolution"),
            "cache": key,
        }
        if odo is not None:
            spec["odometry"] = {"timestamps_us": odo.times_us, "T_world_lidar": [T.tolist() for T in odo.poses],
                                "notes": odo.notes}
        return sweep_cache.publish_spec(stage, spec)


# --------------------------------------------------------------------------------------
# Loading


@dataclass
class _Stream:
    """One sensor folder: its data files by index and their timestamps."""

    files: dict[int, Path]
    timestamps_us: np.ndarray


def load(path: Path, *, skip_missing: bool = False) -> Capture:
    """Load a KITTI raw ``_sync`` drive (its folder, or a date folder holding one drive).

    ``skip_missing`` is accepted for the common interface: a drive's frames are the files its
    ``data/`` folders hold, so a missing one is a gap that is always skipped (with a warning).

    Raises:
        CaptureError: naming the file and field of every problem found.
    """
    capture, notes = _DriveLoader(_locate(Path(path))).load()
    for message in notes:
        warnings.warn(message, KITTIWarning, stacklevel=2)
    return capture


def _locate(path: Path) -> Path:
    if not path.exists():
        raise CaptureError([Problem(str(path), "", "no such file or directory")])
    if not path.is_dir():
        raise CaptureError([Problem(str(path), "", "a KITTI drive is a folder (<date>_drive_<n>_sync)")])
    if _is_drive(path):
        return path
    drives = _drives_in(path)
    if len(drives) == 1:
        return drives[0]
    what = "no drive folders" if not drives else f"{len(drives)} drives ({', '.join(d.name for d in drives)})"
    raise CaptureError([Problem(str(path), "", f"not a KITTI drive folder: {what}; pass one drive folder")])


class _DriveLoader:
    def __init__(self, drive: Path):
        self.drive = drive
        self.root = drive.parent  # messages name files relative to the date folder
        self.problems: list[Problem] = []
        self.notes: list[str] = []
        # streams without timestamps.txt -> the stream whose timestamps they take (None: nominal 10 Hz)
        self.borrowed: dict[str, str | None] = {}

    def inside(self, folder: Path, path: Path) -> bool:
        """Whether ``path`` lies inside ``folder`` once symlinks are resolved (else a problem is recorded)."""
        try:
            ensure_inside(folder, path, self.rel(path))
        except ValueError as exc:
            self.problems.append(Problem(self.rel(path), "", str(exc)))
            return False
        return True

    def plan_timestamps(self, folders: list[str]) -> None:
        """Which streams lack timestamps.txt, and what times they take instead (with a warning)."""
        # the velodyne first: the cameras are triggered by it, and oxts may be recorded at another rate
        timed = [f for f in (LIDAR_FOLDER, *CAMERAS, OXTS_FOLDER) if f in folders
                 and (self.drive / f / "timestamps.txt").exists()]
        for folder in folders:
            if folder in timed:
                continue
            source = timed[0] if timed else None
            self.borrowed[folder] = source
            if source is not None:
                self.notes.append(f"{folder} has no timestamps.txt: its frames take the times of "
                                  f"{source}/timestamps.txt by index (the _sync streams are synchronised frame "
                                  f"by frame)")
        untimed = [f for f, source in self.borrowed.items() if source is None]
        if untimed:
            self.notes.append(f"no timestamps.txt in {', '.join(untimed)}: frames are timed at KITTI's nominal "
                              f"10 Hz by index (frame i at i x 0.1 s), not by their recorded times")

    def timestamps(self, folder: str, count: int) -> tuple[np.ndarray, Path]:
        """The stream's timestamps (its own, borrowed, or nominal for ``count`` indices) and the file they are from."""
        if folder in self.borrowed and self.borrowed[folder] is None:
            return np.arange(count, dtype=np.int64) * NOMINAL_FRAME_US, self.drive / folder / "timestamps.txt"
        path = self.drive / self.borrowed.get(folder, folder) / "timestamps.txt"
        try:
            ensure_inside(self.drive, path, self.rel(path))
        except ValueError as exc:
            raise _FileError(self.rel(path), "", str(exc)) from None
        return read_timestamps(path, self.rel(path)), path

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def fail(self) -> None:
        if self.problems:
            raise CaptureError(self.problems, str(self.root))

    def calib_file(self, name: str) -> Path | None:
        for folder in (self.drive, self.drive.parent):
            if (folder / name).is_file():
                return folder / name
        return None

    def calib_folder_ok(self, name: str) -> bool:
        """Whether the calibration file (when found) lies inside the folder it was found in."""
        path = self.calib_file(name)
        return path is None or self.inside(path.parent, path)

    def calibration(self, name: str, why: str) -> tuple[dict[str, Any], str] | None:
        path = self.calib_file(name)
        if path is None:
            self.problems.append(Problem(self.rel(self.drive.parent / name), "",
                                         f"file does not exist (looked in {self.drive.name} and its parent); "
                                         f"it is needed {why}"))
            return None
        if not self.calib_folder_ok(name):
            return None
        rel = self.rel(path)
        try:
            return read_calibration(path, rel), rel
        except _FileError as exc:
            self.problems.append(exc.problem)
            return None

    def stream(self, folder: str, suffixes: tuple[str, ...]) -> _Stream | None:
        """Data files (by index) of a sensor folder and its timestamps; None (problem recorded) when unusable."""
        base = self.drive / folder
        if not self.inside(self.drive, base / "data"):
            return None
        files: dict[int, Path] = {}
        outside = 0
        for p in sorted((base / "data").iterdir()):
            if p.is_file() and p.suffix.lower() in suffixes and _INDEX_NAME.fullmatch(p.stem):
                if not self.inside(self.drive, p):
                    outside += 1
                    continue
                files[int(p.stem)] = p
        if outside:
            return None
        if not files:
            self.problems.append(Problem(self.rel(base / "data"), "", f"no {'/'.join(suffixes)} files"))
            return None
        try:
            ts, ts_path = self.timestamps(folder, max(files) + 1)
        except _FileError as exc:
            self.problems.append(exc.problem)
            return None
        beyond = [i for i in files if i >= len(ts)]
        if beyond:
            used = f" (taken for {folder}, which has none)" if ts_path.parent.name != folder else ""
            self.problems.append(Problem(self.rel(ts_path), "",
                                         f"has {len(ts)} lines, but {folder}/data/ holds files up to index "
                                         f"{max(beyond)} ({len(beyond)} files have no timestamp){used}"))
            return None
        missing = len(range(min(files), max(files) + 1)) - len(files)
        if missing:
            self.notes.append(f"{folder}: {missing} data files are missing between index {min(files)} and "
                              f"{max(files)}; those frames are skipped")
        return _Stream(files, ts)

    def times_of(self, folder: str, stream: _Stream) -> list[tuple[int, int, Path]]:
        """(timestamp, index, file), sorted by time, one per timestamp (later duplicates dropped)."""
        items = sorted((int(stream.timestamps_us[i]), i, p) for i, p in stream.files.items())
        out = [it for k, it in enumerate(items) if k == 0 or it[0] != items[k - 1][0]]
        if len(out) < len(items):
            self.notes.append(f"{folder}: {len(items) - len(out)} frames share a timestamp with another; dropped")
        order = [i for _, i, _ in items]
        if order != sorted(order):
            self.notes.append(f"{folder}: timestamps are not in file order; frames were sorted by time")
        return out

    # -- the drive ----------------------------------------------------------------------

    def load(self) -> tuple[Capture, list[str]]:
        drive = self.drive
        if drive.name.endswith("_extract"):
            raise CaptureError([Problem(self.rel(drive), "", "unsynced+unrectified (_extract) drives are not "
                                        "supported: their images are not rectified (P_rect does not apply) and "
                                        "their scans are text files; use the drive's _sync download")],
                               str(self.root))
        cam_folders = [c for c in CAMERAS if _has_stream(drive, c)]
        has_lidar, has_oxts = _has_stream(drive, LIDAR_FOLDER), _has_stream(drive, OXTS_FOLDER)
        if not has_oxts and not has_lidar:
            raise CaptureError([Problem(self.rel(drive), "", "neither oxts/ (poses) nor velodyne_points/ "
                                        "(to estimate them from) is present")], str(self.root))
        self.plan_timestamps(cam_folders + [LIDAR_FOLDER] * has_lidar + [OXTS_FOLDER] * has_oxts)

        # Calibration: velodyne <-> camera 0 for any camera, imu <-> velodyne for the oxts rig.
        T_velo_imu = None
        if has_oxts and (cam_folders or has_lidar):
            c = self.calibration(CALIB_IMU_TO_VELO, "to place the sensors on the oxts (GPS/IMU) rig")
            if c is not None:
                try:
                    T_velo_imu = _calib_transform(*c)
                except _FileError as exc:
                    self.problems.append(exc.problem)
        cam_calib = velo_calib = None
        if cam_folders:
            cam_calib = self.calibration(CALIB_CAM_TO_CAM, "for the camera intrinsics (P_rect_0i, R_rect_00)")
            velo_calib = self.calibration(CALIB_VELO_TO_CAM, "to place the cameras relative to the velodyne")

        T_cam0_velo = R_rect = None
        if velo_calib is not None:
            try:
                T_cam0_velo = _calib_transform(*velo_calib)
            except _FileError as exc:
                self.problems.append(exc.problem)
        if cam_calib is not None:
            try:
                R_rect = _rigid(_calib_matrix(cam_calib[0], "R_rect_00", (3, 3), cam_calib[1]), np.zeros(3),
                                cam_calib[1], "R_rect_00")[:3, :3]
            except _FileError as exc:
                self.problems.append(exc.problem)

        # Streams.
        cam_streams = {c: self.stream(c, IMAGE_SUFFIXES) for c in cam_folders}
        lidar_stream = None
        if has_lidar:
            data = drive / LIDAR_FOLDER / "data"
            if not any(data.glob("*.bin")) and any(data.glob("*.txt")):
                self.problems.append(Problem(self.rel(data), "", "holds text scans (an _extract drive); only the "
                                                                 "_sync .bin scans are supported"))
            else:
                lidar_stream = self.stream(LIDAR_FOLDER, (".bin",))
        scans = self.scans(lidar_stream) if lidar_stream is not None else []  # and their revolutions
        oxts = self.oxts() if has_oxts else None
        self.fail()

        # Rig frame: oxts when present, else the velodyne.
        if oxts is not None:
            T_rig_velo = invert_rigid(T_velo_imu) if T_velo_imu is not None else np.eye(4)
            rig_frame = "oxts (GPS/IMU unit: x forward, y left, z up)"
        else:
            T_rig_velo = np.eye(4)
            rig_frame = "velodyne (x forward, y left, z up)"

        cameras: dict[str, Camera] = {}
        for folder, stream in cam_streams.items():
            if stream is None or cam_calib is None or T_cam0_velo is None or R_rect is None:
                continue
            cam = self.camera(folder, stream, cam_calib, R_rect, T_cam0_velo, T_rig_velo)
            if cam is not None:
                cameras[cam.id] = cam
        self.fail()

        lidars: dict[str, Lidar] = {}
        lidar_info: dict[str, Any] = {}
        spec = None
        if scans:
            try:
                spec = convert_scans(scans, odometry=oxts is None)
            except _FileError as exc:
                self.problems.append(exc.problem)
            except OSError as exc:
                self.problems.append(Problem(str(sweep_cache.cache_root()), "",
                                             f"cannot write the converted scans ({exc})"))
            self.fail()
            lidars[LIDAR_ID], lidar_info[LIDAR_ID] = sweep_cache.lidar_from_spec(spec, LIDAR_ID, T_rig_velo)

        metadata: dict[str, Any] = {"source": "kitti", "rig_frame": rig_frame}
        kitti: dict[str, Any] = {
            "drive": drive.name, "folder": str(drive),
            "cameras": {c: CAMERAS[c] + " (rectified)" for c in cameras},
            "calibration": {n: str(p) for n in CALIB_FILES if (p := self.calib_file(n)) is not None},
        }
        if self.borrowed:  # streams without their own timestamps.txt: where their times came from
            kitti["timestamps_from"] = {f: f"{src}/timestamps.txt" if src else "nominal 10 Hz (frame i at i x 0.1 s)"
                                        for f, src in self.borrowed.items()}
        # Rig trajectory.
        if oxts is not None:
            rig_ts, rig_T, scale = oxts
            kitti["mercator_scale"] = scale
            kitti["world"] = "scaled Mercator (x east, y north, z altitude up), as KITTI's devkit converts oxts"
        else:
            odo = spec["odometry"]
            rig_ts = np.asarray(odo["timestamps_us"], dtype=np.int64)
            rig_T = np.asarray(odo["T_world_lidar"], dtype=np.float64)
            for note in odo["notes"]:
                self.notes.append(f"lidar odometry: {note}")
            metadata["poses_estimated"] = POSES_ESTIMATED
            self.notes.append(f"{drive.name} has no oxts poses: the rig (velodyne) trajectory was estimated from "
                              f"the scans by ICP; it drifts and is not gravity-aligned")
            kitti["world"] = "the velodyne frame at the middle of the first scan"
        times = [int(t) for c in cameras.values() for t in c.timestamps_us]
        for s in scans:
            times += [s.start_us, s.start_us + s.duration_us]
        lo, hi = (min(times), max(times)) if times else (int(rig_ts[0]), int(rig_ts[-1]))
        rig_ts, rig_T, (before, after) = extend_trajectory(rig_ts, rig_T, lo, hi)
        kitti["rig_extrapolated_s"] = [before / 1e6, after / 1e6]
        if max(before, after) / 1e6 > EXTRAPOLATION_WARN_S:
            self.notes.append(f"the sensor data reach {before / 1e6:.3f} s before and {after / 1e6:.3f} s after "
                              "the rig poses; the trajectory was extrapolated at constant velocity to cover them")
        for k in range(len(rig_T)):  # re-orthonormalise
            u, _, vt = np.linalg.svd(rig_T[k, :3, :3])
            rig_T[k, :3, :3] = u @ vt
        offset = rig_T[0, :3, 3].copy()
        rig_T[:, :3, 3] -= offset
        if oxts is not None:
            lat, lon = mercator_to_latlon(offset[0], offset[1], kitti["mercator_scale"])
            metadata["geodetic_origin"] = [float(lat), float(lon), float(offset[2])]
        metadata["kitti"] = kitti
        metadata["lidar_models"] = lidar_info
        metadata["warnings"] = list(self.notes)
        # inputs outside the drive folder (the calibration sits in the date folder): hashed by build
        metadata["source_files"] = [str(p) for n in CALIB_FILES if (p := self.calib_file(n)) is not None]
        capture = Capture(root=drive, name=drive.name, rig=RigTrajectory(rig_ts, rig_T), cameras=cameras,
                          lidars=lidars, tracks={}, world_offset_m=offset, metadata=metadata)
        return capture, self.notes

    def oxts(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        stream = self.stream(OXTS_FOLDER, (".txt",))
        if stream is None:
            return None
        items = self.times_of(OXTS_FOLDER, stream)
        records = []
        for _, _, p in items:
            try:
                records.append(_read_oxts(p, self.rel(p)))
            except _FileError as exc:
                self.problems.append(exc.problem)
        if len(records) != len(items):
            return None
        rec = np.stack(records)
        T, scale = oxts_poses(rec)
        return np.array([t for t, _, _ in items], dtype=np.int64), T, scale

    def scans(self, stream: _Stream) -> list[_Scan]:
        base = self.drive / LIDAR_FOLDER
        start = end = None
        present = [(base / f"timestamps_{w}.txt").is_file() for w in ("start", "end")]
        if LIDAR_FOLDER in self.borrowed and any(present):
            # the other streams' times (or nominal ones) do not share the revolution files' clock
            self.notes.append(f"{LIDAR_FOLDER}: timestamps_start.txt / timestamps_end.txt are not used without "
                              "its timestamps.txt; revolutions are centred on the times it takes instead")
            present = [False, False]
        elif any(present) and not all(self.inside(self.drive, base / f"timestamps_{w}.txt") for w in ("start", "end")
                                      if (base / f"timestamps_{w}.txt").is_file()):
            return []
        if all(present):
            try:
                start = read_timestamps(base / "timestamps_start.txt", self.rel(base / "timestamps_start.txt"))
                end = read_timestamps(base / "timestamps_end.txt", self.rel(base / "timestamps_end.txt"))
            except _FileError as exc:
                self.problems.append(exc.problem)
                return []
            for name, ts in (("timestamps_start.txt", start), ("timestamps_end.txt", end)):
                if len(ts) < len(stream.timestamps_us):
                    self.problems.append(Problem(self.rel(base / name), "", f"has {len(ts)} lines for "
                                                 f"{len(stream.timestamps_us)} in timestamps.txt"))
                    return []
        elif any(present):
            self.notes.append(f"{LIDAR_FOLDER}: only one of timestamps_start.txt / timestamps_end.txt is present; "
                              "revolutions are centred on timestamps.txt instead")
        items = self.times_of(LIDAR_FOLDER, stream)
        if start is None:
            times = np.array([t for t, _, _ in items], dtype=np.int64)
            spacing = float(np.median(np.diff(times))) * 1e-6 if len(times) > 1 else math.inf
            duration = int(round(1e6 * (spacing if 0 < spacing <= MAX_SWEEP_SPACING_S else 1 / NOMINAL_SCAN_RATE_HZ)))
            if all(not p for p in present):
                self.notes.append(f"{LIDAR_FOLDER}: no timestamps_start.txt / timestamps_end.txt; each revolution "
                                  f"is taken as {duration * 1e-3:.1f} ms centred on its timestamps.txt time")
            out = [_Scan(i, p, self.rel(p), t - duration // 2, duration) for t, i, p in items]
        else:
            out = []
            for _, i, p in items:
                s, e = int(start[i]), int(end[i])
                if not 0 < e - s <= 1_000_000:
                    self.problems.append(Problem(self.rel(base / "timestamps_end.txt"), f"line {i + 1}",
                                                 f"revolution {i} lasts {(e - s) * 1e-3:.3f} ms (start {s} us, end "
                                                 f"{e} us); expected 0 to 1000 ms"))
                    continue
                out.append(_Scan(i, p, self.rel(p), s, e - s))
            out.sort(key=lambda s: s.start_us)
            kept = [s for k, s in enumerate(out) if k == 0 or s.start_us != out[k - 1].start_us]
            if len(kept) < len(out):
                self.notes.append(f"{LIDAR_FOLDER}: {len(out) - len(kept)} scans share a start time; dropped")
            out = kept
        for s in out:  # cheap checks now, so that a broken file is reported before any conversion
            size = s.path.stat().st_size
            if size % 16:
                self.problems.append(Problem(s.rel, "", f"truncated: {size} bytes is not a whole number of 16-byte "
                                                        "points (float32 x, y, z, reflectance)"))
        return out

    def camera(self, folder: str, stream: _Stream, cam_calib: tuple[dict[str, Any], str], R_rect: np.ndarray,
               T_cam0_velo: np.ndarray, T_rig_velo: np.ndarray) -> Camera | None:
        calib, rel = cam_calib
        key = f"P_rect_{folder[-2:]}"
        try:
            intrinsics, T_velo_cam = rectified_camera(_calib_matrix(calib, key, (3, 4), rel), R_rect, T_cam0_velo,
                                                      rel, key)
        except _FileError as exc:
            self.problems.append(exc.problem)
            return None
        items = self.times_of(folder, stream)
        size = None
        frames = []
        for t, _, p in items:
            try:
                wh = image_size(p)
            except ValueError as exc:
                self.problems.append(Problem(self.rel(p), "", str(exc)))
                continue
            if size is None:
                size = wh
            elif wh != size:
                self.problems.append(Problem(self.rel(p), "", f"is {wh[0]}x{wh[1]} pixels; the first image of "
                                                              f"{folder} is {size[0]}x{size[1]}"))
                continue
            frames.append(CameraFrame(t, p))
        if size is None:
            return None
        s_key = f"S_rect_{folder[-2:]}"
        s_rect = calib.get(s_key)
        if isinstance(s_rect, np.ndarray) and s_rect.size == 2 and tuple(int(round(v)) for v in s_rect) != size:
            self.notes.append(f"{folder}: images are {size[0]}x{size[1]} but {rel} {s_key} says "
                              f"{int(round(s_rect[0]))}x{int(round(s_rect[1]))}; P_rect was used as it is")
        return Camera(folder, "pinhole", int(size[0]), int(size[1]), intrinsics, T_rig_velo @ T_velo_cam,
                      RollingShutter("global", 0), tuple(frames))
