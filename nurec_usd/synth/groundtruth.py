"""Ground truth written beside a synthetic capture (not part of the capture format).

Layout (``<capture>_groundtruth/`` next to the capture by default)::

    groundtruth.json                 index: preset, seed, conventions, actors, every file below
    cameras/<camera>/<t_us>.npz      depth  float32 [H, W]  distance along the ray (not z-depth) from the
                                                            camera centre to the surface seen through the
                                                            pixel centre, at the pixel's own (rolling-
                                                            shutter) time, metres; 0 = no surface (sky) or
                                                            outside the lens's field of view
                                     actor  int16 [H, W]    index into ``actors`` of what the pixel centre
                                                            sees; -1 = static scene, sky or nothing
    lidar/<lidar>/<t_us>.npz         aligned with the sweep file's points (same order, same count N):
                                     range_clean  float32 [N]     noise-free range (m)
                                     points_clean float32 [N, 3]  noise-free point, lidar frame at firing time
                                     actor        int16 [N]       actor index, -1 = static
                                     column       uint16 [N]      firing column (the channel is in the sweep)
                                     and every ray of the scan, dropped or not:
                                     range_grid   float32 [columns, channels]  noise-free range, 0 = no surface
                                     actor_grid   int16 [columns, channels]

``.npz`` files are ordinary numpy archives (``numpy.load``), written with fixed zip dates so the same
seed gives byte-identical files. Actor indices map to the capture's track ids through
``groundtruth.json`` ``actors[i].track_id``.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nurec_usd.util.staging import StagedDirectory

GT_FORMAT = "nurec_usd.synth.groundtruth"
GT_VERSION = 1
GT_INDEX = "groundtruth.json"

CONVENTIONS = {
    "depth": "float32 metres along the camera ray from the camera centre through the pixel centre (ray distance, "
             "not z-depth), at the pixel's own rolling-shutter time; 0 = sky or outside the lens's field of view",
    "actor": "int16 index into 'actors'; -1 = static scene, sky or nothing",
    "lidar": "per returned point, in the sweep file's order: range_clean, points_clean (lidar frame at the point's "
             "firing time), actor, column; per ray: range_grid / actor_grid [columns, channels] (0 = no surface)",
    "noise": "sweep points = clean range + N(0, range_noise_m) along the ray; dropped returns are absent",
}


def default_groundtruth_dir(capture_dir: str | Path) -> Path:
    """``<capture>_groundtruth`` beside the capture directory."""
    capture_dir = Path(capture_dir)
    return capture_dir.parent / f"{capture_dir.name}_groundtruth"


def write_npz(path: Path, arrays: dict[str, tuple[np.ndarray, bool]]) -> None:
    """A numpy ``.npz`` with fixed zip metadata; ``arrays[name] = (array, deflate)``.

    Float images are stored raw (deflate gains ~30% on them at a large CPU cost); integer label
    images compress well and are deflated at a fast level.
    """
    with zipfile.ZipFile(path, "w") as zf:
        for name, (arr, deflate) in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            if deflate:
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, buf.getvalue(), compresslevel=1)
            else:
                info.compress_type = zipfile.ZIP_STORED
                zf.writestr(info, buf.getvalue())


class GroundTruthWriter:
    """Writes the ground-truth folder atomically (a temporary folder renamed at ``finish``)."""

    def __init__(self, out_dir: str | Path, overwrite: bool = False):
        self.out_dir = Path(out_dir)
        self._stage = StagedDirectory(self.out_dir, overwrite=overwrite)
        self._tmp = self._stage.path

    @staticmethod
    def camera_rel(camera_id: str, t_us: int) -> str:
        return f"cameras/{camera_id}/{int(t_us)}.npz"

    @staticmethod
    def lidar_rel(lidar_id: str, t_us: int) -> str:
        return f"lidar/{lidar_id}/{int(t_us)}.npz"

    def camera_frame(self, camera_id: str, t_us: int,
                     depth: np.ndarray,  # [H, W] float32
                     actor: np.ndarray,  # [H, W] int16
                     ) -> None:
        """One camera frame's depth and actor-id images (thread-safe: one file per call)."""
        path = self._tmp / self.camera_rel(camera_id, t_us)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_npz(path, {"depth": (depth.astype(np.float32, copy=False), False),
                         "actor": (actor.astype(np.int16, copy=False), True)})

    def sweep(self, lidar_id: str, t_us: int, arrays: dict[str, np.ndarray]) -> None:
        """One sweep's arrays (see the module docstring for the names)."""
        path = self._tmp / self.lidar_rel(lidar_id, t_us)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_npz(path, {k: (v, v.dtype.kind in "iu") for k, v in arrays.items()})

    def finish(self, index: dict[str, Any]) -> Path:
        """Write ``groundtruth.json`` and move the folder into place. Returns its path."""
        (self._tmp / GT_INDEX).write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
        return self._stage.commit()

    def abort(self) -> None:
        self._stage.abort()


@dataclass
class GroundTruth:
    """A ground-truth folder, read back (files are loaded on demand)."""

    root: Path
    index: dict[str, Any]

    @property
    def actors(self) -> list[dict[str, Any]]:
        return self.index["actors"]

    def track_id(self, actor_index: int) -> str | None:
        """The capture track id of an actor index (None for -1)."""
        return None if actor_index < 0 else self.actors[actor_index]["track_id"]

    def camera_frame(self, camera_id: str, t_us: int) -> tuple[np.ndarray, np.ndarray]:
        """(depth [H, W] float32, actor [H, W] int16) of one frame."""
        with np.load(self.root / GroundTruthWriter.camera_rel(camera_id, t_us)) as z:
            return z["depth"], z["actor"]

    def sweep(self, lidar_id: str, t_us: int) -> dict[str, np.ndarray]:
        """Every array of one sweep's ground truth."""
        with np.load(self.root / GroundTruthWriter.lidar_rel(lidar_id, t_us)) as z:
            return {k: z[k] for k in z.files}


def load_groundtruth(path: str | Path) -> GroundTruth:
    """Open a ground-truth folder (``ValueError`` when it is not one)."""
    root = Path(path)
    index_path = root / GT_INDEX
    if not index_path.is_file():
        raise ValueError(f"{root}: not a synthetic ground-truth folder (no {GT_INDEX})")
    index = json.loads(index_path.read_text(encoding="utf-8"))
    if index.get("format") != GT_FORMAT:
        raise ValueError(f"{index_path}: format is {index.get('format')!r}, expected {GT_FORMAT!r}")
    return GroundTruth(root, index)
