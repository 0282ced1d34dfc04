"""DGP importer: Toyota Research Institute's scene format (the format of the DDAD dataset).

A DGP dataset is a ``scene_dataset*.json`` listing scene files by split; each scene is a
directory with a ``scene_<sha>.json`` (its datums and samples), ``calibration/<key>.json``,
``rgb/<camera>/*.jpg``, ``point_cloud/<lidar>/*.npz`` and annotations such as
``bounding_box_3d/<sensor>/*.json``. Facts of the format this importer relies on (read
from TRI-ML/dgp: its protos and ``BaseDataset``):

* a datum's ``pose`` is the pose of its *sensor* in the scene's world frame at the
  datum's timestamp (``pose_WS``); calibration ``extrinsics`` are sensor -> vehicle
  (``pose_VS``). So the vehicle (our rig) pose is ``T_world_rig = pose_WS @ inv(pose_VS)``,
  and every datum, camera or lidar, contributes a rig pose at its own time;
* point clouds are in the lidar *sensor* frame at the datum time: one pose per sweep, so
  the points are (or are treated by DGP as) motion-compensated to that instant. DDAD's
  lidar extrinsics are the identity, i.e. its "sensor frame" is the vehicle frame (x
  forward, y left, z up), which is why its clouds are described as being in the ego frame;
* cameras are OpenCV pinhole (``fx fy cx cy skew``) with optional Brown-Conrady distortion
  ``k1..k6 p1 p2``; the camera frame is OpenCV's (x right, y down, z forward);
* 3D boxes (``BoundingBox3D``) have their pose in the frame of the datum they annotate,
  origin at the box centre, x along the *length*, y along the *width*, z up. The json
  fields are named ``width``, ``length``, ``height`` (DGP's python class orders its
  ``sizes`` as W, L, H), so our ``size_m`` (length, width, height) is read by name,
  never by position. ``instance_id`` persists across the scene;
* protobuf json leaves out fields at their default value, so a missing number is 0 and
  an all-zero quaternion means "no pose" (DGP treats it as the identity).

How it maps to a ``Capture``:

* rig: the vehicle frame; its poses are gathered from every datum (sorted, one per
  timestamp, lidar datums preferred), so every frame and sweep lies inside the rig's
  time range. The world is re-centred on the first rig pose, like the native loader;
* cameras: ``pinhole``, or ``opencv`` when any distortion coefficient is non-zero;
  global shutter (DGP has no readout model); the JPEGs stay where they are;
* lidars: our ``Lidar`` is a spinning-lidar model; DGP has no channel table, so one is
  *estimated* (``estimate_channel_table``): from the ``RING`` field when the cloud has
  one, else from sharp peaks of the points' elevation histogram (a spinning lidar seen
  from its own origin), else -- as for DDAD, whose clouds merge several sensors -- channels
  at evenly spaced quantiles of the points' elevations. The table only describes ray
  directions approximately; the points themselves are kept exactly. DDAD's merged clouds
  are in the vehicle frame, whose origin is on the road: seen from there every ground
  return lies at elevation 0, so the model's origin is raised to the cameras' mean height
  (``SENSOR_HEIGHT_M`` without cameras) and the points re-expressed from it whenever the
  ground lies within 0.5 m of a cloud's origin. Every point gets
  the sweep's timestamp (time offset 0), because DGP gives each sweep a single pose and
  its points are relative to it; firing times from a spinning model would move the
  points by up to a sweep's worth of ego motion (a ``TIMESTAMP`` channel, when present,
  is not used for the same reason). The same compensation smears the rings of a moving
  spinning lidar, so its table may well come from the quantiles. Only ``.npz`` clouds
  are read (DGP also allows ``.ply``). Sweeps are converted once to ``.nrl``
  in a cache folder (``$XDG_CACHE_HOME/nurec_usd/imports/<sha256 of the inputs>/``,
  written whole then renamed into place), so ``Lidar.load_sweep`` works unchanged;
* tracks: the 3D boxes of the point-cloud datums (of the image datums when no point
  cloud is annotated), grouped by ``instance_id``, one pose per timestamp. Static
  (parked) actors are kept. Labels come from the scene's ontology, lower-cased
  (``Person`` -> ``pedestrian``).

A dataset json may list scenes that are not present: those are reported (a
``DGPWarning`` and ``capture.metadata["warnings"]``) and the first present scene is
loaded; other present scenes are reported too, since one capture is one continuous log.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.images import image_size
from nurec_usd.capture.importers import sweep_cache
from nurec_usd.capture.importers.common import invert_rigid, label, sensor_id
from nurec_usd.capture.importers.problems import FieldError, Problems, relative
# also this module's (in __all__): the cache folder, and the channel table the importers share
from nurec_usd.capture.importers.sweep_cache import cache_root, estimate_channel_table
from nurec_usd.capture.model import (
    Camera,
    CameraFrame,
    Capture,
    Lidar,
    RigTrajectory,
    RollingShutter,
    Track,
)
from nurec_usd.capture.missing import MissingFiles, is_missing
from nurec_usd.capture.paths import ensure_inside, resolve_inside

__all__ = ["DGPWarning", "detect", "load", "estimate_channel_table", "cache_root"]

# Bump when the conversion of sweeps (or the cached lidar description) changes, so old
# cache folders are not reused.
CACHE_VERSION = 2
# How high a merged cloud's model origin sits above the road when the capture has no camera to
# take the height from (a roof-mounted lidar's, about KITTI's and nuScenes' 1.7-1.9 m).
SENSOR_HEIGHT_M = 1.8
BOUNDING_BOX_3D = "1"  # dgp.proto.AnnotationType.BOUNDING_BOX_3D, the key of datum annotations
# dgp.proto.PointCloud.ChannelType: protobuf json may write an enum by name or number.
POINT_CHANNELS = {0: "X", 1: "Y", 2: "Z", 3: "INTENSITY", 4: "R", 5: "G", 6: "B", 7: "RING",
                  8: "NORMAL_X", 9: "NORMAL_Y", 10: "NORMAL_Z", 11: "CLASS_ID", 12: "INSTANCE_ID",
                  13: "TIMESTAMP"}
# Camera parameters we cannot represent: a non-zero value makes the camera unsupported
# rather than silently wrong (thin prism, tilted sensor, UCM/EUCM, FOV, double sphere).
UNSUPPORTED_INTRINSICS = ("s1", "s2", "s3", "s4", "taux", "tauy", "alpha", "beta", "w", "xi", "equirectangular")
# DGP ontology names -> the class vocabulary used across nurec_usd; others are lower-cased.
LABELS = {"person": "pedestrian", "pedestrian": "pedestrian", "car": "car", "truck": "truck",
          "bus/rv/caravan": "bus", "bus": "bus", "bicycle": "bicycle", "motorcycle": "motorcycle"}

DEFAULT_SCAN_RATE_HZ = 10.0
MAX_SWEEP_SPACING_S = 0.2
POSE_AGREEMENT_M = 0.01  # rig poses from two datums at one timestamp should agree this well


class DGPWarning(UserWarning):
    """Something in a DGP dataset was skipped or approximated; the capture still loaded."""


# --------------------------------------------------------------------------------------
# Detection


def _is_dataset_json(name: str) -> bool:
    return name.startswith("scene_dataset") and name.endswith(".json")


def _is_scene_json(name: str) -> bool:
    # scene_<sha1>.json; early DGP versions wrote a plain scene.json
    return (name == "scene.json" or name.startswith("scene_") and name.endswith(".json")) and not _is_dataset_json(name)


def detect(path: Path) -> bool:
    """Whether ``path`` is a DGP dataset json / folder or a DGP scene json / folder (by file names only)."""
    path = Path(path)
    if path.is_file():
        return _is_dataset_json(path.name) or _is_scene_json(path.name)
    if path.is_dir():
        try:
            return any(p.is_file() and (_is_dataset_json(p.name) or _is_scene_json(p.name)) for p in path.iterdir())
        except OSError:
            return False
    return False


# --------------------------------------------------------------------------------------
# Small readers: every failure becomes a Problem naming the file and the field


def _read_json(path: Path, rel: str, root: Path) -> Any:
    """Parse a json file or raise ``CaptureError`` naming it."""
    if not path.is_file():
        raise CaptureError([Problem(rel, "", "file does not exist")], str(root))
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise CaptureError([Problem(rel, "", f"not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})")],
                           str(root)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptureError([Problem(rel, "", f"cannot read the file ({exc})")], str(root)) from None


def _get(obj: Any, key: str, where: str, kind: type | tuple[type, ...] | None = None, default: Any = ...) -> Any:
    """``obj[key]``, checked: ``where`` is obj's json path (for messages)."""
    field = f"{where}.{key}" if where else key
    if not isinstance(obj, dict):
        raise FieldError(where or "(top level)", f"must be a JSON object, got {type(obj).__name__}")
    if key not in obj:
        if default is not ...:
            return default
        raise FieldError(field, "is missing")
    value = obj[key]
    if kind is not None and not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise FieldError(field, f"must be of type {names}, got {type(value).__name__}")
    return value


