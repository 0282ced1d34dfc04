"""nerfstudio / instant-ngp ``transforms.json`` read into a camera-only ``Capture``.

The file (facts from nerfstudio's data conventions and its dataparser)::

    {
      "camera_model": "OPENCV",                      # optional, default perspective
      "fl_x": ..., "fl_y": ..., "cx": ..., "cy": ..., "w": ..., "h": ...,
      "k1": ..., "k2": ..., "k3": ..., "k4": ..., "p1": ..., "p2": ...,
      "ply_file_path": "sparse_pc.ply",              # optional sparse points
      "frames": [
        {"file_path": "images/frame_00001.png",      # relative to the json's folder
         "transform_matrix": [[...4x4...]],          # camera-to-world, OpenGL camera axes
         "mask_path": "masks/frame_00001.png",       # optional, 0 = ignore
         "fl_x": ..., ...}                           # optional per-frame intrinsics
      ]
    }

Intrinsics may be given once at the top level or per frame (a frame's value wins); frames
with identical model, size and intrinsics share one ``Camera`` (``camera_0``, ``camera_1``,
... in the order they first appear). Conversions:

- ``transform_matrix`` uses the OpenGL/Blender camera axes (x right, y up, z back); ours are
  OpenCV's (x right, y down, z forward), so ``T_world_camera = transform_matrix @ diag(1, -1, -1, 1)``.
  The world frame is kept as it is (after ``ns-process-data`` it is the COLMAP world turned
  z-up by ``applied_transform``; poses are taken as metres, though the scale is whatever
  the source used).
- nerfstudio shoots rays through pixel centres at ``index + 0.5`` (the COLMAP convention it
  copies intrinsics from), so ``cx, cy`` shift by ``-0.5`` into ours (centre of the top-left
  pixel at (0, 0)).
- Perspective models (``PINHOLE``, ``SIMPLE_PINHOLE``, ``SIMPLE_RADIAL``, ``RADIAL``,
  ``OPENCV``, or no ``camera_model``) use nerfstudio's radial polynomial
  ``1 + k1 r^2 + k2 r^4 + k3 r^6 + k4 r^8`` with tangential ``p1 p2``: without k4 that is
  OpenCV's model (our ``opencv``, or ``pinhole`` when every coefficient is 0). A non-zero k4
  (an r^8 term our ``opencv`` lacks: its k4 sits in the rational denominator) is refused.
- ``OPENCV_FISHEYE`` is OpenCV's fisheye model, k1..k4 (tangential terms are refused).
  Other models (``EQUIRECTANGULAR``, ``FISHEYE624``, ...) are refused.
- ``fl_x`` may be missing when ``camera_angle_x`` (horizontal field of view, radians) is
  given, as in Blender-style files; ``fl_y`` defaults to ``fl_x``; ``cx, cy`` default to the
  image centre; ``w, h`` default to the image file's size. A ``file_path`` without a suffix
  (Blender-style) is read as ``.png``.

Like COLMAP, the format has no time and no rig: see ``colmap.camera_only_capture``
(images sorted by ``file_path``, 0.1 s apart; rig pose = camera pose; ``T_rig_camera`` =
identity). ``ply_file_path`` points (in the same world as the poses) go to
``capture.metadata["sfm_points"]``.

Splits (Blender / NeRF-synthetic style, and nerfstudio's own blender data): a folder holding
``transforms_train.json``, ``transforms_test.json`` and ``transforms_val.json`` (any of them,
no ``transforms.json``) loads as one capture. Each file keeps its own top-level intrinsics. The
test frames are the held-out set (``CameraFrame.held_out``), so a build is scored on the
dataset's own split and never trains on it; the val frames are then left out (with a warning).
Without a test file, the val frames are the held-out set. A single split file given by its
path loads alone, with the usual held-out rule.

Paths are resolved relative to the json's folder and must stay inside it, as in the native
format (``nurec_usd.capture.paths``): absolute paths, ``..`` and symlinks that lead outside the
folder are refused. Backslashes (written by exporters on Windows) are read as ``/``.
"""

