"""Assemble one synthetic scene on the host: traffic, street, meshes, materials, light, poses.

``build_scene(preset, seed)`` is deterministic: every random choice is drawn from one
``numpy.random.Generator(PCG64(seed))`` in a fixed order. The world frame it returns is the
capture's world after the loader's re-centring: the ego starts at the origin heading along +x.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nurec_usd.synth.materials import MaterialTable
from nurec_usd.synth.presets import Preset
from nurec_usd.synth.road import RoadLayout
from nurec_usd.synth.street import build_street
from nurec_usd.synth.traffic import ActorPlan, build_meshes, ego_poses, plan_traffic, s_extent, world_poses


@dataclass
class Light:
    """Sun and sky (linear radiance; the camera's exposure and tone curve come later)."""

    sun_dir: np.ndarray  # [3] unit, towards the sun
    sun_color: np.ndarray  # [3]
    ambient: np.ndarray  # [3]
    zenith: np.ndarray  # [3]
    horizon: np.ndarray  # [3]


@dataclass
class SceneData:
    """Everything the renderer and the writer need, as numpy arrays."""

    preset: Preset
    seed: int
    key_rate_hz: float
    key_times_s: np.ndarray  # [K] seconds since the capture start
    rig_poses: np.ndarray  # [K, 4, 4] T_world_rig
    actors: list[ActorPlan]  # with poses [k, 4, 4] on keys key_first..key_last and meshes in box frames
    static_vertices: np.ndarray  # [V, 3] float32
    static_faces: np.ndarray  # [F, 3] int32
    static_face_uv: np.ndarray  # [F, 3, 2] float32
    static_face_material: np.ndarray  # [F] int32
    static_face_normal: np.ndarray  # [F, 3, 3] float32 per-corner shading normals
    materials: dict[str, np.ndarray]  # MaterialTable.arrays()
    light: Light
    road: RoadLayout
    crossing_s: float


def _light(rng: np.random.Generator) -> Light:
    elevation = np.radians(rng.uniform(34.0, 46.0))
    azimuth = np.radians(rng.uniform(110.0, 150.0))
    sun = np.array([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)])
    return Light(sun_dir=sun, sun_color=np.array([2.7, 2.55, 2.3]), ambient=np.array([0.5, 0.58, 0.72]),
                 zenith=np.array([0.16, 0.32, 0.72]), horizon=np.array([0.68, 0.78, 0.9]))


def build_scene(preset: Preset, seed: int = 0) -> SceneData:
    """Plan the traffic, lay out the street, build every mesh and the poses on the key grid."""
    rng = np.random.Generator(np.random.PCG64(seed))
    ego, sx, actors = plan_traffic(preset, rng)
    lo, hi = s_extent(ego, actors)
    s_lo, s_hi = lo - 60.0, hi + 160.0
    road = RoadLayout.generate(rng, s_lo - 80.0, s_hi + 80.0, sx)

    # Put the ego's first pose at the world origin, heading +x (the loader re-centres there anyway).
    n_keys = int(round(preset.duration_s * preset.key_rate_hz)) + 1
    key_times = np.arange(n_keys) / preset.key_rate_hz
    first = ego_poses(ego, road, np.array([0.0]))[0]
    road.apply(np.linalg.inv(first))
    rig = ego_poses(ego, road, key_times)
    rig[0] = np.eye(4)  # exact, instead of identity up to rounding

    mats = MaterialTable()
    reserved = [(1.0, a.parked_s - 14.0, a.parked_s + 4.0) for a in actors if a.parked_s is not None]
    street = build_street(road, mats, rng, s_lo, s_hi, reserved)
    build_meshes(actors, mats, rng)
    world_poses(actors, road, preset.key_rate_hz, n_keys)
    v, f, uv, m, n = street.build(with_normals=True)
    return SceneData(preset=preset, seed=seed, key_rate_hz=preset.key_rate_hz, key_times_s=key_times, rig_poses=rig,
                     actors=actors, static_vertices=v, static_faces=f, static_face_uv=uv, static_face_material=m,
                     static_face_normal=n,
                     materials=mats.arrays(), light=_light(rng), road=road, crossing_s=sx)


def describe(scene: SceneData) -> str:
    """One line per part of the scene (for logs)."""
    lines = [f"static mesh: {len(scene.static_vertices)} vertices, {len(scene.static_faces)} triangles, "
             f"{len(scene.materials['kind'])} materials"]
    for a in scene.actors:
        lines.append(f"{a.track_id:14s} {a.label:10s} {a.role:10s} keys {a.key_first}-{a.key_last} "
                     f"({a.t_start:.2f}-{a.t_end:.2f} s)")
    return "\n".join(lines)


__all__ = ["Light", "SceneData", "build_scene", "describe"]
