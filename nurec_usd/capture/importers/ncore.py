"""NCore v4 importer: NVIDIA's component-based sequence format, read through ``nvidia-ncore``.

An NCore v4 sequence is a set of *component stores* -- zarr groups, each either an indexed
tar file ``<base>.ncore4[-<group>].zarr.itar`` or a directory ``<base>.ncore4[-<group>].zarr``
-- optionally listed by a sequence meta json (``{"version": "v4", "component_stores": [...]}``).
The stores hold component instances: ``poses``, ``intrinsics``, ``masks``, ``cameras/<id>``,
``lidars/<id>``, ``cuboids`` (and radars, point clouds, camera labels, which are not imported).
The ``nvidia-ncore`` package (``pip install nvidia-ncore``, or ``nurec_usd[ncore]``) reads
them; it is imported only when a sequence is loaded. Facts of the format this importer
relies on (read from the package's source, ``ncore.impl.data``, and its conventions doc):

* NCore names a transform ``T_a_b`` when it maps points *from a to b* -- the opposite of our
  ``T_a_b``. A pose stored under the key ``(source, target)`` maps source points into the
  target frame, i.e. it is our ``T_target_source``. So the dynamic pose ``("rig", "world")``
  is our ``T_world_rig``, and a static ``("<sensor>", "rig")`` is our ``T_rig_<sensor>``.
  Either direction of a key may be stored; the inverse is used when needed;
* ``world`` is a local frame (the first rig pose is usually the identity); a global frame
  (ECEF) may hang off it as ``("world", "world_global")``. The rig is x forward, y left,
  z up; cameras are OpenCV (x right, y down, z forward); lidar rays are spherical with
  elevation ``asin(z)`` and azimuth ``atan2(y, x)`` -- our lidar frame;
* image coordinates have their origin at the *top-left corner* of the top-left pixel, so
  pixel centres sit at ``+0.5``: the principal points of the pinhole / OpenCV / fisheye
  models are shifted by ``-0.5`` into ours (OpenCV's: the top-left pixel's centre is 0).
  The f-theta model alone stores its principal point in NVIDIA's pixel-*centre* convention,
  which already is ours (NCore's own camera model adds 0.5 internally);
* f-theta: ``angle_to_pixeldist_poly`` (forward, theta [rad] -> pixels from the principal
  point) and ``pixeldist_to_angle_poly`` (backward); ``reference_poly`` says which one is
  exact. The forward one is our ``angle_to_pixel``; when the backward one is the reference,
  the forward polynomial is *fitted* to it over the image (the fit error is recorded and a
  fit worse than ``MAX_FTHETA_FIT_ERROR_PX`` is refused). ``max_angle`` is half our
  ``max_fov_deg``. A non-identity ``linear_cde`` (sensor shear/aspect term) has no
  counterpart in our model and is refused, as is any external (windshield) distortion and
  a non-zero OpenCV thin-prism term;
* a camera frame has start and end timestamps; with a rolling shutter, the line read first
  (in readout order) is captured at the start and the last at the end, linearly in between
  (``CameraModel.image_points_relative_frame_times_kernel``) -- exactly our convention, so
  the frame timestamp is the start and ``readout_time_us`` the (median) end - start;
* a lidar frame is a ray bundle in the sensor frame *at each ray's own time*: unit
  ``direction``, per-ray ``timestamp_us``, optional ``model_element`` (row, column), and per
  return ``distance_m`` / ``intensity`` (NaN where a return is absent). That is our ``.nrl``
  content (a point at its own firing time, in the lidar frame); the first return is used.
  A ``row-offset-spinning`` lidar model gives the channel table: rows (elevations, stored
  top to bottom) are our channels, ``row_azimuth_offsets_rad`` our azimuth offsets,
  ``column_azimuths_rad[0]`` our start azimuth (both measured from +x toward +y), the spin
  direction and frequency ours. Without a model, the table is estimated from the points
  (as the DGP importer does) and rotation / start azimuth / columns from the rays' times;
* cuboid observations carry a box in a *reference frame* (``world``, ``rig`` or a sensor)
  at ``reference_frame_timestamp_us``: centre, ``dim`` = extents along the box's own x, y, z
  (length, width, height) and ``rot`` = scipy ``"xyz"`` (extrinsic) Euler angles. The box
  frame is ours (centre origin, x along the length, y left, z up); the observation's own
  ``timestamp_us`` is the box's time;
* static camera masks: the mask named ``ego`` marks the ego vehicle with non-zero pixels;
  ours marks pixels to *use* with non-zero pixels, so it is inverted. Other named masks
  have no documented meaning and are only listed in the metadata.

How it maps to a ``Capture``: the sequence is converted once into a native capture
directory in the import cache (``$XDG_CACHE_HOME/nurec_usd/imports/ncore-<key>/``: the
images as stored, one mask per camera, ``.nrl`` sweeps and a ``capture.json``), written
whole then renamed into place, and loaded with the native loader -- so the result is
validated exactly like a native capture, and the world is re-centred on the first rig
pose (``world_offset_m``). The cache key is built from the stores' paths, sizes and
modification times (stores can be many GB; they are not hashed). A world whose +Z is far
from the rig's up axis (e.g. ECEF-aligned) is rotated to be Z-up, with a warning.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.importers import sweep_cache
from nurec_usd.capture.importers.common import invert_rigid, label, sensor_id
from nurec_usd.capture.importers.problems import FieldError, Problems, relative
from nurec_usd.capture.importers.sweep_cache import estimate_channel_table
from nurec_usd.capture.loader import load_capture
from nurec_usd.capture.model import Capture
from nurec_usd.capture.paths import ensure_inside, resolve_inside
from nurec_usd.capture.sweep_io import write_nrl

__all__ = ["NCoreWarning", "detect", "load", "INSTALL_HINT"]

# Bump when the conversion changes, so old cache folders are not reused.
CACHE_VERSION = 1
INSTALL_HINT = "pip install nvidia-ncore (or the extra: pip install 'nurec_usd[ncore]')"
# <base>.ncore4[-<group>].zarr[.itar], as SequenceComponentGroupsWriter names its stores
STORE_NAME = re.compile(r"^(?P<base>.+?)\.ncore4(?:-(?P<group>.+?))?\.zarr(?P<itar>\.itar)?$")
META_JSON_MAX_BYTES = 16 << 20  # detect() reads a json only below this size
SHUTTERS = {"ROLLING_TOP_TO_BOTTOM": "top_to_bottom", "ROLLING_BOTTOM_TO_TOP": "bottom_to_top",
            "ROLLING_LEFT_TO_RIGHT": "left_to_right", "ROLLING_RIGHT_TO_LEFT": "right_to_left", "GLOBAL": "global"}
READOUT_SPREAD_US = 20  # frames whose readout differs more than this from the median are reported
MAX_FTHETA_FIT_ERROR_PX = 0.5  # a forward f-theta polynomial fitted worse than this is refused
FTHETA_FIT_WARN_PX = 0.05
LINEAR_TERM_TOLERANCE = 1e-6  # f-theta linear_cde must be [1, 0, 0] within this
MAX_WORLD_TILT_DEG = 30.0  # rig up axis this far from world +Z: the world is not Z-up, rotate it
LABELS = {"automobile": "car", "person": "pedestrian", "heavy_truck": "truck", "bicycle": "bicycle",
          "rider": "cyclist", "bus": "bus", "motorcycle": "motorcycle", "trailer": "trailer"}
COMPONENT_CHOICES = ("poses", "intrinsics", "masks", "cuboids")


class NCoreWarning(UserWarning):
    """Something in an NCore sequence was skipped or approximated; the capture still loaded."""


# --------------------------------------------------------------------------------------
# Detection (by file names only: no ncore import)


def _is_store(path: Path) -> bool:
    m = STORE_NAME.match(path.name)
    if m is None:
        return False
    return path.is_file() if m.group("itar") else path.is_dir()


def _is_meta_json(path: Path) -> bool:
    if path.suffix.lower() != ".json" or not path.is_file():
        return False
    try:
        if path.stat().st_size > META_JSON_MAX_BYTES:
            return False
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(meta, dict) and meta.get("version") == "v4" and isinstance(meta.get("component_stores"), list)


def detect(path: Path) -> bool:
    """Whether ``path`` is an NCore v4 store (``*.ncore4*.zarr.itar`` / ``.zarr``), a folder of
    them, or a v4 sequence meta json."""
    path = Path(path)
    try:
        if _is_store(path) or _is_meta_json(path):
            return True
        return path.is_dir() and any(_is_store(p) for p in path.iterdir())
    except OSError:
        return False


# --------------------------------------------------------------------------------------
# Problems


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --------------------------------------------------------------------------------------
# Finding the stores


@dataclass
class _Inputs:
    root: Path  # problem paths are relative to it
    stores: list[Path]
    meta_json: Path | None = None


def _confined(inputs: _Inputs) -> _Inputs:
    """``inputs``, once every store found by listing its folder is known to lie inside it (symlinks resolved)."""
    problems = []
    for store in inputs.stores:
        try:
            ensure_inside(inputs.root, store)
        except ValueError as exc:
            problems.append(Problem(relative(store, inputs.root), "", str(exc)))
    if problems:
        raise CaptureError(problems, str(inputs.root))
    return inputs


def _locate(path: Path) -> _Inputs:
    path = Path(path).absolute()
    if not path.exists():
        raise CaptureError([Problem(str(path), "", "no such file or directory")])
    if _is_store(path):
        base = STORE_NAME.match(path.name).group("base")
        siblings = sorted(p for p in path.parent.iterdir()
                          if _is_store(p) and STORE_NAME.match(p.name).group("base") == base)
        return _confined(_Inputs(path.parent, siblings))
    if path.is_file():
        return _meta_inputs(path)
    stores = sorted(p for p in path.iterdir() if _is_store(p))
    if not stores:
        metas = sorted(p for p in path.iterdir() if _is_meta_json(p))
        if len(metas) == 1:
            return _meta_inputs(metas[0])
        what = "no *.ncore4*.zarr.itar or *.ncore4*.zarr store" if not metas else \
            f"{len(metas)} sequence meta files ({', '.join(p.name for p in metas)}); pass one of them"
        raise CaptureError([Problem(str(path), "", f"not an NCore v4 sequence: {what}")])
    bases = sorted({STORE_NAME.match(p.name).group("base") for p in stores})
    if len(bases) > 1:
        raise CaptureError([Problem(str(path), "", f"holds the stores of {len(bases)} sequences ({', '.join(bases)}); "
                                                   "a capture is one sequence: pass one of its store files or "
                                                   "its sequence meta json")])
    return _confined(_Inputs(path, stores))


def _meta_inputs(meta_json: Path) -> _Inputs:
    root = meta_json.parent
    rel = meta_json.name
    try:
        meta = json.loads(meta_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptureError([Problem(rel, "", f"cannot read the file ({exc})")], str(root)) from None
    except ValueError as exc:
        raise CaptureError([Problem(rel, "", f"not valid JSON ({exc})")], str(root)) from None
    if not isinstance(meta, dict) or meta.get("version") != "v4":
        raise CaptureError([Problem(rel, "version",
                                    'not an NCore v4 sequence meta file (expected "version": "v4")')], str(root))
    entries = meta.get("component_stores")
    if not isinstance(entries, list) or not entries:
        raise CaptureError([Problem(rel, "component_stores", "must be a non-empty list of stores")], str(root))
    stores, problems = [], []
    for i, entry in enumerate(entries):
        name = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            problems.append(Problem(rel, f"component_stores[{i}].path", "must be a store path"))
            continue
        try:  # a store lies in the meta json's folder, as the native format's files do
            p = resolve_inside(root, name).absolute()
        except ValueError as exc:
            problems.append(Problem(rel, f"component_stores[{i}].path", str(exc)))
            continue
        if not p.exists():
            problems.append(Problem(rel, f"component_stores[{i}].path", f"store {name} does not exist"))
        stores.append(p)
    if problems:
        raise CaptureError(problems, str(root))
    return _Inputs(root, stores, meta_json)


# --------------------------------------------------------------------------------------
# Loading


def _import_ncore(where: str):
    """The ncore v4 API modules, or ``CaptureError`` telling how to install them."""
    try:
        import ncore.data as ncore_data
        import ncore.data.v4 as ncore_v4
    except ImportError as exc:
        raise CaptureError([Problem(where, "", f"reading NCore captures needs the nvidia-ncore package, which "
                                               f"cannot be imported ({exc}): {INSTALL_HINT}")]) from None
    return ncore_data, ncore_v4


def load(path: Path, *, instances: dict[str, str] | None = None, skip_missing: bool = False) -> Capture:
    """Load an NCore v4 sequence: a folder of its stores, one of its store files, or its meta json.

    Args:
        path: the sequence (see above).
        instances: which component instance to use where a sequence holds several, by
            component (``poses``, ``intrinsics``, ``masks``, ``cuboids``); by default the one
            named ``default``, or the only one.
        skip_missing: accepted for the common interface; an NCore sequence holds its images and
            sweeps inside its stores, so no frame's file can be missing.

    Raises:
        CaptureError: naming the store file and component field of every problem found, or
            saying how to install ``nvidia-ncore`` when it is missing.
    """
    inputs = _locate(Path(path))
    _import_ncore(str(path))
    for name in instances or {}:
        if name not in COMPONENT_CHOICES:
            raise ValueError(f"instances: unknown component {name!r}; choose among {COMPONENT_CHOICES}")
    key = _cache_key(inputs, instances or {})
    folder = sweep_cache.cache_root() / f"ncore-{key}"
    if (folder / "capture.json").is_file():
        try:
            capture = load_capture(folder)
        except CaptureError:
            capture = None  # a damaged cache folder: convert again
        if capture is not None:
            _warn(capture)
            return capture
    _Converter(inputs, instances or {}).write(folder)
    try:
        capture = load_capture(folder)
    except CaptureError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    _warn(capture)
    return capture


def _warn(capture: Capture) -> None:
    for message in capture.metadata.get("warnings", []):
        warnings.warn(message, NCoreWarning, stacklevel=3)


def _cache_key(inputs: _Inputs, instances: dict[str, str]) -> str:
    h = hashlib.sha256(f"nurec_usd ncore v{CACHE_VERSION} {sorted(instances.items())}\n".encode())
    for store in sorted(inputs.stores):
        probe = store / ".zmetadata" if store.is_dir() and (store / ".zmetadata").exists() else store
        try:
            st = probe.stat()
        except OSError:
            st = None
        h.update(f"{store.resolve()} {st.st_size if st else -1} {st.st_mtime_ns if st else -1}\n".encode())
    return h.hexdigest()[:32]


# --------------------------------------------------------------------------------------
# Small geometry helpers


def _rigid(T: Any, field: str) -> np.ndarray:
    """A finite 4x4 rigid transform as float64, re-orthonormalised (NCore may store float32)."""
    T = np.asarray(T, dtype=np.float64)
    if T.shape != (4, 4) or not np.all(np.isfinite(T)):
        raise FieldError(field, f"must be a finite 4x4 transform, got shape {T.shape}")
    R = T[:3, :3]
    if np.abs(R.T @ R - np.eye(3)).max() > 1e-3 or np.linalg.det(R) < 0:
        raise FieldError(field, "is not a rigid transform (rotation not orthonormal and right-handed)")
    u, _, vt = np.linalg.svd(R)
    out = T.copy()
    out[:3, :3] = u @ vt
    out[3] = [0.0, 0.0, 0.0, 1.0]
    return out


def euler_xyz_to_matrix(rot: Any) -> np.ndarray:
    """NCore's box orientation: scipy ``Rotation.from_euler("xyz", rot)`` (extrinsic x, then y, then z),
    i.e. ``Rz(c) @ Ry(b) @ Rx(a)``. ``[3]`` -> ``[3, 3]``."""
    a, b, c = (float(v) for v in rot)
    ca, sa, cb, sb, cc, sc = math.cos(a), math.sin(a), math.cos(b), math.sin(b), math.cos(c), math.sin(c)
    Rx = np.array([[1, 0, 0], [0, ca, -sa], [0, sa, ca]])
    Ry = np.array([[cb, 0, sb], [0, 1, 0], [-sb, 0, cb]])
    Rz = np.array([[cc, -sc, 0], [sc, cc, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def _rotation_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest rotation taking unit vector ``a`` to unit vector ``b``. ``[3, 3]``."""
    v = np.cross(a, b)
    c = float(np.dot(a, b))
    if np.linalg.norm(v) < 1e-12:
        if c > 0:
            return np.eye(3)
        axis = np.cross(a, [1.0, 0.0, 0.0] if abs(a[0]) < 0.9 else [0.0, 1.0, 0.0])
        axis /= np.linalg.norm(axis)
        return 2 * np.outer(axis, axis) - np.eye(3)  # 180 degrees about an axis perpendicular to a
    K = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + K + K @ K / (1 + c)