from __future__ import annotations

import json
import math
import numbers
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.images import image_size
from nurec_usd.capture.importers.colmap import (
    PIXEL_CENTRE_SHIFT,
    CameraSpec,
    PosedImage,
    camera_only_capture,
    fisheye_intrinsics,
    image_problem,
    intrinsics_problem,
    perspective_intrinsics,
)
from nurec_usd.capture.loader import rigid_transform_problem
from nurec_usd.capture.missing import MissingFiles, is_missing
from nurec_usd.capture.model import Capture
from nurec_usd.capture.paths import ensure_inside, resolve_inside

__all__ = ["detect", "load", "read_ply_points", "OPENGL_TO_OPENCV", "NerfstudioWarning", "SPLITS"]

TRANSFORMS_NAME = "transforms.json"
#: The split files a folder may hold instead of one transforms.json (transforms_<split>.json).
SPLITS = ("train", "val", "test")
#: Right-multiplied onto an OpenGL-axes camera-to-world pose gives the OpenCV-axes one (and back).
OPENGL_TO_OPENCV = np.diag([1.0, -1.0, -1.0, 1.0])

_PERSPECTIVE = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV")
_FISHEYE = ("OPENCV_FISHEYE",)
_INTRINSIC_KEYS = ("fl_x", "fl_y", "cx", "cy", "w", "h", "k1", "k2", "k3", "k4", "p1", "p2",
                   "camera_angle_x", "camera_angle_y", "camera_model")


class NerfstudioWarning(UserWarning):
    """Something in a nerfstudio / Blender dataset was left out; the capture still loaded."""


def _split_files(folder: Path) -> dict[str, Path]:
    """The split files beside each other in ``folder``: split -> ``transforms_<split>.json``."""
    return {split: folder / f"transforms_{split}.json" for split in SPLITS
            if (folder / f"transforms_{split}.json").is_file()}


def _transforms_files(path: Path) -> dict[str, Path] | None:
    """The file(s) to read: ``{"": transforms.json}``, a folder's split files, or the one file given."""
    if path.is_dir():
        candidate = path / TRANSFORMS_NAME
        if candidate.is_file():
            return {"": candidate}
        return _split_files(path) or None
    if path.is_file() and path.suffix.lower() == ".json" and path.name.startswith("transforms"):
        return {"": path}  # transforms.json, or one split such as transforms_train.json on its own
    return None


def detect(path: Path) -> bool:
    """Whether ``path`` is a ``transforms*.json`` file, or a folder holding ``transforms.json`` or
    split files (``transforms_train.json``, ``transforms_test.json``, ``transforms_val.json``)."""
    try:
        return _transforms_files(Path(path)) is not None
    except OSError:
        return False


class _Problems:
    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.items: list[Problem] = []

    def add(self, field: str, message: str, file: str | None = None) -> None:
        self.items.append(Problem(file or self.shown, field, message))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _resolve(base: Path, rel: str) -> Path:
    """The file ``rel`` names inside ``base``; ``ValueError`` (the native format's words) outside it."""
    # Exporters on Windows write backslashes; a literal backslash in a file name is rare.
    return resolve_inside(base, rel.replace("\\", "/"))


def _image_path(base: Path, rel: str) -> Path:
    """Like ``_resolve``; a path without a suffix that is not there is read as ``.png`` (Blender-style)."""
    path = _resolve(base, rel)
    if not path.suffix and not path.exists():
        path = ensure_inside(base, path.with_name(path.name + ".png"), rel + ".png")
    return path


