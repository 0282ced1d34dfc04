"""The ego's drive and the moving actors: paths in road coordinates, speeds, poses on the key grid.

Everything is planned in road coordinates (s, lat) first (see ``road.py``), which decides how much
street to build; poses in the world come after the road exists. Every actor follows a path (a
polyline in (s, lat)) with a simple driver model: each step it accelerates towards a target
speed that its role chooses from the time and its position along the path:

* ``lead`` / ``follower``: the ego's lane, holding a varying gap ahead of / behind the ego;
* ``oncoming`` / ``truck``: the opposite lane, each with its own speed change;
* ``leave``: drives ahead of the ego, turns right into the side street at the crossing and its
  track ends once it is in there (an actor that leaves mid-capture);
* ``appear``: its track starts in the other side street (an actor that appears mid-capture),
  turns right into the opposite lane and drives past the ego;
* ``pullout``: parked in the opposite parking strip, pulls out into traffic (a lateral S-turn);
* ``pedestrian``: walks along a sidewalk, with a pause.

Poses are written on a uniform key grid (``Preset.key_rate_hz``): the renderer interpolates the
same keys at each ray's time, so the capture's tracks are the exact ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nurec_usd.synth import road as rd
from nurec_usd.synth.materials import MaterialTable
from nurec_usd.synth.presets import Preset
from nurec_usd.synth.road import RoadLayout
from nurec_usd.synth.vehicles import (CAR_SIZES, PEDESTRIAN_SIZE, TRUCK_SIZES, car_mesh, check_inside,
                                      pedestrian_mesh, truck_mesh)

SIM_DT = 0.01  # driver-model time step (s)
EGO_BOX = (4.7, 1.9, 1.5)  # the ego vehicle (not rendered), for the collision check
EGO_BOX_CENTRE_X = 1.35  # box centre ahead of the rig origin (rear axle)


@dataclass
class ActorPath:
    """A polyline in road coordinates, parametrised by its arc length u."""

    sl: np.ndarray  # [N, 2] (s, lat)
    u: np.ndarray  # [N] cumulative arc length in (s, lat) space

    @classmethod
    def from_points(cls, sl: np.ndarray) -> "ActorPath":
        sl = np.asarray(sl, dtype=np.float64)
        keep = np.concatenate([[True], np.linalg.norm(np.diff(sl, axis=0), axis=1) > 1e-9])
        sl = sl[keep]
        u = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(sl, axis=0), axis=1))])
        return cls(sl, u)

    def at(self, u: np.ndarray) -> np.ndarray:
        """(s, lat) at arc lengths u (clamped). Returns [..., 2]."""
        u = np.clip(u, self.u[0], self.u[-1])
        return np.stack([np.interp(u, self.u, self.sl[:, 0]), np.interp(u, self.u, self.sl[:, 1])], -1)

    def heading_sl(self, u: np.ndarray) -> np.ndarray:
        """Direction of travel in (s, lat) space (radians). Returns [...]."""
        d = self.at(u + 0.3) - self.at(u - 0.3)
        return np.arctan2(d[..., 1], d[..., 0])


def _line(s0: float, s1: float, lat: float, step: float = 1.0) -> np.ndarray:
    n = max(2, int(abs(s1 - s0) / step) + 1)
    return np.stack([np.linspace(s0, s1, n), np.full(n, lat)], 1)


def _arc(center: tuple[float, float], radius: float, a0: float, a1: float, step: float = 0.25) -> np.ndarray:
    n = max(3, int(abs(a1 - a0) * radius / step) + 1)
    a = np.linspace(a0, a1, n)
    return np.stack([center[0] + radius * np.cos(a), center[1] + radius * np.sin(a)], 1)


@dataclass
class EgoDrive:
    """The ego's road coordinates over time (on the simulation grid)."""

    t: np.ndarray  # [T]
    s: np.ndarray  # [T]
    lat: np.ndarray  # [T]
    v: np.ndarray  # [T]

    def s_at(self, t: np.ndarray | float) -> np.ndarray:
        return np.interp(t, self.t, self.s)

    def v_at(self, t: np.ndarray | float) -> np.ndarray:
        return np.interp(t, self.t, self.v)


