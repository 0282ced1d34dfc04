"""Rendering-only workflows: a reconstructed scene's cameras and lidars at any rig pose and time.

:class:`Renderer` opens a scene's USD export (``root.usda``, a ``.usdz``, an export folder or a
run folder) with :class:`~nurec_usd.replay.stage.Replay`'s stage reading, once. From then on it renders
without USD: the rig's and the actors' keyed poses are read from the stage into device tensors,
actors are placed by the fused interpolation kernel, and cameras and lidars are drawn by the
Warp renderers. This is the loop of a simulator, of reinforcement learning or of synthetic
data generation: many calls, each for a batch of times, rig poses and sensors.

What one call does (``Renderer.render``):

* Times and rig poses arrive as tensors; given on the device, nothing in the call waits for
  the device (no host synchronisation): intersection buffers have a fixed capacity, sized
  once by the first call of a request and grown, without waiting, from the counts that later
  calls report (``Rendered.overflow`` says on the device when a call ran out of room).
* Cameras of one resolution whose actors are placed at one time are drawn in one
  ``render_cameras`` call. With ``actor_time="readout"`` (the default) each camera sees the
  actors at the middle of its own readout, as replay and a simulator do: cameras group by
  (resolution, readout time). With ``actor_time="batch"`` the cameras of one resolution are
  drawn together with the actors placed once, at the mean of their mid-readout times, as the
  training forward does: fewer, larger renders; an actor is then displaced by its speed times
  at most half the spread of the group's readout times (on drive30: 15 ms, 20 cm at 13 m/s).
  Several times are several placements.
* Results are torch tensors on the renderer's device, written into output buffers that
  belong to the request (its sensors, number of times, downscale, depth flag, actor time):
  **the next call of the same request overwrites them** (clone what must outlive it). After
  the first call of a request, a call makes no new output tensors and, on a GPU, reserves no
  new device memory; the kernels' scratch comes from torch's caching allocator.

Inference is cheaper than the training forward without changing its results: the Gaussians'
activations (scales, opacities, SH, intensities) are computed once at load, not per call;
the depth image is rendered only when asked for; no autograd graph is built, and the
projection's per-camera outputs (2D means, radii) are dropped as soon as the image is done.
Half precision is not offered: the kernels are float32 / float64 only, and no bound on the
image difference of a half-precision path has been measured.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from nurec_usd.ops.camera import CameraBatch, IntersectionCapacity, RenderSettings
from nurec_usd.ops.interpolate import TrackKeys, interpolate_gaussians
from nurec_usd.ops.lidar import LidarBatch, LidarRenderSettings
from nurec_usd.render.scene_renderer import CameraViews, PlacedGaussians
from nurec_usd.render.views import camera_geometry, sensor_poses
from nurec_usd.replay.stage import Replay, ReplayError, StageCamera, StageLidar
from nurec_usd.sensors.se3 import PoseTrajectory, invert_transform, matrix_to_quat, quat_multiply

__all__ = ["Renderer", "Rendered", "CameraFrames", "LidarSweeps", "ACTOR_TIMES", "DEPTH_MIN_ALPHA",
           "rig_offset_transform"]

ACTOR_TIMES = ("readout", "batch")
# Pixels less opaque than this have no depth (0): the expected depth divides by alpha.
DEPTH_MIN_ALPHA = 1e-3
# Intersection buffers get this much room over the largest count seen (novel poses see more than
# the first call's: 1.5 overflowed along the sample's recorded path).
HEADROOM = 2.0
# Renders again after an overflow at most this many times (``render(..., retry_overflow=True)``).
RETRIES = 4
_CV_TO_USD = torch.diag(torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64))  # its own inverse


@dataclass
class CameraFrames:
    """One camera's frames of a call, one per time. Overwritten by the next call of the same request."""

    rgb: torch.Tensor  # [B, H, W, 3] Gaussians over the sky, the camera's exposure applied (not clamped)
    alpha: torch.Tensor  # [B, H, W] opacity of the Gaussians
    depth: torch.Tensor | None  # [B, H, W] expected depth along the camera's z axis, metres; 0 where
    # alpha < DEPTH_MIN_ALPHA; None unless the call asked for depth


@dataclass
class LidarSweeps:
    """One lidar's sweeps of a call, one per time, [B, channels, columns] in the lidar's channel
    order. Overwritten by the next call of the same request."""

    range: torch.Tensor  # expected range of the return, metres (0 where the hit probability is tiny)
    median_range: torch.Tensor  # range where the hit probability reaches 0.5 (a first surface); 0: none
    hit_prob: torch.Tensor  # probability of a return
    intensity: torch.Tensor  # expected intensity of the return, in the capture's units