def _frame_camera(meta: dict, frame: dict, i: int, image_path: Path, shown_image: str,
                  found: _Problems) -> CameraSpec | None:
    """The camera of frame ``i`` (its own intrinsics over the shared ones), or None after a problem."""

    def get(key: str) -> tuple[Any, str]:
        if key in frame:
            return frame[key], f"frames[{i}].{key}"
        return meta.get(key), key

    values: dict[str, float] = {}
    ok = True
    for key in _INTRINSIC_KEYS[:-1]:
        value, field = get(key)
        if value is None:
            continue
        if not _is_number(value):
            found.add(field, f"must be a finite number, got {value!r}")
            ok = False
            continue
        values[key] = float(value)
    model_value, model_field = get("camera_model")
    model = "OPENCV" if model_value is None else str(model_value).upper()
    if model not in _PERSPECTIVE + _FISHEYE:
        found.add(model_field, f"camera model {model_value!r} cannot be represented (supported: "
                               f"{', '.join(_PERSPECTIVE + _FISHEYE)})")
        ok = False
    if not ok:
        return None

    if "w" in values and "h" in values:
        if values["w"] != int(values["w"]) or values["h"] != int(values["h"]):
            found.add(get("w")[1], f"image size must be whole pixels, got {values['w']} x {values['h']}")
            return None
        width, height = int(values["w"]), int(values["h"])
    else:
        # Not given: the image's own size (nerfstudio reads it from the file too).
        try:
            width, height = image_size(image_path)
        except (ValueError, OSError) as exc:
            found.add(f"frames[{i}].file_path", f"image file {shown_image}: no w/h given and {exc}")
            return None
    if "fl_x" not in values:
        if "camera_angle_x" not in values:
            found.add(f"frames[{i}]", "no focal length: fl_x (or camera_angle_x) is missing here and at the top level")
            return None
        values["fl_x"] = 0.5 * width / math.tan(0.5 * values["camera_angle_x"])
    if "fl_y" not in values:
        values["fl_y"] = (0.5 * height / math.tan(0.5 * values["camera_angle_y"])
                          if "camera_angle_y" in values else values["fl_x"])
    # nerfstudio's pixel centres are at index + 0.5; ours at the index.
    cx = values.get("cx", width / 2.0) + PIXEL_CENTRE_SHIFT
    cy = values.get("cy", height / 2.0) + PIXEL_CENTRE_SHIFT
    fx, fy = values["fl_x"], values["fl_y"]
    if model in _FISHEYE:
        if values.get("p1", 0.0) or values.get("p2", 0.0):
            found.add(get("p1")[1] if values.get("p1", 0.0) else get("p2")[1],
                      "OPENCV_FISHEYE with tangential distortion (p1, p2) cannot be represented")
            return None
        our_model, intr = fisheye_intrinsics(fx, fy, cx, cy, *(values.get(k, 0.0) for k in ("k1", "k2", "k3", "k4")))
    else:
        if values.get("k4", 0.0):
            found.add(get("k4")[1], f"{model} with k4 != 0 cannot be represented: nerfstudio's k4 is an r^8 term "
                                    f"of the radial polynomial, which OpenCV's model (ours) does not have")
            return None
        our_model, intr = perspective_intrinsics(
            fx, fy, cx, cy, {k: values[k] for k in ("k1", "k2", "k3", "p1", "p2") if k in values})
    spec = CameraSpec(our_model, width, height, intr)
    message = intrinsics_problem(spec)
    if message:
        found.add(f"frames[{i}]", message)
        return None
    return spec


def _pose(value: Any, field: str, found: _Problems) -> np.ndarray | None:
    """Camera (OpenCV axes) to world from an OpenGL-axes ``transform_matrix``, or None after a problem."""
    try:
        T = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        T = None
    if T is None or T.shape not in ((4, 4), (3, 4)):
        found.add(field, "must be a 4x4 (or 3x4) matrix of numbers")
        return None
    if T.shape == (3, 4):
        T = np.vstack([T, [0.0, 0.0, 0.0, 1.0]])
    message = rigid_transform_problem(T)
    if message:
        found.add(field, message)
        return None
    T = T @ OPENGL_TO_OPENCV
    u, _, vt = np.linalg.svd(T[:3, :3])  # printed matrices are orthonormal only to ~1e-7
    T[:3, :3] = u @ vt
    return T


