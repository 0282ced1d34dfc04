"""Replay: render a scene's cameras and lidars from its USD export alone.

This is what a simulator does with our output, and our proof that it can: :class:`Replay`
opens ``root.usda`` (or a ``.usdz``) and reads nothing else. USD itself evaluates the rig and
the actors at the requested time (``ComputeLocalToWorldTransform``, ``ComputeVisibility``); the
Gaussians, the sky, the cameras' models and exposure and the lidars' spinning models come from
the stage's attributes; the project's Warp renderers then draw them.

Times are seconds since the capture start (the stage's time code divided by
``timeCodesPerSecond``). A camera frame at time t starts its readout at t (rolling shutter:
each line at its own pose); a lidar sweep at t fires column 0 at t and turns once. Actors are
placed at the middle of the readout; a sweep sees them where they are when each column fires
(their motion over the sweep from USD's poses at its start and end), as in training.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nurec_usd.export.usd_check import StageOpenError, open_stage, stage_file
from nurec_usd.export.usd_schema import CV_TO_USD, INTENSITY_PRIMVAR, intrinsics_from_items, register_schema
from nurec_usd.ops.lidar import LidarBatch, LidarRender
from nurec_usd.render.scene_renderer import CameraView, PlacedGaussians, SceneRenderer
from nurec_usd.render.views import CameraGeometry, camera_geometry, sensor_poses
from nurec_usd.scene.gaussians import SH_COEFFS, GaussianParams, Scene
from nurec_usd.sensors.lidar import SpinningLidarModel
from nurec_usd.sensors.se3 import matrix_to_quat, quat_multiply

__all__ = ["Replay", "ReplayError", "StageCamera", "StageLidar", "check_layers"]

# USD cameras look down -Z with +Y up; ours (OpenCV) down +Z with +Y down (the flip is its own inverse).
_USD_TO_CV = torch.from_numpy(CV_TO_USD)


class ReplayError(ValueError):
    """A stage that replay cannot use, or a request it cannot serve; names the file and the field."""


def check_layers(root_layer) -> None:
    """Open every layer ``root_layer`` depends on (sublayers, references, payloads, recursively);
    ReplayError naming the first that does not open (missing, truncated, not a layer)."""
    from pxr import Sdf, Tf

    seen = {root_layer.identifier}
    pending = [root_layer]
    while pending:
        layer = pending.pop()
        for asset in layer.GetCompositionAssetDependencies():
            path = layer.ComputeAbsolutePath(asset)
            if path in seen:
                continue
            seen.add(path)
            try:
                child = Sdf.Layer.FindOrOpen(path)
            except Tf.ErrorException as err:
                reason = str(err).strip().splitlines()[-1].split(" : ", 1)[-1].strip(" '")
                raise ReplayError(f"{path}: this layer (used by {layer.identifier}) cannot be opened: {reason}; "
                                  "export the scene again") from None
            if child is None:
                raise ReplayError(f"{path}: this layer (used by {layer.identifier}) is missing or cannot be opened; "
                                  "export the scene again")
            pending.append(child)


@dataclass
class StageCamera:
    """A camera of the stage's rig, as replay reads it."""

    id: str  # the capture's camera id
    path: str  # prim path
    model: str
    width: int
    height: int
    intrinsics: dict
    shutter: str
    readout_s: float  # 0 for global shutters
    exposure: list[float]  # log gain (3), bias (3)
    frame_times_s: np.ndarray  # [F] the recorded frames' start times, seconds
    vignetting: list[float] = dataclasses.field(default_factory=lambda: [0.0, 0.0])  # (k1, k2): Scene.vignetting


@dataclass
class StageLidar:
    """A lidar of the stage's rig, as replay reads it."""

    id: str
    path: str
    model: SpinningLidarModel
    intensity_scale: float  # capture units per modelled intensity unit
    sweep_times_s: np.ndarray  # [S] the recorded sweeps' start times, seconds

    @property
    def period_s(self) -> float:
        return 1.0 / self.model.scan_rate_hz


@dataclass
class _Splats:
    """One splat prim's Gaussians in its own frame, on the device."""

    path: str
    means: torch.Tensor  # [N, 3]
    quats: torch.Tensor  # [N, 4] (w, x, y, z)
    scales: torch.Tensor  # [N, 3]
    opacities: torch.Tensor  # [N]
    sh: torch.Tensor  # [N, 16, 3] (zero past the prim's degree)
    intensities: torch.Tensor  # [N]
    degree: int


