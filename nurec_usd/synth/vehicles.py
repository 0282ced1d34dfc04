"""Meshes of cars, vans/trucks and pedestrians, built in their own box frame.

The box frame is the capture format's: origin at the box centre, x forward (length), y left
(width), z up; the box spans ``[-l/2, l/2] x [-w/2, w/2] x [-h/2, h/2]`` and every part stays
inside it (``check_inside``), so a tracked box holds its whole actor. Vertical faces get v =
height above the box bottom (the ground), which the car-paint and clothing textures use.
"""

from __future__ import annotations

import numpy as np

from nurec_usd.synth.geometry import MeshBuilder, transform
from nurec_usd.synth.materials import CAR_COLOURS, CLOTH_COLOURS, SKIN_COLOURS, Kind, MaterialTable, pick

CAR_SIZES = [(4.5, 1.85, 1.5), (4.2, 1.8, 1.45), (4.8, 1.9, 1.55), (4.0, 1.75, 1.5), (4.9, 1.95, 1.75)]
TRUCK_SIZES = [(6.8, 2.3, 2.9), (7.4, 2.4, 3.1)]
PEDESTRIAN_SIZE = (0.55, 0.65, 1.78)


def _frustum(mb: MeshBuilder, bottom: tuple[float, float, float, float], top: tuple[float, float, float, float],
             z0: float, z1: float, ground: float, mats: dict[str, int]) -> None:
    """A cabin: bottom rectangle (x0, x1, y half, -) at z0 and a smaller top rectangle at z1."""
    bx0, bx1, by, _ = bottom
    tx0, tx1, ty, _ = top
    b = np.array([[bx0, -by, z0], [bx1, -by, z0], [bx1, by, z0], [bx0, by, z0]])
    t = np.array([[tx0, -ty, z1], [tx1, -ty, z1], [tx1, ty, z1], [tx0, ty, z1]])

    def face(p: np.ndarray, mat: int) -> None:
        # uv: along the face's bottom edge and height above the ground
        e = p[1] - p[0]
        e = e / np.linalg.norm(e)
        u = (p - p[0]) @ e
        mb.quad(p, np.stack([u, p[:, 2] - ground], 1), mat)

    face(np.array([b[1], b[2], t[2], t[1]]), mats["front"])  # windscreen
    face(np.array([b[3], b[0], t[0], t[3]]), mats["rear"])
    face(np.array([b[0], b[1], t[1], t[0]]), mats["side"])
    face(np.array([b[2], b[3], t[3], t[2]]), mats["side"])
    roof = np.array([t[0], t[1], t[2], t[3]])
    mb.quad(roof, roof[:, :2] - roof[:, :2].min(0), mats["roof"])


def _wheels(mb: MeshBuilder, xs: tuple[float, ...], half_track: float, radius: float, width: float,
            bottom: float, tyre: int, rim: int) -> None:
    for x in xs:
        for side in (-1.0, 1.0):
            c = np.array([x, side * (half_track - width / 2), bottom + radius])
            mb.prism(c, np.array([0.0, 1.0, 0.0]), radius, width, 12, tyre, rim)


def car_mesh(size: tuple[float, float, float], mats: MaterialTable, rng: np.random.Generator) -> MeshBuilder:
    """A sedan/SUV-like car filling a box of ``size`` (length, width, height)."""
    l, w, h = size
    bottom = -h / 2
    paint_col = pick(rng, CAR_COLOURS)
    clearance = 0.17
    belt = 0.58 * h  # body top above the ground
    body_w = w - 0.1
    paint = mats.add(Kind.PAINT, paint_col, params=(l / 4.0, clearance + 0.12, belt - 0.1, 0.0), lidar=0.45)
    hood = mats.add(Kind.PAINT, paint_col, params=(1.0, -10.0, -10.0, 0.0), lidar=0.45)
    front = mats.add(Kind.CAR_FRONT, paint_col, params=(body_w, clearance, 0.0, 0.0), lidar=0.45)
    rear = mats.add(Kind.CAR_REAR, paint_col, params=(body_w, clearance, 0.0, 0.0), lidar=0.45)
    glass = mats.add(Kind.CAR_GLASS, (0.03, 0.035, 0.04), lidar=0.08)
    tread = mats.add(Kind.TYRE, (0.03, 0.03, 0.03), params=(0.0, 0.0, 0.0, 0.0), lidar=0.1)
    radius = 0.31 * min(max(h / 1.5, 0.95), 1.15)
    rim = mats.add(Kind.TYRE, (0.03, 0.03, 0.03), params=(radius, 0.0, 0.0, 0.0), lidar=0.3)

    mb = MeshBuilder()
    body = transform(np.eye(3), (0.0, 0.0, bottom + clearance + 0.5 * (belt - clearance)))
    mb.box(body, (l, body_w, belt - clearance), {"+x": front, "-x": rear, "side": paint, "+z": hood, "-z": tread},
           ground=bottom)
    cab_bottom = (-0.36 * l, 0.2 * l, body_w / 2 - 0.06, 0.0)
    cab_top = (-0.29 * l, 0.03 * l, body_w / 2 - 0.2, 0.0)
    _frustum(mb, cab_bottom, cab_top, bottom + belt, h / 2, bottom,
             {"front": glass, "rear": glass, "side": glass, "roof": hood})
    axle = l / 2 - 0.2 * l
    _wheels(mb, (axle, -axle), w / 2, radius, 0.21, bottom, tread, rim)
    return mb