def load(path: Path, *, skip_missing: bool = False) -> Capture:
    """Read a nerfstudio ``transforms.json`` (or the folder holding it, or a folder of split files)
    into a camera-only ``Capture``.

    Args:
        path: a ``transforms*.json`` file, or a folder holding ``transforms.json`` or split files.
        skip_missing: leave out the frames whose image file is missing (one ``MissingFilesWarning``)
            instead of refusing the dataset.

    Raises:
        CaptureError: every problem found (broken JSON, missing fields, camera models we cannot
            represent, missing images or masks, paths outside the folder, unreadable point cloud),
            each naming its file.
    """
    path = Path(path)
    files = _transforms_files(path) if path.exists() else None
    if files is None:
        raise CaptureError([Problem(str(path), "", f"no {TRANSFORMS_NAME} (nor transforms_train.json, "
                                                   "transforms_test.json, transforms_val.json) here")])
    root = next(iter(files.values())).parent
    missing = MissingFiles(skip_missing)
    notes: list[str] = []
    # the split whose frames are held out: test, else val; with a test split the val frames are left out
    held_split = None if len(files) < 2 else "test" if "test" in files else "val" if "val" in files else None
    if held_split == "test" and "val" in files:
        notes.append(f"{files['val'].name}: the val frames are not used (the test frames of "
                     f"{files['test'].name} are the held-out set, the train frames are trained on)")
        files = {k: v for k, v in files.items() if k != "val"}

    def shown_path(p: Path) -> str:
        try:
            return p.relative_to(root).as_posix()
        except ValueError:
            return str(p)

    problems: list[Problem] = []
    entries: list[tuple[str, tuple, CameraSpec, np.ndarray, Path, Path | None, bool | None]] = []
    counts: dict[str, int] = {}
    ply_path: Path | None = None
    applied: dict[str, Any] = {}
    for split, json_path in files.items():
        meta = _read_transforms(json_path, root)
        found = _Problems(json_path.name)
        held = None if held_split is None else split == held_split
        before = len(entries)
        _read_frames(meta, root, found, missing, shown_path, held, entries)
        counts[split or "all"] = len(entries) - before
        ply_rel = meta.get("ply_file_path")
        if ply_rel is not None and ply_path is None:
            try:
                if not isinstance(ply_rel, str):
                    raise ValueError(f"must be a path, got {ply_rel!r}")
                ply_path = _resolve(root, ply_rel)
            except ValueError as exc:
                found.add("ply_file_path", str(exc))
        for key in ("applied_transform", "applied_scale"):
            if key in meta:
                applied.setdefault(key, meta[key])
        problems += found.items
    xyz = rgb = None
    if ply_path is not None:
        try:
            xyz, rgb = read_ply_points(ply_path)
        except (OSError, ValueError) as exc:
            problems.append(Problem(shown_path(ply_path), "", f"cannot read the point cloud: {exc}"))
    if problems:
        raise CaptureError(problems, str(root), hint=missing.hint())
    if not entries:
        raise CaptureError([Problem(", ".join(p.name for p in files.values()), "frames",
                                    f"none of the listed images is present ({len(missing.dropped)} missing)")],
                           str(root))

    # One camera per distinct (model, size, intrinsics), numbered in the order the images are
    # sorted in (the order they get timestamps in), so camera_0 has the first image.
    specs: dict[str, CameraSpec] = {}
    camera_of: dict[tuple, str] = {}
    for rel, key, spec, *_ in sorted(entries, key=lambda e: e[0]):
        if key not in camera_of:
            camera_of[key] = f"camera_{len(camera_of)}"
            specs[camera_of[key]] = spec
    posed = [PosedImage(rel, camera_of[key], T, image_path, mask_path, held)
             for rel, key, _, T, image_path, mask_path, held in entries]
    names = [p.name for p in files.values()]
    metadata: dict[str, Any] = {"source_format": "nerfstudio", "source_file": names[0] if len(names) == 1 else names}
    if held_split is not None:
        metadata["nerfstudio_splits"] = {"frames": counts, "held_out": held_split}
    for key, value in applied.items():
        metadata[f"nerfstudio_{key}"] = value  # how ns-process-data turned its source world into this one
    if missing.message():
        notes.append(missing.message())
    if notes:
        metadata["warnings"] = notes
    capture = camera_only_capture(root, root.name, specs, posed, xyz, rgb, metadata)
    for note in notes:
        if note != missing.message():
            warnings.warn(note, NerfstudioWarning, stacklevel=2)
    missing.warn()
    return capture


