"""COLMAP sparse models (text or binary) read into a camera-only ``Capture``.

A COLMAP workspace looks like::

    workspace/
      images/<name>                   the images the model's NAMEs are relative to
      sparse/0/cameras.{bin,txt}      intrinsics, one entry per CAMERA_ID
      sparse/0/images.{bin,txt}       per-image pose (world -> camera) and CAMERA_ID
      sparse/0/points3D.{bin,txt}     the sparse points (optional here)

``load`` accepts the workspace, its ``sparse/`` folder, or a model folder itself (the model
is looked for in ``sparse/0``, ``sparse``, the folder and ``0``, in that order; ``.bin`` is preferred
over ``.txt`` like COLMAP does). Images are read from ``images/`` next to ``sparse/``; an image
NAME must stay inside that folder (no absolute path, no ``..``, no symlink leading out of it), and
the model files inside the workspace, as the native format's paths do (``nurec_usd.capture.paths``).
Newer COLMAP versions add ``rigs`` and ``frames`` files; they are not needed (every image
still carries its own world-to-camera pose) and are ignored.

COLMAP has no time and no rig, so the capture is built as ``camera_only_capture`` describes:
one timestamp per image (images sorted by name, ``FRAME_INTERVAL_US`` apart), a rig whose pose
at each image's time is that image's camera-to-world pose, and ``T_rig_camera`` = identity.
Each COLMAP camera (CAMERA_ID) becomes one ``Camera`` named ``camera_<CAMERA_ID>``. The sparse
points go to ``capture.metadata["sfm_points"]`` (``xyz`` float64 ``[N, 3]`` in the re-centred
world, ``rgb`` uint8 ``[N, 3]``), where the reconstruction can initialise from them.

Facts about the format used here (COLMAP's documentation and ``colmap/sensor/models.h``):

- image poses are world-to-camera, quaternion (QW, QX, QY, QZ; Hamilton) + translation, and the
  camera frame is OpenCV's (x right, y down, z forward), the same as ours;
- pixel coordinates: the upper-left image *corner* is (0, 0), so the centre of the upper-left
  pixel is (0.5, 0.5). Ours (OpenCV's) puts that pixel centre at (0, 0): principal points are
  shifted by ``-0.5`` on import (focal lengths and distortion are unaffected);
- binary files are little-endian: ``cameras.bin`` = uint64 count, then per camera uint32 id,
  int32 model id, uint64 width, uint64 height, float64 params; ``images.bin`` = uint64 count,
  then per image uint32 id, 4 float64 quaternion, 3 float64 translation, uint32 camera id,
  NUL-terminated name, uint64 point count, per point (float64 x, float64 y, uint64 point3D id);
  ``points3D.bin`` = uint64 count, then per point uint64 id, 3 float64 xyz, 3 uint8 rgb,
  float64 error, uint64 track length, per track element (uint32 image id, uint32 point2D index).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.images import image_size
from nurec_usd.capture.missing import MissingFiles, is_missing
from nurec_usd.capture.model import Camera, CameraFrame, Capture, RigTrajectory, RollingShutter
from nurec_usd.capture.paths import ensure_inside, resolve_inside

__all__ = [
    "detect",
    "load",
    "START_US",
    "FRAME_INTERVAL_US",
    "PIXEL_CENTRE_SHIFT",
    "CameraSpec",
    "PosedImage",
    "perspective_intrinsics",
    "fisheye_intrinsics",
    "intrinsics_problem",
    "image_problem",
    "camera_only_capture",
]

# --------------------------------------------------------------------------------------
# Shared by the camera-only importers (COLMAP, nerfstudio): formats without time or rig.

#: Timestamp of the first image (sorted by name). Any epoch is valid; 0 makes it obvious
#: that the times are synthetic.
START_US = 0
#: Time between consecutive images (sorted by name): 0.1 s, a plausible frame rate that keeps
#: the rig trajectory's interpolation between images meaningful.
FRAME_INTERVAL_US = 100_000
#: Added to a principal point given with the pixel-corner convention (COLMAP, nerfstudio: the
#: centre of the top-left pixel is (0.5, 0.5)) to get ours (OpenCV: that centre is (0, 0)).
PIXEL_CENTRE_SHIFT = -0.5


@dataclass(frozen=True)
class CameraSpec:
    """One camera's model, image size and intrinsics (our conventions, see ``Camera``)."""

    model: str
    width: int
    height: int
    intrinsics: dict[str, float]


