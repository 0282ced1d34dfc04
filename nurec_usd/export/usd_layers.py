"""Write a :class:`~nurec_usd.scene.gaussians.Scene` as the OpenUSD layers of ``USD.md``.

::

    out_dir/
      root.usda            stage metadata, sublayers rig + actors, payload -> background
      rig.usdc             /World/Rig: time-sampled rig pose; cameras and lidars as children (each
                           lidar with an OmniLidar child for Isaac Sim's RTX lidar);
                           /World/Render: a UsdRender product per camera and their settings
      actors.usdc          /World/Actors/<track>: time-sampled pose + visibility, payload -> actors/<track>.usdc
      background.usdc      /World/Background/{Gaussians, Preview}: static Gaussians in the world frame;
                           /World/Background/Sky: a DomeLight with the learned sky (sky.png)
      sky.png              the sky as a latlong texture
      actors/<track>.usdc  /Actor/{Gaussians, Preview}: one actor's Gaussians in its box frame
      collision.usdc       (optional) /Collision: a triangle mesh of the static scene with UsdPhysics
                           collision APIs, referenced from root.usda at /World/Collision
      scene.ply            (optional) the static Gaussians in the common 3DGS PLY layout
      actors/<track>.ply   (optional) one actor's Gaussians in its box frame, same layout, with
      actors/<track>.track.json  its timed poses (nurec_usd.export.actor_ply)
      scene.usdz           (optional) the stage packaged as one file (layers and sky.png)

Gaussians are written post-activation (exp scales, sigmoid opacities, unit quaternions) as
``UsdVol.ParticleField3DGaussianSplat`` prims, each with a ``UsdGeom.Points`` proxy for plain
viewers, and a ``primvars:nurec:lidarIntensity`` (modelled lidar return intensity). Cameras
carry the per-camera exposure and lens falloff the reconstruction learned, lidars the intensity scale: with
the sky, everything ``nurec_usd.replay.stage`` needs to render the sensors from the USD alone.
Actors and the background carry ``UsdSemantics.LabelsAPI:class`` labels; the splats a
``projectionModeHint``. docs/usd-for-simulators.md lists what simulators read.
Actor poses apply the scene's per-key pose corrections when present, as
``nurec_usd.ops.interpolate`` does: corrected key = (exp(w) * q_k, p_k + dt).

Time: ``timeCodesPerSecond`` is the rig's keyframe rate; the time code of an absolute
timestamp is ``(t_us - start_us) * 1e-6 * timeCodesPerSecond`` with ``start_us`` (the
capture's time zero) in ``customLayerData.absoluteTimeOffsetMicroSec``.

The folder is written all or nothing (:class:`~nurec_usd.util.staging.StagedDirectory`).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from nurec_usd.export.usd_schema import (
    CAMERA_API,
    CV_TO_USD,
    INTENSITY_PRIMVAR,
    LIDAR_API,
    intrinsic_items,
    intrinsics_from_items,
    register_schema,
)
from nurec_usd.export.usdz import package_usdz
from nurec_usd.util.io_errors import naming, usd_write_error
from nurec_usd.util.staging import StagedDirectory

__all__ = ["export_usd", "Timing", "COLOR_SPACE", "LENS_APIS", "INTENSITY_PRIMVAR", "SKY_TEXTURE", "DOME_ORIENT",
           "CV_TO_USD", "intrinsic_items", "intrinsics_from_items"]

SH_C0 = 0.28209479177387814
# Gaussians are fit to sRGB-encoded images: their colours are display-referred sRGB.
COLOR_SPACE = "srgb_rec709_display"
LENS_APIS = {"opencv": "OmniLensDistortionOpenCvPinholeAPI",
             "opencv_fisheye": "OmniLensDistortionOpenCvFisheyeAPI",
             "ftheta": "OmniLensDistortionFthetaAPI"}
# USD lens values are in tenths of a scene unit; only ratios matter for projection.
HORIZONTAL_APERTURE = 20.955
# Precision of xformOp:orient. USD.md names quatf, but USD turns an orient into a matrix
# through an angle of 2 acos(w): in float, w of a rotation below ~5e-4 rad rounds to 1 and the
# rotation is lost (measured: a 4.8e-4 rad rig yaw read back as 0). Double keeps it.
ORIENT_PRECISION = "double"
# The sky: a DomeLight with this latlong texture next to the layers (for viewers), and the exact
# learned map as attributes of the light (for replay).
SKY_TEXTURE = "sky.png"
# The DomeLight's rotation (w, x, y, z): a latlong dome has its pole on local +Y and longitude 0
# on local +Z (OpenEXR's convention); this 120-degree turn about (1, 1, 1) maps local x, y, z to
# world y, z, x, so the pole is the world's up (+Z) and longitude 0 looks down world +X.
DOME_ORIENT = (0.5, 0.5, 0.5, 0.5)
# The optional collision mesh (export_usd(collision=True)), referenced from root.usda.
COLLISION_LAYER = "collision.usdc"
# How renderers should project the splats (the splat schema's projectionModeHint): training
# projects every Gaussian EWA-style, with the Jacobian of the camera's own projection at its
# centre (for the fisheye and f-theta models too), which is what "perspective" names; none is
# projected onto a plane tangent to its viewing ray ("tangential").
PROJECTION_MODE = "perspective"
# Semantic labels (UsdSemantics.LabelsAPI): the taxonomy (the API's instance name) and the
# label of the static scene; each actor is labelled with its track's class.
SEMANTIC_TAXONOMY = "class"
BACKGROUND_LABEL = "background"
# The label of an actor whose track has none.
UNLABELLED = "unlabelled"
# Render settings and one render product per camera (UsdRender), in rig.usdc. Under /World rather
# than UsdRender's customary root /Render: a root prim beside the default prim is flagged by
# NVIDIA's validator (DefaultPrimChecker), and the stage's renderSettingsPrimPath finds them anywhere.
RENDER_SCOPE = "/World/Render"
RENDER_SETTINGS = f"{RENDER_SCOPE}/Settings"
RENDER_VAR = f"{RENDER_SCOPE}/Vars/LdrColor"
# Isaac Sim's RTX lidar: an OmniLidar prim under each lidar Xform, at identity, with the applied
# API and the omni:sensor:Core:* attributes of its lidar profiles, authored from our channel table.
RTX_LIDAR_PRIM = "OmniLidar"
RTX_LIDAR_API = "OmniSensorGenericLidarCoreAPI"
RTX_PREFIX = "omni:sensor:Core:"
# Offset after a track's last key from which its actor is invisible: 1 microsecond.
_END_EPS_S = 1e-6


# ---------------------------------------------------------------------------------------------
# Plain numpy helpers


def _np(t: Any, dtype=np.float64) -> np.ndarray:
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.asarray(t, dtype=dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def matrix_to_quat(R: np.ndarray) -> np.ndarray:
    """Rotation matrices ``[..., 3, 3]`` -> unit quaternions (w, x, y, z), w >= 0 (the sensors' se3 version)."""
    import torch

    from nurec_usd.sensors import se3

    return se3.matrix_to_quat(torch.from_numpy(np.asarray(R, dtype=np.float64))).numpy()


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of (w, x, y, z) quaternions, ``[..., 4]`` (the sensors' se3 version)."""
    import torch

    from nurec_usd.sensors import se3

    return se3.quat_multiply(torch.from_numpy(np.asarray(a, dtype=np.float64)),
                             torch.from_numpy(np.asarray(b, dtype=np.float64))).numpy()


def _rotvec_to_quat(w: np.ndarray) -> np.ndarray:
    """Rotation vectors (axis * angle) ``[..., 3]`` -> quaternions (w, x, y, z)."""
    angle = np.linalg.norm(w, axis=-1, keepdims=True)
    half = 0.5 * angle
    # sin(a/2)/a, with its limit 1/2 at a = 0
    k = np.where(angle > 1e-12, np.sin(half) / np.where(angle > 1e-12, angle, 1.0), 0.5)
    return np.concatenate([np.cos(half), w * k], axis=-1)


def _continuous(q: np.ndarray) -> np.ndarray:
    """Quaternion keys with signs flipped so consecutive keys lie in the same hemisphere
    (interpolation then takes the short way)."""
    q = q.copy()
    for i in range(1, len(q)):
        if np.dot(q[i], q[i - 1]) < 0:
            q[i] = -q[i]
    return q


# ---------------------------------------------------------------------------------------------
# Time


@dataclass(frozen=True)
class Timing:
    """How absolute microsecond timestamps map to the stage's time codes."""

    start_us: int  # capture time zero (absoluteTimeOffsetMicroSec)
    time_codes_per_second: float
    start_time_code: float
    end_time_code: float

    def code_us(self, t_us) -> np.ndarray:
        """Absolute microseconds -> time codes."""
        # (dt * rate) / 1e6 rather than dt * 1e-6 * rate: whole time codes stay whole.
        return (np.asarray(t_us, dtype=np.int64) - self.start_us) * self.time_codes_per_second / 1e6

    def code_s(self, t_s) -> np.ndarray:
        """Seconds since the capture start -> time codes."""
        return np.asarray(t_s, dtype=np.float64) * self.time_codes_per_second

    @classmethod
    def of_scene(cls, scene) -> "Timing":
        rig = scene.metadata.get("rig") or {}
        traj = np.asarray((rig.get("trajectory") or {}).get("timestamps_us", []), dtype=np.int64)
        start_us = int(rig.get("start_us", traj[0] if len(traj) else 0))
        # The rig's keyframe rate: the median step of its trajectory, rounded to 1e-6 Hz.
        rate = 10.0
        if len(traj) > 1:
            step = float(np.median(np.diff(traj)))
            if step > 0:
                rate = round(1e6 / step, 6)
        seconds = [(traj - start_us) * 1e-6]
        for cam in rig.get("cameras", []):
            seconds.append((np.asarray(cam.get("timestamps_us", []), dtype=np.int64) - start_us) * 1e-6)
        for lid in rig.get("lidars", []):
            ts = (np.asarray(lid.get("timestamps_us", []), dtype=np.int64) - start_us) * 1e-6
            seconds.append(ts + 1.0 / float(lid.get("scan_rate_hz", 10.0)) if len(ts) else ts)
            seconds.append(ts)
        for tr in scene.tracks:
            seconds.append(_np(tr.times))
        allt = np.concatenate([s.ravel() for s in seconds]) if seconds else np.zeros(0)
        lo, hi = (float(allt.min()), float(allt.max())) if allt.size else (0.0, 0.0)
        return cls(start_us, rate, lo * rate, hi * rate)


# ---------------------------------------------------------------------------------------------
# Layers


def _new_layer_stage(path: Path, timing: Timing, default_prim: str):
    """A new stage on a new layer at ``path`` with the stage metadata of USD.md."""
    from pxr import Usd, UsdGeom

    stage = Usd.Stage.CreateNew(str(path))
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    stage.SetTimeCodesPerSecond(timing.time_codes_per_second)
    stage.SetFramesPerSecond(timing.time_codes_per_second)
    stage.SetStartTimeCode(timing.start_time_code)
    stage.SetEndTimeCode(timing.end_time_code)
    layer = stage.GetRootLayer()
    data = dict(layer.customLayerData)
    data["absoluteTimeOffsetMicroSec"] = int(timing.start_us)
    layer.customLayerData = data
    layer.defaultPrim = default_prim
    return stage


def _set_pose_ops(xformable, translations: np.ndarray, quats: np.ndarray, codes: np.ndarray | None) -> None:
    """translate (double3) + orient (quatd, see ORIENT_PRECISION) ops; time-sampled at ``codes`` (with the first
    key as default value) or static when ``codes`` is None."""
    from pxr import Gf, Usd, UsdGeom

    t_op = xformable.AddTranslateOp(UsdGeom.XformOp.PrecisionDouble)
    double = ORIENT_PRECISION == "double"
    r_op = xformable.AddOrientOp(UsdGeom.XformOp.PrecisionDouble if double else UsdGeom.XformOp.PrecisionFloat)
    vec = lambda p: Gf.Vec3d(*map(float, p))  # noqa: E731
    quat_t = Gf.Quatd if double else Gf.Quatf
    quat = lambda q: quat_t(float(q[0]), float(q[1]), float(q[2]), float(q[3]))  # noqa: E731
    t_op.Set(vec(translations[0]))
    r_op.Set(quat(quats[0]))
    if codes is not None:
        for c, p, q in zip(codes, translations, quats):
            t_op.Set(vec(p), Usd.TimeCode(float(c)))
            r_op.Set(quat(q), Usd.TimeCode(float(c)))


def _rigid_parts(T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[K, 4, 4] rigid transforms -> translations [K, 3], continuous unit quaternions [K, 4]."""
    T = np.asarray(T, dtype=np.float64).reshape(-1, 4, 4)
    return T[:, :3, 3].copy(), _continuous(matrix_to_quat(T[:, :3, :3]))


@dataclass
class _Splats:
    """Post-activation Gaussians as written (float32 numpy)."""

    positions: np.ndarray  # [N, 3]
    orientations: np.ndarray  # [N, 4] (w, x, y, z), unit
    scales: np.ndarray  # [N, 3]
    opacities: np.ndarray  # [N]
    sh0: np.ndarray  # [N, 1, 3] DC
    shN: np.ndarray  # [N, (d+1)^2 - 1, 3] the degree's others (not concatenated here: see _write_splat_prims)
    degree: int
    intensities: np.ndarray  # [N] modelled lidar return intensity in [0, 1]


def activated(params, degree: int, rows=None) -> _Splats:
    """Post-activation values of (a subset ``rows`` of) a GaussianParams as float32 on the host;
    the activations (``nurec_usd.scene.gaussians``) are computed in float64. Only the SH
    coefficients of ``degree`` are copied (``shN`` always holds degree 3's)."""
    import torch

    from nurec_usd.scene.gaussians import intensities_of, opacities_of, scales_of, unit_quats

    index = None if rows is None else np.asarray(rows, dtype=np.int64)

    def host(t: torch.Tensor) -> torch.Tensor:  # the rows asked for, on the host
        t = t.detach()
        if index is None:
            return t.cpu()
        if t.device.type == "cpu":
            # numpy's gather: torch's runs a few thousand rows (an actor) on its thread pool, whose
            # workers then spin a while, taking cores from this thread and from the evaluation
            return torch.from_numpy(t.numpy()[index])
        return t[torch.as_tensor(index, device=t.device)].cpu()

    f32 = lambda t: np.ascontiguousarray(t.numpy(), dtype=np.float32)  # noqa: E731
    k = (degree + 1) ** 2
    return _Splats(f32(host(params.means)), f32(unit_quats(host(params.quats).double())),
                   f32(scales_of(host(params.log_scales).double())),
                   f32(opacities_of(host(params.opacity_logits).double())),
                   f32(host(params.sh0)), f32(host(params.shN[:, : k - 1])), int(degree),  # the degree's only
                   f32(intensities_of(host(params.intensity_logits).double())))


def row_keys(bits: np.ndarray) -> np.ndarray:  # [N, C] uint32 -> [N] integer keys
    """One sortable key per row: equal rows get equal keys; distinct rows rarely share one."""
    key = bits[:, 0]
    if bits.shape[1] > 1:
        key = key.astype(np.uint64)
        for c in range(1, bits.shape[1]):
            key = (key * np.uint64(0x9E3779B97F4A7C15)) ^ bits[:, c]
    return key


def unique_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a float32 array ``[N]`` or ``[N, C]`` (equal when their bits are) and
    the index of each row among them: ``uniq[inverse]`` is ``values`` bit for bit. ``uniq`` lists
    the rows in the order they first appear (so ``inverse`` mostly climbs: USD's crate files
    compress such indices well and fast, where indices in a hash order cost ~0.15 s per
    million rows to write).

    Rows are grouped by one integer key (a single row's bits, or a mix of a row's columns): one
    sort of a million keys, where sorting by every column takes several times as long. Rows that
    share a key are compared; distinct rows that share one are sorted column by column instead,
    so the result is exact.
    """
    v = np.ascontiguousarray(values, dtype=np.float32)
    n = len(v)
    if n == 0:
        return v, np.zeros(0, dtype=np.int64)
    bits = v.reshape(n, -1).view(np.uint32)  # [N, C]
    key = row_keys(bits)
    if key.dtype.itemsize <= 4 and n < 2 ** 32:
        # A 32-bit key and the row's index packed in one uint64: a plain sort (several times
        # faster than an argsort) gives the order, and the sorted keys with it.
        packed = np.sort((key.astype(np.uint64) << np.uint64(32)) | np.arange(n, dtype=np.uint64))
        order = (packed & np.uint64(0xFFFFFFFF)).astype(np.int64)
        sorted_key = packed >> np.uint64(32)
        del packed
    else:
        order = np.argsort(key)
        sorted_key = key[order]
    same = sorted_key[1:] == sorted_key[:-1]  # [N - 1] neighbours with one key
    pairs = np.flatnonzero(same)
    if pairs.size and (bits[order[pairs]] != bits[order[pairs + 1]]).any():  # distinct rows, one key
        order = np.lexsort(bits.T[::-1])
        ranked = bits[order]
        same = ~(ranked[1:] != ranked[:-1]).any(axis=1)
    first = np.empty(n, dtype=bool)  # [N] in sorted order: the first row of its group
    first[0] = True
    np.logical_not(same, out=first[1:])
    starts = np.flatnonzero(first)
    head = np.minimum.reduceat(order, starts)  # [G] each group's first row in ``values``
    # Number the groups in the order their first rows come: mark the first rows, count along.
    is_head = np.zeros(n, dtype=bool)
    is_head[head] = True
    label = np.cumsum(is_head) - 1  # [N] at a first row: its group's number
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = label[head][np.cumsum(first) - 1]
    return v[np.flatnonzero(is_head)], inverse


def _vt_filled(array_type, rows: int, row_shape: tuple, dtype, fill):
    """A new ``Vt`` array of ``rows`` rows, filled by ``fill(dest)`` with ``dest`` a writable numpy
    view ``[rows, *row_shape]`` of its storage; None where its layout is not that.

    ``FromNumpy`` converts element by element with the GIL held (0.5 s for the 16 million SH
    triplets of a million Gaussians); here the array is made (its allocation still holds the GIL),
    then numpy copies the values into its storage (GIL released). ``Vt`` arrays expose their
    storage only as a read-only buffer: the copy goes through its address, into an array just made
    here and shared with nothing. Checked after: the buffer is still that storage and holds what
    was written (rows sampled across it)."""
    out = array_type(rows)
    view = np.asarray(memoryview(out))
    if rows == 0 or view.shape != (rows, *row_shape) or view.dtype != np.dtype(dtype):
        return None
    address = view.__array_interface__["data"][0]
    dest = np.frombuffer((ctypes.c_char * view.nbytes).from_address(address), dtype=view.dtype).reshape(view.shape)
    fill(dest)
    sample = np.linspace(0, rows - 1, 17).astype(np.int64)
    written = dest[sample].tobytes()
    del view, dest
    check = np.asarray(memoryview(out))
    if check.__array_interface__["data"][0] != address or check[sample].tobytes() != written:
        return None
    return out


def _vt(array_type, values: np.ndarray):
    """``array_type.FromNumpy(values)`` (float32 or int32 rows) through :func:`_vt_filled`."""
    values = np.ascontiguousarray(values)
    out = _vt_filled(array_type, len(values), values.shape[1:], values.dtype, lambda dest: np.copyto(dest, values))
    return array_type.FromNumpy(values) if out is None else out


def _set_indexed(primvar, values: np.ndarray, array_type, distinct: tuple[np.ndarray, np.ndarray]) -> None:
    """Set a primvar, indexed when values repeat (validators flag repeated unindexed values);
    ``distinct``: ``unique_rows(values)``."""
    from pxr import Vt

    uniq, inverse = distinct
    if len(uniq) < len(values):
        primvar.Set(_vt(array_type, np.ascontiguousarray(uniq, dtype=np.float32)))
        primvar.SetIndices(_vt(Vt.IntArray, inverse.reshape(-1).astype(np.int32)))
    else:
        primvar.Set(_vt(array_type, np.ascontiguousarray(values, dtype=np.float32)))


def _write_splats(stage, parent_path: str, s: _Splats) -> None:
    """``<parent>/Gaussians`` (ParticleField3DGaussianSplat, purpose render) and
    ``<parent>/Preview`` (Points, purpose proxy), when there are Gaussians."""
    if s.positions.shape[0] == 0:
        return
    rgb = np.clip(0.5 + SH_C0 * s.sh0[:, 0, :], 0.0, 1.0).astype(np.float32)
    # The indexed primvars' distinct values are found in threads (numpy sorts with the GIL
    # released) while this one makes the pxr calls below (which hold it).
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="usd-unique") as pool:
        distinct = {name: pool.submit(unique_rows, v)
                    for name, v in (("intensity", s.intensities), ("colour", rgb), ("opacity", s.opacities))}
        _write_splat_prims(stage, parent_path, s, rgb, distinct)


def _fill_sh(dest: np.ndarray, s: _Splats) -> None:  # [N, k, 3] <- DC, then the others
    dest[:, :1] = s.sh0
    dest[:, 1:] = s.shN


def _write_splat_prims(stage, parent_path: str, s: _Splats, rgb: np.ndarray, distinct: dict) -> None:
    """``_write_splats``' prims; ``distinct``: futures of ``unique_rows`` of the intensities,
    display colours (``rgb``) and opacities."""
    from pxr import Gf, Sdf, Usd, UsdGeom, UsdVol, Vt

    n = s.positions.shape[0]
    gs = UsdVol.ParticleField3DGaussianSplat.Define(stage, f"{parent_path}/Gaussians")
    positions = _vt(Vt.Vec3fArray, s.positions)  # also the proxy's points: one array, shared
    gs.CreatePositionsAttr(positions)
    # Gf quaternions are stored imaginary first (x, y, z, w): reorder for the array copy.
    xyzw = np.ascontiguousarray(s.orientations[:, [1, 2, 3, 0]])
    gs.CreateOrientationsAttr(_vt(Vt.QuatfArray, xyzw))
    gs.CreateScalesAttr(_vt(Vt.Vec3fArray, s.scales))
    gs.CreateOpacitiesAttr(_vt(Vt.FloatArray, s.opacities))
    gs.CreateRadianceSphericalHarmonicsDegreeAttr(int(s.degree))
    k = (s.degree + 1) ** 2
    sh = _vt_filled(Vt.Vec3fArray, n * k, (3,), np.float32, lambda dest: _fill_sh(dest.reshape(n, k, 3), s))
    if sh is None:
        sh = Vt.Vec3fArray.FromNumpy(np.concatenate((s.sh0, s.shN), axis=1).reshape(n * k, 3))
    sh_attr = gs.CreateRadianceSphericalHarmonicsCoefficientsAttr(sh)
    sh_var = UsdGeom.Primvar(sh_attr)
    sh_var.SetInterpolation(UsdGeom.Tokens.vertex)
    sh_var.SetElementSize(k)
    gs.CreateSortingModeHintAttr("cameraDistance")
    gs.CreateProjectionModeHintAttr(PROJECTION_MODE)
    # Lidar return intensity per Gaussian (no standard attribute): a plain primvar, so that
    # replay can render the lidar and other tools can ignore it.
    _set_indexed(UsdGeom.PrimvarsAPI(gs.GetPrim()).CreatePrimvar(INTENSITY_PRIMVAR, Sdf.ValueTypeNames.FloatArray,
                                                                 UsdGeom.Tokens.vertex), s.intensities, Vt.FloatArray,
                 distinct["intensity"].result())
    gs.CreatePurposeAttr(UsdGeom.Tokens.render)
    # 3 sigma, any orientation; column by column (numpy reduces an [N, 3] array along N ~8x slower)
    radius = np.maximum(np.maximum(s.scales[:, 0], s.scales[:, 1]), s.scales[:, 2]) * np.float32(3.0)
    lo = [float((s.positions[:, c] - radius).min()) for c in range(3)]
    hi = [float((s.positions[:, c] + radius).max()) for c in range(3)]
    gs.CreateExtentAttr(Vt.Vec3fArray([Gf.Vec3f(*lo), Gf.Vec3f(*hi)]))
    Usd.ColorSpaceAPI.Apply(gs.GetPrim()).CreateColorSpaceNameAttr(COLOR_SPACE)

    pts = UsdGeom.Points.Define(stage, f"{parent_path}/Preview")
    pts.CreatePointsAttr(positions)
    widths = np.ascontiguousarray(2.0 * s.scales.mean(axis=1), dtype=np.float32)
    pts.CreateWidthsAttr(_vt(Vt.FloatArray, widths))
    pts.SetWidthsInterpolation(UsdGeom.Tokens.vertex)
    _set_indexed(pts.CreateDisplayColorPrimvar(UsdGeom.Tokens.vertex), rgb, Vt.Vec3fArray, distinct["colour"].result())
    _set_indexed(pts.CreateDisplayOpacityPrimvar(UsdGeom.Tokens.vertex), s.opacities, Vt.FloatArray,
                 distinct["opacity"].result())
    pts.CreatePurposeAttr(UsdGeom.Tokens.proxy)
    pts.CreateExtentAttr(UsdGeom.Points.ComputeExtent(pts.GetPointsAttr().Get(), pts.GetWidthsAttr().Get()))
    Usd.ColorSpaceAPI.Apply(pts.GetPrim()).CreateColorSpaceNameAttr(COLOR_SPACE)
    UsdGeom.Imageable(gs.GetPrim()).GetProxyPrimRel().SetTargets([Sdf.Path(f"{parent_path}/Preview")])


def sky_texture(sky: Any) -> np.ndarray:
    """The latlong texture of a pre-sigmoid sky map ``[3, H, W]`` (rows: elevation +90 to -90
    degrees; columns: azimuth -180 to 180 degrees): ``[H, W, 3]`` uint8 in OpenEXR's latlong
    layout (columns from longitude +180 down to -180), which with :data:`DOME_ORIENT` is azimuth
    +180 down to -180: the columns mirrored."""
    rgb = _sigmoid(_np(sky)).transpose(1, 2, 0)[:, ::-1]
    return np.ascontiguousarray(np.clip(np.round(rgb * 255.0), 0, 255).astype(np.uint8))


def _write_sky(stage, path: str, sky: Any, texture: Path) -> None:
    """A DomeLight at ``path`` showing the sky, with the exact map as ``nurec:sky:*`` attributes."""
    from PIL import Image
    from pxr import Gf, Sdf, UsdGeom, UsdLux, Vt

    values = np.ascontiguousarray(_np(sky, np.float32))  # [3, H, W]
    Image.fromarray(sky_texture(values)).save(texture)
    dome = UsdLux.DomeLight.Define(stage, path)
    dome.CreateTextureFileAttr(Sdf.AssetPath(f"./{texture.name}"))
    dome.CreateTextureFormatAttr(UsdLux.Tokens.latlong)
    dome.AddOrientOp(UsdGeom.XformOp.PrecisionDouble).Set(Gf.Quatd(*DOME_ORIENT))
    prim = dome.GetPrim()
    prim.CreateAttribute("nurec:sky:size", Sdf.ValueTypeNames.Int2, False, Sdf.VariabilityUniform).Set(
        Gf.Vec2i(int(values.shape[2]), int(values.shape[1])))
    prim.CreateAttribute("nurec:sky:logits", Sdf.ValueTypeNames.FloatArray, False, Sdf.VariabilityUniform).Set(
        Vt.FloatArray.FromNumpy(values.reshape(-1)))
    prim.SetDocumentation("The learned sky. nurec:sky:logits is the exact map, [3, H, W] channel-major, "
                          "pre-sigmoid: rows elevation +90 to -90 degrees, columns azimuth (from +x toward +y) "
                          "-180 to 180 degrees; colour = sigmoid(logit), display sRGB.")


def _write_background(scene, path: Path, timing: Timing) -> None:
    """background.usdc: /World/Background with the static Gaussians (world frame) and the sky."""
    from pxr import UsdGeom

    stage = _new_layer_stage(path, timing, "World")
    UsdGeom.Xform.Define(stage, "/World")
    UsdGeom.Xform.Define(stage, "/World/Background")
    _write_splats(stage, "/World/Background", activated(scene.static, scene.sh_degree))
    _write_sky(stage, "/World/Background/Sky", scene.sky, path.parent / SKY_TEXTURE)
    stage.GetRootLayer().Save()


def _track_prim_names(scene) -> list[str]:
    """A valid, unique prim (and file) name per track."""
    from pxr import Tf

    names, seen = [], set()
    for tr in scene.tracks:
        base = Tf.MakeValidIdentifier(str(tr.id)) or "track"
        name, i = base, 1
        while name in seen:
            i += 1
            name = f"{base}_{i}"
        seen.add(name)
        names.append(name)
    return names


def _write_actor_layer(scene, index: int, path: Path, timing: Timing) -> None:
    """actors/<track>.usdc: /Actor with the track's Gaussians in the box frame."""
    from pxr import UsdGeom

    stage = _new_layer_stage(path, timing, "Actor")
    UsdGeom.Xform.Define(stage, "/Actor")
    rows = np.nonzero(_np(scene.actor_index, np.int64) == index)[0]
    _write_splats(stage, "/Actor", activated(scene.actors, scene.sh_degree, rows))
    stage.GetRootLayer().Save()


def actor_keys(scene) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per track (times s, translations [K, 3], quaternions [K, 4] (w, x, y, z)), with the
    scene's per-key pose corrections applied when it has them."""
    out, k0 = [], 0
    corr = scene.pose_corrections
    dt = _np(corr[0]) if corr is not None else None
    dw = _np(corr[1]) if corr is not None else None
    for tr in scene.tracks:
        times = _np(tr.times).reshape(-1)
        p, q = _rigid_parts(_np(tr.T_world_box))
        if corr is not None:
            k = len(times)
            p = p + dt[k0:k0 + k]
            q = _quat_mul(_rotvec_to_quat(dw[k0:k0 + k]), q)
            q = q / np.linalg.norm(q, axis=-1, keepdims=True)
            k0 += k
        out.append((times, p, _continuous(q)))
    return out


def label_prim(prim, label: str) -> None:
    """Apply ``UsdSemantics.LabelsAPI`` (taxonomy :data:`SEMANTIC_TAXONOMY`) with one label, so that
    ground-truth tools label the prim and everything under it."""
    from pxr import UsdSemantics, Vt

    UsdSemantics.LabelsAPI.Apply(prim, SEMANTIC_TAXONOMY).CreateLabelsAttr(Vt.TokenArray([label]))


def _write_actors(scene, path: Path, timing: Timing, names: list[str]) -> None:
    """actors.usdc: /World/Actors/<track> Xforms with time-sampled pose and visibility and a
    payload of their Gaussians."""
    from pxr import Sdf, Usd, UsdGeom, Vt

    stage = _new_layer_stage(path, timing, "World")
    UsdGeom.Xform.Define(stage, "/World")
    UsdGeom.Scope.Define(stage, "/World/Actors")
    for tr, name, (times, p, q) in zip(scene.tracks, names, actor_keys(scene)):
        xf = UsdGeom.Xform.Define(stage, f"/World/Actors/{name}")
        prim = xf.GetPrim()
        codes = timing.code_s(times)
        _set_pose_ops(xf, p, q, codes)
        vis = xf.CreateVisibilityAttr(UsdGeom.Tokens.inherited)
        eps = _END_EPS_S * timing.time_codes_per_second
        vis.Set(UsdGeom.Tokens.invisible, Usd.TimeCode(float(codes[0]) - eps))
        vis.Set(UsdGeom.Tokens.inherited, Usd.TimeCode(float(codes[0])))
        vis.Set(UsdGeom.Tokens.invisible, Usd.TimeCode(float(codes[-1]) + eps))
        prim.SetCustomDataByKey("nurec:trackId", str(tr.id))
        prim.SetCustomDataByKey("nurec:label", str(tr.label))
        prim.SetCustomDataByKey("nurec:sizeM", Vt.DoubleArray([float(v) for v in tr.size_m]))
        label_prim(prim, str(tr.label) or UNLABELLED)
        prim.GetPayloads().AddPayload(Sdf.Payload(f"./actors/{name}.usdc", Sdf.Path("/Actor")))
    stage.GetRootLayer().Save()


def _ftheta_backward(coeffs: list[float], max_fov_deg: float, width: int, height: int) -> list[float]:
    """k0..k4 of NVIDIA's f-theta polynomial (pixel distance -> angle, radians) fit to our
    forward polynomial (angle -> pixel distance, ``angle_to_pixel``), k0 = 0."""
    c = np.asarray(coeffs, dtype=np.float64)
    theta_max = math.radians(max_fov_deg) / 2.0
    theta = np.linspace(0.0, theta_max, 512)
    r = np.polynomial.polynomial.polyval(theta, c)
    inc = np.concatenate([[True], np.diff(r) > 0])
    stop = np.argmin(inc) if not inc.all() else len(r)
    theta, r = theta[:stop], r[:stop]
    r_img = math.hypot(width, height)
    keep = r <= r_img * 1.05
    theta, r = theta[keep], r[keep]
    if len(r) < 5:
        return [0.0, 1.0 / c[1], 0.0, 0.0, 0.0]
    A = np.stack([r ** i for i in range(1, 5)], axis=1)
    k, *_ = np.linalg.lstsq(A, theta, rcond=None)
    return [0.0, *map(float, k)]


def _write_camera(stage, path: str, cam: dict, exposure: list[float] | None,
                  vignetting: list[float] | None = None) -> None:
    from pxr import Gf, Sdf, UsdGeom, Vt

    c = UsdGeom.Camera.Define(stage, path)
    c.GetPrim().SetCustomDataByKey("nurec:sensorId", str(cam["id"]))
    T = np.asarray(cam["T_rig_camera"], dtype=np.float64) @ CV_TO_USD
    p, q = _rigid_parts(T)
    _set_pose_ops(c, p, q, None)
    W, H, I, model = int(cam["width"]), int(cam["height"]), dict(cam["intrinsics"]), cam["model"]
    if model == "ftheta":
        fx = fy = float(I["angle_to_pixel"][1])
    else:
        fx, fy = float(I["fx"]), float(I["fy"])
    cx, cy = float(I["cx"]), float(I["cy"])
    ha = HORIZONTAL_APERTURE
    pix = ha / W  # aperture units per pixel (square pixels of fx's size)
    focal = fx * pix
    va = H * pix * fx / fy  # so that focal / verticalAperture = fy / height
    c.CreateProjectionAttr(UsdGeom.Tokens.perspective)
    c.CreateFocalLengthAttr(float(focal))
    c.CreateHorizontalApertureAttr(float(ha))
    c.CreateVerticalApertureAttr(float(va))
    # Pixel centres at integers (OpenCV): the image centre is ((W - 1) / 2, (H - 1) / 2).
    c.CreateHorizontalApertureOffsetAttr(float(((W - 1) / 2.0 - cx) * pix))
    c.CreateVerticalApertureOffsetAttr(float((cy - (H - 1) / 2.0) * va / H))
    c.CreateClippingRangeAttr(Gf.Vec2f(0.1, 10000.0))
    prim = c.GetPrim()
    prim.ApplyAPI(CAMERA_API)
    attr = lambda n, t, v: prim.CreateAttribute(n, t, False, Sdf.VariabilityUniform).Set(v)  # noqa: E731
    names, values = intrinsic_items(I)
    attr("nurec:camera:model", Sdf.ValueTypeNames.Token, model)
    attr("nurec:camera:imageSize", Sdf.ValueTypeNames.Int2, Gf.Vec2i(W, H))
    attr("nurec:camera:intrinsicNames", Sdf.ValueTypeNames.TokenArray, Vt.TokenArray(names))
    attr("nurec:camera:intrinsicValues", Sdf.ValueTypeNames.DoubleArray, Vt.DoubleArray(values))
    rs = cam.get("rolling_shutter") or {"direction": "global", "readout_time_us": 0}
    attr("nurec:rollingShutter:direction", Sdf.ValueTypeNames.Token, str(rs["direction"]))
    attr("nurec:rollingShutter:readoutTimeUs", Sdf.ValueTypeNames.Int, int(rs["readout_time_us"]))
    attr("nurec:camera:frameTimestampsUs", Sdf.ValueTypeNames.Int64Array,
         Vt.Int64Array([int(t) for t in cam.get("timestamps_us", [])]))
    attr("nurec:camera:exposure", Sdf.ValueTypeNames.DoubleArray,
         Vt.DoubleArray([float(v) for v in (exposure if exposure is not None else [0.0] * 6)]))
    attr("nurec:camera:vignetting", Sdf.ValueTypeNames.DoubleArray,
         Vt.DoubleArray([float(v) for v in (vignetting if vignetting is not None else [0.0] * 2)]))

    api = LENS_APIS.get(model)
    if api is None:
        return
    # NVIDIA's lens-distortion schemas: usd-core does not know them, so they are applied by
    # name and their attributes authored with the types NVIDIA's schemas declare.
    prim.AddAppliedSchema(api)
    F, F2, I2, TOK = (Sdf.ValueTypeNames.Float, Sdf.ValueTypeNames.Float2, Sdf.ValueTypeNames.Int2,
                      Sdf.ValueTypeNames.Token)
    lens = lambda n, t, v: prim.CreateAttribute(f"omni:lensdistortion:{n}", t).Set(v)  # noqa: E731
    if model in ("opencv", "opencv_fisheye"):
        ns = "opencvPinhole" if model == "opencv" else "opencvFisheye"
        lens("model", TOK, ns)
        for key in ("fx", "fy", "cx", "cy"):
            lens(f"{ns}:{key}", F, float(I[key]))
        lens(f"{ns}:imageSize", I2, Gf.Vec2i(W, H))
        keys = ("k1", "k2", "k3", "k4", "k5", "k6", "p1", "p2") if model == "opencv" else ("k1", "k2", "k3", "k4")
        for key in keys:
            lens(f"{ns}:{key}", F, float(I.get(key, 0.0)))
    else:  # ftheta
        lens("model", TOK, "ftheta")
        lens("ftheta:nominalWidth", F, float(W))
        lens("ftheta:nominalHeight", F, float(H))
        lens("ftheta:opticalCenter", F2, Gf.Vec2f(cx, cy))
        lens("ftheta:maxFov", F, float(I["max_fov_deg"]))
        for i, k in enumerate(_ftheta_backward(I["angle_to_pixel"], float(I["max_fov_deg"]), W, H)):
            lens(f"ftheta:k{i}", F, float(k))


def _write_lidar(stage, path: str, lid: dict, intensity_scale: float) -> None:
    from pxr import Sdf, UsdGeom, Vt

    x = UsdGeom.Xform.Define(stage, path)
    x.GetPrim().SetCustomDataByKey("nurec:sensorId", str(lid["id"]))
    p, q = _rigid_parts(np.asarray(lid["T_rig_lidar"], dtype=np.float64))
    _set_pose_ops(x, p, q, None)
    prim = x.GetPrim()
    prim.ApplyAPI(LIDAR_API)
    # Every attribute authored (not left to schema fallbacks): readable without the plugin.
    attr = lambda n, t, v: prim.CreateAttribute(f"nurec:lidar:{n}", t, False, Sdf.VariabilityUniform).Set(v)  # noqa: E731
    V = Sdf.ValueTypeNames
    cols = int(lid["columns"])
    attr("elevationDeg", V.DoubleArray, Vt.DoubleArray([float(v) for v in lid["elevation_deg"]]))
    attr("azimuthOffsetDeg", V.DoubleArray, Vt.DoubleArray([float(v) for v in lid["azimuth_offset_deg"]]))
    attr("columns", V.Int, cols)
    attr("azimuthResolutionDeg", V.Double, 360.0 / cols if cols else 0.0)
    attr("scanRateHz", V.Double, float(lid["scan_rate_hz"]))
    attr("rotation", V.Token, str(lid["rotation"]))
    attr("startAzimuthDeg", V.Double, float(lid["start_azimuth_deg"]))
    attr("minRange", V.Double, float(lid["min_range_m"]))
    attr("maxRange", V.Double, float(lid["max_range_m"]))
    attr("returns", V.Int, int(lid.get("returns", 1)))
    attr("intensityScale", V.Double, float(intensity_scale))
    attr("sweepTimestampsUs", V.Int64Array, Vt.Int64Array([int(t) for t in lid.get("timestamps_us", [])]))


def _write_rig(scene, path: Path, timing: Timing) -> None:
    """rig.usdc: /World/Rig with the time-sampled rig pose, cameras and lidars."""
    from pxr import Tf, UsdGeom

    stage = _new_layer_stage(path, timing, "World")
    UsdGeom.Xform.Define(stage, "/World")
    rig_xf = UsdGeom.Xform.Define(stage, "/World/Rig")
    rig = scene.metadata.get("rig") or {}
    traj = rig.get("trajectory") or {}
    if len(traj.get("timestamps_us", [])):
        p, q = _rigid_parts(np.asarray(traj["T_world_rig"], dtype=np.float64))
        _set_pose_ops(rig_xf, p, q, timing.code_us(traj["timestamps_us"]))
    used: set[str] = set()

    def child(sensor_id: str) -> str:
        base = Tf.MakeValidIdentifier(str(sensor_id)) or "sensor"
        name, i = base, 1
        while name in used:
            i += 1
            name = f"{base}_{i}"
        used.add(name)
        return f"/World/Rig/{name}"

    exposure = {cam_id: row for cam_id, row in zip(scene.camera_ids, _np(scene.exposure).tolist())}
    vignetting = {cam_id: row for cam_id, row in zip(scene.camera_ids, _np(scene.vignetting).tolist())}
    cameras = []
    for cam in rig.get("cameras", []):
        cameras.append((cam, child(cam["id"])))
        _write_camera(stage, cameras[-1][1], cam, exposure.get(cam["id"]), vignetting.get(cam["id"]))
    scale = float(scene.metadata.get("intensity_scale", 1.0))
    for lid in rig.get("lidars", []):
        path = child(lid["id"])
        _write_lidar(stage, path, lid, scale)
        _write_rtx_lidar(stage, f"{path}/{RTX_LIDAR_PRIM}", lid)
    if cameras:
        _write_render_products(stage, cameras)
    stage.GetRootLayer().Save()


def rtx_lidar_values(lid: dict) -> dict[str, tuple[str, Any]]:
    """The ``omni:sensor:Core:*`` attributes (name without the prefix -> (Sdf type name, value)) of
    Isaac Sim's RTX lidar for one of our spinning lidars (``describe_rig``'s entry), from its
    channel table alone: one emitter per channel, all firing at once per column (emitter state
    s001: each channel's azimuth offset and elevation), ``columns * scanRateHz`` firings per
    second, the whole turn from column 0's azimuth (in [-180, 180) degrees, from +x toward +y),
    the range limits and returns. The spin direction has no attribute here: it stays
    in our ``nurec:lidar:rotation``."""
    elevations = [float(v) for v in lid["elevation_deg"]]
    offsets = [float(v) for v in lid["azimuth_offset_deg"]]
    channels, columns, rate = len(elevations), int(lid["columns"]), float(lid["scan_rate_hz"])
    # the scanned field is the whole turn, from column 0's azimuth, put in [-180, 180)
    start = (float(lid["start_azimuth_deg"]) + 180.0) % 360.0 - 180.0
    return {
        "scanType": ("token", "ROTARY"),
        "scanRateBaseHz": ("float", rate),
        "reportRateBaseHz": ("float", columns * rate),
        "numberOfEmitters": ("int", channels),
        "numberOfChannels": ("int", channels),
        "maxReturns": ("int", int(lid.get("returns", 1))),
        "nearRangeM": ("float", float(lid["min_range_m"])),
        "farRangeM": ("float", float(lid["max_range_m"])),
        "startAzimuthDeg": ("float", start),
        "endAzimuthDeg": ("float", start + 360.0),
        "upElevationDeg": ("float", max(elevations, default=0.0)),
        "downElevationDeg": ("float", min(elevations, default=0.0)),
        "emitterStateCount": ("int", 1),
        "emitterState:s001:azimuthDeg": ("float[]", offsets),
        "emitterState:s001:elevationDeg": ("float[]", elevations),
        "emitterState:s001:fireTimeNs": ("int[]", [0] * channels),
    }


def _write_rtx_lidar(stage, path: str, lid: dict) -> None:
    """An ``OmniLidar`` prim at ``path`` (under the lidar Xform, at identity: it has no transform
    of its own) with :func:`rtx_lidar_values`. usd-core has no schema for the type or the API:
    the prim is typed and the API applied by name, the attributes authored with the types of
    Isaac Sim's schema."""
    from pxr import Sdf

    prim = stage.DefinePrim(path, RTX_LIDAR_PRIM)
    prim.AddAppliedSchema(RTX_LIDAR_API)
    prim.SetCustomDataByKey("nurec:sensorId", str(lid["id"]))
    for name, (type_name, value) in rtx_lidar_values(lid).items():
        prim.CreateAttribute(RTX_PREFIX + name, Sdf.ValueTypeNames.Find(type_name), False,
                             Sdf.VariabilityUniform).Set(value)


def _write_render_products(stage, cameras: list[tuple[dict, str]]) -> None:
    """:data:`RENDER_SCOPE`: a ``UsdRender.Product`` per camera (its resolution, pixel aspect ratio and
    camera), one ``LdrColor`` render var, and the ``UsdRender.Settings`` listing the products
    (the first camera by default; the splats and meshes, not their proxies or the colliders)."""
    from pxr import Gf, Sdf, UsdGeom, UsdRender

    UsdGeom.Scope.Define(stage, RENDER_SCOPE)
    UsdGeom.Scope.Define(stage, f"{RENDER_SCOPE}/Products")
    UsdGeom.Scope.Define(stage, str(Sdf.Path(RENDER_VAR).GetParentPath()))
    var = UsdRender.Var.Define(stage, RENDER_VAR)
    var.CreateSourceNameAttr("LdrColor")
    var.CreateSourceTypeAttr(UsdRender.Tokens.raw)
    var.CreateDataTypeAttr(UsdRender.Tokens.color3f)
    products = []
    for cam, cam_path in cameras:
        W, H = int(cam["width"]), int(cam["height"])
        product = UsdRender.Product.Define(stage, f"{RENDER_SCOPE}/Products/{Sdf.Path(cam_path).name}")
        product.CreateProductTypeAttr(UsdRender.Tokens.raster)
        product.CreateProductNameAttr(str(cam["id"]))
        product.CreateResolutionAttr(Gf.Vec2i(W, H))
        product.CreatePixelAspectRatioAttr(float(pixel_aspect_ratio(cam)))
        product.CreateCameraRel().SetTargets([Sdf.Path(cam_path)])
        product.CreateOrderedVarsRel().SetTargets([Sdf.Path(RENDER_VAR)])
        products.append(product)
    settings = UsdRender.Settings.Define(stage, RENDER_SETTINGS)
    settings.CreateProductsRel().SetTargets([p.GetPath() for p in products])
    first, first_path = cameras[0]
    settings.CreateCameraRel().SetTargets([Sdf.Path(first_path)])
    settings.CreateResolutionAttr(Gf.Vec2i(int(first["width"]), int(first["height"])))
    settings.CreatePixelAspectRatioAttr(float(pixel_aspect_ratio(first)))
    settings.CreateIncludedPurposesAttr([UsdGeom.Tokens.default_, UsdGeom.Tokens.render])


def pixel_aspect_ratio(cam: dict) -> float:
    """A pixel's width over its height, fy / fx (1 for f-theta): what makes the camera's aperture
    aspect (see ``_write_camera``) and the product's resolution agree."""
    if cam["model"] == "ftheta":
        return 1.0
    return float(cam["intrinsics"]["fy"]) / float(cam["intrinsics"]["fx"])


def _write_collision(scene, path: Path, timing: Timing, device: Any, progress) -> None:
    """collision.usdc: /Collision, a triangle mesh of the static scene for physics."""
    from nurec_usd.export.collision import collision_mesh, write_collision

    vertices, faces = collision_mesh(scene, device=device, progress=progress)
    stage = _new_layer_stage(path, timing, "Collision")
    write_collision(stage, "/Collision", vertices, faces)
    stage.GetRootLayer().Save()


def _write_root(path: Path, timing: Timing, capture_name: str | None, collision: bool,
                render_settings: bool = False) -> None:
    """root.usda: metadata (with the render settings' path when the rig has cameras), the rig and
    actors sublayers, the background payload (and a reference to the collision mesh)."""
    from pxr import Sdf, UsdGeom

    stage = _new_layer_stage(path, timing, "World")
    layer = stage.GetRootLayer()
    # Prims first, sublayers after: so that this layer itself says `def Xform "World"`.
    world = UsdGeom.Xform.Define(stage, "/World")
    if capture_name:
        world.GetPrim().SetCustomDataByKey("nurec:captureName", str(capture_name))
    bg = UsdGeom.Xform.Define(stage, "/World/Background")
    bg.GetPrim().GetPayloads().AddPayload(Sdf.Payload("./background.usdc", Sdf.Path("/World/Background")))
    label_prim(bg.GetPrim(), BACKGROUND_LABEL)  # here, not in the payload: readable without loading it
    if render_settings:
        stage.SetMetadata("renderSettingsPrimPath", RENDER_SETTINGS)
    if collision:  # a reference, not a payload: physics needs the colliders even when splats are not loaded
        col = UsdGeom.Xform.Define(stage, "/World/Collision")
        col.GetPrim().GetReferences().AddReference(Sdf.Reference(f"./{COLLISION_LAYER}", Sdf.Path("/Collision")))
    layer.subLayerPaths.append("./rig.usdc")
    layer.subLayerPaths.append("./actors.usdc")
    layer.Save()


def _on_host(scene):
    """The scene with its tensors on the host (itself when they are there already): one copy up
    front, where the layers' many reads of a scene on a GPU were copies each of their own, each
    waiting for the GPU work queued before it (the evaluation, beside a build's export)."""
    import torch

    with torch.no_grad():
        return scene.to("cpu")


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A failed write of ``path`` as an ``OSError`` naming it (USD reports a full disk as a
    ``Tf.ErrorException``; a file object's write error carries no file name)."""
    from pxr import Tf

    try:
        with naming(path):
            yield
    except Tf.ErrorException as err:
        converted = usd_write_error(err, path)
        if converted is None:
            raise
        raise converted from err


def export_usd(scene, out_dir: str | Path, overwrite: bool = False, *, ply: bool = False, usdz: bool = False,
               collision: bool = False, device: Any = "cpu", progress=None, ply_actors: bool = False,
               ply_pad_sh: bool = False) -> Path:
    """Write ``scene`` as the USD layers of USD.md into ``out_dir`` (all or nothing).

    Args:
        scene: the scene (its ``metadata["rig"]`` gives the rig, cameras, lidars and time base).
        out_dir: the folder to create (``root.usda`` and its layers).
        overwrite: replace an existing ``out_dir`` (only once the new one is complete).
        ply: also write ``scene.ply``, the static Gaussians in the common 3DGS layout.
        ply_actors: also write ``actors/<track>.ply`` (each actor's Gaussians in its box frame) and
            ``actors/<track>.track.json`` (its timed poses), see :mod:`nurec_usd.export.actor_ply`.
        ply_pad_sh: write the PLYs with SH degree 3 (45 ``f_rest``), zero past the scene's degree.
        usdz: also package the stage as ``scene.usdz`` (refused past the zip limit, see
            :mod:`nurec_usd.export.usdz`).
        collision: also write ``collision.usdc``, a mesh of the static scene fused from rendered
            depth (:mod:`nurec_usd.export.collision`), rendered on ``device``.
        progress: called with (done, total) while the collision mesh's views render.

    Returns:
        ``out_dir``; open ``out_dir / "root.usda"``.
    """
    register_schema()
    given, scene = scene, _on_host(scene)  # the collision mesh renders on ``device`` from the scene as given
    timing = Timing.of_scene(scene)
    staged = StagedDirectory(out_dir, overwrite=overwrite)
    try:
        root = staged.path
        (root / "actors").mkdir()
        names = _track_prim_names(scene)
        with _writing(root / "background.usdc"):
            _write_background(scene, root / "background.usdc", timing)
        for i, name in enumerate(names):
            with _writing(root / "actors" / f"{name}.usdc"):
                _write_actor_layer(scene, i, root / "actors" / f"{name}.usdc", timing)
        with _writing(root / "actors.usdc"):
            _write_actors(scene, root / "actors.usdc", timing, names)
        with _writing(root / "rig.usdc"):
            _write_rig(scene, root / "rig.usdc", timing)
        if collision:
            with _writing(root / COLLISION_LAYER):
                _write_collision(given, root / COLLISION_LAYER, timing, device, progress)
        rig = scene.metadata.get("rig") or {}
        with _writing(root / "root.usda"):
            _write_root(root / "root.usda", timing, rig.get("capture_name"), collision,
                        render_settings=bool(rig.get("cameras")))
        pad = 3 if ply_pad_sh else None
        if ply:
            from nurec_usd.export.ply import write_gaussian_ply

            with _writing(root / "scene.ply"):
                write_gaussian_ply(scene.static, scene.sh_degree, root / "scene.ply", pad_to_degree=pad)
        if ply_actors:
            from nurec_usd.export.actor_ply import write_actor_plys

            with _writing(root / "actors"):
                write_actor_plys(scene, root / "actors", names, pad_to_degree=pad)
        if usdz:
            with _writing(root / "scene.usdz"):
                package_usdz(root / "root.usda", root / "scene.usdz")
    except BaseException:
        staged.abort()
        raise
    return staged.commit()
