"""nuScenes importer: one scene of the official layout, read into a ``Capture`` (no devkit needed).

A nuScenes dataset root (``dataroot``) holds the metadata tables of one or more versions and
the sensor files they name::

    dataroot/
      v1.0-mini/                 (or v1.0-trainval, v1.0-test): one JSON list per table
        scene.json sample.json sample_data.json calibrated_sensor.json sensor.json ego_pose.json
        sample_annotation.json instance.json category.json log.json (attribute, visibility, map)
      samples/CAM_FRONT/<log>__CAM_FRONT__<timestamp>.jpg        key frames (2 Hz)
      samples/LIDAR_TOP/<log>__LIDAR_TOP__<timestamp>.pcd.bin
      sweeps/CAM_FRONT/...  sweeps/LIDAR_TOP/...                 the frames in between

``load`` accepts the dataroot (with one version folder, or several when ``scene`` names a
scene of one of them) or a version folder. Facts of the format relied on (the devkit's
``schema.md`` and its data classes):

* every record has a ``token``; tables link by ``<table>_token`` fields. A ``scene`` has its
  ``sample``s (``scene_token``); every ``sample_data`` (key frame or not) points to a sample
  (``sample_token``), to the ``calibrated_sensor`` it was taken with and to the ``ego_pose``
  at its ``timestamp``; a ``calibrated_sensor`` points to its ``sensor`` (``channel``,
  ``modality``). Timestamps are integer microseconds;
* poses are ``translation`` (x, y, z, metres) + ``rotation`` (quaternion w, x, y, z):
  ``calibrated_sensor`` maps the sensor frame into the ego frame (x forward, y left, z up,
  origin at the rear axle), ``ego_pose`` the ego frame into the log's global (map) frame, z up;
* cameras (``CAM_*``, 1600x900 JPEGs) are undistorted: ``camera_intrinsic`` is a 3x3 pinhole
  matrix, the camera frame OpenCV's (x right, y down, z forward). Pixel coordinates are taken
  as OpenCV's (centre of the top-left pixel at (0, 0)), as the devkit projects with that
  matrix directly. The cameras have a global shutter;
* ``LIDAR_TOP`` (a 32-beam spinning lidar, 20 Hz) files are ``float32`` rows of x, y, z,
  intensity and ring index (5 values, 20 bytes a point) in the lidar frame at the
  sample_data's timestamp: the points are motion-compensated to that one pose (its time is
  the end of the revolution);
* ``sample_annotation`` boxes: ``translation`` = centre and ``rotation`` in the global frame,
  ``size`` = *width, length, height* (the box's x axis runs along its length); an
  ``instance`` is one object across the samples of one scene, of a ``category``
  (``vehicle.car``, ``human.pedestrian.adult``, ...).

How it maps to a ``Capture``:

* one scene per capture (``scene`` by name, default the first in ``scene.json``; the others
  are listed in the warning and in ``metadata["nuscenes"]["scenes"]``);
* rig: the ego frame, posed by the ``ego_pose`` of every sample_data used (one per
  timestamp); the world is re-centred on the first rig pose;
* cameras: every ``CAM_*`` channel, ``pinhole``, global shutter, ``T_rig_camera`` from its
  calibrated sensor; key frames and sweeps alike, in time order;
* lidar ``LIDAR_TOP``: the channel table from the ring indices (``sweep_cache``'s shared
  estimation), every point at its sweep's timestamp (they are compensated to it), spinning
  clockwise at the sweeps' own rate (nominal 20 Hz when only key frames are present); points
  within 1 m of the sensor (returns from the ego vehicle's roof) are dropped. Sweeps are
  converted once to ``.nrl`` in the import cache (``sweep_cache``). Radars are not imported;
* tracks: each instance's annotations over the scene's samples (one pose per sample), its
  box size the median of theirs as (length, width, height), its class the category's
  (``vehicle.car`` -> ``car``, ``human.pedestrian.*`` -> ``pedestrian``, ...).

``capture.root`` is the version folder (the tables), so a build's manifest hashes the tables
and the files the scene uses, not the whole dataset. Every file name is confined to the
dataroot (``nurec_usd.capture.paths``). ``skip_missing`` leaves out the frames and sweeps whose
file is missing (trimmed copies often lack ``sweeps/``).
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.images import image_size
from nurec_usd.capture.importers import sweep_cache
from nurec_usd.capture.importers.problems import FieldError, Problems, relative
from nurec_usd.capture.missing import MissingFiles, is_missing
from nurec_usd.capture.model import Camera, CameraFrame, Capture, Lidar, RigTrajectory, RollingShutter, Track
from nurec_usd.capture.paths import ensure_inside, resolve_inside

__all__ = ["NuScenesWarning", "detect", "load", "label", "TABLES", "REQUIRED_TABLES"]

# Bump when the conversion of sweeps (or the cached lidar description) changes.
CACHE_VERSION = 1
VERSION_FOLDER = re.compile(r"^v\d+\.\d+(-[A-Za-z0-9_.-]+)?$")  # v1.0-mini, v1.0-trainval, v1.0-test
REQUIRED_TABLES = ("scene", "sample", "sample_data", "calibrated_sensor", "sensor", "ego_pose")
TRACK_TABLES = ("sample_annotation", "instance", "category")
TABLES = REQUIRED_TABLES + TRACK_TABLES + ("log",)
LIDAR_CHANNEL = "LIDAR_TOP"
LIDAR_VALUES = 5  # float32 x, y, z, intensity, ring index per point
NOMINAL_SCAN_RATE_HZ = 20.0
MAX_SWEEP_SPACING_S = 0.1  # sweeps further apart than this are key frames only: use the nominal rate
EGO_RETURN_RANGE_M = 1.0  # points nearer than this hit the ego vehicle
MAX_LISTED_MISSING = 20  # missing files listed one by one; the rest are counted
LISTED_SCENES = 10  # scenes named in the warning (all are in the metadata)
# category prefix -> the class vocabulary used across nurec_usd (first match wins)
LABELS = (("human.pedestrian", "pedestrian"), ("vehicle.car", "car"), ("vehicle.truck", "truck"),
          ("vehicle.bus", "bus"), ("vehicle.bicycle", "bicycle"), ("vehicle.motorcycle", "motorcycle"),
          ("vehicle.trailer", "trailer"), ("vehicle.construction", "construction_vehicle"),
          ("vehicle.emergency", "emergency_vehicle"), ("movable_object.barrier", "barrier"),
          ("movable_object.trafficcone", "traffic_cone"), ("animal", "animal"))


class NuScenesWarning(UserWarning):
    """Something in a nuScenes scene was left out or approximated; the capture still loaded."""


# --------------------------------------------------------------------------------------
# Detection


def _is_tables(folder: Path) -> bool:
    return (folder.is_dir() and VERSION_FOLDER.match(folder.name) is not None
            and all((folder / f"{t}.json").is_file() for t in REQUIRED_TABLES))


def _table_folders(path: Path) -> list[Path]:
    if _is_tables(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if _is_tables(p))


def detect(path: Path) -> bool:
    """Whether ``path`` is a nuScenes version folder (``v1.0-*`` with the tables) or a dataroot holding one."""
    try:
        return bool(_table_folders(Path(path)))
    except OSError:
        return False


# --------------------------------------------------------------------------------------
# Small readers: every failure names its table and field


def label(category: str) -> str:
    """Our class of a nuScenes category name (``vehicle.car`` -> ``car``)."""
    for prefix, ours in LABELS:
        if category == prefix or category.startswith(prefix + "."):
            return ours
    return re.sub(r"[^a-z0-9]+", "_", category.lower().split(".")[-1]).strip("_") or "unknown"


def _field(record: dict, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in record:
        raise FieldError(f"{where}.{key}", "is missing")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise FieldError(f"{where}.{key}", f"must be of type {names}, got {type(value).__name__}")
    return value


def _numbers(record: dict, key: str, where: str, count: int) -> np.ndarray:
    value = _field(record, key, where, list)
    try:
        out = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        out = None
    if out is None or out.shape != (count,) or not np.all(np.isfinite(out)):
        raise FieldError(f"{where}.{key}", f"must be {count} finite numbers, got {value!r}")
    return out


def _pose(record: dict, where: str) -> np.ndarray:
    """``translation`` + ``rotation`` (w, x, y, z) as a 4x4 transform."""
    t = _numbers(record, "translation", where, 3)
    q = _numbers(record, "rotation", where, 4)
    norm = float(np.linalg.norm(q))
    if abs(norm - 1.0) > 1e-3:
        raise FieldError(f"{where}.rotation", f"quaternion (w, x, y, z) has norm {norm:.6g}, expected 1")
    w, x, y, z = q / norm
    T = np.eye(4)
    T[:3, :3] = [[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                 [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                 [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]]
    T[:3, 3] = t
    return T


def _intrinsics(record: dict, where: str) -> dict[str, float]:
    """Pinhole ``fx fy cx cy`` of a ``camera_intrinsic`` 3x3 matrix (no skew)."""
    value = _field(record, "camera_intrinsic", where, list)
    try:
        K = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        K = None
    field = f"{where}.camera_intrinsic"
    if K is None or K.shape != (3, 3) or not np.all(np.isfinite(K)):
        raise FieldError(field, f"must be a 3x3 matrix of finite numbers, got {value!r}")
    if not np.allclose(K[2], [0, 0, 1]) or abs(K[1, 0]) > 1e-9 or abs(K[0, 1]) > 1e-6 * abs(K[0, 0]):
        raise FieldError(field, f"must be a pinhole matrix [[fx, 0, cx], [0, fy, cy], [0, 0, 1]], got {K.tolist()}")
    if not (K[0, 0] > 0 and K[1, 1] > 0):
        raise FieldError(field, f"focal lengths must be positive, got fx={K[0, 0]}, fy={K[1, 1]}")
    return {"fx": float(K[0, 0]), "fy": float(K[1, 1]), "cx": float(K[0, 2]), "cy": float(K[1, 2])}


class _SweepError(Exception):
    def __init__(self, file: str, field: str, message: str):
        super().__init__(f"{file}: {field}: {message}")
        self.problem = Problem(file, field, message)


def read_lidar_points(path: Path, rel: str) -> dict[str, np.ndarray]:
    """A ``.pcd.bin`` sweep by column: ``X Y Z INTENSITY RING`` (float64), without non-finite
    points and those within ``EGO_RETURN_RANGE_M`` of the sensor."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _SweepError(rel, "", f"cannot read the file ({exc})") from None
    row = 4 * LIDAR_VALUES
    if len(data) % row:
        raise _SweepError(rel, "", f"truncated: {len(data)} bytes is not a whole number of {row}-byte points "
                                   "(float32 x, y, z, intensity, ring index)")
    pts = np.frombuffer(data, dtype="<f4").reshape(-1, LIDAR_VALUES).astype(np.float64)
    keep = np.all(np.isfinite(pts[:, :3]), axis=1) & (np.linalg.norm(pts[:, :3], axis=1) >= EGO_RETURN_RANGE_M)
    pts = pts[keep]
    return {"X": pts[:, 0], "Y": pts[:, 1], "Z": pts[:, 2], "INTENSITY": pts[:, 3], "RING": pts[:, 4]}


