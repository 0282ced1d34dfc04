"""Timed poses in a file: a novel rig trajectory for ``render --trajectory``, or an actor's new track.

Two layouts, each a pose per row: time ``t_s`` in seconds since the capture start, the
translation ``tx, ty, tz`` in metres and the rotation as a unit quaternion ``qw, qx, qy, qz``,
together the transform from the moving frame (rig, or actor box) into the scene's world frame
(the capture's world, re-centred on its first rig pose as ``build`` loads it).

CSV (``.csv``): a header naming the eight columns (in any order), then one row per pose; blank
lines and lines starting with ``#`` are skipped::

    t_s,tx,ty,tz,qw,qx,qy,qz
    0.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0
    0.1,0.8,0.0,0.0,1.0,0.0,0.0,0.0

JSON (``.json``): an object with a list ``poses`` of objects with the same eight keys::

    {"poses": [{"t_s": 0.0, "tx": 0.0, "ty": 0.0, "tz": 0.0, "qw": 1.0, "qx": 0.0, "qy": 0.0, "qz": 0.0}]}

Every value must be a finite number, times must increase strictly, quaternions must have unit
length within ``QUAT_TOLERANCE`` (they are then normalised), and for a rig trajectory every
time must lie within the scene's span. A file that breaks a rule is refused with one line
naming the file, the row (CSV: its data row and line; JSON: ``poses[i]``) and the field.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nurec_usd.util.staging import atomic_bytes

__all__ = ["COLUMNS", "QUAT_TOLERANCE", "Trajectory", "TrajectoryError", "read_trajectory", "write_trajectory_csv"]

COLUMNS = ("t_s", "tx", "ty", "tz", "qw", "qx", "qy", "qz")
QUAT_TOLERANCE = 1e-3  # |norm - 1| allowed before a quaternion is refused (rounding in hand-written files)


class TrajectoryError(ValueError):
    """A trajectory file that cannot be used; the message names the file, the row and the field."""


@dataclass
class Trajectory:
    """Timed poses read from a file."""

    times_s: np.ndarray  # [K] float64, strictly increasing
    T_world: np.ndarray  # [K, 4, 4] float64, the moving frame -> world

    def __len__(self) -> int:
        return len(self.times_s)


def _quat_matrix(q: np.ndarray) -> np.ndarray:  # [4] unit (w, x, y, z) -> [3, 3]
    w, x, y, z = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def _rows_csv(path: Path) -> list[tuple[str, dict]]:
    """(where, {column: text}) per data row."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TrajectoryError(f"{path}: not a text file (UTF-8 CSV expected)") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise TrajectoryError(f"{path}: empty; expected a header {','.join(COLUMNS)} and a row per pose")
    header_line, header = lines[0]
    names = [h.strip() for h in next(csv.reader([header]))]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise TrajectoryError(f"{path}: line {header_line}: header: missing column{'s' * (len(missing) > 1)} "
                              f"{', '.join(missing)} (the header must name {','.join(COLUMNS)})")
    unknown = [c for c in names if c not in COLUMNS]
    if unknown:
        raise TrajectoryError(f"{path}: line {header_line}: header: unknown column {unknown[0]!r} "
                              f"(the columns are {','.join(COLUMNS)})")
    if len(set(names)) != len(names):
        twice = next(c for c in names if names.count(c) > 1)
        raise TrajectoryError(f"{path}: line {header_line}: header: column {twice!r} appears twice")
    rows = []
    for i, (n, line) in enumerate(lines[1:], 1):
        values = next(csv.reader([line]))
        where = f"row {i} (line {n})"
        if len(values) != len(names):
            raise TrajectoryError(f"{path}: {where}: {len(values)} values, expected {len(names)} ({','.join(names)})")
        rows.append((where, {k: v.strip() for k, v in zip(names, values)}))
    return rows