@dataclass
class ActorPlan:
    """One moving actor: its class, box, path, motion and life span."""

    track_id: str
    label: str
    size: tuple[float, float, float]
    role: str
    path: ActorPath
    t: np.ndarray  # [T] simulation times
    u: np.ndarray | None  # [T] arc length along the path (after simulation)
    t_start: float
    t_end: float
    ground_z: float  # height of the surface it moves on
    mesh: object = None  # MeshBuilder in the box frame, built by ``build_meshes``
    sim: dict | None = None  # how the planner simulates it
    parked_s: float | None = None  # where a parked actor waits (its bay is kept free of parked cars)
    poses: np.ndarray | None = None  # [K, 4, 4] T_world_box on the key grid, set by ``world_poses``
    key_first: int = 0
    key_last: int = 0

    def sl_at(self, t: np.ndarray) -> np.ndarray:
        return self.path.at(np.interp(t, self.t, self.u))


def drive_ego(preset: Preset, rng: np.random.Generator) -> EgoDrive:
    """The ego's speed profile (the preset's knots) and a slight weave within its lane."""
    T = preset.duration_s
    t = np.arange(0.0, T + 2 * SIM_DT, SIM_DT)
    knots = np.array(preset.ego_speeds)
    v = np.interp(t / T, knots[:, 0], knots[:, 1])
    s = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * SIM_DT)])
    phase = rng.uniform(0, 2 * np.pi)
    lat = -rd.LANE_CENTRE + 0.12 * np.sin(2 * np.pi * t / 7.0 + phase)
    return EgoDrive(t, s, lat, v)


@dataclass
class _Track:
    """A simulated road user, as an obstacle for the ones simulated after it."""

    s: np.ndarray  # [T]
    lat: np.ndarray  # [T]
    v_s: np.ndarray  # [T] speed along s (signed)
    alive: np.ndarray  # [T] bool
    length: float