@dataclass(frozen=True)
class PosedImage:
    """One image of a camera-only capture, before timestamps are assigned.

    ``sort_name`` orders the images in time; ``T_world_camera`` maps the camera frame
    (OpenCV axes) into the source's world frame (not yet re-centred). ``held_out``: the
    dataset's own split, when it has one (``CameraFrame.held_out``).
    """

    sort_name: str
    camera_id: str
    T_world_camera: np.ndarray  # [4, 4] float64
    image_path: Path
    mask_path: Path | None = None
    held_out: bool | None = None


def perspective_intrinsics(fx: float, fy: float, cx: float, cy: float,
                           distortion: dict[str, float] | None = None) -> tuple[str, dict[str, float]]:
    """Our model and intrinsics for a perspective (radial-tangential) camera.

    ``distortion`` holds any of ``k1 k2 p1 p2 k3 k4 k5 k6`` with OpenCV's meaning (k4..k6 in
    the rational denominator). Without any non-zero coefficient the camera is a ``pinhole``:
    it projects identically and is cheaper (no iterative undistortion, no domain limit).
    Optional coefficients (k3..k6) are only listed when non-zero.
    """
    dist = {k: float(v) for k, v in (distortion or {}).items()}
    base = {"fx": float(fx), "fy": float(fy), "cx": float(cx), "cy": float(cy)}
    if not any(dist.values()):
        return "pinhole", base
    intr = dict(base)
    for key in ("k1", "k2", "p1", "p2"):
        intr[key] = dist.get(key, 0.0)
    for key in ("k3", "k4", "k5", "k6"):
        if dist.get(key, 0.0) != 0.0:
            intr[key] = dist[key]
    return "opencv", intr


def fisheye_intrinsics(fx: float, fy: float, cx: float, cy: float,
                       k1: float = 0.0, k2: float = 0.0, k3: float = 0.0, k4: float = 0.0
                       ) -> tuple[str, dict[str, float]]:
    """Our ``opencv_fisheye`` model and intrinsics (Kannala-Brandt, all of k1..k4 required)."""
    return "opencv_fisheye", {"fx": float(fx), "fy": float(fy), "cx": float(cx), "cy": float(cy),
                              "k1": float(k1), "k2": float(k2), "k3": float(k3), "k4": float(k4)}


def intrinsics_problem(spec: CameraSpec) -> str | None:
    """Why a camera's size or intrinsics cannot be used, or None (cheap checks, no torch)."""
    if spec.width < 1 or spec.height < 1:
        return f"image size must be positive, got {spec.width}x{spec.height}"
    bad = [k for k, v in spec.intrinsics.items() if not math.isfinite(v)]
    if bad:
        return f"intrinsics {', '.join(bad)} must be finite"
    for key in ("fx", "fy"):
        if key in spec.intrinsics and not spec.intrinsics[key] > 0:
            return f"focal length {key} must be positive, got {spec.intrinsics[key]}"
    return None


def image_problem(path: Path, shown: str, width: int, height: int, what: str = "image") -> str | None:
    """Why an image (or mask) file cannot be used with a camera of this size, or None.

    Reads only the file header (existence, decodable header, size).
    """
    if not path.is_file():
        return f"{what} file {shown} does not exist"
    try:
        w, h = image_size(path)
    except ValueError as exc:
        return f"{what} file {shown}: {exc}"
    if (w, h) != (width, height):
        return f"{what} file {shown} is {w}x{h} pixels; the camera's width x height is {width}x{height}"
    return None


