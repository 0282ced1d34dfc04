"""Writing a native capture directory, all or nothing.

Everything is written into a temporary folder beside the destination and moved into
place only when the whole capture is complete and validates, so an interrupted or
failed write never leaves a half-written capture behind.

    with CaptureWriter("out/capture", name="demo") as w:
        w.set_rig(timestamps_us, T_world_rig)
        w.add_camera("front", "pinhole", 320, 180, {"fx": ..., ...}, T_rig_camera)
        w.add_frame("front", t_us, rgb)
        ...
    # on leaving the block without an exception: validated and moved into place
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from nurec_usd.capture.images import write_image
from nurec_usd.capture.loader import load_capture
from nurec_usd.capture.manifest import MANIFEST_NAME
from nurec_usd.capture.sweep_io import write_nrl
from nurec_usd.util.staging import StagedDirectory


def _matrix(T: np.ndarray) -> list[list[float]]:
    T = np.asarray(T, dtype=np.float64)
    if T.shape != (4, 4):
        raise ValueError(f"a pose must be 4x4, got {T.shape}")
    return [[float(v) for v in row] for row in T]


class CaptureWriter:
    """Builds a capture directory. See the module docstring for the shape of its use."""

    def __init__(self, out_dir: str | Path, name: str = "", metadata: dict[str, Any] | None = None,
                 overwrite: bool = False, image_format: str = "png"):
        self.out_dir = Path(out_dir)
        if image_format not in ("png", "jpg"):
            raise ValueError(f"image_format must be 'png' or 'jpg', got {image_format!r}")
        self._stage = StagedDirectory(self.out_dir, overwrite=overwrite)
        self._tmp = self._stage.path
        self.image_format = image_format
        self._manifest: dict[str, Any] = {
            "format": "nurec_usd.capture",
            "version": 1,
            "name": name or self.out_dir.name,
            "metadata": dict(metadata or {}),
            "rig": None,
            "cameras": [],
            "lidars": [],
            "tracks": [],
        }
        self._cameras: dict[str, dict[str, Any]] = {}
        self._lidars: dict[str, dict[str, Any]] = {}
        self._finished = False

    # -- rig and sensors ------------------------------------------------------------------

    def set_rig(self, timestamps_us: np.ndarray,  # [K] int
                T_world_rig: np.ndarray,  # [K, 4, 4]
                ) -> None:
        """Rig poses over time (rig -> world)."""
        self._manifest["rig"] = {
            "timestamps_us": [int(t) for t in timestamps_us],
            "T_world_rig": [_matrix(T) for T in T_world_rig],
        }

    def add_camera(self, camera_id: str, model: str, width: int, height: int, intrinsics: dict[str, Any],
                   T_rig_camera: np.ndarray,  # [4, 4]
                   rolling_shutter: str = "global", readout_time_us: int = 0) -> None:
        """Declare a camera; its frames follow with ``add_frame``."""
        if camera_id in self._cameras or camera_id in self._lidars:
            raise ValueError(f"sensor id {camera_id!r} already declared")
        cam = {
            "id": camera_id, "model": model, "width": int(width), "height": int(height),
            "intrinsics": {k: ([float(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else float(v))
                           for k, v in intrinsics.items()},
            "T_rig_camera": _matrix(T_rig_camera),
            "rolling_shutter": {"direction": rolling_shutter, "readout_time_us": int(readout_time_us)},
            "frames": [],
        }
        self._cameras[camera_id] = cam
        self._manifest["cameras"].append(cam)

    def add_frame(self, camera_id: str, timestamp_us: int,
                  image: np.ndarray,  # [H, W, 3] uint8
                  mask: np.ndarray | None = None,  # [H, W] bool or uint8
                  ) -> None:
        """Write one image (and optional mask) of a declared camera."""
        cam = self._cameras[camera_id]
        rel = f"images/{camera_id}/{int(timestamp_us)}.{self.image_format}"
        self._write(rel, lambda p: write_image(p, image))
        frame: dict[str, Any] = {"timestamp_us": int(timestamp_us), "image": rel}
        if mask is not None:
            mrel = f"masks/{camera_id}/{int(timestamp_us)}.png"
            self._write(mrel, lambda p: write_image(p, (np.asarray(mask) > 0).astype(np.uint8) * 255))
            frame["mask"] = mrel
        cam["frames"].append(frame)

    def add_lidar(self, lidar_id: str, T_rig_lidar: np.ndarray,  # [4, 4]
                  elevation_deg: np.ndarray,  # [C]
                  columns: int, scan_rate_hz: float, min_range_m: float, max_range_m: float,
                  rotation: str = "clockwise",
                  azimuth_offset_deg: np.ndarray | None = None,  # [C]
                  start_azimuth_deg: float = 0.0) -> None:
        """Declare a spinning lidar; its sweeps follow with ``add_sweep``."""
        if lidar_id in self._cameras or lidar_id in self._lidars:
            raise ValueError(f"sensor id {lidar_id!r} already declared")
        spec: dict[str, Any] = {
            "id": lidar_id, "model": "spinning", "T_rig_lidar": _matrix(T_rig_lidar),
            "elevation_deg": [float(e) for e in elevation_deg],
            "columns": int(columns), "rotation": rotation, "scan_rate_hz": float(scan_rate_hz),
            "start_azimuth_deg": float(start_azimuth_deg),
            "min_range_m": float(min_range_m), "max_range_m": float(max_range_m), "sweeps": [],
        }
        if azimuth_offset_deg is not None:
            spec["azimuth_offset_deg"] = [float(a) for a in azimuth_offset_deg]
        self._lidars[lidar_id] = spec
        self._manifest["lidars"].append(spec)

    def add_sweep(self, lidar_id: str, timestamp_us: int,
                  points: np.ndarray,  # [N, 3] lidar frame
                  intensity: np.ndarray,  # [N]
                  timestamps_us: np.ndarray,  # [N] int, absolute firing times
                  channel: np.ndarray,  # [N] int
                  ) -> None:
        """Write one sweep of a declared lidar as ``.nrl``."""
        spec = self._lidars[lidar_id]
        rel = f"lidar/{lidar_id}/{int(timestamp_us)}.nrl"
        self._write(rel, lambda p: write_nrl(p, int(timestamp_us), np.asarray(points), np.asarray(intensity),
                                             np.asarray(timestamps_us), np.asarray(channel)))
        spec["sweeps"].append({"timestamp_us": int(timestamp_us), "file": rel})

    def add_track(self, track_id: str, label: str, size_m: np.ndarray,  # [3]
                  timestamps_us: np.ndarray,  # [K] int
                  T_world_box: np.ndarray,  # [K, 4, 4]
                  ) -> None:
        """A tracked actor: class label, box size (length, width, height) and box poses."""
        self._manifest["tracks"].append({
            "id": track_id, "class": label, "size_m": [float(s) for s in size_m],
            "timestamps_us": [int(t) for t in timestamps_us],
            "T_world_box": [_matrix(T) for T in T_world_box],
        })

    # -- finishing -----------------------------------------------------------------------

    def finish(self, validate: bool = True) -> Path:
        """Write the manifest, validate, and move the capture into place. Returns its path.

        On any failure the temporary folder is removed and the destination left as it was.
        """
        try:
            if self._manifest["rig"] is None:
                raise ValueError("set_rig() was never called: a capture needs rig poses")
            manifest = {k: v for k, v in self._manifest.items() if not (k == "metadata" and not v)}
            (self._tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
            if validate:
                load_capture(self._tmp)  # raises CaptureError
            self._stage.commit()
        except BaseException:
            self.abort()
            raise
        self._finished = True
        return self.out_dir

    def abort(self) -> None:
        """Drop everything written so far."""
        self._stage.abort()

    def __enter__(self) -> "CaptureWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._finished:
            return
        if exc_type is None:
            self.finish()
        else:
            self.abort()

    def _write(self, rel: str, write) -> None:
        path = self._tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