# --------------------------------------------------------------------------------------
# Finding the tables and the scene


@dataclass
class _Tables:
    dataroot: Path
    folder: Path  # the version folder
    rows: dict[str, list[dict]]
    by_token: dict[str, dict[str, tuple[int, dict]]]  # table -> token -> (index, record)

    def rel(self, table: str) -> str:
        return f"{self.folder.name}/{table}.json"


def _read_table(folder: Path, name: str, root: Path) -> list[dict]:
    path = folder / f"{name}.json"
    rel = f"{folder.name}/{name}.json"
    try:
        ensure_inside(folder, path, rel)
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
    except ValueError as exc:  # a symlink leading out of the folder, or not JSON
        message = (f"not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
                   if isinstance(exc, json.JSONDecodeError) else str(exc))
        raise CaptureError([Problem(rel, "", message)], str(root)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptureError([Problem(rel, "", f"cannot read the file ({exc})")], str(root)) from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("token"), str) for r in rows):
        raise CaptureError([Problem(rel, "", "must be a JSON list of records, each with a string 'token'")],
                           str(root))
    return rows


def _load_tables(folder: Path) -> _Tables:
    dataroot = folder.parent
    rows = {}
    for name in TABLES:
        if name in REQUIRED_TABLES or (folder / f"{name}.json").is_file():
            rows[name] = _read_table(folder, name, dataroot)
    by_token = {name: {r["token"]: (i, r) for i, r in enumerate(table)} for name, table in rows.items()}
    return _Tables(dataroot, folder, rows, by_token)


