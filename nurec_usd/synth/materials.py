"""Material table of the procedural scene: what each triangle looks like to a camera and a lidar.

A material is a kind (one of the procedural texture functions in ``warp_kernels/synth_raycast.py``,
whose numbers ``Kind`` mirrors), two linear RGB albedo colours, two parameter vectors whose
meaning depends on the kind, and a lidar reflectivity (the intensity of a head-on return).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


class Kind(IntEnum):
    """Procedural texture kinds; the numbers match the ``K_*`` constants of the Warp module."""

    ASPHALT = 1  # params: (markings 0/1, road half width, travel-lane edge, -)
    CROSSWALK = 2  # params: (-, road half width, -, -)
    SIDEWALK = 3  # params: (slab size, -, -, -); colour_b = grout
    KERB = 4
    GRASS = 5  # colour_b = dry grass
    BRICK = 6  # facades: params (window spacing, floor height, ground floor height, window fraction)
    PLASTER = 7  #          params2 (building height, shop front 0/1, lit window fraction, blank wall 0/1)
    GLASS = 8
    ROOF = 9
    METAL = 10
    SIGN = 11  # params: (style 0 round / 1 plate / 2 arrow, width, height, -)
    FOLIAGE = 12  # colour_b = second leaf colour
    BARK = 13
    PAINT = 14  # params: (door seam spacing, sill height, belt height, -) above the box bottom
    CAR_FRONT = 15  # params: (face width, bumper top, -, -)
    CAR_REAR = 16
    CAR_GLASS = 17
    TYRE = 18  # params: (wheel radius for the wheel faces, or 0 for the tread)
    CLOTH = 19  # params: (neck height, hip height, -, -); colour_b = skin
    CONCRETE = 20  # params: (joint spacing or 0, -, -, -)


@dataclass
class MaterialTable:
    """Materials collected while the scene is built; ``add`` returns the index that faces use."""

    kind: list[int] = field(default_factory=list)
    color_a: list[tuple[float, float, float]] = field(default_factory=list)
    color_b: list[tuple[float, float, float]] = field(default_factory=list)
    params: list[tuple[float, float, float, float]] = field(default_factory=list)
    params2: list[tuple[float, float, float, float]] = field(default_factory=list)
    lidar: list[float] = field(default_factory=list)

    def add(self, kind: Kind, color_a, color_b=(0.0, 0.0, 0.0), params=(0.0, 0.0, 0.0, 0.0),
            params2=(0.0, 0.0, 0.0, 0.0), lidar: float = 0.2) -> int:
        """Append a material and return its index."""
        self.kind.append(int(kind))
        self.color_a.append(tuple(float(c) for c in color_a))
        self.color_b.append(tuple(float(c) for c in color_b))
        self.params.append(tuple(float(p) for p in params))
        self.params2.append(tuple(float(p) for p in params2))
        self.lidar.append(float(lidar))
        return len(self.kind) - 1

    def __len__(self) -> int:
        return len(self.kind)

    def arrays(self) -> dict[str, np.ndarray]:
        """The table as arrays: kind [M] int32, color_a/color_b [M, 3], params/params2 [M, 4], lidar [M] float32."""
        return {
            "kind": np.asarray(self.kind, dtype=np.int32),
            "color_a": np.asarray(self.color_a, dtype=np.float32).reshape(-1, 3),
            "color_b": np.asarray(self.color_b, dtype=np.float32).reshape(-1, 3),
            "params": np.asarray(self.params, dtype=np.float32).reshape(-1, 4),
            "params2": np.asarray(self.params2, dtype=np.float32).reshape(-1, 4),
            "lidar": np.asarray(self.lidar, dtype=np.float32),
        }


# Palettes (linear albedo). Real-world albedos are low: asphalt ~0.1, brick ~0.25, white paint ~0.7.
BRICK_COLOURS = [(0.36, 0.12, 0.07), (0.42, 0.2, 0.11), (0.3, 0.1, 0.07), (0.5, 0.3, 0.18), (0.26, 0.14, 0.1)]
PLASTER_COLOURS = [(0.62, 0.55, 0.42), (0.55, 0.5, 0.45), (0.6, 0.42, 0.3), (0.4, 0.45, 0.5), (0.68, 0.64, 0.56),
                   (0.5, 0.55, 0.4), (0.62, 0.38, 0.34)]
GLASS_TINTS = [(0.07, 0.12, 0.16), (0.05, 0.09, 0.1), (0.1, 0.12, 0.14), (0.06, 0.1, 0.08)]
CAR_COLOURS = [(0.75, 0.75, 0.74), (0.03, 0.03, 0.035), (0.4, 0.41, 0.43), (0.18, 0.18, 0.2), (0.55, 0.05, 0.04),
               (0.06, 0.13, 0.4), (0.05, 0.2, 0.12), (0.65, 0.48, 0.05), (0.5, 0.25, 0.06), (0.6, 0.6, 0.58)]
CLOTH_COLOURS = [(0.1, 0.12, 0.3), (0.45, 0.08, 0.07), (0.5, 0.45, 0.35), (0.06, 0.06, 0.07), (0.15, 0.35, 0.2),
                 (0.6, 0.55, 0.2)]
SKIN_COLOURS = [(0.55, 0.38, 0.28), (0.35, 0.22, 0.15), (0.6, 0.45, 0.35), (0.2, 0.13, 0.09)]


def pick(rng: np.random.Generator, palette: list) -> tuple[float, float, float]:
    """A palette entry, slightly varied so that no two buildings or cars are quite the same."""
    base = np.asarray(palette[int(rng.integers(len(palette)))])
    return tuple(np.clip(base * rng.uniform(0.88, 1.12, 3), 0.0, 0.95))