# --------------------------------------------------------------------------------------
# Camera models


def ftheta_forward_from_backward(bw: np.ndarray, max_angle: float, rho_max: float) -> tuple[list[float], float]:
    """Fit the forward f-theta polynomial ``rho = sum c_i theta^i`` (degree 5) to a backward
    (pixel distance -> angle) one, over ``[0, rho_max]`` pixels limited to ``theta <= max_angle``.

    ``c0`` is held at 0 when the backward polynomial maps 0 to 0 (the principal ray).
    Returns (coefficients ``[c0 .. c5]``, largest error in pixels over the fitted range).
    """
    bw = np.asarray(bw, dtype=np.float64)
    rho = np.linspace(0.0, rho_max, 4001)
    theta = np.polynomial.polynomial.polyval(rho, bw)
    # the usable branch: theta increasing from the axis, up to max_angle
    rising = np.concatenate([[True], np.diff(theta) > 0])
    stop = int(np.argmin(rising)) if not rising.all() else len(rho)
    keep = np.arange(len(rho)) < stop
    keep &= theta <= max_angle
    rho, theta = rho[keep], theta[keep]
    if len(rho) < 10 or theta[-1] <= 0:
        raise ValueError("the backward polynomial does not map the image to increasing angles")
    free_c0 = abs(bw[0]) > 1e-9
    powers = np.arange(0 if free_c0 else 1, 6)
    A = theta[:, None] ** powers[None, :]
    coeffs, *_ = np.linalg.lstsq(A, rho, rcond=None)
    err = float(np.abs(A @ coeffs - rho).max())
    full = np.zeros(6)
    full[powers] = coeffs
    return [float(c) for c in full], err