def _scene_names(folder: Path) -> list[str]:
    try:
        rows = json.loads((folder / "scene.json").read_text(encoding="utf-8"))
        return [r.get("name") for r in rows if isinstance(r, dict)]
    except (OSError, ValueError):
        return []


def _locate(path: Path, scene: str | None) -> Path:
    """The version folder to read."""
    if not path.exists():
        raise CaptureError([Problem(str(path), "", "no such file or directory")])
    folders = _table_folders(path)
    if not folders:
        raise CaptureError([Problem(str(path), "", "not a nuScenes dataroot or version folder (a v1.0-* folder "
                                                   f"with {', '.join(t + '.json' for t in REQUIRED_TABLES)})")])
    for folder in folders:
        try:
            ensure_inside(path, folder)
        except ValueError as exc:
            raise CaptureError([Problem(folder.name, "", str(exc))], str(path)) from None
    if len(folders) == 1:
        return folders[0]
    if scene is not None:
        having = [f for f in folders if scene in _scene_names(f)]
        if len(having) == 1:
            return having[0]
    names = ", ".join(f.name for f in folders)
    raise CaptureError([Problem(str(path), "", f"holds {len(folders)} versions ({names}); pass one version folder "
                                               f"(e.g. {folders[0]})" + (" or a --scene that only one of them has"
                                                                         if scene is None else ""))])