def _read_transforms(json_path: Path, root: Path) -> dict:
    """A transforms file's object, or ``CaptureError`` naming it."""
    shown = json_path.name
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptureError([Problem(shown, "", f"cannot read the file ({exc})")], str(root)) from None
    except json.JSONDecodeError as exc:
        raise CaptureError([Problem(shown, "", f"not valid JSON: {exc}")], str(root)) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("frames"), list) or not meta["frames"]:
        raise CaptureError([Problem(shown, "frames", "expected an object with a non-empty list 'frames'")], str(root))
    return meta


def _read_frames(meta: dict, root: Path, found: _Problems, missing: MissingFiles, shown_path,
                 held: bool | None, entries: list) -> None:
    """Check the frames of one transforms file and append each usable one to ``entries``."""
    for i, frame in enumerate(meta["frames"]):
        if not isinstance(frame, dict):
            found.add(f"frames[{i}]", "must be an object")
            continue
        rel = frame.get("file_path")
        if not isinstance(rel, str) or not rel:
            found.add(f"frames[{i}].file_path", "missing (the image, relative to the json's folder)")
            continue
        try:
            image_path = _image_path(root, rel)
        except ValueError as exc:
            found.add(f"frames[{i}].file_path", str(exc))
            continue
        if is_missing(image_path):
            if not missing.drop(shown_path(image_path)):
                found.add(f"frames[{i}].file_path", f"image file {shown_path(image_path)} does not exist")
            continue
        if "transform_matrix" not in frame:
            found.add(f"frames[{i}].transform_matrix", "missing (camera-to-world, 4x4)")
            continue
        T = _pose(frame["transform_matrix"], f"frames[{i}].transform_matrix", found)
        spec = _frame_camera(meta, frame, i, image_path, shown_path(image_path), found)
        if T is None or spec is None:
            continue
        message = image_problem(image_path, shown_path(image_path), spec.width, spec.height)
        if message:
            found.add(f"frames[{i}].file_path", message)
        mask_path = None
        if frame.get("mask_path") is not None:
            try:
                if not isinstance(frame["mask_path"], str):
                    raise ValueError(f"must be a path, got {frame['mask_path']!r}")
                mask_path = _resolve(root, frame["mask_path"])
            except ValueError as exc:
                found.add(f"frames[{i}].mask_path", str(exc))
            else:
                message = image_problem(mask_path, shown_path(mask_path), spec.width, spec.height, what="mask")
                if message:
                    found.add(f"frames[{i}].mask_path", message)
        key = (spec.model, spec.width, spec.height, tuple(sorted(spec.intrinsics.items())))
        entries.append((rel, key, spec, T, image_path, mask_path, held))


# --------------------------------------------------------------------------------------
# PLY point clouds (vertex x, y, z and optional colours); ascii and binary


_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
_COLOUR_NAMES = (("red", "green", "blue"), ("r", "g", "b"), ("diffuse_red", "diffuse_green", "diffuse_blue"))