def camera_only_capture(root: Path, name: str, cameras: dict[str, CameraSpec], images: Sequence[PosedImage],
                        points_xyz: np.ndarray | None, points_rgb: np.ndarray | None,
                        metadata: dict[str, Any]) -> Capture:
    """Assemble a ``Capture`` from posed images of formats that have no time and no rig.

    Images are sorted by ``sort_name`` (stable) and given timestamps ``START_US``,
    ``START_US + FRAME_INTERVAL_US``, ... The rig trajectory has one key per image: its
    camera-to-world pose, so with ``T_rig_camera`` = identity every frame sees exactly its own
    pose. The world is re-centred on the first image's camera centre (``world_offset_m``), as
    the native loader re-centres on the first rig pose; sparse points move with it and are
    stored as ``metadata["sfm_points"]``. Cameras keep the order of ``cameras``; one without
    images is left out. All cameras are global-shutter.
    """
    if not images:
        raise ValueError("a camera-only capture needs at least one image")
    order = sorted(range(len(images)), key=lambda i: images[i].sort_name)
    timestamps = START_US + FRAME_INTERVAL_US * np.arange(len(order), dtype=np.int64)
    T = np.stack([np.asarray(images[i].T_world_camera, dtype=np.float64) for i in order]).copy()
    offset = T[0, :3, 3].copy()
    T[:, :3, 3] -= offset

    frames: dict[str, list[CameraFrame]] = {cid: [] for cid in cameras}
    for t, i in zip(timestamps, order):
        im = images[i]
        frames[im.camera_id].append(CameraFrame(int(t), im.image_path, im.mask_path, im.held_out))
    out_cameras = {
        cid: Camera(id=cid, model=spec.model, width=spec.width, height=spec.height,
                    intrinsics=dict(spec.intrinsics), T_rig_camera=np.eye(4),
                    rolling_shutter=RollingShutter("global", 0), frames=tuple(frames[cid]))
        for cid, spec in cameras.items() if frames[cid]
    }
    meta = dict(metadata)
    if points_xyz is not None:
        xyz = np.asarray(points_xyz, dtype=np.float64).reshape(-1, 3) - offset
        rgb = (np.asarray(points_rgb, dtype=np.uint8).reshape(-1, 3) if points_rgb is not None
               else np.full((len(xyz), 3), 128, dtype=np.uint8))
        meta["sfm_points"] = {"xyz": xyz, "rgb": rgb}
    return Capture(root=root, name=name, rig=RigTrajectory(timestamps, T), cameras=out_cameras,
                   lidars={}, tracks={}, world_offset_m=offset, metadata=meta)


# --------------------------------------------------------------------------------------
# COLMAP camera models

# model id -> (name, parameter names) for every model COLMAP defines (the ids are the binary
# format's). Only the names of the models we can map matter beyond their count.
_MODELS: dict[int, tuple[str, tuple[str, ...]]] = {
    0: ("SIMPLE_PINHOLE", ("f", "cx", "cy")),
    1: ("PINHOLE", ("fx", "fy", "cx", "cy")),
    2: ("SIMPLE_RADIAL", ("f", "cx", "cy", "k")),
    3: ("RADIAL", ("f", "cx", "cy", "k1", "k2")),
    4: ("OPENCV", ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2")),
    5: ("OPENCV_FISHEYE", ("fx", "fy", "cx", "cy", "k1", "k2", "k3", "k4")),
    6: ("FULL_OPENCV", ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6")),
    7: ("FOV", ("fx", "fy", "cx", "cy", "omega")),
    8: ("SIMPLE_RADIAL_FISHEYE", ("f", "cx", "cy", "k")),
    9: ("RADIAL_FISHEYE", ("f", "cx", "cy", "k1", "k2")),
    10: ("THIN_PRISM_FISHEYE", ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "sx1", "sy1")),
    11: ("RAD_TAN_THIN_PRISM_FISHEYE", ("fx", "fy", "cx", "cy", "k0", "k1", "k2", "k3", "k4", "k5",
                                        "p0", "p1", "s0", "s1", "s2", "s3")),
    12: ("SIMPLE_DIVISION", ("f", "cx", "cy", "k")),
    13: ("DIVISION", ("fx", "fy", "cx", "cy", "k")),
    14: ("SIMPLE_FISHEYE", ("f", "cx", "cy")),
    15: ("FISHEYE", ("fx", "fy", "cx", "cy")),
    16: ("EUCM", ("fx", "fy", "cx", "cy", "alpha", "beta")),
    17: ("EQUIRECTANGULAR", ("w", "h")),
}
_MODEL_BY_NAME = {name: (mid, params) for mid, (name, params) in _MODELS.items()}
# COLMAP models that are exactly one of ours.
SUPPORTED_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV",
                    "SIMPLE_RADIAL_FISHEYE", "RADIAL_FISHEYE", "OPENCV_FISHEYE", "SIMPLE_FISHEYE", "FISHEYE")