# --------------------------------------------------------------------------------------
# Loading


def load(path: Path, *, scene: str | None = None, skip_missing: bool = False) -> Capture:
    """Load one scene of a nuScenes dataset (a dataroot or a version folder).

    Args:
        path: the dataroot (holding ``v1.0-*``, ``samples/``, ``sweeps/``) or a version folder.
        scene: the scene's name (``scene-0061``); default: the first in ``scene.json``.
        skip_missing: leave out the frames and sweeps whose file is missing (one
            ``MissingFilesWarning``) instead of refusing the scene.

    Raises:
        CaptureError: naming the table (or file) and field of every problem found.
    """
    folder = _locate(Path(path), scene)
    missing = MissingFiles(skip_missing)
    loader = _SceneLoader(_load_tables(folder), missing)
    capture = loader.load(scene)
    for note in loader.notes:
        warnings.warn(note, NuScenesWarning, stacklevel=2)
    missing.warn()
    return capture


@dataclass
class _Data:
    """One sample_data record of the scene, checked."""

    index: int  # in sample_data.json
    token: str
    channel: str
    modality: str
    timestamp_us: int
    path: Path
    calibrated_sensor: str
    ego_pose: str
    width: int
    height: int


class _SceneLoader:
    def __init__(self, tables: _Tables, missing: MissingFiles):
        self.t = tables
        self.root = tables.dataroot
        self.missing = missing
        self.found = Problems(self.root, missing)
        self.notes: list[str] = []
        self.listed_missing = 0

    def record(self, table: str, token: Any, where: str, file: str) -> tuple[int, dict] | None:
        """The record ``token`` of ``table``, or None (problem recorded against ``file``/``where``)."""
        hit = self.t.by_token.get(table, {}).get(token) if isinstance(token, str) else None
        if hit is None:
            self.found.add(file, where, f"{table} {token!r} is not in {self.t.rel(table)}")
        return hit

    def load(self, scene_name: str | None) -> Capture:
        scene_index, scene = self._scene(scene_name)
        samples = self._samples(scene["token"])
        data = self._sample_data(set(samples))
        self.found.raise_if_any()
        by_channel: dict[str, list[_Data]] = {}
        for d in sorted(data, key=lambda d: (d.timestamp_us, d.index)):
            by_channel.setdefault(d.channel, []).append(d)
        radars = sorted(c for c, ds in by_channel.items() if ds[0].modality == "radar")
        if radars:
            self.notes.append(f"radar channels ({', '.join(radars)}) are not imported")
        others = sorted(c for c, ds in by_channel.items() if ds[0].modality == "lidar" and c != LIDAR_CHANNEL)
        if others:
            self.notes.append(f"lidar channels other than {LIDAR_CHANNEL} ({', '.join(others)}) are not imported")
        used = {c: ds for c, ds in by_channel.items() if ds[0].modality == "camera" or c == LIDAR_CHANNEL}
        if not used:
            self.found.add(self.t.rel("sample_data"), "", f"scene {scene['name']!r} has no camera or "
                                                          f"{LIDAR_CHANNEL} data")
        self.found.raise_if_any()

        rig_ts, rig_T = self._rig([d for ds in used.values() for d in ds])
        cameras: dict[str, Camera] = {}
        for channel, ds in used.items():
            if channel != LIDAR_CHANNEL:
                cam = self._camera(channel, ds)
                if cam is not None:
                    cameras[cam.id] = cam
        tracks = self._tracks(samples)
        self.found.raise_if_any()
        lidars: dict[str, Lidar] = {}
        lidar_info: dict[str, Any] = {}
        if LIDAR_CHANNEL in used:
            lidar, info = self._lidar(used[LIDAR_CHANNEL])
            if lidar is not None:
                lidars[lidar.id], lidar_info[lidar.id] = lidar, info
        self.found.raise_if_any()

        offset = rig_T[0, :3, 3].copy()
        rig_T[:, :3, 3] -= offset
        for track in tracks.values():
            track.T_world_box[:, :3, 3] -= offset
        names = [r.get("name") for r in self.t.rows["scene"]]
        if scene_name is None and len(names) > 1:
            shown = ", ".join(str(n) for n in names[1:1 + LISTED_SCENES]) + (", ..." if len(names) > 1 + LISTED_SCENES
                                                                            else "")
            self.notes.append(f"{self.t.rel('scene')} lists {len(names)} scenes; a capture is one scene, so "
                              f"{scene['name']} (the first) is loaded; the others: {shown} (pick one with --scene NAME)")
        log = self.t.by_token.get("log", {}).get(scene.get("log_token"), (None, {}))[1]
        if self.missing.message():
            self.notes.append(self.missing.message())
        metadata = {
            "source": "nuscenes",
            "nuscenes": {
                "dataroot": str(self.root), "version": self.t.folder.name, "scene": scene["name"],
                "scene_token": scene["token"], "scene_index": scene_index,
                "description": scene.get("description", ""), "samples": len(samples),
                "log": {k: log[k] for k in ("logfile", "vehicle", "date_captured", "location") if k in log},
                "scenes": names,
            },
            "lidar_models": lidar_info,
            "warnings": list(self.notes),
        }
        return Capture(root=self.t.folder, name=str(scene["name"]), rig=RigTrajectory(rig_ts, rig_T),
                       cameras=cameras, lidars=lidars, tracks=tracks, world_offset_m=offset, metadata=metadata)

    # -- the scene and its records --------------------------------------------------------

    def _scene(self, name: str | None) -> tuple[int, dict]:
        rows = self.t.rows["scene"]
        rel = self.t.rel("scene")
        if not rows:
            raise CaptureError([Problem(rel, "", "lists no scene")], str(self.root))
        if name is None:
            index = 0
        else:
            matches = [i for i, r in enumerate(rows) if r.get("name") == name]
            if not matches:
                names = [str(r.get("name")) for r in rows]
                shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
                raise CaptureError([Problem(rel, "name", f"no scene is named {name!r}; the {len(names)} scenes: "
                                                         f"{shown}")], str(self.root))
            index = matches[0]
        scene = rows[index]
        if not isinstance(scene.get("name"), str):
            raise CaptureError([Problem(rel, f"[{index}].name", "must be a string")], str(self.root))
        return index, scene

    def _samples(self, scene_token: str) -> dict[str, int]:
        """The scene's samples: token -> timestamp."""
        out: dict[str, int] = {}
        rel = self.t.rel("sample")
        for i, r in enumerate(self.t.rows["sample"]):
            if r.get("scene_token") != scene_token:
                continue
            try:
                out[r["token"]] = int(_field(r, "timestamp", f"[{i}]", int))
            except FieldError as exc:
                self.found.add(rel, exc.field, exc.message)
        if not out and not self.found.items:
            self.found.add(rel, "", f"no sample has scene_token {scene_token!r}")
        return out

    def _sample_data(self, samples: set[str]) -> list[_Data]:
        rel = self.t.rel("sample_data")
        out: list[_Data] = []
        for i, r in enumerate(self.t.rows["sample_data"]):
            if r.get("sample_token") not in samples:
                continue
            where = f"[{i}]"
            try:
                ts = int(_field(r, "timestamp", where, int))
                name = _field(r, "filename", where, str)
                cs_token = _field(r, "calibrated_sensor_token", where, str)
                ego_token = _field(r, "ego_pose_token", where, str)
            except FieldError as exc:
                self.found.add(rel, exc.field, exc.message)
                continue
            hit = self.record("calibrated_sensor", cs_token, f"{where}.calibrated_sensor_token", rel)
            if hit is None:
                continue
            sensor = self.record("sensor", hit[1].get("sensor_token"), f"[{hit[0]}].sensor_token",
                                 self.t.rel("calibrated_sensor"))
            if sensor is None:
                continue
            channel, modality = sensor[1].get("channel"), sensor[1].get("modality")
            if not isinstance(channel, str) or modality not in ("camera", "lidar", "radar"):
                self.found.add(self.t.rel("sensor"), f"[{sensor[0]}]",
                               f"needs a string channel and a modality of camera, lidar or radar, got "
                               f"{channel!r}, {modality!r}")
                continue
            if modality == "radar" or modality == "lidar" and channel != LIDAR_CHANNEL:
                out.append(_Data(i, r["token"], channel, modality, ts, Path(), cs_token, ego_token, 0, 0))
                continue  # listed (for the note), not read
            try:
                path = resolve_inside(self.root, name)
            except ValueError as exc:
                self.found.add(rel, f"{where}.filename", str(exc))
                continue
            if is_missing(path):
                if not self.missing.drop(relative(path, self.root), "frame" if modality == "camera" else "sweep"):
                    self.listed_missing += 1
                    if self.listed_missing <= MAX_LISTED_MISSING:
                        self.found.add(rel, f"{where}.filename",
                                       f"sample_data {r['token']}: file {name} does not exist")
                continue
            width = height = 0
            if modality == "camera":
                try:
                    width, height = int(_field(r, "width", where, int)), int(_field(r, "height", where, int))
                except FieldError as exc:
                    self.found.add(rel, exc.field, exc.message)
                    continue
            out.append(_Data(i, r["token"], channel, modality, ts, path, cs_token, ego_token, width, height))
        if self.listed_missing > MAX_LISTED_MISSING:
            self.found.add(rel, "", f"... and {self.listed_missing - MAX_LISTED_MISSING} more files it names "
                                    "are missing")
        return out

    # -- rig --------------------------------------------------------------------------

    def _rig(self, data: list[_Data]) -> tuple[np.ndarray, np.ndarray]:
        """Ego poses of every sample_data used, one per timestamp (the first of those sharing one)."""
        poses: dict[int, np.ndarray] = {}
        rel = self.t.rel("ego_pose")
        disagree = 0.0
        for d in data:
            hit = self.record("ego_pose", d.ego_pose, f"[{d.index}].ego_pose_token", self.t.rel("sample_data"))
            if hit is None:
                continue
            try:
                T = _pose(hit[1], f"[{hit[0]}]")
            except FieldError as exc:
                self.found.add(rel, exc.field, exc.message)
                continue
            if d.timestamp_us in poses:
                disagree = max(disagree, float(np.abs(poses[d.timestamp_us][:3, 3] - T[:3, 3]).max()))
            else:
                poses[d.timestamp_us] = T
        if disagree > 0.01:
            self.notes.append(f"ego poses at the same timestamp are up to {disagree:.3f} m apart; the first is used")
        if not poses:
            self.found.raise_if_any()  # (there is a problem: every sample_data names an ego pose)
        ts = np.array(sorted(poses), dtype=np.int64)
        return ts, np.stack([poses[int(t)] for t in ts])

    def _calibration(self, channel: str, ds: list[_Data]) -> tuple[dict, int]:
        """The channel's calibrated_sensor record (one mounting per channel in a scene)."""
        tokens = list(dict.fromkeys(d.calibrated_sensor for d in ds))
        index, record = self.t.by_token["calibrated_sensor"][tokens[0]]
        for token in tokens[1:]:
            other = self.t.by_token["calibrated_sensor"][token][1]
            if (other.get("translation"), other.get("rotation"), other.get("camera_intrinsic")) != \
                    (record.get("translation"), record.get("rotation"), record.get("camera_intrinsic")):
                self.notes.append(f"{channel}: its calibration changes within the scene; the first one is used")
                break
        return record, index

    # -- cameras ------------------------------------------------------------------------

    def _camera(self, channel: str, ds: list[_Data]) -> Camera | None:
        record, index = self._calibration(channel, ds)
        rel = self.t.rel("calibrated_sensor")
        try:
            intrinsics = _intrinsics(record, f"[{index}]")
            T_rig_camera = _pose(record, f"[{index}]")
        except FieldError as exc:
            self.found.add(rel, exc.field, f"{exc.message} (camera {channel})")
            return None
        width, height = ds[0].width, ds[0].height
        frames: list[CameraFrame] = []
        duplicates = 0
        for d in ds:
            if frames and frames[-1].timestamp_us == d.timestamp_us:
                duplicates += 1
                continue
            shown = relative(d.path, self.root)
            try:
                size = image_size(d.path)
            except ValueError as exc:
                self.found.add(shown, "", str(exc))
                continue
            if size != (width, height) or (d.width, d.height) != (width, height):
                self.found.add(self.t.rel("sample_data"), f"[{d.index}].filename",
                               f"{shown} is {size[0]}x{size[1]} pixels (its record says {d.width}x{d.height}); "
                               f"camera {channel} is {width}x{height}")
                continue
            frames.append(CameraFrame(d.timestamp_us, d.path))
        if duplicates:
            self.notes.append(f"{channel}: {duplicates} frames share a timestamp with an earlier one and were dropped")
        if not frames:
            return None
        return Camera(channel, "pinhole", width, height, intrinsics, T_rig_camera, RollingShutter("global", 0),
                      tuple(frames))

    # -- lidar --------------------------------------------------------------------------

    def _lidar(self, ds: list[_Data]) -> tuple[Lidar | None, dict[str, Any]]:
        record, index = self._calibration(LIDAR_CHANNEL, ds)
        try:
            T_rig_lidar = _pose(record, f"[{index}]")
        except FieldError as exc:
            self.found.add(self.t.rel("calibrated_sensor"), exc.field, f"{exc.message} ({LIDAR_CHANNEL})")
            return None, {}
        sweeps: list[sweep_cache.CompensatedSweep] = []
        for d in ds:
            if sweeps and sweeps[-1].timestamp_us == d.timestamp_us:
                continue  # sweep timestamps must strictly increase: keep the first
            rel = relative(d.path, self.root)
            size = d.path.stat().st_size
            if size % (4 * LIDAR_VALUES):
                self.found.add(rel, "", f"truncated: {size} bytes is not a whole number of {4 * LIDAR_VALUES}-byte "
                                        "points (float32 x, y, z, intensity, ring index)")
                continue
            sweeps.append(sweep_cache.CompensatedSweep(d.timestamp_us, d.path, rel, f"{d.timestamp_us} "))
        if self.found.items or not sweeps:
            return None, {}
        try:
            spec = sweep_cache.convert_compensated_sweeps(
                f"nurec_usd nuscenes sweeps v{CACHE_VERSION} {LIDAR_CHANNEL} near={EGO_RETURN_RANGE_M}\n", sweeps,
                lambda s: read_lidar_points(s.path, s.rel), _SweepError, rotation="clockwise",
                default_scan_rate_hz=NOMINAL_SCAN_RATE_HZ, max_spacing_s=MAX_SWEEP_SPACING_S)
        except _SweepError as exc:
            self.found.items.append(exc.problem)
            return None, {}
        except OSError as exc:
            self.found.add(str(sweep_cache.cache_root()), "", f"cannot write the converted sweeps ({exc})")
            return None, {}
        return sweep_cache.lidar_from_spec(spec, LIDAR_CHANNEL, T_rig_lidar)

    # -- tracks -------------------------------------------------------------------------

    def _tracks(self, samples: dict[str, int]) -> dict[str, Track]:
        if any(t not in self.t.rows for t in TRACK_TABLES):
            absent = [f"{t}.json" for t in TRACK_TABLES if t not in self.t.rows]
            self.notes.append(f"no {', '.join(absent)} in {self.t.folder.name}: the scene has no tracks")
            return {}
        rel = self.t.rel("sample_annotation")
        boxes: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        for i, r in enumerate(self.t.rows["sample_annotation"]):
            if r.get("sample_token") not in samples:
                continue
            where = f"[{i}]"
            try:
                instance = _field(r, "instance_token", where, str)
                T = _pose(r, where)
                wlh = _numbers(r, "size", where, 3)
                if not np.all(wlh > 0):
                    raise FieldError(f"{where}.size", f"width, length and height must be positive, got {wlh.tolist()}")
            except FieldError as exc:
                self.found.add(rel, exc.field, exc.message)
                continue
            size = np.array([wlh[1], wlh[0], wlh[2]])  # nuScenes: width, length, height; ours: length, width, height
            boxes.setdefault(instance, []).append((samples[r["sample_token"]], T, size))
        tracks: dict[str, Track] = {}
        for instance, items in boxes.items():
            hit = self.record("instance", instance, "instance_token", rel)
            if hit is None:
                continue
            category = self.record("category", hit[1].get("category_token"), f"[{hit[0]}].category_token",
                                   self.t.rel("instance"))
            if category is None:
                continue
            name = category[1].get("name")
            if not isinstance(name, str):
                self.found.add(self.t.rel("category"), f"[{category[0]}].name", "must be a string")
                continue
            items.sort(key=lambda it: it[0])
            kept = [it for k, it in enumerate(items) if k == 0 or it[0] != items[k - 1][0]]
            if len(kept) < len(items):
                self.notes.append(f"instance {instance}: {len(items) - len(kept)} annotations share a sample with "
                                  "another of it; the first is used")
            tracks[instance] = Track(instance, label(name), np.median(np.stack([it[2] for it in kept]), axis=0),
                                     np.array([it[0] for it in kept], dtype=np.int64),
                                     np.stack([it[1] for it in kept]))
        return tracks