def _simulate(t: np.ndarray, u0: float, v0: float, target, accel: float = 2.5, decel: float = 4.5,
              path: "ActorPath | None" = None, length: float = 4.5, obstacles: list[_Track] | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Driver model: speed approaches ``target(t, u)`` with bounded acceleration. Returns u [T], v [T].

    With a path and obstacles, the actor also keeps its distance to the nearest obstacle ahead of
    it in its lane (same direction of travel, lateral offset within 1.6 m).
    """
    u = np.empty_like(t)
    v = np.empty_like(t)
    uu, vv = u0, v0
    obstacles = obstacles or []
    for i, ti in enumerate(t):
        u[i], v[i] = uu, vv
        goal = max(float(target(ti, uu)), 0.0)
        if obstacles and path is not None:
            here = path.at(np.array([uu, uu + 0.5]))
            ds = here[1, 0] - here[0, 0]
            if abs(ds) > 0.35:  # moving along the road, not across it
                direction = 1.0 if ds > 0 else -1.0
                for ob in obstacles:
                    if not ob.alive[i] or abs(ob.lat[i] - here[0, 1]) > 1.6:
                        continue
                    gap = direction * (ob.s[i] - here[0, 0]) - 0.5 * (ob.length + length)
                    if gap < -0.5:
                        continue
                    lead_v = max(direction * ob.v_s[i], 0.0)
                    safe = lead_v + 0.7 * (gap - (3.0 + 0.9 * vv))
                    goal = min(goal, max(safe, 0.0))
        dv = np.clip(goal - vv, -decel * SIM_DT, accel * SIM_DT)
        vv = max(vv + dv, 0.0)
        uu += vv * SIM_DT
    return u, v


class _Planner:
    def __init__(self, preset: Preset, ego: EgoDrive, crossing_s: float, rng: np.random.Generator):
        self.p = preset
        self.ego = ego
        self.sx = crossing_s
        self.rng = rng
        self.T = preset.duration_s
        self.t = ego.t
        self.counts: dict[str, int] = {}

    def _defer(self, plan: ActorPlan, priority: float, u0: float, v0: float, target, accel: float = 2.5,
               decel: float = 4.5, follow: bool = True, finish=None) -> ActorPlan:
        """Remember how to simulate ``plan``; ``plan()`` runs them in priority order."""
        plan.sim = dict(priority=priority, u0=u0, v0=v0, target=target, accel=accel, decel=decel, follow=follow,
                        finish=finish)
        return plan

    def _id(self, label: str) -> str:
        n = self.counts.get(label, 0)
        self.counts[label] = n + 1
        return f"{label}_{n:02d}"

    def _gap_follower(self, role: str, sign: float) -> ActorPlan:
        rng, ego = self.rng, self.ego
        g0 = rng.uniform(15.0, 21.0) if sign > 0 else rng.uniform(11.0, 16.0)
        g1 = rng.uniform(2.5, 5.0)
        w = 2 * np.pi / rng.uniform(7.0, 12.0)
        ph = rng.uniform(0, 2 * np.pi)

        def gap(t):
            return sign * (g0 + g1 * np.sin(w * t + ph))

        s_lo = float(ego.s[0]) - 40.0
        path = ActorPath.from_points(_line(s_lo, float(ego.s[-1]) + 60.0, -rd.LANE_CENTRE))

        def target(t, u):
            err = ego.s_at(t) + gap(t) - (u + s_lo)
            return ego.v_at(t) + 0.8 * err

        u0 = float(ego.s[0] + gap(0.0) - s_lo)
        size = CAR_SIZES[int(rng.integers(len(CAR_SIZES)))]
        plan = ActorPlan(self._id("car"), "car", size, role, path, self.t, None, 0.0, self.T, 0.0)
        return self._defer(plan, 4 if sign > 0 else 5, u0, float(ego.v[0]), target)

    def _oncoming(self, role: str, index: int) -> ActorPlan:
        rng, ego = self.rng, self.ego
        truck = role == "truck"
        s_start = float(ego.s[0]) + 30.0 + 32.0 * index + rng.uniform(0.0, 20.0) + (60.0 if truck else 0.0)
        v0 = rng.uniform(7.0, 9.0) if truck else rng.uniform(8.0, 12.5)
        v1 = float(np.clip(v0 + rng.choice([-1.0, 1.0]) * rng.uniform(2.0, 4.0), 4.0, 14.0))
        t_change = rng.uniform(0.2, 0.8) * self.T
        s_hi = s_start + 5.0
        path = ActorPath.from_points(_line(s_hi, s_hi - 20.0 - 15.0 * self.T, rd.LANE_CENTRE))

        def target(t, u):
            return v0 if t < t_change else v1

        if truck:
            size, label = TRUCK_SIZES[int(rng.integers(len(TRUCK_SIZES)))], "truck"
        else:
            size, label = CAR_SIZES[int(rng.integers(len(CAR_SIZES)))], "car"
        plan = ActorPlan(self._id(label), label, size, role, path, self.t, None, 0.0, self.T, 0.0)
        # the front-most car of the opposite lane (smallest s) is simulated first: the others follow it
        return self._defer(plan, 3 + 1e-4 * s_start, s_hi - s_start, v0, target)

    def _leave(self) -> ActorPlan:
        """Ahead of the ego in its lane; right turn into the side street at lat < 0; track ends in there."""
        rng, sx, R = self.rng, self.sx, rd.TURN_RADIUS
        s_lane = sx - rd.LANE_CENTRE  # the side street's outbound lane (driving on the right)
        c = (s_lane - R, -rd.LANE_CENTRE - R)
        pts = [_line(sx - 400.0, c[0], -rd.LANE_CENTRE), _arc(c, R, np.pi / 2, 0.0),
               np.array([[s_lane, -rd.ROAD_HALF - 80.0]])]
        path = ActorPath.from_points(np.concatenate(pts))
        u_arc0 = c[0] - (sx - 400.0)  # the path runs straight along +s up to the arc
        u_arc1 = u_arc0 + 0.5 * np.pi * R
        v_plan = rng.uniform(7.5, 9.5)
        # long captures show the whole approach; short ones start close to the turn
        t_arc = rng.uniform(0.26, 0.34) * self.T if self.T > 10.0 else 0.05 * self.T
        depth = min(22.0, 1.5 * self.T)  # how far into the side street the track ends
        # start where it reaches the arc at about t_arc (it slows down for the turn on the way)
        u0 = u_arc0 - v_plan * t_arc + 12.0

        def target(t, u):
            if u < u_arc0 - 14.0:
                return v_plan
            if u < u_arc1:
                return 4.5
            return 8.0

        size = CAR_SIZES[int(rng.integers(len(CAR_SIZES)))]
        plan = ActorPlan(self._id("car"), "car", size, "leave", path, self.t, None, 0.0, self.T, 0.0)

        def finish(a: ActorPlan) -> None:
            inside = np.nonzero(a.u >= u_arc1 + depth)[0]
            if len(inside):
                a.t_end = min(a.t_end, float(self.t[inside[0]]))

        return self._defer(plan, 0, u0, v_plan, target, finish=finish)

    def _appear(self) -> ActorPlan:
        """Track starts in the side street at lat > 0; right turn into the opposite lane."""
        rng, ego, sx, R = self.rng, self.ego, self.sx, rd.TURN_RADIUS
        s_lane = sx - rd.LANE_CENTRE
        c = (s_lane - R, rd.LANE_CENTRE + R)
        lat_start = rd.ROAD_HALF + min(45.0, 3.0 * self.T)
        pts = [np.array([[s_lane, lat_start]]), _arc(c, R, 0.0, -np.pi / 2),
               _line(c[0], c[0] - 20.0 - 15.0 * self.T, rd.LANE_CENTRE)]
        path = ActorPath.from_points(np.concatenate(pts))
        u_arc0 = lat_start - (rd.LANE_CENTRE + R)
        u_arc1 = u_arc0 + 0.5 * np.pi * R
        t_cross = float(np.interp(sx, ego.s, ego.t))
        t_start = float(np.clip(t_cross - rng.uniform(2.5, 4.0), 0.1 * self.T, 0.8 * self.T))
        v_side = rng.uniform(5.5, 7.0)

        def target(t, u):
            if t < t_start:
                return 0.0
            if u < u_arc0 - 8.0:
                return v_side
            if u < u_arc1:
                return 4.5
            return 10.0

        size = CAR_SIZES[int(rng.integers(len(CAR_SIZES)))]
        plan = ActorPlan(self._id("car"), "car", size, "appear", path, self.t, None, t_start, self.T, 0.0)
        return self._defer(plan, 1, 0.0, 0.0, target)

    def _pullout(self) -> ActorPlan:
        rng, ego = self.rng, self.ego
        s_p = float(ego.s_at(0.45 * self.T)) + rng.uniform(30.0, 45.0)
        if abs(s_p - self.sx) < 30.0:
            s_p = self.sx + 32.0
        s = np.arange(s_p, s_p - 20.0 - 15.0 * self.T, -0.5)
        blend = np.clip((s_p - 2.0 - s) / 15.0, 0.0, 1.0)
        blend = blend * blend * (3 - 2 * blend)
        lat = rd.PARKING_CENTRE + (rd.LANE_CENTRE - rd.PARKING_CENTRE) * blend
        path = ActorPath.from_points(np.stack([s, lat], 1))
        t_go = rng.uniform(0.3, 0.4) * self.T

        def target(t, u):
            return 0.0 if t < t_go else 9.0

        size = CAR_SIZES[int(rng.integers(len(CAR_SIZES)))]
        plan = ActorPlan(self._id("car"), "car", size, "pullout", path, self.t, None, 0.0, self.T, 0.0)
        plan.parked_s = s_p
        return self._defer(plan, 2, 0.0, 0.0, target, accel=2.0)

    def _pedestrian(self, index: int) -> ActorPlan:
        rng, ego = self.rng, self.ego
        side = 1.0 if index % 2 == 0 else -1.0
        lat = side * (rd.ROAD_HALF + rng.uniform(1.3, 2.3))  # clear of trees (kerb side) and bushes (house side)
        s0 = float(ego.s_at(rng.uniform(0.2, 0.8) * self.T)) + rng.uniform(5.0, 30.0)
        direction = float(rng.choice([-1.0, 1.0]))
        speed = rng.uniform(1.1, 1.5)
        length = speed * self.T + 2.0
        # walkers stay on their block: the walk must not cross the side street at the crossing
        zone = rd.SIDE_STREET_HALF + rd.SIDE_SIDEWALK + 1.0

        def crosses(start, d):
            lo, hi = sorted((start, start + d * length))
            return lo < self.sx + zone and hi > self.sx - zone

        if crosses(s0, direction):
            direction = -direction
        if crosses(s0, direction):
            s0 = self.sx + direction * (zone + 1.0)
        path = ActorPath.from_points(_line(s0, s0 + direction * (length + 2.0), lat, step=0.5))
        t_pause = rng.uniform(0.2, 0.7) * self.T
        pause = rng.uniform(1.5, 3.0)

        def target(t, u):
            return 0.0 if t_pause <= t < t_pause + pause else speed

        plan = ActorPlan(self._id("pedestrian"), "pedestrian", PEDESTRIAN_SIZE, "pedestrian", path, self.t, None,
                         0.0, self.T, rd.KERB_HEIGHT)
        return self._defer(plan, 6, 0.0, speed, target, accel=1.0, decel=2.0, follow=False)

    def plan(self) -> list[ActorPlan]:
        actors = []
        oncoming = 0
        peds = 0
        for role in self.p.roles:
            if role == "lead":
                actors.append(self._gap_follower(role, +1.0))
            elif role == "follower":
                actors.append(self._gap_follower(role, -1.0))
            elif role in ("oncoming", "truck"):
                actors.append(self._oncoming(role, oncoming))
                oncoming += 1
            elif role == "leave":
                actors.append(self._leave())
            elif role == "appear":
                actors.append(self._appear())
            elif role == "pullout":
                actors.append(self._pullout())
            elif role == "pedestrian":
                actors.append(self._pedestrian(peds))
                peds += 1
            else:
                raise ValueError(f"unknown traffic role {role!r}")
        for a in actors:
            start, end = self.p.role_times.get(a.role, (None, None))
            if start is not None:
                a.t_start = max(a.t_start, start)
            if end is not None:
                a.t_end = min(a.t_end, end)
        # simulate leaders before followers; every simulated car is an obstacle for the later ones
        ego = self.ego
        v_s = np.gradient(ego.s, self.t)
        obstacles = [_Track(ego.s + EGO_BOX_CENTRE_X, ego.lat, v_s, np.ones_like(self.t, dtype=bool), EGO_BOX[0])]
        for a in sorted(actors, key=lambda a: a.sim["priority"]):
            sim = a.sim
            a.u, _ = _simulate(self.t, sim["u0"], sim["v0"], sim["target"], sim["accel"], sim["decel"],
                               path=a.path, length=a.size[0], obstacles=obstacles if sim["follow"] else None)
            if sim["finish"] is not None:
                sim["finish"](a)
            if a.label != "pedestrian":
                sl = a.path.at(a.u)
                alive = (self.t >= a.t_start) & (self.t <= a.t_end)
                obstacles.append(_Track(sl[:, 0], sl[:, 1], np.gradient(sl[:, 0], self.t), alive, a.size[0]))
        return actors


def _boxes_overlap(c1, h1, e1, c2, h2, e2) -> bool:
    """Separating-axis test of two oriented rectangles (centre [2], heading, half extents [2])."""
    axes = []
    for h in (h1, h2):
        axes += [np.array([np.cos(h), np.sin(h)]), np.array([-np.sin(h), np.cos(h)])]
    d = np.asarray(c2) - np.asarray(c1)

    def radius(h, e, ax):  # half the rectangle's extent along the axis
        c, s = np.cos(h), np.sin(h)
        return abs(e[0] * (c * ax[0] + s * ax[1])) + abs(e[1] * (-s * ax[0] + c * ax[1]))

    for ax in axes:
        if abs(d @ ax) > radius(h1, e1, ax) + radius(h2, e2, ax):
            return False
    return True


def find_collision(ego: EgoDrive, actors: list[ActorPlan], times: np.ndarray, margin: float = 0.3) -> str | None:
    """First pair of road users whose boxes overlap (in road coordinates) at ``times``, or None."""
    names = ["ego"] + [a.track_id for a in actors]
    n, k = len(names), len(times)
    centre = np.zeros((n, k, 2))
    heading = np.zeros((n, k))
    half = np.zeros((n, 2))
    alive = np.ones((n, k), dtype=bool)
    centre[0, :, 0] = ego.s_at(times) + EGO_BOX_CENTRE_X
    centre[0, :, 1] = np.interp(times, ego.t, ego.lat)
    half[0] = np.array(EGO_BOX[:2]) / 2 + margin
    for i, a in enumerate(actors, start=1):
        uu = np.interp(times, a.t, a.u)
        centre[i] = a.path.at(uu)
        heading[i] = a.path.heading_sl(uu)
        half[i] = np.array(a.size[:2]) / 2 + margin
        alive[i] = (times >= a.t_start) & (times <= a.t_end)
    reach = np.linalg.norm(half, axis=1)
    for i in range(n):
        for j in range(i + 1, n):
            # broad phase: bounding circles, then the exact rectangle test where they touch
            near = alive[i] & alive[j] & (np.linalg.norm(centre[i] - centre[j], axis=1) < reach[i] + reach[j])
            for q in np.nonzero(near)[0]:
                if _boxes_overlap(centre[i, q], heading[i, q], half[i], centre[j, q], heading[j, q], half[j]):
                    return f"{names[i]} and {names[j]} collide at t = {times[q]:.2f} s"
    return None


def plan_traffic(preset: Preset, rng: np.random.Generator) -> tuple[EgoDrive, float, list[ActorPlan]]:
    """The ego's drive, the crossing's arc length and the actors, free of collisions.

    Random choices are redrawn (from the same generator, so still deterministic) until no two
    road users overlap at any key time.
    """
    ego = drive_ego(preset, rng)
    if preset.crossing_ahead_m is not None:
        sx = float(ego.s[0]) + preset.crossing_ahead_m
    else:
        sx = float(ego.s_at(preset.crossing_at * preset.duration_s)) + 10.0
    key_times = np.arange(int(round(preset.duration_s * preset.key_rate_hz)) + 1) / preset.key_rate_hz
    problem = None
    for _attempt in range(60):
        actors = _Planner(preset, ego, sx, rng).plan()
        problem = find_collision(ego, actors, key_times)
        if problem is None:
            return ego, sx, actors
    raise RuntimeError(f"could not plan collision-free traffic: {problem}")


def build_meshes(actors: list[ActorPlan], mats: MaterialTable, rng: np.random.Generator) -> None:
    """Each actor's mesh in its box frame (checked to stay inside the box)."""
    for a in actors:
        if a.label == "pedestrian":
            a.mesh = pedestrian_mesh(a.size, mats, rng)
        elif a.label == "truck":
            a.mesh = truck_mesh(a.size, mats, rng)
        else:
            a.mesh = car_mesh(a.size, mats, rng)
        check_inside(a.mesh, a.size)


def _yaw_pose(xy: np.ndarray, yaw: np.ndarray, z: float) -> np.ndarray:
    n = len(yaw)
    T = np.tile(np.eye(4), (n, 1, 1))
    c, s = np.cos(yaw), np.sin(yaw)
    T[:, 0, 0], T[:, 0, 1], T[:, 1, 0], T[:, 1, 1] = c, -s, s, c
    T[:, 0, 3], T[:, 1, 3], T[:, 2, 3] = xy[:, 0], xy[:, 1], z
    return T


def ego_poses(ego: EgoDrive, road: RoadLayout, times: np.ndarray) -> np.ndarray:
    """T_world_rig at ``times``: on the ground, heading along the direction of travel. Returns [K, 4, 4]."""
    def xy(t):
        return road.to_world(ego.s_at(t), np.interp(t, ego.t, ego.lat))

    d = xy(times + 0.01) - xy(times - 0.01)
    return _yaw_pose(xy(times), np.arctan2(d[:, 1], d[:, 0]), 0.0)


def world_poses(actors: list[ActorPlan], road: RoadLayout, key_rate_hz: float, n_keys: int) -> None:
    """Each actor's T_world_box on its span of the key grid (box centre at half height above its ground)."""
    for a in actors:
        first = int(np.ceil(a.t_start * key_rate_hz - 1e-9))
        last = int(np.floor(a.t_end * key_rate_hz + 1e-9))
        first, last = max(first, 0), min(last, n_keys - 1)
        if last - first < 1:
            raise RuntimeError(f"actor {a.track_id} lives for less than two keys")
        times = np.arange(first, last + 1) / key_rate_hz
        u = np.interp(times, a.t, a.u)
        sl = a.path.at(u)
        p = road.to_world(sl[:, 0], sl[:, 1])
        ahead = a.path.at(u + 0.3)
        behind = a.path.at(u - 0.3)
        d = road.to_world(ahead[:, 0], ahead[:, 1]) - road.to_world(behind[:, 0], behind[:, 1])
        a.poses = _yaw_pose(p, np.arctan2(d[:, 1], d[:, 0]), a.ground_z + a.size[2] / 2)
        a.key_first, a.key_last = first, last


def s_extent(ego: EgoDrive, actors: list[ActorPlan]) -> tuple[float, float]:
    """The range of s that the ego and the live actors visit."""
    lo, hi = float(ego.s.min()), float(ego.s.max())
    for a in actors:
        live = (a.t >= a.t_start) & (a.t <= a.t_end)
        s = a.path.at(a.u[live])[:, 0]
        lo, hi = min(lo, float(s.min())), max(hi, float(s.max()))
    return lo, hi