@dataclass
class Rendered:
    """What ``Renderer.render`` returns: the same object, with the same tensors, for every call of
    one request; its contents belong to the latest call."""

    times: torch.Tensor  # [B] float64, seconds since the capture start
    cameras: dict[str, CameraFrames]
    lidars: dict[str, LidarSweeps]
    overflow: torch.Tensor  # [1] bool on the device: a render of this call ran out of intersection room
    # (it dropped splats; the next calls have more room once the count has reached the host)


def rig_offset_transform(lateral_m: float = 0.0, height_m: float = 0.0, yaw_deg: float = 0.0) -> torch.Tensor:
    """The ``[4, 4]`` rig-frame transform that moves a rig ``lateral_m`` along its own +y axis,
    ``height_m`` along its +z and turns it ``yaw_deg`` about its z axis (counter-clockwise seen from
    above): ``T_world_rig' = T_world_rig @ offset``. For a rig with x forward, y left and z up (every
    driving importer's), that is a lane change to the left, a higher mount and a turn to the left."""
    for name, value in (("lateral_m", lateral_m), ("height_m", height_m), ("yaw_deg", yaw_deg)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
    a = math.radians(yaw_deg)
    T = torch.eye(4, dtype=torch.float64)
    T[0, 0], T[0, 1], T[1, 0], T[1, 1] = math.cos(a), -math.sin(a), math.sin(a), math.cos(a)
    T[1, 3], T[2, 3] = float(lateral_m), float(height_m)
    return T


@dataclass(eq=False)
class _Actor:
    """One actor as the renderer places it: keyed box -> world poses and its Gaussian rows."""

    id: str
    times: torch.Tensor  # [K] float64 seconds, on the host
    translations: torch.Tensor  # [K, 3] float64
    quats: torch.Tensor  # [K, 4] float64 (w, x, y, z), unit
    rows: torch.Tensor  # [M] long: rows of the stage's actor Gaussians (own frame) it draws
    source: str  # the stage actor it came from (itself, or what it duplicates)


@dataclass
class _Placement:
    """Everything a placement needs, built once per set of actor edits (float32 on the device)."""

    static_means: torch.Tensor  # [Ns, 3]
    static_quats: torch.Tensor  # [Ns, 4]
    actor_means: torch.Tensor  # [Na, 3] box frames
    actor_quats: torch.Tensor  # [Na, 4]
    actor_index: torch.Tensor  # [Na] int32 into keys
    keys: TrackKeys | None  # None: nothing moves
    scales: torch.Tensor  # [N, 3] static then actors, activated
    opacities: torch.Tensor  # [N]
    sh: torch.Tensor  # [N, (d+1)^2, 3]
    intensities: torch.Tensor  # [N]


@dataclass
class _CameraGroup:
    """Cameras drawn in one render_cameras call per time."""

    ids: list[str]
    template: CameraBatch  # [C] models, intrinsics, shutters; poses replaced per time
    rays: torch.Tensor  # [C, H, W, 3]
    lens: torch.Tensor | None  # [C, H, W] bool
    camera_indices: torch.Tensor  # [C] long, into the stage's cameras (exposure)
    T_rig_camera: torch.Tensor  # [C, 4, 4] float64, OpenCV axes
    readout_s: torch.Tensor  # [C] float64
    place_offset_s: float  # actors placed at the call's time plus this
    frames: list[CameraFrames]  # per camera, the request's output buffers
    capacity: IntersectionCapacity | None = None


@dataclass
class _LidarPlan:
    id: str
    template: LidarBatch
    T_rig_lidar: torch.Tensor  # [4, 4] float64
    period_s: float
    intensity_scale: float
    sweeps: LidarSweeps
    capacity: IntersectionCapacity | None = None


@dataclass
class _Plan:
    groups: list[_CameraGroup]
    lidars: list[_LidarPlan]
    result: Rendered


def _time_varying(prim) -> bool:
    from pxr import UsdGeom

    xf = UsdGeom.Xformable(prim)
    return bool(xf) and xf.TransformMightBeTimeVarying()


class Renderer:
    """A scene opened for rendering at any rig pose and time, with actors removed, moved or
    duplicated at will.

    Args:
        scene: ``root.usda`` / ``.usdz``, an export folder, or a run folder (its ``usd/``).
        device: where the Gaussians live and the renderers run.

    ``render`` draws cameras and lidars for a batch of times; ``rig_path`` is the recorded rig
    trajectory and ``path`` makes another. Edits (``remove_actor``, ``shift_actor``,
    ``set_actor_track``, ``duplicate_actor``, ``reset_actors``) apply from the next call.
    """

    def __init__(self, scene: str | Path, device: torch.device | str = "cpu"):
        self.replay = Replay(scene, device=device)
        self.device = self.replay.device
        self.root = self.replay.root
        self.cameras: dict[str, StageCamera] = self.replay.cameras
        self.lidars: dict[str, StageLidar] = self.replay.lidars
        self.start_s, self.end_s = self.replay.start_s, self.replay.end_s
        stage = self.replay.stage
        rig = stage.GetPrimAtPath("/World/Rig")
        # The rig's keyed path; sensors ride on it with their fixed mountings.
        self.rig_path = self._keyed_path(rig)
        self._T_rig = {sid: self._mounting(stage.GetPrimAtPath(s.path))
                       for sid, s in [*self.cameras.items(), *self.lidars.items()]}
        self._static = self._read_static()
        self._stage_actors = self._read_actors()
        self._actors = [dataclasses.replace(a) for a in self._stage_actors]
        self._placement: _Placement | None = None
        self._geometry: dict[tuple[str, int], object] = {}
        self._plans: dict[tuple, _Plan] = {}

    # -- reading the stage (once) -------------------------------------------------------------

    def _where(self, prim) -> str:
        return f"{self.root}: {prim.GetPath()}"

    def _check_static_ancestors(self, prim) -> None:
        parent = prim.GetParent()
        while parent and not parent.IsPseudoRoot():
            if _time_varying(parent):
                raise ReplayError(f"{self._where(parent)}: a moving parent of {prim.GetPath()}; the renderer "
                                  "needs sensors' and actors' parents to stay put")
            parent = parent.GetParent()

    def _keyed_path(self, prim) -> PoseTrajectory:
        """A prim's world pose over time as keys (float64 on the device) that interpolate as USD does:
        a translate and an orient op, lerp and slerp between time samples."""
        from pxr import UsdGeom

        xf = UsdGeom.Xformable(prim)
        self._check_static_ancestors(prim)
        codes = sorted(xf.GetTimeSamples())
        if codes:
            kinds = [op.GetOpType() for op in xf.GetOrderedXformOps()]
            allowed = (UsdGeom.XformOp.TypeTranslate, UsdGeom.XformOp.TypeOrient)
            if any(k not in allowed for k in kinds) or len(kinds) > 2:
                raise ReplayError(f"{self._where(prim)}: time-sampled xformOps {[str(k) for k in kinds]}; the "
                                  "renderer interpolates a translate and an orient op (as nurec_usd writes them)")
        times = [c / self.replay.time_codes_per_second for c in codes] or [self.start_s]
        T = torch.stack([self.replay.world_pose(str(prim.GetPath()), t) for t in times])
        return PoseTrajectory(torch.tensor(times, dtype=torch.float64, device=self.device), T.to(self.device))

    def _mounting(self, prim) -> torch.Tensor:  # [4, 4] float64 on the device: sensor -> rig
        if _time_varying(prim):
            raise ReplayError(f"{self._where(prim)}: a sensor that moves on the rig; the renderer needs fixed "
                              "mountings")
        from pxr import UsdGeom

        local = UsdGeom.Xformable(prim).GetLocalTransformation()
        return torch.tensor(np.array(local), dtype=torch.float64).T.contiguous().to(self.device)

    def _read_static(self):
        """The background Gaussians in the world (its prim's fixed transform applied)."""
        bg = self.replay.background
        if bg is None:
            return None
        prim = self.replay.stage.GetPrimAtPath(bg.path)
        if _time_varying(prim):
            raise ReplayError(f"{self._where(prim)}: the background moves; the renderer needs it to stay put")
        self._check_static_ancestors(prim)
        T = self.replay.world_pose(bg.path, self.start_s).to(self.device)
        means, quats = bg.means, bg.quats
        if not torch.equal(T, torch.eye(4, dtype=T.dtype, device=T.device)):
            means = (means.double() @ T[:3, :3].T + T[:3, 3]).float()
            quats = quat_multiply(matrix_to_quat(T[:3, :3]).float().expand_as(quats), quats)
        return dataclasses.replace(bg, means=means.contiguous(), quats=quats.contiguous())

    def _read_actors(self) -> list[_Actor]:
        """Each actor's keyed poses (of its prim under /World/Actors) and its rows of the stage's
        actor Gaussians, moved into that prim's frame when the splat prim sits below it."""
        splats, owner = self.replay.actor_splats, self.replay.actor_of
        self._actor_splats = splats  # replaced by a copy if some rows must move into their actor's frame
        actors, seen = [], {}
        for i, path in enumerate(self.replay.actor_paths):
            splat_prim = self.replay.stage.GetPrimAtPath(path)
            prim = splat_prim.GetParent()  # /World/Actors/<name>: the keyed pose
            if _time_varying(splat_prim):
                raise ReplayError(f"{self._where(splat_prim)}: moves inside its actor; the renderer needs it fixed")
            path_keys = self._keyed_path(prim)
            rows = torch.nonzero(owner == i).flatten()
            T_actor_splat = invert_transform(path_keys.key_T[0]) @ self.replay.world_pose(
                path, float(path_keys.key_times[0])).to(self.device)
            if not torch.allclose(T_actor_splat, torch.eye(4, dtype=torch.float64, device=self.device), atol=1e-12):
                R, p = T_actor_splat[:3, :3], T_actor_splat[:3, 3]
                if splats is self.replay.actor_splats:  # (the replay's own tensors stay as read)
                    splats = self._actor_splats = dataclasses.replace(splats, means=splats.means.clone(),
                                                                      quats=splats.quats.clone())
                splats.means[rows] = (splats.means[rows].double() @ R.T + p).float()
                splats.quats[rows] = quat_multiply(matrix_to_quat(R).float().expand(len(rows), 4), splats.quats[rows])
            T = path_keys.key_T.cpu()
            track_id = str(prim.GetCustomDataByKey("nurec:trackId") or prim.GetName())
            if track_id in seen:  # edits name actors by track id: one each
                raise ReplayError(f"{self._where(prim)}: track id {track_id!r} is also {seen[track_id]}'s")
            seen[track_id] = prim.GetPath()
            actors.append(_Actor(track_id, path_keys.key_times.cpu(), T[:, :3, 3].clone(),
                                 _continuous(matrix_to_quat(T[:, :3, :3])), rows, track_id))
        return actors

    # -- actors ---------------------------------------------------------------------------------

    @property
    def actor_ids(self) -> list[str]:
        """The actors drawn now (the stage's, less removed ones, plus duplicates), by track id."""
        return [a.id for a in self._actors]

    def _actor(self, actor_id: str) -> _Actor:
        """An actor drawn now, by track id or, for a name that is no track's, by its prim's name under
        /World/Actors. A track id always wins: prim names and track ids can cross (the exporter names a
        track "car-1" car_1 and a track "car_1" car_1_2), and a removed track must not be taken for
        another actor's prim name."""
        wanted = actor_id
        if actor_id not in {a.id for a in [*self._stage_actors, *self._actors]}:
            names = {Path(p).parent.name: a.id for p, a in zip(self.replay.actor_paths, self._stage_actors)}
            wanted = names.get(actor_id, actor_id)
        for a in self._actors:
            if a.id == wanted:
                return a
        removed = [a.id for a in self._stage_actors if a.id not in self.actor_ids]
        hint = f" (removed: {', '.join(removed)})" if wanted in removed else ""
        prim = f" (the track of the prim {actor_id})" if wanted != actor_id else ""
        raise ReplayError(f"{self.root}: no actor {actor_id!r}{prim}{hint}; the scene has "
                          f"{', '.join(self.actor_ids) or 'none'}")

    def _edited(self) -> None:
        self._placement = None
        for plan in self._plans.values():  # other Gaussians: size the buffers again
            for g in plan.groups:
                g.capacity = None
            for lid in plan.lidars:
                lid.capacity = None

    def remove_actor(self, actor_id: str) -> None:
        """Stop drawing an actor (its Gaussians leave every camera and lidar)."""
        a = self._actor(actor_id)
        self._actors = [x for x in self._actors if x is not a]
        self._edited()

    def shift_actor(self, actor_id: str, offset_m: Sequence[float]) -> None:
        """Move an actor's whole track by a world-frame offset (x, y, z metres)."""
        offset = _vector(offset_m, "offset_m")
        a = self._actor(actor_id)
        a.translations = a.translations + offset
        self._edited()

    def set_actor_track(self, actor_id: str, times_s: Sequence[float] | torch.Tensor,
                        T_world_box: torch.Tensor | np.ndarray) -> None:
        """Give an actor a new track: box -> world poses ``[K, 4, 4]`` at ``times_s`` (seconds since the
        capture start, strictly increasing). It is drawn over the track's time span only."""
        times = torch.as_tensor(times_s, dtype=torch.float64).reshape(-1).cpu()
        T = torch.as_tensor(T_world_box, dtype=torch.float64).cpu()
        if T.shape != (len(times), 4, 4) or len(times) < 1:
            raise ValueError(f"T_world_box must have shape ({len(times)}, 4, 4) for {len(times)} times, "
                             f"got {tuple(T.shape)}")
        if not (torch.isfinite(times).all() and torch.isfinite(T).all()):
            raise ValueError("times_s and T_world_box must be finite")
        if len(times) > 1 and not bool((times[1:] > times[:-1]).all()):
            raise ValueError("times_s must increase strictly")
        a = self._actor(actor_id)
        a.times, a.translations = times, T[:, :3, 3].clone()
        a.quats = _continuous(matrix_to_quat(T[:, :3, :3]))
        self._edited()

    def duplicate_actor(self, actor_id: str, offset_m: Sequence[float] = (0.0, 0.0, 0.0),
                        time_offset_s: float = 0.0, new_id: str | None = None) -> str:
        """Draw a copy of an actor: its Gaussians on its track moved by a world-frame offset (metres)
        and delayed by ``time_offset_s`` (the copy is where the original was that long before).
        Returns the copy's id (``<id>_copy<n>`` unless ``new_id``)."""
        offset = _vector(offset_m, "offset_m")
        if not math.isfinite(time_offset_s):
            raise ValueError(f"time_offset_s must be finite, got {time_offset_s}")
        a = self._actor(actor_id)
        if new_id is None:
            n = 1
            while f"{a.id}_copy{n}" in self.actor_ids:
                n += 1
            new_id = f"{a.id}_copy{n}"
        elif new_id in self.actor_ids:
            raise ValueError(f"an actor {new_id!r} exists already")
        self._actors.append(_Actor(new_id, a.times + float(time_offset_s), a.translations + offset, a.quats.clone(),
                                   a.rows, a.source))
        self._edited()
        return new_id

    def reset_actors(self) -> None:
        """Undo every edit: the stage's actors on their recorded tracks."""
        self._actors = [dataclasses.replace(a) for a in self._stage_actors]
        self._edited()

    def _place_data(self) -> _Placement:
        """The Gaussians, activated and concatenated for the current actors (once per set of edits)."""
        if self._placement is not None:
            return self._placement
        k = (self.replay.sh_degree + 1) ** 2
        dev = self.device
        s = self._static
        z = lambda *shape: torch.zeros(*shape, device=dev)  # noqa: E731
        parts = {"means": [], "quats": [], "scales": [], "opacities": [], "sh": [], "intensities": []}
        if s is not None:
            for name in parts:
                parts[name].append(getattr(s, name))
        static_means = s.means if s is not None else z(0, 3)
        static_quats = s.quats if s is not None else z(0, 4)
        splats = self._actor_splats
        rows = [a.rows for a in self._actors]
        actor_means, actor_quats, index, keys = z(0, 3), z(0, 4), torch.zeros(0, dtype=torch.int32, device=dev), None
        if self._actors and splats is not None:
            take = torch.cat(rows)
            actor_means, actor_quats = splats.means[take].contiguous(), splats.quats[take].contiguous()
            index = torch.cat([torch.full((len(r),), i, dtype=torch.int32) for i, r in enumerate(rows)]).to(dev)
            keys = TrackKeys.from_tracks([(a.times, a.translations, a.quats) for a in self._actors],
                                         dtype=torch.float32, device=dev)
            for name in ("scales", "opacities", "sh", "intensities"):
                parts[name].append(getattr(splats, name)[take])
        cat = lambda name, *shape: torch.cat(parts[name]).contiguous() if parts[name] else z(*shape)  # noqa: E731
        self._placement = _Placement(static_means.contiguous(), static_quats.contiguous(), actor_means, actor_quats,
                                     index, keys, cat("scales", 0, 3), cat("opacities", 0),
                                     cat("sh", 0, 16, 3)[:, :k].contiguous(), cat("intensities", 0))
        return self._placement

    def place(self, t: torch.Tensor) -> PlacedGaussians:  # t: [] seconds, on the device
        """Every Gaussian drawn now, in the world at time ``t`` (no host synchronisation)."""
        p = self._place_data()
        if p.keys is None or not len(p.actor_means):
            return PlacedGaussians(p.static_means, p.static_quats, p.scales, p.opacities, p.sh, p.intensities)
        means, quats, visible = interpolate_gaussians(t, p.static_means, p.static_quats, p.actor_means,
                                                      p.actor_quats, p.actor_index, p.keys)
        return PlacedGaussians(means, quats, p.scales, p.opacities * visible, p.sh, p.intensities)

    def _motion(self, t0: torch.Tensor, t1: torch.Tensor) -> torch.Tensor | None:
        """Each Gaussian's position at ``t1`` minus at ``t0`` (``[N, 3]``); None when nothing moves."""
        p = self._place_data()
        if p.keys is None or not len(p.actor_means):
            return None
        ends = [interpolate_gaussians(t, p.static_means, p.static_quats, p.actor_means, p.actor_quats,
                                      p.actor_index, p.keys)[0] for t in (t0, t1)]
        return ends[1] - ends[0]

    # -- rig poses --------------------------------------------------------------------------------

    def path(self, times_s: Sequence[float] | torch.Tensor, T_world_rig: torch.Tensor | np.ndarray) -> PoseTrajectory:
        """A rig trajectory on the device from keyed poses (``[K]`` seconds, ``[K, 4, 4]`` rig -> world in
        the scene's world frame), interpolated as the recorded one (slerp and lerp; held at its ends)."""
        times = torch.as_tensor(times_s, dtype=torch.float64).reshape(-1)
        T = torch.as_tensor(T_world_rig, dtype=torch.float64)
        if T.shape != (len(times), 4, 4):
            raise ValueError(f"T_world_rig must have shape ({len(times)}, 4, 4), got {tuple(T.shape)}")
        if not bool(torch.isfinite(T).all()):
            raise ValueError("T_world_rig must be finite")
        return PoseTrajectory(times.to(self.device), T.to(self.device))

    def rig_pose(self, times: Sequence[float] | torch.Tensor, rig: PoseTrajectory | None = None,
                 rig_offset: torch.Tensor | None = None) -> torch.Tensor:  # [B, 4, 4] float64
        """The rig pose (rig -> world) at each time on a trajectory (None: the recorded one), with a
        rig-frame offset applied: e.g. the start of an edited pose for ``render(rig=...)``."""
        offset = None if rig_offset is None else rig_offset.to(device=self.device, dtype=torch.float64)
        return self._rig_at(rig, self._times(times), offset)

    def _times(self, times) -> torch.Tensor:  # [B] float64 on the device
        if isinstance(times, torch.Tensor) and times.device.type == "cuda":
            t = times.reshape(-1)  # on a GPU: trusted, not read back (that would synchronise)
        else:
            t = torch.as_tensor(np.asarray(times.cpu() if isinstance(times, torch.Tensor) else times,
                                            dtype=np.float64).reshape(-1))
            for v in t.tolist():
                if not math.isfinite(v):
                    raise ReplayError(f"{self.root}: time {v} s is not finite")
                self.replay.check_time(v)
        if t.numel() == 0:
            raise ValueError("render: no times given")
        return t.to(device=self.device, dtype=torch.float64)

    def _rig_at(self, rig, t: torch.Tensor, offset: torch.Tensor | None) -> torch.Tensor:
        """Rig poses ``[..., 4, 4]`` at times ``t`` ``[...]`` from a trajectory (None: the recorded one)."""
        T = (rig or self.rig_path).at(t)
        return T if offset is None else T @ offset

    # -- rendering --------------------------------------------------------------------------------

    def _camera(self, name: str) -> StageCamera:
        s = self.replay.sensor(name)
        if not isinstance(s, StageCamera):
            raise ReplayError(f"{self.root}: {name!r} is a lidar, not a camera")
        return s

    def _lidar(self, name: str) -> StageLidar:
        s = self.replay.sensor(name)
        if not isinstance(s, StageLidar):
            raise ReplayError(f"{self.root}: {name!r} is a camera, not a lidar")
        return s

    def _camera_geometry(self, cam: StageCamera, downscale: int):
        key = (cam.id, downscale)
        if key not in self._geometry:
            self._geometry[key] = camera_geometry(cam.model, cam.width, cam.height, cam.intrinsics, cam.shutter,
                                                  self.device, downscale)
        return self._geometry[key]

    def _plan(self, cameras: tuple[str, ...], lidars: tuple[str, ...], b: int, depth: bool, downscale: int,
              actor_time: str) -> _Plan:
        key = (cameras, lidars, b, depth, downscale, actor_time)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        ids = list(self.cameras)
        groups: dict[tuple, list[StageCamera]] = {}
        for name in cameras:
            cam = self.cameras[name]
            g = self._camera_geometry(cam, downscale)
            group_key = (g.width, g.height) + ((cam.readout_s,) if actor_time == "readout" else ())
            groups.setdefault(group_key, []).append(cam)
        out = Rendered(torch.zeros(b, dtype=torch.float64, device=self.device), {}, {},
                       torch.zeros(1, dtype=torch.bool, device=self.device))
        plan_groups = []
        for cams in groups.values():
            geo = [self._camera_geometry(c, downscale) for c in cams]
            t0 = geo[0].template
            template = dataclasses.replace(
                t0, model=torch.cat([g.template.model for g in geo]),
                params=torch.cat([g.template.params for g in geo]), shutter=torch.cat([g.template.shutter for g in geo]),
                pinhole_global=all(g.template.pinhole_global for g in geo))
            lens = None if all(g.lens is None for g in geo) else torch.stack(
                [g.lens if g.lens is not None else torch.ones_like(g.rays[..., 0], dtype=torch.bool) for g in geo])
            h, w = t0.height, t0.width
            frames = []
            for c in cams:
                frames.append(CameraFrames(self._buffer(b, h, w, 3), self._buffer(b, h, w),
                                           self._buffer(b, h, w) if depth else None))
                out.cameras[c.id] = frames[-1]
            readout = torch.tensor([c.readout_s for c in cams], dtype=torch.float64)
            plan_groups.append(_CameraGroup(
                [c.id for c in cams], template, torch.stack([g.rays for g in geo]).contiguous(), lens,
                torch.tensor([ids.index(c.id) for c in cams], dtype=torch.long, device=self.device),
                torch.stack([self._T_rig[c.id] @ _CV_TO_USD.to(self.device) for c in cams]),
                readout.to(self.device), float(readout.mean()) / 2, frames))
        plan_lidars = []
        for name in lidars:
            lid = self.lidars[name]
            template = LidarBatch.from_model(lid.model, torch.eye(4, dtype=torch.float32, device=self.device))
            c, w = lid.model.channels, lid.model.columns
            sweeps = LidarSweeps(*(self._buffer(b, c, w) for _ in range(4)))
            out.lidars[name] = sweeps
            plan_lidars.append(_LidarPlan(name, template, self._T_rig[name], lid.period_s, lid.intensity_scale,
                                          sweeps))
        plan = self._plans[key] = _Plan(plan_groups, plan_lidars, out)
        return plan

    def _buffer(self, *shape: int) -> torch.Tensor:
        """An output buffer (made once per request)."""
        return torch.zeros(*shape, dtype=torch.float32, device=self.device)

    def clear_buffers(self) -> None:
        """Free every request's output buffers (the next call of each makes them again)."""
        self._plans.clear()

    @torch.no_grad()
    def render(self, times: Sequence[float] | torch.Tensor, cameras: Sequence[str] = (),
               lidars: Sequence[str] = (), rig: torch.Tensor | PoseTrajectory | None = None,
               rig_offset: torch.Tensor | None = None, depth: bool = False, downscale: int = 1,
               actor_time: str = "readout", retry_overflow: bool = False) -> Rendered:
        """Render cameras and lidars at B times.

        Args:
            times: ``[B]`` seconds since the capture start: a camera frame's readout starts then, a
                lidar sweep fires its first column then. Host values are checked against the scene's
                span; a CUDA tensor is used as given (reading it would synchronise).
            cameras, lidars: sensor ids (or prim names); each is rendered at every time.
            rig: the rig's poses. None: the recorded trajectory. A ``PoseTrajectory`` (``path``): poses
                interpolated at each readout's and sweep's own times. A ``[B, 4, 4]`` tensor of
                rig -> world poses: the rig holds that pose through each frame's readout and sweep.
            rig_offset: ``[4, 4]`` rig-frame transform applied to every rig pose
                (``rig_offset_transform``), or None.
            depth: also render each camera's depth image.
            downscale: camera images this many times smaller.
            actor_time: "readout" (each camera sees the actors at the middle of its readout) or
                "batch" (once per resolution, at the mean of the cameras' mid-readouts; see the module).
            retry_overflow: after a call that ran out of intersection room, render it again with
                grown buffers until none does (this waits for the device once per call: for writing
                files, not for a loop that must never wait). False: check ``overflow`` yourself.

        Returns:
            The request's :class:`Rendered`, overwritten by its next call.
        """
        if actor_time not in ACTOR_TIMES:
            raise ValueError(f"actor_time must be one of {ACTOR_TIMES}, got {actor_time!r}")
        if int(downscale) != downscale or downscale < 1:
            raise ValueError(f"downscale must be a positive integer, got {downscale!r}")
        cam_ids = tuple(self._camera(c).id for c in cameras)
        lid_ids = tuple(self._lidar(name).id for name in lidars)
        if len(set(cam_ids + lid_ids)) != len(cam_ids) + len(lid_ids):
            raise ValueError(f"a sensor is asked for twice: {[*cam_ids, *lid_ids]}")
        t = self._times(times)
        b = t.shape[0]
        fixed = isinstance(rig, torch.Tensor)
        if fixed:
            if tuple(rig.shape) != (b, 4, 4):
                raise ValueError(f"rig must have shape ({b}, 4, 4) for {b} times, got {tuple(rig.shape)}")
            rig = rig.to(device=self.device, dtype=torch.float64)
        elif rig is not None and not isinstance(rig, PoseTrajectory):
            raise ValueError(f"rig must be None, a PoseTrajectory or a [B, 4, 4] tensor, got {type(rig).__name__}")
        if rig_offset is not None:
            if tuple(rig_offset.shape) != (4, 4):
                raise ValueError(f"rig_offset must have shape (4, 4), got {tuple(rig_offset.shape)}")
            rig_offset = rig_offset.to(device=self.device, dtype=torch.float64)
        plan = self._plan(cam_ids, lid_ids, b, bool(depth), int(downscale), actor_time)
        out = self._render(plan, t, rig, rig_offset, bool(depth))
        for _ in range(RETRIES if retry_overflow else 0):
            if not bool(out.overflow):  # (waits for the device)
                break
            out = self._render(plan, t, rig, rig_offset, bool(depth))  # the counts have arrived: more room
        return out

    def _render(self, plan: _Plan, t: torch.Tensor, rig, rig_offset: torch.Tensor | None, depth: bool) -> Rendered:
        b = t.shape[0]
        fixed = isinstance(rig, torch.Tensor)
        out = plan.result
        out.times.copy_(t)
        out.overflow.zero_()

        def rig_at(times_bk: torch.Tensor) -> torch.Tensor:  # [B, k] -> [B, k, 4, 4]
            if fixed:
                T = rig[:, None].expand(b, times_bk.shape[1], 4, 4)
                return T if rig_offset is None else T @ rig_offset
            return self._rig_at(rig, times_bk, rig_offset)

        # Poses of every camera and lidar at every time, in a few batched ops
        poses = []
        for g in plan.groups:
            start = rig_at(t[:, None].expand(b, len(g.ids)))  # [B, C, 4, 4]
            end = rig_at(t[:, None] + g.readout_s[None])
            T0, T1 = start @ g.T_rig_camera, end @ g.T_rig_camera  # T_world_camera
            q0, p0, q1, p1 = (x.float().reshape(b, len(g.ids), -1) for x in sensor_poses(T0.flatten(0, 1),
                                                                                           T1.flatten(0, 1)))
            poses.append((q0, p0, q1, p1, T0[..., :3, :3].float().contiguous()))
        lidar_poses = []
        for lid in plan.lidars:
            ends = rig_at(torch.stack((t, t + lid.period_s), 1)) @ lid.T_rig_lidar  # [B, 2, 4, 4] T_world_lidar
            lidar_poses.append([x.float() for x in sensor_poses(ends[:, 0], ends[:, 1])])

        renderer = self.replay.renderer
        for i in range(b):
            placed: dict[float, PlacedGaussians] = {}  # placements of this time, by offset

            def at(offset: float) -> PlacedGaussians:
                if offset not in placed:
                    placed[offset] = self.place(t[i] + offset)
                return placed[offset]

            for g, (q0, p0, q1, p1, R) in zip(plan.groups, poses):
                batch = dataclasses.replace(g.template, rot_start=q0[i], trans_start=p0[i], rot_end=q1[i],
                                            trans_end=p1[i])
                views = CameraViews(batch, g.camera_indices, t[i], R[i], g.rays, g.lens)
                first = g.capacity is None
                settings = RenderSettings(depth=depth) if first else g.capacity.settings(depth=depth)
                r = renderer.cameras(views, settings, placed=at(g.place_offset_s))
                if first:  # the one synchronisation of a request: its exact size, with headroom
                    g.capacity = IntersectionCapacity(int(int(r.raw.intersections) * HEADROOM) + 1, HEADROOM)
                else:
                    g.capacity.observe(r.raw)
                    out.overflow.logical_or_(r.raw.overflow)
                for k, frames in enumerate(g.frames):
                    frames.rgb[i].copy_(r.image[k])
                    frames.alpha[i].copy_(r.raw.alpha[k])
                    if depth:
                        a = r.raw.alpha[k]
                        torch.where(a >= DEPTH_MIN_ALPHA, r.raw.depth[k] / a.clamp_min(DEPTH_MIN_ALPHA),
                                    torch.zeros((), device=a.device), out=frames.depth[i])
            for lid, (q0, p0, q1, p1) in zip(plan.lidars, lidar_poses):
                batch = dataclasses.replace(lid.template, rot_start=q0[i:i + 1], trans_start=p0[i:i + 1],
                                            rot_end=q1[i:i + 1], trans_end=p1[i:i + 1])
                first = lid.capacity is None
                settings = LidarRenderSettings(capacity=None if first else lid.capacity.settings().capacity)
                mid = lid.period_s / 2
                # actors seen where they are when their column fires, as in training and replay
                r = renderer.lidar(batch, t[i] + mid, settings, placed=at(mid),
                                   motion=self._motion(t[i], t[i] + lid.period_s))
                if first:
                    lid.capacity = IntersectionCapacity(int(int(r.intersections) * HEADROOM) + 1, HEADROOM)
                else:
                    lid.capacity.observe(r)
                    out.overflow.logical_or_(r.overflow)
                s = lid.sweeps
                s.range[i].copy_(r.range)
                s.median_range[i].copy_(r.median_range)
                s.hit_prob[i].copy_(r.hit_prob)
                torch.mul(r.intensity, lid.intensity_scale, out=s.intensity[i])
        return out


def _vector(value: Sequence[float], name: str) -> torch.Tensor:  # [3] float64
    v = torch.as_tensor(value, dtype=torch.float64).reshape(-1)
    if v.shape != (3,) or not bool(torch.isfinite(v).all()):
        raise ValueError(f"{name} must be 3 finite numbers (x, y, z metres), got {list(np.asarray(value).ravel())}")
    return v


def _continuous(q: torch.Tensor) -> torch.Tensor:  # [K, 4]
    """Quaternions flipped where needed so that neighbours lie in one hemisphere (short slerps)."""
    q = q.clone()
    for k in range(1, len(q)):
        if float((q[k] * q[k - 1]).sum()) < 0:
            q[k] = -q[k]
    return q