def truck_mesh(size: tuple[float, float, float], mats: MaterialTable, rng: np.random.Generator) -> MeshBuilder:
    """A box van: a cab in front of a tall cargo box."""
    l, w, h = size
    bottom = -h / 2
    cab_col = pick(rng, CAR_COLOURS)
    box_col = tuple(np.clip(np.array([0.72, 0.72, 0.7]) * rng.uniform(0.85, 1.05), 0, 1))
    clearance = 0.35
    cab_len = 2.0
    cab_h = 2.35
    paint = mats.add(Kind.PAINT, cab_col, params=(1.0, clearance + 0.2, 1.35, 0.0), lidar=0.45)
    roof = mats.add(Kind.PAINT, cab_col, params=(1.0, -10.0, -10.0, 0.0), lidar=0.45)
    front = mats.add(Kind.CAR_FRONT, cab_col, params=(w - 0.1, clearance + 0.1, 0.0, 0.0), lidar=0.45)
    rear = mats.add(Kind.CAR_REAR, box_col, params=(w, clearance + 0.1, 0.0, 0.0), lidar=0.5)
    cargo = mats.add(Kind.CONCRETE, box_col, params=(0.6, 0.0, 0.0, 0.0), lidar=0.55)  # panel joints
    glass = mats.add(Kind.CAR_GLASS, (0.03, 0.035, 0.04), lidar=0.08)
    tread = mats.add(Kind.TYRE, (0.03, 0.03, 0.03), lidar=0.1)
    radius = 0.45
    rim = mats.add(Kind.TYRE, (0.03, 0.03, 0.03), params=(radius, 0.0, 0.0, 0.0), lidar=0.3)

    mb = MeshBuilder()
    x_cab = l / 2 - cab_len / 2
    lower = 1.35
    mb.box(transform(np.eye(3), (x_cab, 0.0, bottom + clearance + 0.5 * (lower - clearance))),
           (cab_len, w - 0.1, lower - clearance), {"+x": front, "-x": paint, "side": paint, "+z": roof, "-z": tread},
           ground=bottom)
    _frustum(mb, (l / 2 - cab_len, l / 2 - 0.05, (w - 0.1) / 2, 0.0), (l / 2 - cab_len, l / 2 - 0.45, (w - 0.2) / 2,
             0.0), bottom + lower, bottom + cab_h, bottom, {"front": glass, "rear": paint, "side": glass, "roof": roof})
    box_len = l - cab_len - 0.15
    mb.box(transform(np.eye(3), (-l / 2 + box_len / 2, 0.0, bottom + clearance + 0.5 * (h - clearance))),
           (box_len, w, h - clearance), {"+x": cargo, "-x": rear, "side": cargo, "+z": cargo, "-z": tread},
           ground=bottom)
    # wheels tucked under the full-width cargo box (never coplanar with its sides)
    _wheels(mb, (l / 2 - 1.1, -l / 2 + 1.3, -l / 2 + 2.3), w / 2 - 0.08, radius, 0.3, bottom, tread, rim)
    return mb


def pedestrian_mesh(size: tuple[float, float, float], mats: MaterialTable, rng: np.random.Generator) -> MeshBuilder:
    """A standing person: legs, torso, arms and head (clothes and skin from one material)."""
    l, w, h = size
    bottom = -h / 2
    hip, neck = 0.86, 1.5
    cloth = mats.add(Kind.CLOTH, pick(rng, CLOTH_COLOURS), pick(rng, SKIN_COLOURS), params=(neck, hip, 0.0, 0.0),
                     lidar=0.35)
    mats_all = {"side": cloth, "top": cloth, "bottom": cloth}
    mb = MeshBuilder()

    def part(center, extent):
        mb.box(transform(np.eye(3), (center[0], center[1], bottom + center[2])), extent, mats_all, ground=bottom)

    stride = rng.uniform(-0.12, 0.12)
    part((stride, 0.1, hip / 2), (0.15, 0.15, hip))
    part((-stride, -0.1, hip / 2), (0.15, 0.15, hip))
    part((0.0, 0.0, 0.5 * (hip + neck)), (0.26, 0.42, neck - hip))
    part((0.02, 0.26, 1.17), (0.1, 0.1, 0.62))
    part((-0.02, -0.26, 1.17), (0.1, 0.1, 0.62))
    part((0.0, 0.0, neck + 0.13), (0.2, 0.18, 0.25))
    return mb


def check_inside(mb: MeshBuilder, size: tuple[float, float, float], tol: float = 1e-6) -> None:
    """Raise if any vertex lies outside the box ``size`` centred at the origin."""
    v = mb.build()[0]
    half = np.asarray(size) / 2 + tol
    if len(v) and (np.abs(v) > half).any():
        worst = np.abs(v).max(axis=0)
        raise AssertionError(f"actor geometry leaves its box: extent {worst * 2} > size {size}")