def _cat_splats(parts: list[_Splats]) -> _Splats | None:
    """One set from several (fields concatenated; the path and degree of the first), or None."""
    if not parts:
        return None
    fields = [f.name for f in dataclasses.fields(_Splats) if f.name not in ("path", "degree")]
    return _Splats(parts[0].path, *(torch.cat([getattr(p, f) for p in parts]) for f in fields),
                   max(p.degree for p in parts))


class Replay:
    """A USD export opened for rendering at any time.

    Args:
        root: ``root.usda`` / ``.usdz``, an export folder (its ``root.usda``) or a run folder
            (its ``usd/root.usda``); see :func:`nurec_usd.export.usd_check.stage_file`.
        device: where the Gaussians live and the renderers run.
    """

    def __init__(self, root: str | Path, device: torch.device | str = "cpu"):
        register_schema()
        from pxr import UsdGeom

        if not Path(root).exists():  # (a folder is meant as often as a file)
            raise ReplayError(f"{root}: no such file or folder")
        self.device = torch.device(device)
        try:
            self.root = stage_file(root)
            stage = open_stage(self.root, load_payloads=False)
        except StageOpenError as err:  # one line naming the file, not USD's exception
            raise ReplayError(str(err)) from None
        # USD composes a stage without a layer it cannot open (a warning, and no Gaussians):
        # every layer must open, before the payloads load
        check_layers(stage.GetRootLayer())
        stage.Load()
        self.stage = stage
        self.time_codes_per_second = float(stage.GetTimeCodesPerSecond())
        self.start_s = float(stage.GetStartTimeCode()) / self.time_codes_per_second
        self.end_s = float(stage.GetEndTimeCode()) / self.time_codes_per_second
        offset = stage.GetRootLayer().customLayerData.get("absoluteTimeOffsetMicroSec")
        if offset is None:
            raise ReplayError(f"{self.root}: customLayerData.absoluteTimeOffsetMicroSec is missing "
                              "(not a nurec_usd export?)")
        self.start_us = int(offset)
        rig = stage.GetPrimAtPath("/World/Rig")
        if not rig:
            raise ReplayError(f"{self.root}: /World/Rig is missing (not a nurec_usd export?)")
        self.cameras: dict[str, StageCamera] = {}
        self.lidars: dict[str, StageLidar] = {}
        for prim in rig.GetChildren():
            if prim.IsA(UsdGeom.Camera):
                cam = self._read_camera(prim)
                self.cameras[cam.id] = cam
            elif prim.GetAttribute("nurec:lidar:columns").IsValid():
                lid = self._read_lidar(prim)
                self.lidars[lid.id] = lid
        self._names = {Path(s.path).name: key for key, s in [*self.cameras.items(), *self.lidars.items()]}
        self.background = self._read_splats("/World/Background/Gaussians")
        actors = [s for s in (self._read_splats(f"{p.GetPath()}/Gaussians")
                              for p in self._children("/World/Actors")) if s is not None]
        self.actor_paths = [s.path for s in actors]  # the splat prims USD moves, one per actor
        # All actors' Gaussians in one set (their own frames), and the actor of each row: a
        # placement is then a few batched ops, however many actors there are.
        self._actor_splats = _cat_splats(actors)
        self._actor_of = torch.cat([torch.full((len(s.means),), i, dtype=torch.long) for i, s in enumerate(actors)]
                                   ).to(self.device) if actors else None
        self.sh_degree = max([s.degree for s in [self.background, *actors] if s is not None], default=0)
        sky = self._read_sky()
        ids = list(self.cameras)
        exposure = torch.tensor([self.cameras[i].exposure for i in ids], dtype=torch.float32).reshape(-1, 6)
        vignetting = torch.tensor([self.cameras[i].vignetting for i in ids], dtype=torch.float32).reshape(-1, 2)
        empty = GaussianParams.empty(self.device)
        # A scene without Gaussians: the renderer takes the placed Gaussians per call, and the
        # scene only brings the sky, the exposures and falloffs, and the SH degree.
        self._scene = Scene(empty, empty, torch.zeros(0, dtype=torch.int32, device=self.device), [], sky.to(self.device),
                            ids, exposure.to(self.device), self.sh_degree,
                            vignetting=vignetting.to(self.device))
        self._renderer = SceneRenderer(self._scene)
        self._geometry: dict[tuple[str, int], CameraGeometry] = {}
        self._lidar_templates: dict[str, LidarBatch] = {}

    @property
    def renderer(self) -> SceneRenderer:
        """The renderer replay draws with: the stage's sky, the cameras' exposures and falloffs, and the SH degree.
        Its scene holds no Gaussians: pass placed ones (``placed=``)."""
        return self._renderer

    @property
    def actor_splats(self) -> _Splats | None:
        """Every actor's Gaussians in its own prim's frame, concatenated in ``actor_paths`` order
        (``actor_of`` gives each row's actor); None without actors."""
        return self._actor_splats

    @property
    def actor_of(self) -> torch.Tensor | None:  # [Na] long
        """The index into ``actor_paths`` of each row of ``actor_splats``; None without actors."""
        return self._actor_of

    # -- reading ----------------------------------------------------------------------------

    def _children(self, path: str) -> list:
        prim = self.stage.GetPrimAtPath(path)
        return list(prim.GetChildren()) if prim else []

    def _attr(self, prim, name: str, default=None):
        attr = prim.GetAttribute(name)
        value = attr.Get() if attr.IsValid() else None
        if value is None:
            if default is not None:
                return default
            raise ReplayError(f"{self.root}: {prim.GetPath()}: attribute {name} is missing")
        return value

    def _read_camera(self, prim) -> StageCamera:
        a = lambda name, default=None: self._attr(prim, name, default)  # noqa: E731
        width, height = (int(v) for v in a("nurec:camera:imageSize"))
        shutter = str(a("nurec:rollingShutter:direction", "global"))
        readout_s = 0.0 if shutter == "global" else int(a("nurec:rollingShutter:readoutTimeUs", 0)) * 1e-6
        exposure = [float(v) for v in a("nurec:camera:exposure", [0.0] * 6)]
        if len(exposure) != 6:
            raise ReplayError(f"{self.root}: {prim.GetPath()}: nurec:camera:exposure must hold 6 values, "
                              f"got {len(exposure)}")
        # none authored (stages written before the falloff was learned) or empty: no falloff
        vignetting = [float(v) for v in a("nurec:camera:vignetting", [0.0] * 2)] or [0.0] * 2
        if len(vignetting) != 2 or not all(math.isfinite(v) for v in vignetting):
            raise ReplayError(f"{self.root}: {prim.GetPath()}: nurec:camera:vignetting must hold 2 finite values, "
                              f"got {vignetting}")
        return StageCamera(
            id=str(prim.GetCustomDataByKey("nurec:sensorId") or prim.GetName()), path=str(prim.GetPath()),
            model=str(a("nurec:camera:model")), width=width, height=height,
            intrinsics=intrinsics_from_items(list(a("nurec:camera:intrinsicNames")),
                                             list(a("nurec:camera:intrinsicValues"))),
            shutter=shutter, readout_s=readout_s, exposure=exposure, vignetting=vignetting,
            frame_times_s=self._seconds(a("nurec:camera:frameTimestampsUs", [])))

    def _read_lidar(self, prim) -> StageLidar:
        a = lambda name, default=None: self._attr(prim, f"nurec:lidar:{name}", default)  # noqa: E731
        try:
            model = SpinningLidarModel(
                [float(v) for v in a("elevationDeg")], columns=int(a("columns")), rotation=str(a("rotation")),
                scan_rate_hz=float(a("scanRateHz")), min_range_m=float(a("minRange")),
                max_range_m=float(a("maxRange")), azimuth_offset_deg=[float(v) for v in a("azimuthOffsetDeg")],
                start_azimuth_deg=float(a("startAzimuthDeg")), dtype=torch.float64, device=self.device)
        except ValueError as err:
            raise ReplayError(f"{self.root}: {prim.GetPath()}: nurec:lidar:*: {err}") from err
        return StageLidar(id=str(prim.GetCustomDataByKey("nurec:sensorId") or prim.GetName()),
                          path=str(prim.GetPath()), model=model,
                          intensity_scale=float(a("intensityScale", 1.0)),
                          sweep_times_s=self._seconds(a("sweepTimestampsUs", [])))

    def _seconds(self, timestamps_us) -> np.ndarray:
        return (np.asarray(list(timestamps_us), dtype=np.int64) - self.start_us) * 1e-6

    def _read_splats(self, path: str) -> _Splats | None:
        from pxr import UsdGeom, UsdVol

        prim = self.stage.GetPrimAtPath(path)
        if not prim:
            return None
        gs = UsdVol.ParticleField3DGaussianSplat(prim)
        where = f"{self.root}: {path}"

        def get(attr, width: int) -> np.ndarray:  # [M, width] float32
            if not attr.HasValue():
                raise ReplayError(f"{where}: attribute {attr.GetName()} has no value")
            return np.asarray(attr.Get(), dtype=np.float32).reshape(-1, width)

        pos = get(gs.GetPositionsAttr(), 3)
        n = pos.shape[0]
        xyzw = get(gs.GetOrientationsAttr(), 4)
        scales = get(gs.GetScalesAttr(), 3)
        opac = get(gs.GetOpacitiesAttr(), 1)[:, 0]
        degree = int(gs.GetRadianceSphericalHarmonicsDegreeAttr().Get() or 0)
        k = (degree + 1) ** 2
        sh = get(gs.GetRadianceSphericalHarmonicsCoefficientsAttr(), 3)
        inten_var = UsdGeom.PrimvarsAPI(prim).GetPrimvar(INTENSITY_PRIMVAR)
        inten = np.asarray(inten_var.ComputeFlattened(), dtype=np.float32) if inten_var and inten_var.HasValue() \
            else np.zeros(n, np.float32)  # a stage from elsewhere: no lidar returns modelled
        for name, arr, want in (("orientations", xyzw, n), ("scales", scales, n), ("opacities", opac, n),
                                ("radiance:sphericalHarmonicsCoefficients", sh, n * k),
                                (f"primvars:{INTENSITY_PRIMVAR}", inten, n)):
            if arr.shape[0] != want:
                raise ReplayError(f"{where}: {name} has {arr.shape[0]} entries, expected {want} "
                                  f"({n} positions, SH degree {degree})")
        sh_full = np.zeros((n, SH_COEFFS, 3), np.float32)
        sh_full[:, :k] = sh.reshape(n, k, 3)
        t = lambda x: torch.from_numpy(np.array(x, copy=True)).to(self.device)  # noqa: E731 (USD's buffers are read-only)
        return _Splats(path, t(pos), t(xyzw[:, [3, 0, 1, 2]]), t(scales), t(opac), t(sh_full), t(inten), degree)

    def _read_sky(self) -> torch.Tensor:  # [3, H, W] pre-sigmoid
        prim = self.stage.GetPrimAtPath("/World/Background/Sky")
        if not prim:  # no sky recorded: black (a logit of -30 is 1e-13)
            return torch.full((3, 1, 2), -30.0)
        w, h = (int(v) for v in self._attr(prim, "nurec:sky:size"))
        logits = np.asarray(self._attr(prim, "nurec:sky:logits"), dtype=np.float32)
        if logits.size != 3 * h * w:
            raise ReplayError(f"{self.root}: {prim.GetPath()}: nurec:sky:logits has {logits.size} values, "
                              f"expected 3 x {h} x {w}")
        return torch.from_numpy(logits.reshape(3, h, w).copy())

    # -- evaluating -------------------------------------------------------------------------

    def sensor(self, name: str) -> StageCamera | StageLidar:
        """A camera or lidar by its capture id or its prim name."""
        key = name if name in self.cameras or name in self.lidars else self._names.get(name)
        if key in self.cameras:
            return self.cameras[key]
        if key in self.lidars:
            return self.lidars[key]
        known = sorted([*self.cameras, *self.lidars])
        raise ReplayError(f"{self.root}: no sensor {name!r}; the rig has {', '.join(known) or 'none'}")

    def _code(self, t_s: float):
        from pxr import Usd

        return Usd.TimeCode(float(t_s) * self.time_codes_per_second)

    def check_time(self, t_s: float) -> None:
        """ReplayError unless ``t_s`` lies within the stage's time span."""
        eps = 1e-6
        if not self.start_s - eps <= t_s <= self.end_s + eps:
            raise ReplayError(f"{self.root}: time {t_s:.6f} s is outside the scene's span "
                              f"[{self.start_s:.6f}, {self.end_s:.6f}] s")

    def world_pose(self, path: str, t_s: float) -> torch.Tensor:  # [4, 4] float64
        """A prim's local-to-world transform at ``t_s``, evaluated by USD (column-vector convention)."""
        from pxr import UsdGeom

        m = UsdGeom.Xformable(self.stage.GetPrimAtPath(path)).ComputeLocalToWorldTransform(self._code(t_s))
        return torch.tensor(np.array(m), dtype=torch.float64).T

    def place(self, t_s: float) -> PlacedGaussians:
        """Every Gaussian in the world at ``t_s``: the background as stored, each actor moved by its
        prim's transform at ``t_s`` and hidden where USD says it is invisible. (The tensors may be
        the replay's own: do not modify them in place.)"""
        parts = []
        if self.background is not None:
            T = self.world_pose(self.background.path, t_s)
            if torch.equal(T, torch.eye(4, dtype=T.dtype)):
                parts.append(PlacedGaussians(*(getattr(self.background, f.name)
                                               for f in dataclasses.fields(PlacedGaussians))))
            else:
                parts.append(self._moved(self.background, T[None], torch.ones(1, dtype=torch.float64), None))
        if self._actor_splats is not None:
            parts.append(self._moved(self._actor_splats, *self._actor_transforms(t_s), self._actor_of))
        if not parts:
            z = lambda *shape: torch.zeros(*shape, device=self.device)  # noqa: E731
            return PlacedGaussians(z(0, 3), z(0, 4), z(0, 3), z(0), z(0, SH_COEFFS, 3), z(0))
        if len(parts) == 1:
            return parts[0]
        cat = lambda field: torch.cat([getattr(p, field) for p in parts])  # noqa: E731
        return PlacedGaussians(*(cat(f.name) for f in dataclasses.fields(PlacedGaussians)))

    def _actor_transforms(self, t_s: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Each actor prim's world transform ``[A, 4, 4]`` and visibility ``[A]`` (0 or 1) at ``t_s``,
        float64 on the host."""
        from pxr import UsdGeom

        code = self._code(t_s)
        T = torch.stack([self.world_pose(path, t_s) for path in self.actor_paths])
        visible = torch.tensor([float(UsdGeom.Imageable(self.stage.GetPrimAtPath(path)).ComputeVisibility(code)
                                      != UsdGeom.Tokens.invisible) for path in self.actor_paths], dtype=torch.float64)
        return T, visible

    def sweep_motion(self, t0_s: float, t1_s: float) -> torch.Tensor | None:
        """Each Gaussian's position at ``t1_s`` minus at ``t0_s``, in ``place``'s order (``[N, 3]``;
        the actors' from their prims' transforms, the background's zero unless its prim moves);
        None when nothing moves. Only the positions are computed, not whole placements."""
        parts, moves = [], False
        if self.background is not None:
            T0, T1 = self.world_pose(self.background.path, t0_s), self.world_pose(self.background.path, t1_s)
            if torch.equal(T0, T1):
                parts.append(torch.zeros_like(self.background.means))
            else:
                one = torch.ones(1, dtype=torch.float64)
                parts.append(self._moved(self.background, T1[None], one, None).means
                             - self._moved(self.background, T0[None], one, None).means)
                moves = True
        if self._actor_splats is not None:
            ends = [self._moved(self._actor_splats, *self._actor_transforms(t), self._actor_of).means
                    for t in (t0_s, t1_s)]
            parts.append(ends[1] - ends[0])
            moves = True
        return torch.cat(parts) if moves else None

    def _moved(self, s: _Splats, T: torch.Tensor,  # [A, 4, 4] float64, on the host
               visible: torch.Tensor,  # [A] 0 or 1, on the host
               owner: torch.Tensor | None,  # [N] the row of T of each Gaussian; None: row 0
               ) -> PlacedGaussians:
        """Gaussians ``s`` moved by per-owner rigid transforms, hidden where their owner is not visible.
        The transforms go to the device in one copy; the rest is a few batched ops."""
        q = matrix_to_quat(T[:, :3, :3])  # [A, 4]
        packed = torch.cat((T[:, :3, :3].reshape(-1, 9), T[:, :3, 3], q, visible[:, None]), dim=1)  # [A, 17]
        packed = packed.to(device=self.device, dtype=torch.float32)
        R, p, q, vis = packed[:, :9].reshape(-1, 3, 3), packed[:, 9:12], packed[:, 12:16], packed[:, 16]
        if owner is not None:
            R, p, q, vis = R[owner], p[owner], q[owner], vis[owner]
        means = torch.einsum("nij,nj->ni", R, s.means) + p
        quats = quat_multiply(q.expand_as(s.quats), s.quats)
        return PlacedGaussians(means, quats, s.scales, s.opacities * vis, s.sh, s.intensities)

    # -- rendering --------------------------------------------------------------------------

    def camera_view(self, cam: StageCamera, t_s: float, downscale: int = 1) -> CameraView:
        """The view of camera ``cam`` whose readout starts at ``t_s``."""
        key = (cam.id, int(downscale))
        if key not in self._geometry:
            self._geometry[key] = camera_geometry(cam.model, cam.width, cam.height, cam.intrinsics, cam.shutter,
                                                  self.device, downscale)
        g = self._geometry[key]
        T0 = self.world_pose(cam.path, t_s) @ _USD_TO_CV  # T_world_camera, OpenCV axes
        T1 = self.world_pose(cam.path, t_s + cam.readout_s) @ _USD_TO_CV
        q0, p0, q1, p1 = (x.to(device=self.device, dtype=torch.float32) for x in sensor_poses(T0[None], T1[None]))
        batch = dataclasses.replace(g.template, rot_start=q0, trans_start=p0, rot_end=q1, trans_end=p1)
        t_mid = torch.tensor(t_s + cam.readout_s / 2, dtype=torch.float32, device=self.device)
        return CameraView(batch, list(self.cameras).index(cam.id), t_mid,
                          T0[:3, :3].to(device=self.device, dtype=torch.float32), g.rays, g.lens)

    @torch.no_grad()
    def render_camera(self, name: str, t_s: float, downscale: int = 1) -> torch.Tensor:
        """Camera ``name``'s frame whose readout starts at ``t_s``: ``[H, W, 3]`` in [0, 1] (unclamped)."""
        cam = self.sensor(name)
        if not isinstance(cam, StageCamera):
            raise ReplayError(f"{self.root}: {name!r} is a lidar, not a camera")
        self.check_time(t_s)
        view = self.camera_view(cam, t_s, downscale)
        return self._renderer.camera(view, placed=self.place(t_s + cam.readout_s / 2)).image

    def lidar_batch(self, lid: StageLidar, t_s: float) -> LidarBatch:
        """The sweep of lidar ``lid`` that starts at ``t_s``."""
        T0 = self.world_pose(lid.path, t_s)
        T1 = self.world_pose(lid.path, t_s + lid.period_s)
        template = self._lidar_templates.get(lid.id)
        if template is None:  # built once per lidar: its channel bands take host work
            template = self._lidar_templates[lid.id] = LidarBatch.from_model(
                lid.model, torch.eye(4, dtype=torch.float32, device=self.device))
        q0, p0, q1, p1 = (x.to(device=self.device, dtype=torch.float32) for x in sensor_poses(T0[None], T1[None]))
        return dataclasses.replace(template, rot_start=q0, trans_start=p0, rot_end=q1, trans_end=p1)

    @torch.no_grad()
    def render_lidar(self, name: str, t_s: float) -> LidarRender:
        """Lidar ``name``'s sweep starting at ``t_s`` (ranges, hit probabilities, intensities in
        modelled units: multiply by ``StageLidar.intensity_scale`` for the capture's)."""
        lid = self.sensor(name)
        if not isinstance(lid, StageLidar):
            raise ReplayError(f"{self.root}: {name!r} is a camera, not a lidar")
        self.check_time(t_s)
        t_mid = t_s + lid.period_s / 2
        # actors seen where they are when their column fires (as in training): their motion over the sweep
        return self._renderer.lidar(self.lidar_batch(lid, t_s),
                                    torch.tensor(t_mid, dtype=torch.float32, device=self.device),
                                    placed=self.place(t_mid), motion=self.sweep_motion(t_s, t_s + lid.period_s))