@dataclass(frozen=True)
class _ColmapCamera:
    camera_id: int
    model: str
    width: int
    height: int
    params: tuple[float, ...]
    where: str  # the field of the problem report: "line 4" or "cameras[2]"


@dataclass(frozen=True)
class _ColmapImage:
    image_id: int
    qvec: tuple[float, float, float, float]  # w, x, y, z
    tvec: tuple[float, float, float]
    camera_id: int
    name: str
    where: str


def _to_our_camera(cam: _ColmapCamera) -> CameraSpec:
    """Map a COLMAP camera onto our models; ``ValueError`` for models we cannot represent.

    SIMPLE_RADIAL / RADIAL / OPENCV / FULL_OPENCV are OpenCV's radial-tangential (rational)
    model with some coefficients fixed at 0; the *_FISHEYE ones (and the distortion-free
    SIMPLE_FISHEYE / FISHEYE) are OpenCV's fisheye model theta_d = theta (1 + k1 theta^2 + ...).
    """
    p = dict(zip(_MODEL_BY_NAME[cam.model][1], cam.params)) if cam.model in _MODEL_BY_NAME else {}
    if cam.model not in SUPPORTED_MODELS:
        raise ValueError(f"camera {cam.camera_id}: COLMAP camera model {cam.model} cannot be represented "
                         f"(supported: {', '.join(SUPPORTED_MODELS)}); undistort the images with COLMAP's "
                         f"image_undistorter or re-run with one of the supported models")
    fx = p.get("fx", p.get("f"))
    fy = p.get("fy", p.get("f"))
    # COLMAP's pixel centres sit at +0.5 (see the module docstring); ours at integers.
    cx = p["cx"] + PIXEL_CENTRE_SHIFT
    cy = p["cy"] + PIXEL_CENTRE_SHIFT
    if cam.model in ("SIMPLE_RADIAL_FISHEYE", "RADIAL_FISHEYE", "OPENCV_FISHEYE", "SIMPLE_FISHEYE", "FISHEYE"):
        model, intr = fisheye_intrinsics(fx, fy, cx, cy, k1=p.get("k1", p.get("k", 0.0)), k2=p.get("k2", 0.0),
                                         k3=p.get("k3", 0.0), k4=p.get("k4", 0.0))
    else:
        dist = {key: p[key] for key in ("k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6") if key in p}
        if "k" in p:
            dist["k1"] = p["k"]
        model, intr = perspective_intrinsics(fx, fy, cx, cy, dist)
    return CameraSpec(model, int(cam.width), int(cam.height), intr)


# --------------------------------------------------------------------------------------
# Reading the model files


class _FileProblems(Exception):
    """Problems of one model file; parsing of that file stops."""

    def __init__(self, problems: list[Problem]):
        super().__init__(problems)
        self.problems = problems


