"""The street's centreline and its cross-section: road coordinates (s, lat) to world.

``s`` is the arc length along the centreline (metres), ``lat`` the signed lateral offset (positive
to the left of the +s direction). Traffic drives on the right: +s in the lane at ``-LANE_CENTRE``,
-s in the lane at ``+LANE_CENTRE``. The centreline alternates straight pieces and circular arcs,
and is straight around the crossing so that side streets meet it at right angles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Cross-section (metres). |lat| < LANE_EDGE: travel lanes; LANE_EDGE..ROAD_HALF: parking strips.
LANE_CENTRE = 1.75
LANE_EDGE = 3.5
ROAD_HALF = 5.8
PARKING_CENTRE = 0.5 * (LANE_EDGE + ROAD_HALF)
KERB_HEIGHT = 0.15
SIDEWALK = 3.6
SIDE_STREET_HALF = 3.5  # side streets: two 3.5 m lanes
SIDE_SIDEWALK = 2.5
CROSSING_STRAIGHT = 45.0  # the centreline is straight within this distance of the crossing
TURN_RADIUS = 6.0


@dataclass
class RoadLayout:
    """A centreline sampled every ``step`` metres from ``s_min`` to ``s_max``."""

    s: np.ndarray  # [N] arc length
    xy: np.ndarray  # [N, 2] centreline points (world)
    heading: np.ndarray  # [N] radians, direction of +s
    crossing_s: float

    @classmethod
    def generate(cls, rng: np.random.Generator, s_min: float, s_max: float, crossing_s: float,
                 step: float = 0.5) -> "RoadLayout":
        """Random gentle curves (radius 90-220 m, 12-35 degrees) between straights, straight at the crossing."""
        s = np.arange(s_min, s_max + step, step)
        curvature = np.zeros_like(s)
        pos = s_min
        straight = True
        while pos < s_max:
            if straight:
                length = rng.uniform(40.0, 110.0)
            else:
                radius = rng.uniform(90.0, 220.0)
                angle = np.radians(rng.uniform(12.0, 35.0))
                length = radius * angle
                sign = 1.0 if rng.random() < 0.5 else -1.0
                curvature[(s >= pos) & (s < pos + length)] = sign / radius
            pos += length
            straight = not straight
        curvature[np.abs(s - crossing_s) < CROSSING_STRAIGHT] = 0.0
        heading = np.concatenate([[0.0], np.cumsum(0.5 * (curvature[1:] + curvature[:-1]) * step)])
        mid = heading[:-1] + 0.5 * np.diff(heading)
        xy = np.concatenate([[[0.0, 0.0]], np.cumsum(step * np.stack([np.cos(mid), np.sin(mid)], 1), axis=0)])
        return cls(s=s, xy=xy, heading=heading, crossing_s=float(crossing_s))

    def apply(self, T: np.ndarray  # [4, 4] (only the yaw and xy translation are used)
              ) -> None:
        """Move the whole layout rigidly in the plane (e.g. to put the ego's start at the origin)."""
        R = T[:2, :2]
        self.xy = self.xy @ R.T + T[:2, 3]
        self.heading = self.heading + np.arctan2(T[1, 0], T[0, 0])

    def frame(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Centreline point [..., 2] and heading [...] at arc lengths ``s`` (clamped to the layout)."""
        s = np.clip(np.asarray(s, dtype=np.float64), self.s[0], self.s[-1])
        x = np.interp(s, self.s, self.xy[:, 0])
        y = np.interp(s, self.s, self.xy[:, 1])
        h = np.interp(s, self.s, self.heading)
        return np.stack([x, y], -1), h

    def to_world(self, s: np.ndarray, lat: np.ndarray) -> np.ndarray:
        """World xy [..., 2] of road coordinates (s, lat)."""
        p, h = self.frame(s)
        lat = np.asarray(lat, dtype=np.float64)
        return p + lat[..., None] * np.stack([-np.sin(h), np.cos(h)], -1)

    def pose(self, s: float, lat: float, z: float = 0.0, yaw_offset: float = 0.0) -> np.ndarray:
        """4x4 pose at (s, lat) with x along +s (rotated by ``yaw_offset``), z up. Returns [4, 4]."""
        p = self.to_world(np.array(s), np.array(lat))
        _, h = self.frame(np.array(s))
        yaw = float(h) + yaw_offset
        T = np.eye(4)
        T[:2, :2] = [[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]]
        T[:3, 3] = [p[0], p[1], z]
        return T