def read_ply_points(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Vertex positions and colours of a PLY file.

    Supports ``ascii``, ``binary_little_endian`` and ``binary_big_endian`` files whose vertex
    element has scalar properties (point clouds; faces after the vertices are ignored).
    Colours are ``red green blue`` (or ``r g b``, ``diffuse_*``), as uint8 or as floats in
    [0, 1]; without colours points are mid-grey (128).

    Returns:
        xyz float64 ``[N, 3]`` and rgb uint8 ``[N, 3]``.

    Raises:
        ValueError: not a PLY file, unsupported layout, or truncated data.
    """
    data = Path(path).read_bytes()
    if not data.startswith(b"ply"):
        raise ValueError("not a PLY file (no 'ply' magic)")
    end = data.find(b"end_header")
    if end < 0:
        raise ValueError("PLY header has no end_header")
    body_start = data.find(b"\n", end) + 1
    if body_start == 0:
        raise ValueError("PLY header has no end_header line")
    header = data[:end].decode("ascii", errors="replace").splitlines()

    fmt = None
    elements: list[tuple[str, int, list[tuple[str, str]], bool]] = []  # name, count, [(prop, dtype)], has_list
    for line in header[1:]:
        tokens = line.split()
        if not tokens or tokens[0] in ("comment", "obj_info"):
            continue
        if tokens[0] == "format" and len(tokens) >= 2:
            fmt = tokens[1]
        elif tokens[0] == "element" and len(tokens) == 3:
            elements.append((tokens[1], int(tokens[2]), [], False))
        elif tokens[0] == "property" and elements:
            name, count, props, has_list = elements[-1]
            if tokens[1] == "list":
                elements[-1] = (name, count, props, True)
            elif tokens[1] in _PLY_TYPES and len(tokens) == 3:
                props.append((tokens[2], _PLY_TYPES[tokens[1]]))
            else:
                raise ValueError(f"PLY property line not understood: {line!r}")
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise ValueError(f"PLY format {fmt!r} is not supported")
    names = [e[0] for e in elements]
    if "vertex" not in names:
        raise ValueError("PLY file has no vertex element")
    vi = names.index("vertex")
    _, count, props, has_list = elements[vi]
    if has_list:
        raise ValueError("PLY vertex element with list properties is not supported")
    prop_names = [p for p, _ in props]
    if not {"x", "y", "z"} <= set(prop_names):
        raise ValueError(f"PLY vertices have no x, y, z (properties: {', '.join(prop_names)})")

    if fmt == "ascii":
        lines = data[body_start:].decode("ascii", errors="replace").splitlines()
        skip = sum(e[1] for e in elements[:vi])  # one line per element entry, lists included
        rows = lines[skip:skip + count]
        if len(rows) < count:
            raise ValueError(f"PLY file ends after {len(rows)} of {count} vertices (truncated)")
        flat = np.array(" ".join(rows).split(), dtype=np.float64)
        if flat.size != count * len(props):
            raise ValueError(f"PLY ascii vertices: expected {len(props)} values per line")
        table = flat.reshape(count, len(props))
        columns = {name: table[:, k] for k, name in enumerate(prop_names)}
    else:
        endian = "<" if fmt == "binary_little_endian" else ">"
        offset = body_start
        for name, n, eprops, elist in elements[:vi]:
            if elist:
                raise ValueError(f"PLY element {name!r} with list properties before the vertices is not supported")
            offset += n * np.dtype([(p, endian + t) for p, t in eprops]).itemsize
        dtype = np.dtype([(p, endian + t) for p, t in props])
        if offset + count * dtype.itemsize > len(data):
            raise ValueError(f"PLY file is truncated: {count} vertices need {offset + count * dtype.itemsize} "
                             f"bytes, the file has {len(data)}")
        table = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
        columns = {name: table[name] for name in prop_names}

    xyz = np.stack([columns[k].astype(np.float64) for k in ("x", "y", "z")], axis=1)
    if not np.all(np.isfinite(xyz)):
        raise ValueError("PLY vertices have non-finite coordinates")
    rgb = np.full((count, 3), 128, dtype=np.uint8)
    for triple in _COLOUR_NAMES:
        if set(triple) <= set(prop_names):
            c = np.stack([columns[k].astype(np.float64) for k in triple], axis=1)
            kinds = {dict(props)[k] for k in triple}
            if any(k.startswith("f") for k in kinds) and c.size and c.max() <= 1.0:
                c = c * 255.0  # float colours in [0, 1]
            rgb = np.clip(np.rint(c), 0, 255).astype(np.uint8)
            break
    return xyz, rgb