def _rows_json(path: Path) -> list[tuple[str, dict]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TrajectoryError(f"{path}: not valid JSON ({err})") from None
    poses = data.get("poses") if isinstance(data, dict) else None
    if not isinstance(poses, list):
        raise TrajectoryError(f"{path}: poses: expected an object with a list \"poses\" of "
                              f"{{{', '.join(COLUMNS)}}} objects")
    rows = []
    for i, pose in enumerate(poses):
        where = f"poses[{i}]"
        if not isinstance(pose, dict):
            raise TrajectoryError(f"{path}: {where}: expected an object with keys {', '.join(COLUMNS)}")
        missing = [c for c in COLUMNS if c not in pose]
        if missing:
            raise TrajectoryError(f"{path}: {where}.{missing[0]}: missing (each pose needs {', '.join(COLUMNS)})")
        unknown = [k for k in pose if k not in COLUMNS]
        if unknown:
            raise TrajectoryError(f"{path}: {where}.{unknown[0]}: unknown key (the keys are {', '.join(COLUMNS)})")
        rows.append((where, pose))
    return rows


def read_trajectory(path: str | Path, span_s: tuple[float, float] | None = None) -> Trajectory:
    """Read and check a trajectory file (layout by suffix: ``.csv`` or ``.json``).

    Args:
        path: the file.
        span_s: (start, end) seconds every time must lie in (the scene's span, for a rig
            trajectory); None: any time.

    Raises:
        TrajectoryError: naming the file, the row and the field of the first problem.
    """
    path = Path(path)
    if not path.is_file():
        raise TrajectoryError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".json"):
        raise TrajectoryError(f"{path}: unknown layout {path.suffix!r}; a trajectory is a .csv or a .json file")
    rows = _rows_csv(path) if suffix == ".csv" else _rows_json(path)
    if not rows:
        raise TrajectoryError(f"{path}: no poses")
    json_layout = suffix == ".json"
    sep = "." if json_layout else ": "
    times, poses = [], []
    for where, row in rows:
        values = {}
        for name in COLUMNS:
            raw = row[name]
            if json_layout and (isinstance(raw, bool) or not isinstance(raw, (int, float))):
                raise TrajectoryError(f"{path}: {where}{sep}{name}: expected a number, got {json.dumps(raw)}")
            try:
                value = float(raw)
            except ValueError:
                raise TrajectoryError(f"{path}: {where}{sep}{name}: not a number ({raw!r})") from None
            if not math.isfinite(value):
                raise TrajectoryError(f"{path}: {where}{sep}{name}: must be finite, got {raw}")
            values[name] = value
        q = np.array([values[c] for c in ("qw", "qx", "qy", "qz")])
        norm = float(np.linalg.norm(q))
        if abs(norm - 1.0) > QUAT_TOLERANCE:
            raise TrajectoryError(f"{path}: {where}{sep}qw,qx,qy,qz: the quaternion has length {norm:.6g}, not 1 "
                                  f"(within {QUAT_TOLERANCE:g}); give a unit quaternion (w, x, y, z)")
        t = values["t_s"]
        if times and not t > times[-1]:
            raise TrajectoryError(f"{path}: {where}{sep}t_s: {t:g} s does not come after the previous pose's "
                                  f"{times[-1]:g} s (times must increase strictly)")
        if span_s is not None and not span_s[0] - 1e-6 <= t <= span_s[1] + 1e-6:
            raise TrajectoryError(f"{path}: {where}{sep}t_s: {t:g} s is outside the scene's span "
                                  f"[{span_s[0]:g}, {span_s[1]:g}] s")
        T = np.eye(4)
        T[:3, :3] = _quat_matrix(q / norm)
        T[:3, 3] = [values["tx"], values["ty"], values["tz"]]
        times.append(t)
        poses.append(T)
    return Trajectory(np.array(times, dtype=np.float64), np.stack(poses))


def write_trajectory_csv(path: str | Path, times_s: np.ndarray, T_world: np.ndarray) -> Path:
    """Write timed poses (``[K]``, ``[K, 4, 4]``) in the CSV layout, which ``read_trajectory`` reads back."""
    import torch

    from nurec_usd.sensors.se3 import matrix_to_quat

    path = Path(path)
    T = np.asarray(T_world, dtype=np.float64).reshape(-1, 4, 4)
    q = matrix_to_quat(torch.from_numpy(T[:, :3, :3].copy())).numpy()  # [K, 4] (w, x, y, z)
    lines = [",".join(COLUMNS)]
    for t, M, qk in zip(np.asarray(times_s, dtype=np.float64), T, q):
        lines.append(",".join(f"{v:.9g}" for v in (t, *M[:3, 3], *qk)))
    atomic_bytes(path, ("\n".join(lines) + "\n").encode("ascii"))
    return path