def _number(obj: Any, key: str, where: str) -> float:
    """A float field; protobuf json leaves out zeros, so a missing number is 0."""
    value = _get(obj, key, where, default=0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(f"{where}.{key}", f"must be a finite number, got {value!r}")
    return float(value)


_TIMESTAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_timestamp_us(value: Any, field: str) -> int:
    """A protobuf json ``Timestamp`` (RFC 3339, up to nanoseconds) as integer microseconds since the epoch.

    Parsed by hand: DGP's logs use far-future dates (year 2463) and nanosecond fractions,
    which neither ``fromisoformat`` nor float seconds keep exactly.
    """
    m = _TIMESTAMP.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise FieldError(field, f"must be an RFC 3339 timestamp like '2019-05-15T00:38:58.203752Z', got {value!r}")
    try:
        dt = datetime(*(int(m.group(i)) for i in range(1, 7)), tzinfo=timezone.utc)
    except ValueError as exc:
        raise FieldError(field, f"is not a valid date/time ({exc})") from None
    us = (dt - _EPOCH) // timedelta(microseconds=1)
    ns = int((m.group(7) or "").ljust(9, "0"))
    us += (ns + 500) // 1000  # nearest microsecond
    zone = m.group(8)
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        us -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60) * 1_000_000
    return int(us)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Unit quaternion (w, x, y, z) -> rotation matrix ``[3, 3]``."""
    w, x, y, z = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def _pose(obj: Any, where: str) -> tuple[np.ndarray, bool]:
    """A DGP ``Pose`` as a 4x4 matrix, and whether it was given at all.

    An absent pose or an all-zero quaternion (protobuf's default) means "no pose"; it is
    returned as the identity with ``False``, like DGP does.
    """
    T = np.eye(4)
    if obj is None:
        return T, False
    if not isinstance(obj, dict):
        raise FieldError(where, f"must be a JSON object, got {type(obj).__name__}")
    rot = _get(obj, "rotation", where, dict, default={})
    tr = _get(obj, "translation", where, dict, default={})
    q = np.array([_number(rot, k, f"{where}.rotation") for k in ("qw", "qx", "qy", "qz")])
    t = np.array([_number(tr, k, f"{where}.translation") for k in ("x", "y", "z")])
    norm = float(np.linalg.norm(q))
    if norm == 0.0:
        return T, bool(np.any(t != 0))  # a translation alone is still a pose
    if abs(norm - 1.0) > 1e-3:  # float64 writers give unit quaternions; far off means a wrong field
        raise FieldError(f"{where}.rotation", f"quaternion (qw, qx, qy, qz) has norm {norm:.6g}, expected 1")
    T[:3, :3] = quat_to_matrix(q / norm)
    T[:3, 3] = t
    return T, True


# --------------------------------------------------------------------------------------
# Finding the scene


@dataclass
class _Source:
    """Which scene to load, from where, and what to tell the user about the rest."""

    root: Path  # folder paths in messages are relative to
    scene_json: Path
    dataset_json: Path | None = None
    warnings: list[str] = field(default_factory=list)
    scenes_listed: list[str] = field(default_factory=list)


def _dataset_scenes(dataset_json: Path, root: Path) -> tuple[Path, list[str], list[str]]:
    """The first present scene of a ``scene_dataset*.json``, the warnings, and every listed scene."""
    rel = relative(dataset_json, root)
    data = _read_json(dataset_json, rel, root)
    try:
        splits = _get(data, "scene_splits", "", dict)
        listed: list[tuple[str, str]] = []  # (filename, json path), in split order, without repeats
        seen: set[str] = set()
        for split in sorted(splits, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s)):
            names = _get(_get(splits, split, "scene_splits", dict), "filenames", f"scene_splits.{split}", list,
                          default=[])
            for i, name in enumerate(names):
                if not isinstance(name, str):
                    raise FieldError(f"scene_splits.{split}.filenames[{i}]", "must be a string")
                if name not in seen:
                    seen.add(name)
                    listed.append((name, f"scene_splits.{split}.filenames[{i}]"))
    except FieldError as exc:
        raise CaptureError([Problem(rel, exc.field, exc.message)], str(root)) from None
    if not listed:
        raise CaptureError([Problem(rel, "scene_splits", "lists no scene files")], str(root))
    present: list[Path] = []
    missing: list[Problem] = []
    for name, where in listed:
        try:
            path = resolve_inside(dataset_json.parent, name)
        except ValueError as exc:
            missing.append(Problem(rel, where, str(exc)))
            continue
        if path.is_file():
            present.append(path)
        else:
            missing.append(Problem(rel, where, f"scene file {name} does not exist"))
    if not present:
        raise CaptureError([*missing, Problem(rel, "scene_splits", "none of the listed scenes is present")], str(root))
    notes = [f"{p.file}: {p.field}: {p.message}; that scene is not loaded" for p in missing]
    if len(present) > 1:
        others = ", ".join(relative(p, root) for p in present[1:])
        notes.append(f"{rel} lists {len(present)} present scenes; a capture is one scene, so only "
                     f"{relative(present[0], root)} is loaded (load {others} by its own path)")
    return present[0], notes, [name for name, _ in listed]


def _confined(folder: Path, path: Path) -> None:
    """``CaptureError`` when a file found in ``folder`` is a symlink to somewhere outside it."""
    try:
        ensure_inside(folder, path)
    except ValueError as exc:
        raise CaptureError([Problem(path.name, "", str(exc))], str(folder)) from None


def _locate(path: Path) -> _Source:
    path = Path(path)
    if not path.exists():
        raise CaptureError([Problem(str(path), "", "no such file or directory")])
    if path.is_file():
        root = path.parent
        if _is_dataset_json(path.name):
            scene, notes, listed = _dataset_scenes(path, root)
            return _Source(root, scene, path, notes, listed)
        return _Source(root, path)
    datasets = sorted(p for p in path.iterdir() if p.is_file() and _is_dataset_json(p.name))
    for p in datasets:
        _confined(path, p)
    if datasets:
        scene, notes, listed = _dataset_scenes(datasets[0], path)
        if len(datasets) > 1:
            notes.append(f"{len(datasets)} dataset files in {path}; used {datasets[0].name}")
        return _Source(path, scene, datasets[0], notes, listed)
    scenes = sorted(p for p in path.iterdir() if p.is_file() and _is_scene_json(p.name))
    for p in scenes:
        _confined(path, p)
    if len(scenes) != 1:
        what = "no scene_*.json" if not scenes else f"{len(scenes)} scene files ({', '.join(p.name for p in scenes)})"
        raise CaptureError([Problem(str(path), "", f"not a DGP scene folder: {what}; pass the scene json itself")])
    return _Source(path, scenes[0])


# --------------------------------------------------------------------------------------
# Loading


@dataclass
class _Datum:
    index: int  # in scene["data"]
    key: str
    name: str  # sensor name as in the scene (calibration names match it case-insensitively)
    kind: str  # "image" | "point_cloud"
    timestamp_us: int
    T_world_sensor: np.ndarray | None  # None: the datum has no pose
    body: dict  # datum[kind]
    where: str  # json path of body


@dataclass
class _Calibration:
    file: str  # relative path, for messages
    T_vehicle_sensor: np.ndarray
    intrinsics: dict  # the raw CameraIntrinsics object
    where: str


def load(path: Path, *, skip_missing: bool = False) -> Capture:
    """Load a DGP scene (a scene folder or json) or the first present scene of a dataset json.

    Every file a scene names must lie inside its folder (``nurec_usd.capture.paths``).
    ``skip_missing``: leave out the images and point clouds whose file is missing (one
    ``MissingFilesWarning``) instead of refusing the scene.

    Raises:
        CaptureError: naming the file and field of every problem found.
    """
    src = _locate(Path(path))
    missing = MissingFiles(skip_missing)
    capture = _SceneLoader(src, missing).load()
    for message in src.warnings:
        warnings.warn(message, DGPWarning, stacklevel=2)
    missing.warn()
    return capture


class _SceneLoader:
    def __init__(self, src: _Source, missing: MissingFiles):
        self.src = src
        self.scene_dir = src.scene_json.parent
        self.root = src.root
        self.scene_rel = relative(src.scene_json, self.root)
        self.missing = missing
        self.found = Problems(self.root, missing)
        self.notes = src.warnings  # shared: load() warns about all of them

    def rel(self, path: Path) -> str:
        return relative(path, self.root)

    def scene_file(self, name: str, where: str, file: str | None = None) -> Path | None:
        """A file named inside the scene folder, or None (problem recorded) when it is unusable."""
        try:
            path = resolve_inside(self.scene_dir, name)
        except ValueError as exc:
            self.found.add(file or self.scene_rel, where, str(exc))
            return None
        if not path.is_file():
            self.found.add(file or self.scene_rel, where, f"file {self.rel(path)} does not exist")
            return None
        return path

    def datum_file(self, name: str, where: str, kind: str) -> Path | None:
        """A datum's image or point cloud, like ``scene_file``; a missing one is left out with
        ``skip_missing`` (None, no problem), else reported as missing."""
        try:
            path = resolve_inside(self.scene_dir, name)
        except ValueError:
            return self.scene_file(name, where)  # reports it
        if is_missing(path):
            if not self.missing.drop(self.rel(path), kind):
                self.found.add(self.scene_rel, where, f"file {self.rel(path)} does not exist")
            return None
        return self.scene_file(name, where)

    # -- the scene json -----------------------------------------------------------------

    def load(self) -> Capture:
        scene = _read_json(self.src.scene_json, self.scene_rel, self.root)
        try:
            data = _get(scene, "data", "", list)
            samples = _get(scene, "samples", "", list, default=[])
        except FieldError as exc:
            raise CaptureError([Problem(self.scene_rel, exc.field, exc.message)], str(self.root)) from None
        # Problems are collected while as much as possible is still checked (a datum with a
        # bad field is skipped, a sensor without calibration too) and raised together; only
        # the costly sweep conversion waits until everything cheaper is clean.
        datums = self._datums(data)
        calib_of_datum, calibrations = self._calibrations(samples)
        by_sensor: dict[str, list[_Datum]] = {}
        for d in datums:
            by_sensor.setdefault(d.name, []).append(d)
        sensor_calib = self._sensor_calibrations(by_sensor, calib_of_datum, calibrations)
        by_sensor = {name: ds for name, ds in by_sensor.items() if name in sensor_calib}
        datums = [d for ds in by_sensor.values() for d in ds]
        if not datums:
            if not self.found.items:
                self.found.add(self.scene_rel, "data", "the scene has no image or point-cloud datum")
            self.found.raise_if_any()

        rig_ts, rig_T = self._rig(datums, sensor_calib)
        cameras: dict[str, Camera] = {}
        lidars: dict[str, Lidar] = {}
        point_cloud_sensors: list[tuple[str, list[_Datum]]] = []
        for name, ds in by_sensor.items():
            if ds[0].kind == "image":
                cam = self._camera(name, ds, sensor_calib[name])
                if cam is not None:
                    cameras[cam.id] = cam
            else:
                point_cloud_sensors.append((name, ds))
        self.found.raise_if_any()
        lidar_info: dict[str, Any] = {}
        # a cloud whose origin is on the road is seen from the cameras' mean height instead
        heights = [float(cam.T_rig_camera[2, 3]) for cam in cameras.values()]
        sensor_height = float(np.mean(heights)) if heights else SENSOR_HEIGHT_M
        for name, ds in point_cloud_sensors:
            lidar, info = self._lidar(name, ds, sensor_calib[name], sensor_height)
            if lidar is not None:
                lidars[lidar.id] = lidar
                lidar_info[lidar.id] = info
        tracks = self._tracks(scene, datums)
        self.found.raise_if_any()

        # Re-centre the world on the first rig position, as the native loader does.
        offset = rig_T[0, :3, 3].copy()
        rig_T[:, :3, 3] -= offset
        for track in tracks.values():
            track.T_world_box[:, :3, 3] -= offset
        name = scene.get("name") if isinstance(scene.get("name"), str) and scene.get("name") else self.scene_dir.name
        metadata = {
            "source": "dgp",
            "dgp": {
                "dataset": str(self.src.dataset_json) if self.src.dataset_json else None,
                "scene": str(self.src.scene_json),
                "scenes_listed": self.src.scenes_listed,
                "log": scene.get("log", ""),
                "description": scene.get("description", ""),
            },
            "lidar_models": lidar_info,
            "warnings": list(self.notes) + ([self.missing.message()] if self.missing.message() else []),
        }
        return Capture(root=self.scene_dir, name=name, rig=RigTrajectory(rig_ts, rig_T), cameras=cameras,
                       lidars=lidars, tracks=tracks, world_offset_m=offset, metadata=metadata)

    def _datums(self, data: list) -> list[_Datum]:
        out: list[_Datum] = []
        skipped: dict[str, str] = {}
        keys: set[str] = set()
        for i, item in enumerate(data):
            where = f"data[{i}]"
            try:
                ident = _get(item, "id", where, dict)
                name = _get(ident, "name", f"{where}.id", str)
                t_us = parse_timestamp_us(_get(ident, "timestamp", f"{where}.id"), f"{where}.id.timestamp")
                key = _get(item, "key", where, str, default=f"#{i}")
                datum = _get(item, "datum", where, dict)
                kinds = [k for k in datum if isinstance(datum[k], dict)]
                if len(kinds) != 1:
                    raise FieldError(f"{where}.datum", f"must hold exactly one datum type, found {sorted(datum)}")
                kind = kinds[0]
                if kind not in ("image", "point_cloud"):
                    skipped.setdefault(name, kind)
                    continue
                body = datum[kind]
                T, has_pose = _pose(body.get("pose"), f"{where}.datum.{kind}.pose")
                _get(body, "filename", f"{where}.datum.{kind}", str)
            except FieldError as exc:
                self.found.add(self.scene_rel, exc.field, exc.message)
                continue
            if key in keys:
                self.found.add(self.scene_rel, f"{where}.key", f"datum key {key!r} is used twice")
            keys.add(key)
            out.append(_Datum(i, key, name, kind, t_us, T if has_pose else None, body, f"{where}.datum.{kind}"))
        for name, kind in skipped.items():
            self.notes.append(f"{self.scene_rel}: datums of {name!r} are of type {kind!r}, which is not imported")
        kinds_of: dict[str, set[str]] = {}
        for d in out:
            kinds_of.setdefault(d.name, set()).add(d.kind)
        for name, kinds in kinds_of.items():
            if len(kinds) > 1:
                self.found.add(self.scene_rel, "data", f"sensor {name!r} has datums of several types {sorted(kinds)}")
        return out

    def _calibrations(self, samples: list) -> tuple[dict[str, str], dict[str, dict[str, _Calibration]]]:
        """datum key -> calibration key, and calibration key -> {sensor name (lower case) -> calibration}."""
        of_datum: dict[str, str] = {}
        order: list[tuple[str, str]] = []  # (calibration key, where it is named)
        for i, sample in enumerate(samples):
            where = f"samples[{i}]"
            try:
                ckey = _get(sample, "calibration_key", where, str)
                for k in _get(sample, "datum_keys", where, list, default=[]):
                    of_datum.setdefault(str(k), ckey)
            except FieldError as exc:
                self.found.add(self.scene_rel, exc.field, exc.message)
                continue
            if ckey not in [k for k, _ in order]:
                order.append((ckey, f"{where}.calibration_key"))
        if not order:
            self.found.add(self.scene_rel, "samples", "no sample names a calibration_key, so no sensor is calibrated")
        tables: dict[str, dict[str, _Calibration]] = {}
        for ckey, where in order:
            path = self.scene_file(f"calibration/{ckey}.json", where)
            if path is None:
                continue
            rel = self.rel(path)
            try:
                cal = _read_json(path, rel, self.root)
            except CaptureError as err:
                self.found.items.extend(err.problems)
                continue
            try:
                names = _get(cal, "names", "", list)
                intrinsics = _get(cal, "intrinsics", "", list)
                extrinsics = _get(cal, "extrinsics", "", list)
                for what, values in (("intrinsics", intrinsics), ("extrinsics", extrinsics)):
                    if len(values) != len(names):
                        raise FieldError(what, f"has {len(values)} entries for {len(names)} names")
                table: dict[str, _Calibration] = {}
                for j, name in enumerate(names):
                    if not isinstance(name, str):
                        raise FieldError(f"names[{j}]", "must be a string")
                    T, _ = _pose(extrinsics[j], f"extrinsics[{j}]")
                    if not isinstance(intrinsics[j], dict):
                        raise FieldError(f"intrinsics[{j}]", "must be a JSON object")
                    table[name.lower()] = _Calibration(rel, T, intrinsics[j], f"intrinsics[{j}]")
                tables[ckey] = table
            except FieldError as exc:
                self.found.add(rel, exc.field, exc.message)
        return of_datum, tables

    def _sensor_calibrations(self, by_sensor: dict[str, list[_Datum]], of_datum: dict[str, str],
                             tables: dict[str, dict[str, _Calibration]]) -> dict[str, _Calibration]:
        """Each sensor's calibration: the one of its first datum's sample (one fixed mounting per sensor)."""
        if not tables:
            return {}
        default_key = next(iter(tables))
        out: dict[str, _Calibration] = {}
        for name, ds in by_sensor.items():
            chosen: _Calibration | None = None
            for d in ds:
                ckey = of_datum.get(d.key, default_key)
                cal = tables.get(ckey, {}).get(name.lower())
                if cal is None:
                    if ckey in tables:
                        self.found.add(self.rel(self.scene_dir / "calibration" / f"{ckey}.json"), "names",
                                       f"has no calibration for sensor {name!r} (used by {self.scene_rel} {d.where})")
                        break
                    continue
                if chosen is None:
                    chosen = cal
                elif (np.abs(cal.T_vehicle_sensor - chosen.T_vehicle_sensor).max() > 1e-6
                      or cal.intrinsics != chosen.intrinsics):
                    self.notes.append(f"{name}: calibration changes within the scene ({chosen.file} vs {cal.file}); "
                                      f"using {chosen.file} throughout")
                    break
            if chosen is not None:
                out[name] = chosen
        return out

    # -- rig --------------------------------------------------------------------------

    def _rig(self, datums: list[_Datum], calib: dict[str, _Calibration]) -> tuple[np.ndarray, np.ndarray]:
        """Vehicle poses from every datum: ``pose_WS @ inv(pose_VS)``, one per timestamp."""
        poses: dict[int, tuple[np.ndarray, _Datum]] = {}
        unposed: set[str] = set()
        disagree = 0.0
        # point clouds first: the lidar is what DGP's ego poses are usually tied to
        for d in sorted(datums, key=lambda d: (d.kind != "point_cloud", d.index)):
            if d.T_world_sensor is None:
                unposed.add(d.name)
                continue
            T = d.T_world_sensor @ invert_rigid(calib[d.name].T_vehicle_sensor)
            if d.timestamp_us in poses:
                disagree = max(disagree, float(np.abs(poses[d.timestamp_us][0][:3, 3] - T[:3, 3]).max()))
            else:
                poses[d.timestamp_us] = (T, d)
        if disagree > POSE_AGREEMENT_M:
            self.notes.append(f"datums at the same timestamp imply vehicle poses up to {disagree:.3f} m apart; "
                              "the first one (point clouds preferred) is used")
        times = sorted({d.timestamp_us for d in datums})
        if not poses:
            self.notes.append("no datum has a pose: the vehicle is taken to stand still at the world origin")
            ts = np.array([times[0], times[-1]] if times[-1] > times[0] else [times[0]], dtype=np.int64)
            return ts, np.repeat(np.eye(4)[None], len(ts), axis=0)
        if unposed:
            self.notes.append(f"datums of {sorted(unposed)} have no pose; the rig poses come from the other sensors")
            lo, hi = min(poses), max(poses)
            outside = [t for t in times if t < lo or t > hi]
            if outside:
                self.found.add(self.scene_rel, "data", f"{len(outside)} datum timestamps lie outside the time range "
                                                       f"{lo}..{hi} us of the datums that have poses")
        ts = np.array(sorted(poses), dtype=np.int64)
        T = np.stack([poses[int(t)][0] for t in ts])
        for k in range(len(T)):  # re-orthonormalise (quaternions were normalised, products add rounding)
            u, _, vt = np.linalg.svd(T[k, :3, :3])
            T[k, :3, :3] = u @ vt
        return ts, T

    # -- cameras ------------------------------------------------------------------------

    def _camera(self, name: str, ds: list[_Datum], cal: _Calibration) -> Camera | None:
        model: str | None = None
        try:
            model, intrinsics = camera_intrinsics(cal.intrinsics, cal.where)
        except FieldError as exc:
            self.found.add(cal.file, exc.field, f"{exc.message} (camera {name!r})")  # frames are still checked
        try:
            width = int(_get(ds[0].body, "width", ds[0].where, int))
            height = int(_get(ds[0].body, "height", ds[0].where, int))
            if width <= 0 or height <= 0:
                raise FieldError(f"{ds[0].where}.width", f"image size must be positive, got {width}x{height}")
        except FieldError as exc:
            self.found.add(self.scene_rel, exc.field, exc.message)
            return None
        frames: list[CameraFrame] = []
        duplicates = 0
        for d in sorted(ds, key=lambda d: (d.timestamp_us, d.index)):
            if frames and frames[-1].timestamp_us == d.timestamp_us:
                duplicates += 1  # frame timestamps must strictly increase: keep the first
                continue
            path = self.datum_file(d.body["filename"], f"{d.where}.filename", "frame")
            if path is None:
                continue
            try:
                size = image_size(path)
            except ValueError as exc:
                self.found.add(self.rel(path), "", str(exc))
                continue
            w, h = (d.body.get("width", width), d.body.get("height", height))
            if size != (width, height) or (w, h) != (width, height):
                self.found.add(self.scene_rel, f"{d.where}.filename",
                               f"{self.rel(path)} is {size[0]}x{size[1]} pixels; camera {name!r} is {width}x{height}")
                continue
            frames.append(CameraFrame(d.timestamp_us, path))
        if duplicates:
            self.notes.append(f"{name}: {duplicates} frames share a timestamp with an earlier one and were dropped")
        if model is None:
            return None
        T_rig_camera = cal.T_vehicle_sensor.copy()
        return Camera(sensor_id(name), model, width, height, intrinsics, T_rig_camera,
                      RollingShutter("global", 0), tuple(frames))

    # -- lidars -------------------------------------------------------------------------

    def _lidar(self, name: str, ds: list[_Datum], cal: _Calibration,
               sensor_height_m: float) -> tuple[Lidar | None, dict[str, Any]]:
        sweeps: list[_SweepInput] = []
        duplicates = 0
        for d in sorted(ds, key=lambda d: (d.timestamp_us, d.index)):
            if sweeps and sweeps[-1].timestamp_us == d.timestamp_us:
                duplicates += 1
                continue
            try:
                fmt = _point_format(d.body.get("point_format", []), f"{d.where}.point_format")
            except FieldError as exc:
                self.found.add(self.scene_rel, exc.field, exc.message)
                continue
            path = self.datum_file(d.body["filename"], f"{d.where}.filename", "sweep")
            if path is None:
                continue
            if path.suffix.lower() != ".npz":
                self.found.add(self.scene_rel, f"{d.where}.filename",
                               f"{self.rel(path)}: only .npz point clouds are supported")
                continue
            sweeps.append(_SweepInput(d.timestamp_us, path, self.rel(path), fmt))
        if duplicates:
            self.notes.append(f"{name}: {duplicates} sweeps share a timestamp with an earlier one and were dropped")
        if self.found.items or not sweeps:
            return None, {}
        try:
            spec = convert_sweeps(sensor_id(name), sweeps, sensor_height_m)
        except _SweepError as exc:
            self.found.add(exc.file, exc.field, exc.message)
            return None, {}
        except OSError as exc:
            self.found.add(str(cache_root()), "", f"cannot write the converted sweeps of {name!r} ({exc})")
            return None, {}
        return sweep_cache.lidar_from_spec(spec, sensor_id(name), cal.T_vehicle_sensor)

    # -- tracks -------------------------------------------------------------------------

    def _tracks(self, scene: dict, datums: list[_Datum]) -> dict[str, Track]:
        annotated = [d for d in datums if d.T_world_sensor is not None
                     and isinstance(d.body.get("annotations"), dict) and BOUNDING_BOX_3D in d.body["annotations"]]
        # DGP annotates boxes in the point cloud and may copy them into each camera's frame:
        # the point-cloud ones are the source; camera ones are used only when there are none.
        source = [d for d in annotated if d.kind == "point_cloud"] or annotated
        if not source:
            return {}
        classes = self._ontology(scene)
        boxes: dict[str, list[tuple[int, int, np.ndarray, np.ndarray, int]]] = {}  # id -> (t, order, T, size, class)
        unnamed = 0
        for order, d in enumerate(sorted(source, key=lambda d: (d.timestamp_us, d.kind != "point_cloud", d.index))):
            where = f"{d.where}.annotations.{BOUNDING_BOX_3D}"
            ann_name = d.body["annotations"][BOUNDING_BOX_3D]
            if not isinstance(ann_name, str):
                self.found.add(self.scene_rel, where, "must be a file name")
                continue
            path = self.scene_file(ann_name, where)
            if path is None:
                continue
            rel = self.rel(path)
            try:
                anns = _get(_read_json(path, rel, self.root), "annotations", "", list, default=[])
            except CaptureError as err:
                self.found.items.extend(err.problems)
                continue
            except FieldError as exc:
                self.found.add(rel, exc.field, exc.message)
                continue
            for j, a in enumerate(anns):
                aw = f"annotations[{j}]"
                try:
                    box = _get(a, "box", aw, dict)
                    T_sensor_box, _ = _pose(box.get("pose"), f"{aw}.box.pose")
                    # by name: DGP's own python class orders sizes (W, L, H); ours is (L, W, H)
                    size = np.array([_number(box, k, f"{aw}.box") for k in ("length", "width", "height")])
                    if not np.all(size > 0):
                        raise FieldError(f"{aw}.box",
                                         f"length, width and height must be positive, got {size.tolist()}")
                    class_id = int(_number(a, "class_id", aw))
                    instance = int(_number(a, "instance_id", aw))
                except FieldError as exc:
                    self.found.add(rel, exc.field, exc.message)
                    continue
                if instance == 0:  # protobuf default: no persistent id, so a track of its own
                    unnamed += 1
                    track_id = f"box_{d.timestamp_us}_{j}"
                else:
                    track_id = str(instance)
                boxes.setdefault(track_id, []).append(
                    (d.timestamp_us, order, d.T_world_sensor @ T_sensor_box, size, class_id))
        if unnamed:
            self.notes.append(f"{unnamed} boxes have no instance_id; each became a one-pose track")
        tracks: dict[str, Track] = {}
        for track_id, items in boxes.items():
            items.sort(key=lambda it: (it[0], it[1]))
            kept = [it for k, it in enumerate(items) if k == 0 or it[0] != items[k - 1][0]]  # one pose per time
            poses = np.stack([it[2] for it in kept])
            for k in range(len(poses)):
                u, _, vt = np.linalg.svd(poses[k, :3, :3])
                poses[k, :3, :3] = u @ vt
            class_ids = [it[4] for it in kept]
            class_id = max(set(class_ids), key=class_ids.count)
            # DGP sizes may wobble between frames; a track has one box size: the median
            tracks[track_id] = Track(track_id, classes.get(class_id, f"class_{class_id}"),
                                     np.median(np.stack([it[3] for it in kept]), axis=0),
                                     np.array([it[0] for it in kept], dtype=np.int64), poses)
        return tracks

    def _ontology(self, scene: dict) -> dict[int, str]:
        ontologies = scene.get("ontologies")
        key = ontologies.get(BOUNDING_BOX_3D) if isinstance(ontologies, dict) else None
        if not isinstance(key, str):
            self.notes.append(f"{self.scene_rel} names no bounding_box_3d ontology; track labels are class_<id>")
            return {}
        path = self.scene_file(f"ontology/{key}.json", f"ontologies.{BOUNDING_BOX_3D}")
        if path is None:
            return {}
        rel = self.rel(path)
        try:
            items = _get(_read_json(path, rel, self.root), "items", "", list)
            out = {}
            for i, item in enumerate(items):
                out[int(_number(item, "id", f"items[{i}]"))] = label(_get(item, "name", f"items[{i}]", str), LABELS)
            return out
        except CaptureError as err:
            self.found.items.extend(err.problems)
        except FieldError as exc:
            self.found.add(rel, exc.field, exc.message)
        return {}


# --------------------------------------------------------------------------------------
# Cameras


def camera_intrinsics(intr: dict, where: str) -> tuple[str, dict[str, float]]:
    """A DGP ``CameraIntrinsics`` as (model, our intrinsics): ``pinhole``, or ``opencv`` with distortion.

    Raises ``FieldError`` for what we cannot represent (skew, fisheye and the other models)
    rather than importing a camera that projects wrongly.
    """
    fx, fy, cx, cy = (_number(intr, k, where) for k in ("fx", "fy", "cx", "cy"))
    if fx <= 0 or fy <= 0:
        raise FieldError(f"{where}.fx", f"focal lengths must be positive for a camera, got fx={fx}, fy={fy}")
    if abs(_number(intr, "skew", where)) > 1e-9 * fx:
        raise FieldError(f"{where}.skew", "skewed pixels are not supported by nurec_usd camera models")
    if _number(intr, "fisheye", where) != 0:
        raise FieldError(f"{where}.fisheye", "DGP fisheye camera models are not supported (only pinhole and "
                                             "Brown-Conrady distortion)")
    for k in UNSUPPORTED_INTRINSICS:
        if _number(intr, k, where) != 0:
            raise FieldError(f"{where}.{k}", f"a non-zero {k!r} needs a camera model nurec_usd does not have")
    dist = {k: _number(intr, k, where) for k in ("k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6")}
    if not any(dist.values()):
        return "pinhole", {"fx": fx, "fy": fy, "cx": cx, "cy": cy}
    out = {"fx": fx, "fy": fy, "cx": cx, "cy": cy, **{k: dist[k] for k in ("k1", "k2", "p1", "p2", "k3")}}
    if any(dist[k] for k in ("k4", "k5", "k6")):  # the rational model's denominator
        out.update({k: dist[k] for k in ("k4", "k5", "k6")})
    return "opencv", out


# --------------------------------------------------------------------------------------
# Lidar sweeps: reading .npz, estimating a spinning model, the .nrl cache


@dataclass(frozen=True)
class _SweepInput:
    timestamp_us: int
    path: Path
    rel: str  # for messages
    point_format: tuple[str, ...]


class _SweepError(Exception):
    def __init__(self, file: str, field: str, message: str):
        super().__init__(f"{file}: {field}: {message}")
        self.file, self.field, self.message = file, field, message


def _point_format(values: Any, where: str) -> tuple[str, ...]:
    if not isinstance(values, list):
        raise FieldError(where, "must be a list of channel names")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, int) and not isinstance(v, bool) and v in POINT_CHANNELS:
            out.append(POINT_CHANNELS[v])
        elif isinstance(v, str) and v in POINT_CHANNELS.values():
            out.append(v)
        else:
            raise FieldError(f"{where}[{i}]", f"unknown point channel {v!r}")
    return tuple(out)


def read_dgp_points(path: Path, point_format: tuple[str, ...] = (), rel: str | None = None) -> dict[str, np.ndarray]:
    """The columns of a DGP ``.npz`` point cloud by channel name (``X Y Z`` at least, ``INTENSITY``, ``RING``...).

    The ``data`` array is either structured (named fields) or ``[N, C]`` with columns in
    ``point_format`` order (``X Y Z INTENSITY`` when the format is empty, as DGP assumes).
    Points with non-finite coordinates, or exactly at the origin (padding), are dropped.
    """
    rel = rel or str(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            if "data" not in z.files:
                raise _SweepError(rel, "data", f"no 'data' array (found {sorted(z.files)})")
            X = z["data"]
    except _SweepError:
        raise
    except Exception as exc:  # zipfile / numpy raise a variety of types for damaged files
        raise _SweepError(rel, "", f"cannot read the point cloud ({type(exc).__name__}: {exc})") from None
    cols: dict[str, np.ndarray] = {}
    if X.dtype.names:
        for name in X.dtype.names:
            cols[name.upper()] = np.asarray(X[name], dtype=np.float64).reshape(-1)
    else:
        if X.ndim != 2:
            raise _SweepError(rel, "data", f"must be an [N, C] array, got shape {X.shape}")
        fmt = point_format or ("X", "Y", "Z", "INTENSITY")[: X.shape[1]]
        if X.shape[1] < len(fmt):
            raise _SweepError(rel, "data", f"has {X.shape[1]} columns for point_format {list(fmt)}")
        for i, name in enumerate(fmt):
            cols[name] = np.asarray(X[:, i], dtype=np.float64)
    if not all(k in cols for k in ("X", "Y", "Z")):
        raise _SweepError(rel, "data", f"needs X, Y and Z columns, found {sorted(cols)}")
    xyz = np.stack([cols["X"], cols["Y"], cols["Z"]], axis=1)
    keep = np.all(np.isfinite(xyz), axis=1) & np.any(xyz != 0, axis=1)
    return {k: v[keep] for k, v in cols.items()}


def convert_sweeps(lidar_id: str, sweeps: list[_SweepInput],
                   sensor_height_m: float = SENSOR_HEIGHT_M) -> dict[str, Any]:
    """Convert DGP sweeps to ``.nrl`` (cached) and describe the estimated spinning model
    (``sweep_cache.convert_compensated_sweeps``: DGP gives each sweep one pose). A cloud whose
    origin lies on the road (DDAD merges its lidars into the vehicle frame, whose origin is on
    the ground) is modelled from ``sensor_height_m`` above the road.

    Returns a dict with the model's fields (``elevation_deg``, ``columns``, ...), ``sweeps``
    (timestamp and file name), ``folder`` (the cache folder), ``method`` and ``note``.
    """
    inputs = [sweep_cache.CompensatedSweep(s.timestamp_us, s.path, s.rel,
                                           f"{s.timestamp_us} {','.join(s.point_format)} ") for s in sweeps]
    formats = {s.path: s.point_format for s in sweeps}  # the reader's column names, per file
    return sweep_cache.convert_compensated_sweeps(
        f"nurec_usd dgp sweeps v{CACHE_VERSION} {lidar_id} {sensor_height_m:.4f}\n", inputs,
        lambda s: read_dgp_points(s.path, formats[s.path], s.rel), _SweepError,
        rotation="counterclockwise", default_scan_rate_hz=DEFAULT_SCAN_RATE_HZ, max_spacing_s=MAX_SWEEP_SPACING_S,
        raised_origin_m=sensor_height_m)