def camera_intrinsics(params: Any, where: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Our (model, intrinsics, notes) for NCore camera model parameters; ``FieldError`` when unsupported.

    ``where`` is the field path of the parameters (for messages).
    """
    kind = params.type()
    W, H = (int(v) for v in np.asarray(params.resolution).reshape(-1)[:2])
    if params.external_distortion_parameters is not None:
        raise FieldError(f"{where}.external_distortion_parameters",
                         f"external distortion ({params.external_distortion_parameters.type()}) cannot be "
                         "represented by nurec_usd's camera models")
    notes: dict[str, Any] = {"ncore_model": kind}
    if kind in ("ideal-pinhole", "opencv-pinhole", "opencv-fisheye"):
        fx, fy = (float(v) for v in params.focal_length)
        # NCore's image origin is the top-left pixel's corner, ours its centre
        cx, cy = (float(v) - 0.5 for v in params.principal_point)
        base = {"fx": fx, "fy": fy, "cx": cx, "cy": cy}
        if kind == "ideal-pinhole":
            return "pinhole", base, notes
        if kind == "opencv-fisheye":
            k = [float(v) for v in params.radial_coeffs]
            notes["max_angle_deg"] = math.degrees(float(params.max_angle))
            return "opencv_fisheye", {**base, "k1": k[0], "k2": k[1], "k3": k[2], "k4": k[3]}, notes
        if np.any(np.asarray(params.thin_prism_coeffs) != 0):
            raise FieldError(f"{where}.thin_prism_coeffs",
                             f"non-zero thin-prism distortion {np.asarray(params.thin_prism_coeffs).tolist()} "
                             "cannot be represented by nurec_usd's opencv model")
        k = [float(v) for v in params.radial_coeffs]
        p = [float(v) for v in params.tangential_coeffs]
        if not any(k) and not any(p):
            return "pinhole", base, notes
        out = {**base, "k1": k[0], "k2": k[1], "p1": p[0], "p2": p[1], "k3": k[2]}
        if any(k[3:]):
            out.update({"k4": k[3], "k5": k[4], "k6": k[5]})
        return "opencv", out, notes
    if kind == "ftheta":
        cde = np.asarray(params.linear_cde, dtype=np.float64)
        if np.abs(cde - [1.0, 0.0, 0.0]).max() > LINEAR_TERM_TOLERANCE:
            raise FieldError(f"{where}.linear_cde",
                             f"f-theta linear term [c, d, e] = {cde.tolist()} (pixel aspect / shear) is not "
                             "[1, 0, 0]; nurec_usd's ftheta model has no such term")
        # stored in NVIDIA's pixel-centre convention, which is ours: no shift
        cx, cy = (float(v) for v in params.principal_point)
        max_angle = float(params.max_angle)
        reference = params.reference_poly.name
        notes["reference_poly"] = reference
        if reference == "ANGLE_TO_PIXELDIST":
            coeffs = [float(c) for c in params.angle_to_pixeldist_poly]
            while len(coeffs) > 2 and coeffs[-1] == 0.0:
                coeffs.pop()
        else:
            corners = np.array([[-0.5, -0.5], [W - 0.5, -0.5], [-0.5, H - 0.5], [W - 0.5, H - 0.5]])
            rho_max = float(np.linalg.norm(corners - [cx, cy], axis=1).max())
            try:
                coeffs, err = ftheta_forward_from_backward(params.pixeldist_to_angle_poly, max_angle, rho_max)
            except ValueError as exc:
                raise FieldError(f"{where}.pixeldist_to_angle_poly", str(exc)) from None
            notes["forward_fit_error_px"] = err
            if err > MAX_FTHETA_FIT_ERROR_PX:
                raise FieldError(f"{where}.pixeldist_to_angle_poly",
                                 f"no degree-5 angle-to-pixel polynomial fits this backward polynomial within "
                                 f"{MAX_FTHETA_FIT_ERROR_PX} px over the image (best: {err:.3g} px)")
        if len(coeffs) < 2 or not coeffs[1] > 0:
            raise FieldError(f"{where}.angle_to_pixeldist_poly",
                             f"the linear coefficient (pixels per radian) must be positive, got {coeffs}")
        fov = min(360.0, 2.0 * math.degrees(max_angle))
        return "ftheta", {"cx": cx, "cy": cy, "angle_to_pixel": coeffs, "max_fov_deg": fov}, notes
    raise FieldError(where, f"camera model {kind!r} is not supported (ftheta, ideal-pinhole, opencv-pinhole "
                            "and opencv-fisheye are)")


# --------------------------------------------------------------------------------------
# The conversion


@dataclass
class _Instance:
    reader: Any
    file: str  # the store it lives in (relative to the input root)
    name: str


class _Converter:
    def __init__(self, inputs: _Inputs, choices: dict[str, str]):
        self.inputs = inputs
        self.root = inputs.root
        self.choices = choices
        self.found = Problems(self.root)
        self.notes: list[str] = []
        self.camera_info: dict[str, Any] = {}
        self.nd, self.v4 = _import_ncore(str(self.root))
        self._open()

    # -- stores and components --------------------------------------------------------

    def _open(self) -> None:
        self.readers: list[tuple[Any, str]] = []
        first: tuple[Any, str] | None = None
        for store in self.inputs.stores:
            rel = relative(store, self.root)
            try:
                reader = self.v4.SequenceComponentGroupsReader([store], max_threads=1)
            except Exception as exc:  # zarr / tar / json errors of many types
                self.found.add(rel, "", f"cannot open as an NCore v4 component store ({_describe(exc)})")
                continue
            if first is None:
                first = (reader, rel)
            else:
                r0, rel0 = first
                span, span0 = reader.sequence_timestamp_interval_us, r0.sequence_timestamp_interval_us
                for what, a, b in (("sequence id", reader.sequence_id, r0.sequence_id),
                                   ("sequence time interval", (span.start, span.stop), (span0.start, span0.stop))):
                    if a != b:
                        self.found.add(rel, "sequence_meta_data", f"{what} {a} differs from {b} of {rel0}: the stores "
                                                                  "are not of one sequence")
            self.readers.append((reader, rel))
        self.found.raise_if_any()
        self.sequence = first[0]

    def instances(self, reader_type: Any, strict: bool = True) -> dict[str, _Instance]:
        """Component instances of one type over all stores; unreadable ones are problems (``strict``) or notes."""
        out: dict[str, _Instance] = {}
        component = reader_type.get_component_name()
        for reader, rel in self.readers:
            try:
                found = reader.open_component_readers(reader_type)
            except Exception as exc:
                message = f"cannot read the {component} components ({_describe(exc)})"
                if strict:
                    self.found.add(rel, component, message)
                else:
                    self.notes.append(f"{rel}: {component}: {message}")
                continue
            for name, r in found.items():
                if name in out:
                    self.found.add(rel, f"{component}/{name}", f"also stored in {out[name].file}")
                    continue
                out[name] = _Instance(r, rel, name)
        return out

    def pick(self, component: str, reader_type: Any, required: bool) -> _Instance | None:
        found = self.instances(reader_type)
        want = self.choices.get(component)
        stores = ", ".join(rel for _, rel in self.readers)
        if want is not None:
            if want not in found:
                self.found.add(stores, component, f"no {component} component named {want!r} "
                                                  f"(found: {sorted(found) or 'none'})")
                return None
            return found[want]
        if not found:
            if required:
                self.found.add(stores, component, f"the sequence has no {component} component")
            return None
        if "default" in found:
            return found["default"]
        if len(found) == 1:
            return next(iter(found.values()))
        self.found.add(stores, component, f"several {component} components ({', '.join(sorted(found))}): choose one "
                                          f"with load(..., instances={{{component!r}: NAME}})")
        return None

    # -- the whole sequence -------------------------------------------------------------

    def write(self, folder: Path) -> None:
        v4 = self.v4
        poses = self.pick("poses", v4.PosesComponent.Reader, required=True)
        intrinsics = self.pick("intrinsics", v4.IntrinsicsComponent.Reader, required=True)
        masks = self.pick("masks", v4.MasksComponent.Reader, required=False)
        cuboids = self.pick("cuboids", v4.CuboidsComponent.Reader, required=False)
        cameras = self.instances(v4.CameraSensorComponent.Reader)
        lidars = self.instances(v4.LidarSensorComponent.Reader)
        self.found.raise_if_any()
        for kind, reader_type in (("radars", v4.RadarSensorComponent.Reader),
                                  ("point_clouds", v4.PointCloudsComponent.Reader),
                                  ("camera_labels", v4.CameraLabelsComponent.Reader)):
            skipped = self.instances(reader_type, strict=False)
            if skipped:
                self.notes.append(f"{kind} components are not imported: {', '.join(sorted(skipped))}")

        self._poses(poses)
        self.found.raise_if_any()
        ids: dict[str, str] = {}
        for name in [*cameras, *lidars]:
            sid = sensor_id(name)
            if sid in ids:
                self.found.add(cameras.get(name, lidars.get(name)).file, name,
                               f"sensor ids {ids[sid]!r} and {name!r} both become {sid!r}")
            ids[sid] = name
        self.found.raise_if_any()

        with sweep_cache.staged_folder(folder) as stage:
            self.out = stage.path
            cams = [c for name in sorted(cameras) if (c := self._camera(cameras[name], intrinsics, masks)) is not None]
            self.found.raise_if_any()
            lids = [spec for name in sorted(lidars) if (spec := self._lidar(lidars[name], intrinsics)) is not None]
            self.found.raise_if_any()
            tracks = self._tracks(cuboids) if cuboids is not None else []
            self.found.raise_if_any()
            interval = self.sequence.sequence_timestamp_interval_us
            manifest = {
                "format": "nurec_usd.capture",
                "version": 1,
                "name": self.sequence.sequence_id or self.root.name,
                "metadata": {
                    "source": "ncore",
                    "ncore": {
                        "sequence_id": self.sequence.sequence_id,
                        "sequence_timestamp_interval_us": [int(interval.start), int(interval.stop)],
                        "stores": [str(p) for p in self.inputs.stores],
                        "meta_json": str(self.inputs.meta_json) if self.inputs.meta_json else None,
                        "components": {"poses": poses.name, "intrinsics": intrinsics.name,
                                       "masks": masks.name if masks else None,
                                       "cuboids": cuboids.name if cuboids else None},
                        "generic_meta_data": _jsonable(self.sequence.generic_meta_data),
                        "world": self.world_info,
                        "cameras": self.camera_info,
                        "sensor_ids": {sid: name for sid, name in ids.items() if sid != name},
                    },
                    "lidar_models": {lid["id"]: info for lid, info in lids},
                    "warnings": self.notes,
                },
                "rig": {"timestamps_us": [int(t) for t in self.rig_us],
                        "T_world_rig": [T.tolist() for T in self.T_world_rig]},
                "cameras": cams,
                "lidars": [lid for lid, _ in lids],
                "tracks": tracks,
            }
            (stage.path / "capture.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
            try:
                stage.commit()
            except FileExistsError:  # another process converted the same sequence meanwhile: use theirs
                stage.abort()

    # -- poses --------------------------------------------------------------------------

    def _poses(self, inst: _Instance) -> None:
        """Static sensor mountings (a graph of static edges) and the rig trajectory."""
        self.pose_file = inst.file
        self.pose_base = base = f"poses/{inst.name}"
        self.static: dict[str, list[tuple[str, np.ndarray]]] = {}
        dynamic: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        try:
            static_items = list(inst.reader.get_static_poses())
            dynamic_items = list(inst.reader.get_dynamic_poses())
        except Exception as exc:
            self.found.add(inst.file, base, f"cannot read the poses ({_describe(exc)})")
            return
        for (src, dst), T in static_items:
            try:
                T = _rigid(T, f"{base}.static_poses[{src!r}, {dst!r}]")
            except FieldError as exc:
                self.found.add(inst.file, exc.field, exc.message)
                continue
            self.static.setdefault(src, []).append((dst, T))  # maps src points into dst: our T_dst_src
            self.static.setdefault(dst, []).append((src, invert_rigid(T)))
        for (src, dst), (T, ts) in dynamic_items:
            dynamic[(src, dst)] = (np.asarray(T, dtype=np.float64), np.asarray(ts, dtype=np.uint64))
        if ("rig", "world") in dynamic:
            T, ts = dynamic[("rig", "world")]
            where, invert = f"{base}.dynamic_poses['rig', 'world']", False
        elif ("world", "rig") in dynamic:
            T, ts = dynamic[("world", "rig")]
            where, invert = f"{base}.dynamic_poses['world', 'rig']", True
        else:
            keys = ", ".join(f"({a!r}, {b!r})" for a, b in dynamic) or "none"
            self.found.add(inst.file, f"{base}.dynamic_poses",
                           f"no rig trajectory: expected a dynamic pose ('rig', 'world'); found {keys}")
            return
        if T.ndim != 3 or T.shape[1:] != (4, 4) or len(T) != len(ts) or len(ts) < 1:
            self.found.add(inst.file, where, f"{T.shape} poses for {len(ts)} timestamps")
            return
        if np.any(np.diff(ts.astype(np.int64)) <= 0):
            self.found.add(inst.file, where, "timestamps must strictly increase")
            return
        poses = []
        for k in range(len(T)):
            try:
                Tk = _rigid(T[k], f"{where}.poses[{k}]")
            except FieldError as exc:
                self.found.add(inst.file, exc.field, exc.message)
                return
            poses.append(invert_rigid(Tk) if invert else Tk)
        self.rig_us = ts.astype(np.int64)
        self.T_world_rig = np.stack(poses)
        # Our world must be Z-up: the rig's up axis, on average, should be near +Z.
        up = self.T_world_rig[:, :3, 2].mean(axis=0)
        up /= np.linalg.norm(up)
        tilt = math.degrees(math.acos(max(-1.0, min(1.0, float(up[2])))))
        self.R_fix = np.eye(4)
        self.world_info: dict[str, Any] = {"rig_up_tilt_deg": tilt}
        if tilt > MAX_WORLD_TILT_DEG:
            self.R_fix[:3, :3] = _rotation_between(up, np.array([0.0, 0.0, 1.0]))
            self.T_world_rig = self.R_fix @ self.T_world_rig
            self.world_info["T_imported_ncore_world"] = self.R_fix.tolist()
            self.notes.append(f"the NCore world's +Z is {tilt:.1f} deg from the rig's mean up axis; the world is "
                              "rotated to be Z-up (metadata ncore.world.T_imported_ncore_world)")
        for dst, Tg in self.static.get("world", []):
            if dst == "world_global":  # maps world points into world_global
                self.world_info["T_world_global_world"] = (Tg @ invert_rigid(self.R_fix)).tolist()
        self.rig_interval = (int(self.rig_us[0]), int(self.rig_us[-1]))

    def T_rig(self, frame: str) -> np.ndarray | None:
        """Our ``T_rig_<frame>`` through static poses only, or None when there is no static path."""
        if frame == "rig":
            return np.eye(4)
        best = {frame: np.eye(4)}
        queue = [frame]
        while queue:
            cur = queue.pop(0)
            for nxt, T_nxt_cur in self.static.get(cur, []):
                if nxt not in best:
                    best[nxt] = T_nxt_cur @ best[cur]
                    queue.append(nxt)
        return best.get("rig")

    def T_world_rig_at(self, t_us: np.ndarray) -> np.ndarray:
        import torch

        from nurec_usd.sensors import interpolate_poses

        t0 = int(self.rig_us[0])
        return interpolate_poses(torch.from_numpy((self.rig_us - t0) * 1e-6), torch.from_numpy(self.T_world_rig),
                                 torch.as_tensor((np.asarray(t_us, dtype=np.int64) - t0) * 1e-6)).numpy()

    def _mounting(self, inst: _Instance, kind: str) -> np.ndarray | None:
        T = self.T_rig(inst.name)
        if T is None:
            self.found.add(self.pose_file, f"{self.pose_base}.static_poses[{inst.name!r}, 'rig']",
                           f"no static pose links {kind} {inst.name!r} to the rig")
        return T

    def _in_rig_range(self, start: int, end: int) -> bool:
        return self.rig_interval[0] <= start and end <= self.rig_interval[1]

    # -- cameras ------------------------------------------------------------------------

    def _camera(self, inst: _Instance, intrinsics: _Instance, masks: _Instance | None) -> dict[str, Any] | None:
        cam_id, reader = sensor_id(inst.name), inst.reader
        where = f"intrinsics/{intrinsics.name}.cameras.{inst.name}.camera_model_parameters"
        try:
            params = intrinsics.reader.get_camera_model_parameters(inst.name)
        except Exception as exc:
            self.found.add(intrinsics.file, f"intrinsics/{intrinsics.name}.cameras.{inst.name}",
                           f"no usable intrinsics for camera {inst.name!r} ({_describe(exc)})")
            return None
        try:
            model, intr, notes = camera_intrinsics(params, where)
        except FieldError as exc:
            self.found.add(intrinsics.file, exc.field, exc.message)
            return None
        W, H = (int(v) for v in np.asarray(params.resolution).reshape(-1)[:2])
        shutter = SHUTTERS.get(params.shutter_type.name)
        if shutter is None:
            self.found.add(intrinsics.file, f"{where}.shutter_type", f"unknown shutter type {params.shutter_type.name}")
            return None
        if notes.get("forward_fit_error_px", 0.0) > FTHETA_FIT_WARN_PX:
            self.notes.append(f"camera {inst.name}: the f-theta forward polynomial fitted to the backward one is off "
                              f"by up to {notes['forward_fit_error_px']:.3f} px")
        T_rig_cam = self._mounting(inst, "camera")
        if T_rig_cam is None:
            return None
        frames_ts = np.asarray(reader.frames_timestamps_us, dtype=np.int64).reshape(-1, 2)
        if shutter == "global":
            readout = 0
        else:
            durations = frames_ts[:, 1] - frames_ts[:, 0]
            readout = int(round(float(np.median(durations)))) if len(durations) else 0
            spread = int(np.abs(durations - readout).max()) if len(durations) else 0
            if spread > READOUT_SPREAD_US:
                self.notes.append(f"camera {inst.name}: frame readout times vary by up to {spread} us around the "
                                  f"median {readout} us, which is used for all frames")
        notes["readout_time_us"] = readout
        self.camera_info[cam_id] = notes

        mask_rel = self._mask(inst, masks, cam_id, W, H)
        frames: list[dict[str, Any]] = []
        dropped = 0
        image_dir = self.out / "images" / cam_id
        image_dir.mkdir(parents=True, exist_ok=True)
        for start, end in frames_ts:
            field_ = f"cameras/{inst.name}.frames[{int(end)}].image"
            if not self._in_rig_range(int(start), int(start) + readout):
                dropped += 1
                continue
            try:
                data = reader.get_frame_data(int(end))
                blob, fmt = bytes(data.get_encoded_image_data()), data.get_encoded_image_format().lower()
            except Exception as exc:
                self.found.add(inst.file, field_, f"cannot read the image ({_describe(exc)})")
                continue
            try:
                with Image.open(io.BytesIO(blob)) as im:
                    size = im.size
                    if fmt not in ("png", "jpeg", "jpg"):
                        buf = io.BytesIO()
                        im.convert("RGB").save(buf, format="PNG")
                        blob, fmt = buf.getvalue(), "png"
            except Exception as exc:
                self.found.add(inst.file, field_, f"not a decodable {fmt} image ({_describe(exc)})")
                continue
            if size != (W, H):
                self.found.add(inst.file, field_, f"image is {size[0]}x{size[1]}, the camera model says {W}x{H}")
                continue
            name = f"{int(start)}.{'png' if fmt == 'png' else 'jpg'}"
            (image_dir / name).write_bytes(blob)
            frame = {"timestamp_us": int(start), "image": f"images/{cam_id}/{name}"}
            if mask_rel:
                frame["mask"] = mask_rel
            frames.append(frame)
        if dropped:
            self.notes.append(f"camera {inst.name}: {dropped} frame(s) outside the rig trajectory "
                              f"({self.rig_interval[0]}..{self.rig_interval[1]} us) are skipped")
        if not frames:
            if not any(p.file == inst.file for p in self.found.items):
                self.notes.append(f"camera {inst.name}: no frame to import; the camera is skipped")
            return None
        return {"id": cam_id, "model": model, "width": W, "height": H, "intrinsics": intr,
                "T_rig_camera": T_rig_cam.tolist(), "rolling_shutter": {"direction": shutter,
                                                                          "readout_time_us": readout},
                "frames": frames}

    def _mask(self, inst: _Instance, masks: _Instance | None, cam_id: str, W: int, H: int) -> str | None:
        if masks is None:
            return None
        try:
            names = masks.reader.get_camera_mask_names(inst.name)
        except KeyError:
            return None
        except Exception as exc:
            self.found.add(masks.file, f"masks/{masks.name}.cameras.{inst.name}", f"cannot read ({_describe(exc)})")
            return None
        others = [n for n in names if n != "ego"]
        if others:
            self.notes.append(f"camera {inst.name}: masks {others} are not applied (only 'ego' has a known meaning)")
        if "ego" not in names:
            return None
        field_ = f"masks/{masks.name}.cameras.{inst.name}.ego"
        try:
            ego = np.asarray(masks.reader.get_camera_mask_image(inst.name, "ego").convert("L")) != 0
        except Exception as exc:
            self.found.add(masks.file, field_, f"cannot decode the mask ({_describe(exc)})")
            return None
        if ego.shape != (H, W):
            self.found.add(masks.file, field_, f"mask is {ego.shape[1]}x{ego.shape[0]}, the camera is {W}x{H}")
            return None

        rel = f"masks/{cam_id}.png"
        (self.out / "masks").mkdir(exist_ok=True)
        Image.fromarray(np.where(ego, 0, 255).astype(np.uint8)).save(self.out / rel, format="PNG")  # ours: 0 = ignore
        return rel

    # -- lidars -------------------------------------------------------------------------

    def _sweep(self, inst: _Instance, end: int) -> dict[str, np.ndarray]:
        """One frame's first-return points (lidar frame, own times). ``FieldError`` when unreadable."""
        r = inst.reader
        field_ = f"lidars/{inst.name}.frames[{end}]"
        try:
            direction = np.asarray(r.get_frame_ray_bundle_data(end, "direction"), dtype=np.float64)
            t = np.asarray(r.get_frame_ray_bundle_data(end, "timestamp_us"), dtype=np.int64)
            dist = np.asarray(r.get_frame_ray_bundle_return_data(end, "distance_m", 0), dtype=np.float64)
            valid = np.asarray(r.get_frame_ray_bundle_return_valid_mask(end))[0]
            names = r.get_frame_ray_bundle_return_data_names(end)
            intensity = (np.asarray(r.get_frame_ray_bundle_return_data(end, "intensity", 0), dtype=np.float64)
                         if "intensity" in names else np.zeros(len(dist)))
            element = (np.asarray(r.get_frame_ray_bundle_data(end, "model_element"), dtype=np.int64)
                       if r.has_frame_ray_bundle_data(end, "model_element") else None)
            n_returns = int(r.get_frame_ray_bundle_return_count(end))
        except Exception as exc:
            raise FieldError(field_, f"cannot read the ray bundle ({_describe(exc)})") from None
        n = len(direction)
        if direction.shape != (n, 3) or t.shape != (n,) or dist.shape != (n,) or valid.shape != (n,):
            raise FieldError(field_, f"ray bundle arrays disagree: direction {direction.shape}, timestamp_us "
                                     f"{t.shape}, distance_m {dist.shape}")
        keep = valid & np.isfinite(dist) & (dist > 0) & np.all(np.isfinite(direction), axis=1)
        out = {"xyz": direction[keep] * dist[keep, None], "t": t[keep], "dist": dist[keep],
               "intensity": np.clip(np.nan_to_num(intensity[keep], nan=0.0), 0.0, 1.0), "n_returns": n_returns}
        if element is not None:
            if element.shape != (n, 2):
                raise FieldError(f"{field_}.model_element", f"must be [N, 2], got {element.shape}")
            out["row"] = element[keep, 0]
        return out

    def _lidar(self, inst: _Instance, intrinsics: _Instance) -> tuple[dict[str, Any], dict[str, Any]] | None:
        lid_id = sensor_id(inst.name)
        T_rig_lidar = self._mounting(inst, "lidar")
        if T_rig_lidar is None:
            return None
        where = f"intrinsics/{intrinsics.name}.lidars.{inst.name}.lidar_model_parameters"
        try:
            params = intrinsics.reader.get_lidar_model_parameters(inst.name)
        except Exception as exc:
            self.found.add(intrinsics.file, where, f"cannot read the lidar model ({_describe(exc)})")
            return None
        frames_ts = np.asarray(inst.reader.frames_timestamps_us, dtype=np.int64).reshape(-1, 2)
        usable = [(int(s), int(e)) for s, e in frames_ts if self._in_rig_range(int(s), int(e))]
        if len(usable) < len(frames_ts):
            self.notes.append(f"lidar {inst.name}: {len(frames_ts) - len(usable)} sweep(s) outside the rig "
                              f"trajectory are skipped")
        if not usable:
            self.notes.append(f"lidar {inst.name}: no sweep to import; the lidar is skipped")
            return None
        if params is not None and params.type() != "row-offset-spinning":
            self.notes.append(f"lidar {inst.name}: model {params.type()!r} is not known; its channel table is "
                              "estimated from the points")
            params = None
        try:
            if params is not None:
                model, info = self._model_from_params(inst.name, params), {"method": "ncore-model"}
            else:
                model, info = self._estimate_model(inst, usable)
        except FieldError as exc:
            self.found.add(inst.file if exc.field.startswith("lidars/") else intrinsics.file, exc.field, exc.message)
            return None

        sweeps, r_min, r_max, multi = [], math.inf, 0.0, 0
        folder = self.out / "lidar" / lid_id
        folder.mkdir(parents=True, exist_ok=True)
        table = np.asarray(model["elevation_deg"])
        for start, end in usable:
            try:
                s = self._sweep(inst, end)
            except FieldError as exc:
                self.found.add(inst.file, exc.field, exc.message)
                continue
            multi = max(multi, s["n_returns"])
            if params is not None and "row" in s:
                channel = s["row"]
                bad = (channel < 0) | (channel >= len(table))
                if np.any(bad):
                    self.found.add(inst.file, f"lidars/{inst.name}.frames[{end}].model_element",
                                   f"rows {np.unique(channel[bad])[:5].tolist()} outside the model's {len(table)} rows")
                    continue
            else:
                _, el, _ = sweep_cache.spherical(s["xyz"])
                channel = sweep_cache.nearest_channel(el, table)
            if len(s["t"]) and (s["t"].min() < start or s["t"].max() > end):
                self.found.add(inst.file, f"lidars/{inst.name}.frames[{end}].ray_bundle.timestamp_us",
                               f"ray times {s['t'].min()}..{s['t'].max()} lie outside the frame {start}..{end}")
                continue
            name = f"{start}.nrl"
            write_nrl(folder / name, start, s["xyz"].astype(np.float32), s["intensity"].astype(np.float32), s["t"],
                      channel.astype(np.int64))
            sweeps.append({"timestamp_us": start, "file": f"lidar/{lid_id}/{name}"})
            if len(s["dist"]):
                r_min, r_max = min(r_min, float(s["dist"].min())), max(r_max, float(s["dist"].max()))
        if not sweeps:
            return None
        if multi > 1:
            info["returns"] = f"first of {multi} returns imported"
        min_range, max_range = sweep_cache.range_limits(r_min, r_max)
        spec = {"id": lid_id, "model": "spinning", "T_rig_lidar": T_rig_lidar.tolist(), **model,
                "min_range_m": min_range, "max_range_m": max_range, "sweeps": sweeps}
        return spec, info

    def _model_from_params(self, name: str, p: Any) -> dict[str, Any]:
        """Our spinning model from a ``row-offset-spinning`` one (exact up to column spacing)."""
        az = np.asarray(p.column_azimuths_rad, dtype=np.float64)
        sign = 1.0 if p.spinning_direction == "ccw" else -1.0
        model = {
            "elevation_deg": np.degrees(np.asarray(p.row_elevations_rad, dtype=np.float64)).tolist(),
            "azimuth_offset_deg": np.degrees(np.asarray(p.row_azimuth_offsets_rad, dtype=np.float64)).tolist(),
            "rotation": "counterclockwise" if sign > 0 else "clockwise",
            "scan_rate_hz": float(p.spinning_frequency_hz),
            "start_azimuth_deg": float(np.degrees(az[0])),
            "columns": int(p.n_columns),
        }
        if len(az) > 1:
            # columns along the spin, relative to column 0, in (0, 2 pi)
            rel = np.mod(sign * (az - az[0]), 2 * np.pi)
            step = float(np.median(np.diff(rel)))
            columns = int(round(2 * np.pi / step)) if step > 0 else int(p.n_columns)
            off = np.degrees(np.abs(rel - step * np.arange(len(az))).max())
            model["columns"] = max(1, columns)
            if columns != int(p.n_columns) or off > 0.5 * math.degrees(step):
                self.notes.append(f"lidar {name}: columns are not evenly spread over a revolution "
                                  f"({int(p.n_columns)} columns, median step {math.degrees(step):.4f} deg, off by "
                                  f"up to {off:.3f} deg): the spinning model uses {columns} even columns; points "
                                  "are kept exactly")
        return model

    def _estimate_model(self, inst: _Instance, usable: list[tuple[int, int]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """A spinning model for a lidar without one: the table from the points, spin from the ray times."""
        pick = sweep_cache.sample_indices(len(usable))
        els, rngs, sample = [], [], None
        for i in pick:
            s = self._sweep(inst, usable[i][1])
            xyz = s["xyz"]
            _, el, _ = sweep_cache.spherical(xyz)
            step = max(1, len(el) // 200_000)
            els.append(el[::step])
            rngs.append(s["dist"][::step])
            if sample is None and len(xyz) >= 100:
                sample = (s, usable[i])
        table, method = estimate_channel_table(np.concatenate(els), np.concatenate(rngs))
        starts = np.array([s for s, _ in usable], dtype=np.int64)
        durations = np.array([e - s for s, e in usable], dtype=np.int64)
        spacing = float(np.median(np.diff(starts))) if len(starts) > 1 else math.inf
        period_us = spacing if spacing <= 200_000 else float(np.median(durations)) or 100_000.0
        model = {"elevation_deg": [float(e) for e in table], "scan_rate_hz": 1e6 / period_us,
                 "rotation": "counterclockwise", "start_azimuth_deg": 0.0, "columns": 1024}
        if sample is not None:
            (s, (start, _)) = sample
            az = np.degrees(np.arctan2(s["xyz"][:, 1], s["xyz"][:, 0]))
            dt = (s["t"] - start).astype(np.float64)
            # spin direction and start azimuth from the azimuth drift over time bins
            bins = np.minimum((dt / period_us * 16).astype(np.int64), 15)
            means = []
            for b in range(16):
                a = np.radians(az[bins == b])
                means.append(math.degrees(math.atan2(np.sin(a).mean(), np.cos(a).mean())) if len(a) else np.nan)
            means = np.array(means)
            steps = np.diff(means)
            steps = (steps + 180.0) % 360.0 - 180.0
            steps = steps[np.isfinite(steps)]
            sign = 1.0 if len(steps) == 0 or np.median(steps) >= 0 else -1.0
            model["rotation"] = "counterclockwise" if sign > 0 else "clockwise"
            first = np.nonzero(np.isfinite(means))[0]
            if len(first):
                b = int(first[0])
                model["start_azimuth_deg"] = float((means[b] - sign * 360.0 * (b + 0.5) / 16 + 180.0) % 360.0 - 180.0)
            columns = sweep_cache.ring_columns(s["xyz"], table)
            if columns is not None:
                model["columns"] = columns
        info = {"method": method, "note": "no lidar model in the sequence: the channel table is estimated from the "
                                          "points, rotation / start azimuth / columns from the ray times; the points "
                                          "and their times are kept exactly"}
        return model, info

    # -- tracks -------------------------------------------------------------------------

    def _tracks(self, inst: _Instance) -> list[dict[str, Any]]:
        base = f"cuboids/{inst.name}.cuboid_track_observations"
        try:
            observations = list(inst.reader.get_observations())
        except Exception as exc:
            self.found.add(inst.file, base, f"cannot read the cuboid observations ({_describe(exc)})")
            return []
        by_track: dict[str, list[tuple[int, Any]]] = {}
        for i, obs in enumerate(observations):
            by_track.setdefault(obs.track_id, []).append((i, obs))
        out, ids, skipped, duplicates = [], {}, 0, 0
        for track_id, items in by_track.items():
            items.sort(key=lambda io: io[1].timestamp_us)
            ts, poses, dims, labels = [], [], [], []
            for i, obs in items:
                if ts and obs.timestamp_us == ts[-1]:
                    duplicates += 1
                    continue
                T_world_ref = self._T_world_frame(obs.reference_frame_id, int(obs.reference_frame_timestamp_us))
                if T_world_ref is None:
                    skipped += 1
                    continue
                if isinstance(T_world_ref, str):
                    self.found.add(inst.file, f"{base}[{i}].reference_frame_id", T_world_ref)
                    continue
                box = np.eye(4)
                box[:3, :3] = euler_xyz_to_matrix(obs.bbox3.rot)
                box[:3, 3] = obs.bbox3.centroid
                dim = np.asarray(obs.bbox3.dim, dtype=np.float64)
                if not (np.all(np.isfinite(dim)) and np.all(dim > 0) and np.all(np.isfinite(box))):
                    self.found.add(inst.file, f"{base}[{i}].bbox3", f"box must be finite with a positive size, got "
                                                                    f"dim {dim.tolist()}")
                    continue
                ts.append(int(obs.timestamp_us))
                poses.append(T_world_ref @ box)
                dims.append(dim)
                labels.append(obs.class_id)
            if not ts:
                continue
            tid = sensor_id(track_id)
            while tid in ids:
                tid = f"{tid}_"
            ids[tid] = track_id
            size = np.median(np.stack(dims), axis=0)
            out.append({"id": tid, "class": label(max(set(labels), key=labels.count), LABELS),
                        "size_m": [float(v) for v in size], "timestamps_us": ts,
                        "T_world_box": [T.tolist() for T in poses]})
        if skipped:
            self.notes.append(f"{skipped} cuboid observation(s) whose reference frame time lies outside the rig "
                              "trajectory are skipped")
        if duplicates:
            self.notes.append(f"{duplicates} cuboid observation(s) repeating a track's timestamp are skipped")
        return out

    def _T_world_frame(self, frame: str, t_us: int) -> np.ndarray | str | None:
        """Our ``T_world_<frame>`` at ``t_us``; None when outside the rig trajectory; a message when unknown."""
        if frame == "world":
            return self.R_fix.copy()
        T_rig = self.T_rig(frame)
        if T_rig is None:
            if frame == "world_global":
                for dst, T in self.static.get("world", []):
                    if dst == "world_global":
                        return self.R_fix @ invert_rigid(T)
            return f"reference frame {frame!r} is neither world, rig nor linked to the rig by static poses"
        if not self.rig_interval[0] <= t_us <= self.rig_interval[1]:
            return None
        return self.T_world_rig_at(np.array([t_us]))[0] @ T_rig


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str))