def _text_lines(path: Path, shown: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise _FileProblems([Problem(shown, "", f"cannot read the file ({exc})")]) from None


def _numbers(tokens: Sequence[str], kind: type, shown: str, where: str, what: str) -> list:
    try:
        return [kind(t) for t in tokens]
    except ValueError:
        raise _FileProblems([Problem(shown, where, f"{what}: expected numbers, got {' '.join(tokens)!r}")]) from None


def _read_cameras_txt(path: Path, shown: str) -> list[_ColmapCamera]:
    cameras = []
    for n, raw in enumerate(_text_lines(path, shown), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"line {n}"
        tokens = line.split()
        if len(tokens) < 4:
            raise _FileProblems([Problem(shown, where, "expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]")])
        camera_id, = _numbers(tokens[:1], int, shown, where, "CAMERA_ID")
        width, height = _numbers(tokens[2:4], int, shown, where, "WIDTH HEIGHT")
        params = tuple(_numbers(tokens[4:], float, shown, where, "PARAMS"))
        model = tokens[1]
        if model in _MODEL_BY_NAME and len(params) != len(_MODEL_BY_NAME[model][1]):
            names = " ".join(_MODEL_BY_NAME[model][1])
            raise _FileProblems([Problem(shown, where, f"camera {camera_id}: {model} has {len(_MODEL_BY_NAME[model][1])} "
                                                       f"parameters ({names}), got {len(params)}")])
        cameras.append(_ColmapCamera(camera_id, model, width, height, params, where))
    return cameras


def _read_images_txt(path: Path, shown: str) -> list[_ColmapImage]:
    # Two lines per image: the pose line, then the (possibly empty) POINTS2D line, which is
    # consumed whatever it holds, as COLMAP's own reader does.
    images = []
    lines = _text_lines(path, shown)
    n = 0
    while n < len(lines):
        line = lines[n].strip()
        n += 1
        if not line or line.startswith("#"):
            continue
        where = f"line {n}"
        tokens = line.split(maxsplit=9)
        if len(tokens) < 10:
            raise _FileProblems([Problem(shown, where, "expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME")])
        image_id, = _numbers(tokens[:1], int, shown, where, "IMAGE_ID")
        pose = _numbers(tokens[1:8], float, shown, where, "QW QX QY QZ TX TY TZ")
        camera_id, = _numbers(tokens[8:9], int, shown, where, "CAMERA_ID")
        images.append(_ColmapImage(image_id, tuple(pose[:4]), tuple(pose[4:]), camera_id, tokens[9].strip(), where))
        n += 1  # the POINTS2D line
    return images


def _read_points_txt(path: Path, shown: str) -> tuple[np.ndarray, np.ndarray]:
    xyz, rgb = [], []
    for n, raw in enumerate(_text_lines(path, shown), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        tokens = line.split()
        where = f"line {n}"
        if len(tokens) < 8:
            raise _FileProblems([Problem(shown, where, "expected POINT3D_ID X Y Z R G B ERROR TRACK[]")])
        xyz.append(_numbers(tokens[1:4], float, shown, where, "X Y Z"))
        rgb.append(_numbers(tokens[4:7], int, shown, where, "R G B"))
    return (np.asarray(xyz, dtype=np.float64).reshape(-1, 3),
            np.clip(np.asarray(rgb, dtype=np.int64).reshape(-1, 3), 0, 255).astype(np.uint8))


class _Binary:
    """A little-endian cursor over a whole binary file that reports truncation by record."""

    def __init__(self, path: Path, shown: str):
        self.shown = shown
        try:
            self.data = path.read_bytes()
        except OSError as exc:
            raise _FileProblems([Problem(shown, "", f"cannot read the file ({exc})")]) from None
        self.pos = 0

    def _need(self, size: int, where: str) -> None:
        if self.pos + size > len(self.data):
            raise _FileProblems([Problem(self.shown, where,
                                         f"the file ends inside this record ({len(self.data)} bytes, at least "
                                         f"{self.pos + size} needed): it is truncated or not a COLMAP model")])

    def unpack(self, fmt: struct.Struct, where: str) -> tuple:
        self._need(fmt.size, where)
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def skip(self, size: int, where: str) -> None:
        self._need(size, where)
        self.pos += size

    def cstring(self, where: str) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise _FileProblems([Problem(self.shown, where, "the file ends inside an image name: it is truncated")])
        text = self.data[self.pos:end].decode("utf-8", errors="replace")
        self.pos = end + 1
        return text

    def finish(self) -> None:
        # Bytes left over mean the counts do not describe the file: corrupt, not just truncated.
        if self.pos != len(self.data):
            raise _FileProblems([Problem(self.shown, "", f"{len(self.data) - self.pos} unexpected bytes after the "
                                                         f"last record; the file is corrupt")])


_U64 = struct.Struct("<Q")
_CAMERA_HEAD = struct.Struct("<IiQQ")
_IMAGE_HEAD = struct.Struct("<I7dI")
_POINT_HEAD = struct.Struct("<Q3d3BdQ")
_POINT2D_BYTES = 24  # float64 x, float64 y, uint64 point3D id
_TRACK_ELEMENT_BYTES = 8  # uint32 image id, uint32 point2D index


def _read_cameras_bin(path: Path, shown: str) -> list[_ColmapCamera]:
    f = _Binary(path, shown)
    count, = f.unpack(_U64, "header.num_cameras")
    cameras = []
    for i in range(count):
        where = f"cameras[{i}]"
        camera_id, model_id, width, height = f.unpack(_CAMERA_HEAD, where)
        if model_id not in _MODELS:
            # Unknown ids have an unknown parameter count: the rest of the file cannot be parsed.
            raise _FileProblems([Problem(shown, where, f"camera {camera_id}: unknown COLMAP camera model id "
                                                       f"{model_id} (known: 0..{max(_MODELS)})")])
        model, names = _MODELS[model_id]
        params = f.unpack(struct.Struct(f"<{len(names)}d"), f"{where}.params")
        cameras.append(_ColmapCamera(camera_id, model, width, height, tuple(params), where))
    f.finish()
    return cameras


def _read_images_bin(path: Path, shown: str) -> list[_ColmapImage]:
    f = _Binary(path, shown)
    count, = f.unpack(_U64, "header.num_reg_images")
    images = []
    for i in range(count):
        where = f"images[{i}]"
        image_id, qw, qx, qy, qz, tx, ty, tz, camera_id = f.unpack(_IMAGE_HEAD, where)
        name = f.cstring(f"{where}.name")
        num_points, = f.unpack(_U64, f"{where}.num_points2D")
        f.skip(num_points * _POINT2D_BYTES, f"{where}.points2D")
        images.append(_ColmapImage(image_id, (qw, qx, qy, qz), (tx, ty, tz), camera_id, name, where))
    f.finish()
    return images


def _read_points_bin(path: Path, shown: str) -> tuple[np.ndarray, np.ndarray]:
    f = _Binary(path, shown)
    count, = f.unpack(_U64, "header.num_points3D")
    xyz = np.empty((min(count, len(f.data) // _POINT_HEAD.size), 3), dtype=np.float64)
    rgb = np.empty((len(xyz), 3), dtype=np.uint8)
    for i in range(count):
        where = f"points3D[{i}]"
        _, x, y, z, r, g, b, _, track_length = f.unpack(_POINT_HEAD, where)
        f.skip(track_length * _TRACK_ELEMENT_BYTES, f"{where}.track")
        xyz[i] = (x, y, z)  # i < len(xyz): each point takes at least _POINT_HEAD.size bytes
        rgb[i] = (r, g, b)
    f.finish()
    return xyz[:count], rgb[:count]


# --------------------------------------------------------------------------------------
# Finding the model


def _find_model(path: Path) -> tuple[Path, str] | None:
    """(model folder, ".bin" or ".txt") of the model at or under ``path``, or None."""
    if path.is_file():
        path = path.parent
    # The workspace (sparse/0, sparse), a model folder, or sparse/ itself (its model 0).
    for model_dir in (path / "sparse" / "0", path / "sparse", path, path / "0"):
        for suffix in (".bin", ".txt"):  # COLMAP prefers binary when both are present
            if (model_dir / f"cameras{suffix}").is_file() and (model_dir / f"images{suffix}").is_file():
                return model_dir, suffix
    return None


def _workspace_root(model_dir: Path) -> Path:
    """The folder holding ``images/``: the one above ``sparse/`` (or the model folder itself)."""
    if model_dir.parent.name == "sparse":
        return model_dir.parent.parent
    if model_dir.name == "sparse":
        return model_dir.parent
    return model_dir


def detect(path: Path) -> bool:
    """Whether ``path`` is a COLMAP workspace, its ``sparse/`` folder or a model folder."""
    try:
        return _find_model(Path(path)) is not None
    except OSError:
        return False


# --------------------------------------------------------------------------------------
# Loading


def _quat_to_matrix(q: Iterable[float]) -> np.ndarray:
    """Rotation matrix of a unit quaternion (w, x, y, z), Hamilton convention."""
    w, x, y, z = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def _T_world_camera(image: _ColmapImage) -> np.ndarray:
    """Camera-to-world of a COLMAP image (whose pose is world-to-camera)."""
    q = np.asarray(image.qvec, dtype=np.float64)
    norm = float(np.linalg.norm(q))
    if not (math.isfinite(norm) and norm > 0) or not np.all(np.isfinite(image.tvec)):
        raise ValueError(f"image {image.image_id}: pose must be finite with a non-zero quaternion, "
                         f"got q={list(image.qvec)}, t={list(image.tvec)}")
    R = _quat_to_matrix(q / norm)  # text files round the quaternion; re-normalise
    T = np.eye(4)
    T[:3, :3] = R.T
    T[:3, 3] = -R.T @ np.asarray(image.tvec, dtype=np.float64)
    return T


def load(path: Path, *, skip_missing: bool = False) -> Capture:
    """Read a COLMAP sparse model and its images into a camera-only ``Capture``.

    ``skip_missing``: leave out the images whose file is missing (one ``MissingFilesWarning``)
    instead of refusing the model.

    Raises:
        CaptureError: every problem found (unreadable or truncated model files, camera models
            we cannot represent, missing images, ...), each naming its file.
    """
    path = Path(path)
    found = _find_model(path) if path.exists() else None
    if found is None:
        raise CaptureError([Problem(str(path), "", "no COLMAP model (cameras and images .bin or .txt) in it, "
                                                   "in sparse/0 or in sparse")])
    model_dir, suffix = found
    root = _workspace_root(model_dir)

    def shown(p: Path) -> str:
        try:
            return p.relative_to(root).as_posix()
        except ValueError:
            return str(p)

    readers = {".bin": (_read_cameras_bin, _read_images_bin, _read_points_bin),
               ".txt": (_read_cameras_txt, _read_images_txt, _read_points_txt)}[suffix]
    problems: list[Problem] = []
    cameras: list[_ColmapCamera] = []
    images: list[_ColmapImage] = []
    points: tuple[np.ndarray, np.ndarray] | None = None
    points_path = model_dir / f"points3D{suffix}"
    for kind, reader in zip(("cameras", "images", "points3D"), readers):
        file = model_dir / f"{kind}{suffix}"
        if kind == "points3D" and not file.is_file():
            continue  # optional: the capture is usable without initial points
        try:
            ensure_inside(root, file)
        except ValueError as exc:
            problems.append(Problem(shown(file), "", str(exc)))
            continue
        try:
            result = reader(file, shown(file))
        except _FileProblems as exc:
            problems.extend(exc.problems)
            continue
        if kind == "cameras":
            cameras = result
        elif kind == "images":
            images = result
        else:
            points = result
    if problems:
        raise CaptureError(problems, str(root))

    cameras_shown = shown(model_dir / f"cameras{suffix}")
    images_shown = shown(model_dir / f"images{suffix}")
    by_id: dict[int, _ColmapCamera] = {}
    for cam in cameras:
        if cam.camera_id in by_id:
            problems.append(Problem(cameras_shown, cam.where, f"camera id {cam.camera_id} is used twice"))
        by_id[cam.camera_id] = cam
    if not images:
        problems.append(Problem(images_shown, "", "the model has no registered images"))

    # Only cameras that registered images use matter: a camera without images is dropped, so
    # an unsupported model there is no reason to refuse the whole reconstruction.
    used = sorted({im.camera_id for im in images if im.camera_id in by_id})
    specs: dict[int, CameraSpec] = {}
    for camera_id in used:
        cam = by_id[camera_id]
        try:
            spec = _to_our_camera(cam)
        except ValueError as exc:
            problems.append(Problem(cameras_shown, cam.where, str(exc)))
            continue
        message = intrinsics_problem(spec)
        if message:
            problems.append(Problem(cameras_shown, cam.where, f"camera {camera_id} ({cam.model}): {message}"))
            continue
        specs[camera_id] = spec

    images_dir = root / "images"
    if images and not images_dir.is_dir():
        problems.append(Problem(shown(images_dir), "", f"the images folder {shown(images_dir)} does not exist "
                                                       f"(expected next to sparse/)"))
    posed: list[PosedImage] = []
    seen_names: dict[str, int] = {}
    missing = MissingFiles(skip_missing)
    for im in images:
        if im.camera_id not in by_id:
            problems.append(Problem(images_shown, im.where, f"image {im.image_id} ({im.name}) refers to camera "
                                                            f"{im.camera_id}, which {cameras_shown} does not define"))
            continue
        if im.name in seen_names:
            problems.append(Problem(images_shown, im.where, f"image name {im.name!r} is used twice "
                                                            f"(also by image {seen_names[im.name]})"))
        seen_names.setdefault(im.name, im.image_id)
        try:
            T = _T_world_camera(im)
        except ValueError as exc:
            problems.append(Problem(images_shown, im.where, str(exc)))
            continue
        try:
            # NAMEs are relative to the image folder, which lies in the workspace like everything read
            image_path = ensure_inside(root, resolve_inside(images_dir, im.name), f"images/{im.name}")
        except ValueError as exc:
            problems.append(Problem(images_shown, im.where, f"image {im.image_id}: {exc}"))
            continue
        if images_dir.is_dir() and is_missing(image_path):
            if not missing.drop(shown(image_path)):
                problems.append(Problem(images_shown, im.where,
                                        f"image {im.image_id}: image file {shown(image_path)} does not exist"))
            continue
        spec = specs.get(im.camera_id)
        if spec is not None and images_dir.is_dir():
            message = image_problem(image_path, shown(image_path), spec.width, spec.height)
            if message:
                problems.append(Problem(images_shown, im.where, f"image {im.image_id}: {message}"))
        posed.append(PosedImage(im.name, f"camera_{im.camera_id}", T, image_path))
    if problems:
        raise CaptureError(problems, str(root), hint=missing.hint())
    if not posed:
        raise CaptureError([Problem(images_shown, "", f"none of the model's {len(images)} images is present "
                                                      f"in {shown(images_dir)}")], str(root))

    metadata: dict[str, Any] = {"source_format": "colmap", "source_model": shown(model_dir) if model_dir != root else "."}
    if points is None:
        xyz = rgb = None
    else:
        xyz, rgb = points
        if not np.all(np.isfinite(xyz)):
            raise CaptureError([Problem(shown(points_path), "", "points have non-finite coordinates")], str(root))
    if missing.message():
        metadata["warnings"] = [missing.message()]
    capture = camera_only_capture(root, root.name, {f"camera_{cid}": specs[cid] for cid in used}, posed,
                                  xyz, rgb, metadata)
    missing.warn()
    return capture
