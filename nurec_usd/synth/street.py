"""The static street: road surface, kerbs, sidewalks, side streets, buildings, furniture, parked cars.

Built once per capture into one ``MeshBuilder`` (one BVH on the device). Everything is placed in
road coordinates through ``RoadLayout``, so it follows the street's curves. Random choices come
from the caller's seeded generator, in a fixed order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nurec_usd.synth import road as rd
from nurec_usd.synth.geometry import MeshBuilder
from nurec_usd.synth.materials import BRICK_COLOURS, GLASS_TINTS, PLASTER_COLOURS, Kind, MaterialTable, pick
from nurec_usd.synth.road import RoadLayout
from nurec_usd.synth.vehicles import CAR_SIZES, car_mesh

YARD = 30.0  # paved/grass band behind the sidewalks (m)
SIDE_STREET_LENGTH = 85.0


@dataclass
class StaticMaterials:
    """Materials shared by many static parts."""

    road: int
    road_plain: int
    crosswalk: int
    side_road: int
    sidewalk: int
    kerb: int
    yard: int
    grass: int
    roofs: tuple[int, ...]
    pole: int
    bark: int
    foliage: tuple[int, ...]
    concrete: int
    signs: tuple[int, ...]

    @classmethod
    def create(cls, mats: MaterialTable) -> "StaticMaterials":
        return cls(
            road=mats.add(Kind.ASPHALT, (0.11, 0.11, 0.115), params=(1.0, rd.ROAD_HALF, rd.LANE_EDGE, 0.0), lidar=0.1),
            road_plain=mats.add(Kind.ASPHALT, (0.11, 0.11, 0.115), lidar=0.1),
            crosswalk=mats.add(Kind.CROSSWALK, (0.11, 0.11, 0.115), params=(0.0, rd.ROAD_HALF, 0.0, 0.0), lidar=0.1),
            side_road=mats.add(Kind.ASPHALT, (0.12, 0.12, 0.12), params=(1.0, rd.SIDE_STREET_HALF, 3.3, 0.0),
                               lidar=0.1),
            sidewalk=mats.add(Kind.SIDEWALK, (0.42, 0.4, 0.37), (0.2, 0.19, 0.18), params=(0.6, 0, 0, 0), lidar=0.3),
            kerb=mats.add(Kind.KERB, (0.45, 0.45, 0.44), lidar=0.35),
            yard=mats.add(Kind.SIDEWALK, (0.36, 0.3, 0.26), (0.16, 0.14, 0.12), params=(0.35, 0, 0, 0), lidar=0.3),
            grass=mats.add(Kind.GRASS, (0.09, 0.2, 0.05), (0.28, 0.25, 0.12), lidar=0.4),
            roofs=(mats.add(Kind.ROOF, (0.16, 0.16, 0.17), lidar=0.15),
                   mats.add(Kind.ROOF, (0.3, 0.18, 0.13), lidar=0.2)),
            pole=mats.add(Kind.METAL, (0.12, 0.14, 0.13), lidar=0.4),
            bark=mats.add(Kind.BARK, (0.16, 0.11, 0.07), lidar=0.3),
            foliage=(mats.add(Kind.FOLIAGE, (0.08, 0.2, 0.04), (0.2, 0.28, 0.06), lidar=0.35),
                     mats.add(Kind.FOLIAGE, (0.05, 0.15, 0.05), (0.12, 0.2, 0.04), lidar=0.35),
                     mats.add(Kind.FOLIAGE, (0.14, 0.22, 0.05), (0.3, 0.25, 0.05), lidar=0.35)),
            concrete=mats.add(Kind.CONCRETE, (0.4, 0.39, 0.37), params=(0.0, 0, 0, 0), lidar=0.3),
            signs=(mats.add(Kind.SIGN, (0.8, 0.8, 0.78), params=(0.0, 0.65, 0.65, 0.0), lidar=0.85),
                   mats.add(Kind.SIGN, (0.03, 0.28, 0.1), (0.85, 0.85, 0.82), params=(1.0, 1.1, 0.3, 0.0), lidar=0.85),
                   mats.add(Kind.SIGN, (0.04, 0.12, 0.45), (0.85, 0.85, 0.82), params=(2.0, 0.6, 0.6, 0.0),
                            lidar=0.85)),
        )


def _grid(mb: MeshBuilder, road: RoadLayout, s0: float, s1: float, lat0: float, lat1: float, z0: float, z1: float,
          mat: int, uv_fn, step: float = 1.0) -> None:
    """A strip over [s0, s1] x [lat0, lat1] rising from z0 (at lat0) to z1 (at lat1), following the road.

    ``uv_fn(s, lat, z)`` gives the texture coordinates of each vertex.
    """
    if s1 - s0 < 1e-6:
        return
    n = max(1, int(np.ceil((s1 - s0) / step)))
    s = np.linspace(s0, s1, n + 1)
    lat = np.array([lat0, lat1])
    S, L = np.meshgrid(s, lat, indexing="ij")  # [n+1, 2]
    Z = np.broadcast_to(np.array([z0, z1]), S.shape)
    xy = road.to_world(S, L)
    verts = np.concatenate([xy, Z[..., None]], -1).reshape(-1, 3)
    uv = np.asarray(uv_fn(S, L, Z), dtype=np.float64).reshape(-1, 2)
    i = np.arange(n)
    a, b, c, d = 2 * i, 2 * (i + 1), 2 * (i + 1) + 1, 2 * i + 1
    faces = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    mb.add(verts, faces, uv[faces], mat)


def _sl(S, L, Z):
    return np.stack([S, L], -1)


def _sz(S, L, Z):
    return np.stack([S, Z], -1)


def _intervals(lo: float, hi: float, holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """[lo, hi] minus the holes."""
    out = [(lo, hi)]
    for h0, h1 in holes:
        nxt = []
        for a, b in out:
            if h1 <= a or h0 >= b:
                nxt.append((a, b))
                continue
            if h0 > a:
                nxt.append((a, h0))
            if h1 < b:
                nxt.append((h1, b))
        out = nxt
    return out


def _road_surface(mb: MeshBuilder, road: RoadLayout, m: StaticMaterials, s_lo: float, s_hi: float) -> None:
    sx = road.crossing_s
    w = rd.SIDE_STREET_HALF
    cw = [(sx - w - 4.5, sx - w - 1.0), (sx + w + 1.0, sx + w + 4.5)]
    pieces = [(s_lo, cw[0][0], m.road), (cw[0][0], cw[0][1], m.crosswalk), (cw[0][1], cw[1][0], m.road_plain),
              (cw[1][0], cw[1][1], m.crosswalk), (cw[1][1], s_hi, m.road)]
    for a, b, mat in pieces:
        _grid(mb, road, a, b, -rd.ROAD_HALF, rd.ROAD_HALF, 0.0, 0.0, mat, _sl)
    gap_main = [(sx - w, sx + w)]
    gap_yard = [(sx - w - rd.SIDE_SIDEWALK, sx + w + rd.SIDE_SIDEWALK)]
    kh = rd.KERB_HEIGHT
    for side in (-1.0, 1.0):
        edge = side * rd.ROAD_HALF
        for a, b in _intervals(s_lo, s_hi, gap_main):
            # kerb face, kerb top, sidewalk
            _grid(mb, road, a, b, edge, edge, 0.0, kh, m.kerb, _sz)
            _grid(mb, road, a, b, edge, edge + side * 0.3, kh, kh, m.kerb, _sl)
            _grid(mb, road, a, b, edge + side * 0.3, side * (rd.ROAD_HALF + rd.SIDEWALK), kh, kh, m.sidewalk, _sl)
        for a, b in _intervals(s_lo, s_hi, gap_yard):
            _grid(mb, road, a, b, side * (rd.ROAD_HALF + rd.SIDEWALK), side * (rd.ROAD_HALF + rd.SIDEWALK + YARD), kh,
                  kh, m.yard, _sl, step=2.0)
        # side street: asphalt running away from the main road, kerbs and sidewalks along it
        far = side * (rd.ROAD_HALF + SIDE_STREET_LENGTH)
        _side_patch(mb, road, sx - w, sx + w, edge, far, 0.0, m.side_road, sx, side)
        for sign in (-1.0, 1.0):
            s_k = sx + sign * w
            _side_patch(mb, road, min(s_k, s_k + sign * rd.SIDE_SIDEWALK), max(s_k, s_k + sign * rd.SIDE_SIDEWALK),
                        side * (rd.ROAD_HALF + rd.SIDEWALK), far, kh, m.sidewalk, sx, side)
            _side_kerb(mb, road, s_k, edge, far, kh, m.kerb)


def _side_patch(mb: MeshBuilder, road: RoadLayout, s0: float, s1: float, lat0: float, lat1: float, z: float, mat: int,
                sx: float, side: float) -> None:
    """A flat patch of the side street; uv = (distance along the side street, offset across it)."""
    lats = np.linspace(lat0, lat1, max(2, int(abs(lat1 - lat0) / 4.0) + 1))
    for la, lb in zip(lats[:-1], lats[1:]):
        p = np.array([[s0, la], [s1, la], [s1, lb], [s0, lb]])
        xy = road.to_world(p[:, 0], p[:, 1])
        verts = np.concatenate([xy, np.full((4, 1), z)], 1)
        uv = np.stack([np.abs(p[:, 1]) - rd.ROAD_HALF, side * (p[:, 0] - sx)], 1)
        mb.quad(verts, uv, mat)


def _side_kerb(mb: MeshBuilder, road: RoadLayout, s: float, lat0: float, lat1: float, h: float, mat: int) -> None:
    a = road.to_world(np.array(s), np.array(lat0))
    b = road.to_world(np.array(s), np.array(lat1))
    mb.vertical_quad(a, b, 0.0, h, mat)


def _building(mb: MeshBuilder, mats: MaterialTable, sm: StaticMaterials, rng: np.random.Generator, T: np.ndarray,
              width: float, depth: float, height: float, facing: str, shop_prob: float = 0.65,
              styles=(0.45, 0.35, 0.2)) -> None:
    """A building box at pose T (box centre at ground level + height/2 is set here) with a textured facade.

    ``facing`` is the box face ("+x", "-x", "+y", "-y") that looks onto the street.
    """
    style = rng.choice(3, p=styles)
    spacing = rng.uniform(2.6, 3.6)
    floor_h = rng.uniform(2.9, 3.4)
    ground = rng.uniform(3.9, 4.4)
    params = (spacing, floor_h, ground, rng.uniform(0.42, 0.6))
    shop = 1.0 if rng.random() < shop_prob else 0.0
    lit = rng.uniform(0.03, 0.2)
    if style == 0:
        kind, col, col_b = Kind.BRICK, pick(rng, BRICK_COLOURS), (0.42, 0.4, 0.37)
        side_kind, side_col, side_b = Kind.BRICK, col, col_b
    elif style == 1:
        kind, col = Kind.PLASTER, pick(rng, PLASTER_COLOURS)
        col_b = tuple(np.clip(np.asarray(col) * 0.6 + 0.15, 0, 1))
        side_kind, side_col, side_b = Kind.PLASTER, col, col_b
    else:
        kind, col, col_b = Kind.GLASS, pick(rng, GLASS_TINTS), pick(rng, PLASTER_COLOURS)
        side_kind, side_col, side_b = Kind.PLASTER, col_b, col_b
    front = mats.add(kind, col, col_b, params=params, params2=(height, shop, lit, 0.0),
                     lidar=0.45 if kind != Kind.GLASS else 0.3)
    blank = mats.add(side_kind, side_col, side_b, params=params, params2=(height, 0.0, 0.0, 1.0), lidar=0.45)
    roof = sm.roofs[int(rng.integers(len(sm.roofs)))]
    faces = {"+x": blank, "-x": blank, "+y": blank, "-y": blank, "+z": roof, "-z": None}
    faces[facing] = front
    Tc = T.copy()
    Tc[:3, 3] = T[:3, :3] @ np.array([0.0, 0.0, 0.5 * height]) + T[:3, 3]
    mb.box(Tc, (width, depth, height), faces, ground=T[2, 3] + rd.KERB_HEIGHT)
    # rooftop units
    for _ in range(int(rng.integers(0, 3))):
        size = (rng.uniform(1.0, 3.0), rng.uniform(1.0, 2.5), rng.uniform(0.8, 2.0))
        off = np.array([rng.uniform(-0.3, 0.3) * width, rng.uniform(-0.3, 0.3) * depth, height + size[2] / 2])
        Tu = T.copy()
        Tu[:3, 3] = T[:3, :3] @ off + T[:3, 3]
        mb.box(Tu, size, {"side": sm.concrete, "top": sm.concrete, "bottom": None})


def _yaw_T(road: RoadLayout, s: float, lat: float, z: float, yaw_offset: float = 0.0) -> np.ndarray:
    return road.pose(s, lat, z, yaw_offset)


def _buildings(mb: MeshBuilder, mats: MaterialTable, sm: StaticMaterials, rng: np.random.Generator,
               road: RoadLayout, s_lo: float, s_hi: float) -> None:
    sx = road.crossing_s
    hole = (sx - rd.SIDE_STREET_HALF - rd.SIDE_SIDEWALK - 0.5, sx + rd.SIDE_STREET_HALF + rd.SIDE_SIDEWALK + 0.5)
    front_lat = rd.ROAD_HALF + rd.SIDEWALK
    for side in (-1.0, 1.0):
        facing = "+y" if side < 0 else "-y"
        # front row: terraced houses with the occasional alley
        s = s_lo - 5.0
        while s < s_hi + 5.0:
            width = rng.uniform(7.0, 20.0)
            gap = rng.uniform(1.5, 4.0) if rng.random() < 0.25 else 0.0
            a, b = s, s + width
            s = b + gap
            if b > hole[0] and a < hole[1]:
                # the corner buildings stop at the side street
                if a < hole[0] - 4.0:
                    b = hole[0]
                elif b > hole[1] + 4.0:
                    a = hole[1]
                else:
                    continue
            depth = rng.uniform(10.0, 16.0)
            floors = int(rng.integers(1, 7))
            height = 4.2 + floors * 3.15 + rng.uniform(0.3, 0.9)
            setback = rng.uniform(0.0, 0.6)
            T = _yaw_T(road, 0.5 * (a + b), side * (front_lat + setback + depth / 2), 0.0)
            _building(mb, mats, sm, rng, T, b - a, depth, height, facing)
        # back row: taller blocks behind, for a skyline
        s = s_lo - 20.0
        while s < s_hi + 20.0:
            width = rng.uniform(14.0, 28.0)
            a, b = s, s + width
            s = b + rng.uniform(4.0, 15.0)
            if b > hole[0] - 6 and a < hole[1] + 6:
                continue
            depth = rng.uniform(12.0, 20.0)
            height = rng.uniform(14.0, 48.0)
            T = _yaw_T(road, 0.5 * (a + b), side * (front_lat + 18.0 + rng.uniform(0, 8) + depth / 2), 0.0)
            _building(mb, mats, sm, rng, T, width, depth, height, facing, shop_prob=0.0, styles=(0.2, 0.4, 0.4))
        # along the side street, facing it
        for sign in (-1.0, 1.0):
            lat = front_lat + 18.0
            while lat < rd.ROAD_HALF + SIDE_STREET_LENGTH - 5.0:
                width = rng.uniform(8.0, 16.0)
                depth = rng.uniform(8.0, 12.0)
                s_c = sx + sign * (rd.SIDE_STREET_HALF + rd.SIDE_SIDEWALK + 0.3 + depth / 2)
                T = _yaw_T(road, s_c, side * (lat + width / 2), 0.0)
                # box x runs along the road: the face towards the side street is -x (sign > 0) or +x
                _building(mb, mats, sm, rng, T, depth, width, rng.uniform(7.0, 20.0), "-x" if sign > 0 else "+x")
                lat += width + rng.uniform(0.0, 3.0)
    # closing walls beyond both ends of the street
    for s_end, facing in ((s_lo - 12.0, "+x"), (s_hi + 12.0, "-x")):
        for lat in (-30.0, -10.0, 10.0, 30.0):
            T = _yaw_T(road, s_end, lat, 0.0)
            _building(mb, mats, sm, rng, T, 14.0, 20.0, rng.uniform(12.0, 35.0), facing)


def _furniture(mb: MeshBuilder, sm: StaticMaterials, rng: np.random.Generator, road: RoadLayout, s_lo: float,
               s_hi: float) -> None:
    sx = road.crossing_s
    zone = rd.SIDE_STREET_HALF + rd.SIDE_SIDEWALK + 1.0
    kh = rd.KERB_HEIGHT
    for side in (-1.0, 1.0):
        lamps = np.arange(s_lo + (0.0 if side < 0 else 14.0), s_hi, 28.0)
        lamps = lamps[np.abs(lamps - sx) > zone]
        for s in lamps:
            lat = side * (rd.ROAD_HALF + 0.45)
            T = road.pose(s, lat, kh)
            base = T[:3, 3]
            mb.prism(base + np.array([0, 0, 3.75]), np.array([0.0, 0.0, 1.0]), 0.09, 7.5, 8, sm.pole, sm.pole)
            inward = -side * T[:3, 1]
            arm = T.copy()
            arm[:3, 3] = base + inward * 0.8 + np.array([0, 0, 7.35])
            mb.box(arm, (0.1, 1.6, 0.1), {"side": sm.pole, "top": sm.pole, "bottom": sm.pole})
            head = T.copy()
            head[:3, 3] = base + inward * 1.6 + np.array([0, 0, 7.25])
            mb.box(head, (0.35, 0.7, 0.16), {"side": sm.pole, "top": sm.pole, "bottom": sm.concrete})
        s = s_lo + rng.uniform(0.0, 8.0)
        while s < s_hi:
            near_lamp = np.min(np.abs(lamps - s)) < 2.5 if len(lamps) else False
            if abs(s - sx) > zone + 2.0 and not near_lamp:
                lat = side * (rd.ROAD_HALF + 0.7)
                p = road.pose(s, lat, kh)[:3, 3]
                trunk_h = rng.uniform(2.4, 3.2)
                mb.prism(p + np.array([0, 0, trunk_h / 2]), np.array([0.0, 0.0, 1.0]), rng.uniform(0.12, 0.17), trunk_h,
                         7, sm.bark, None)
                r = rng.uniform(1.9, 2.7)
                rz = rng.uniform(1.6, 2.2)
                canopy = p + np.array([0, 0, trunk_h + 0.75 * rz])
                mb.blob(canopy, (r, r, rz), sm.foliage[int(rng.integers(len(sm.foliage)))], rng)
            s += rng.uniform(9.0, 14.0)
        # bushes in front of the houses
        s = s_lo + rng.uniform(0.0, 10.0)
        while s < s_hi:
            if abs(s - sx) > zone + 1.0:
                lat = side * (rd.ROAD_HALF + rd.SIDEWALK - 0.4)
                p = road.pose(s, lat, kh)[:3, 3]
                mb.blob(p + np.array([0, 0, 0.3]), (rng.uniform(0.6, 1.2), 0.35, rng.uniform(0.4, 0.6)),
                        sm.foliage[int(rng.integers(len(sm.foliage)))], rng, subdivisions=1, roughness=0.3)
            s += rng.uniform(6.0, 20.0)
        # traffic signs facing the traffic of their side, street-name plates at the crossing
        for s in np.arange(s_lo + rng.uniform(10.0, 30.0), s_hi, rng.uniform(38.0, 55.0)):
            if abs(s - sx) < zone + 3.0:
                continue
            lat = side * (rd.ROAD_HALF + 0.35)
            T = road.pose(s, lat, kh)
            style = int(rng.integers(0, 3))
            _sign(mb, sm, T, style)
        for sign in (-1.0, 1.0):
            T = road.pose(sx + sign * (rd.SIDE_STREET_HALF + 0.6), side * (rd.ROAD_HALF + 0.6), kh)
            _sign(mb, sm, T, 1, yaw=np.pi / 2)


def _sign(mb: MeshBuilder, sm: StaticMaterials, T: np.ndarray, style: int, yaw: float = 0.0) -> None:
    w, h = [(0.65, 0.65), (1.1, 0.3), (0.6, 0.6)][style]
    pole_h = 2.3
    base = T[:3, 3]
    mb.prism(base + np.array([0, 0, pole_h / 2]), np.array([0.0, 0.0, 1.0]), 0.035, pole_h, 6, sm.pole, sm.pole)
    P = T.copy()
    c, s = np.cos(yaw), np.sin(yaw)
    P[:3, :3] = T[:3, :3] @ np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    bottom = base[2] + pole_h - 0.1
    P[:3, 3] = base + np.array([0, 0, pole_h - 0.1 + h / 2]) + P[:3, 0] * 0.045
    mat = sm.signs[style]
    mb.box(P, (0.03, w, h), {"+x": mat, "-x": mat, "side": sm.pole, "top": sm.pole, "bottom": sm.pole}, ground=bottom)


def _parked_cars(mb: MeshBuilder, mats: MaterialTable, rng: np.random.Generator, road: RoadLayout, s_lo: float,
                 s_hi: float, reserved: list[tuple[float, float, float]]) -> None:
    """Cars in about half of the 6 m parking bays (none near the crossing or in reserved bays)."""
    sx = road.crossing_s
    for side in (-1.0, 1.0):
        for k in range(int(np.ceil(s_lo / 6.0)), int(np.floor(s_hi / 6.0))):
            s = 6.0 * k + 3.0
            if abs(s - sx) < 16.0 or any(r_side == side and a <= s <= b for r_side, a, b in reserved):
                continue
            if rng.random() > 0.5:
                continue
            size = CAR_SIZES[int(rng.integers(len(CAR_SIZES)))]
            yaw = (0.0 if side < 0 else np.pi) + np.radians(rng.uniform(-2.0, 2.0))
            T = road.pose(s + rng.uniform(-0.3, 0.3), side * rd.PARKING_CENTRE + rng.uniform(-0.1, 0.1),
                          size[2] / 2, yaw_offset=yaw)
            mb.extend(car_mesh(size, mats, rng), T)


def build_street(road: RoadLayout, mats: MaterialTable, rng: np.random.Generator, s_lo: float, s_hi: float,
                 reserved_bays: list[tuple[float, float, float]]) -> MeshBuilder:
    """The whole static scene over road coordinates [s_lo, s_hi] (plus closing walls beyond).

    ``reserved_bays``: (side, s_from, s_to) parking ranges kept free (a parked actor waits there).
    """
    sm = StaticMaterials.create(mats)
    mb = MeshBuilder()
    _road_surface(mb, road, sm, s_lo - 20.0, s_hi + 20.0)
    _buildings(mb, mats, sm, rng, road, s_lo, s_hi)
    _furniture(mb, sm, rng, road, s_lo, s_hi)
    _parked_cars(mb, mats, rng, road, s_lo, s_hi, reserved_bays)
    # the ground beyond the yards, a little below the road so the two never fight
    xy = road.xy
    lo, hi = xy.min(0) - 600.0, xy.max(0) + 600.0
    ground = np.array([[lo[0], lo[1], -0.05], [hi[0], lo[1], -0.05], [hi[0], hi[1], -0.05], [lo[0], hi[1], -0.05]])
    mb.quad(ground, ground[:, :2], sm.grass)
    return mb
