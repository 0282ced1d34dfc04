"""Triangle-mesh building blocks for the procedural scene (numpy, host side).

``MeshBuilder`` collects triangles with a material index, per-corner texture coordinates in
metres on the surface (so procedural textures have a physical scale) and per-corner shading
normals (the face normal, or a smooth one on round parts: canopies, poles, wheels). Vertical faces get
``u`` along the face (increasing to the right as seen from outside) and ``v`` = height above a
given ground level, so facade windows line up with floors; horizontal faces get the two
horizontal axes of the part.
"""

from __future__ import annotations

import numpy as np

_UP = np.array([0.0, 0.0, 1.0])


class MeshBuilder:
    """Accumulates triangles; ``build`` returns the arrays the renderer uploads."""

    def __init__(self) -> None:
        self._verts: list[np.ndarray] = []
        self._faces: list[np.ndarray] = []
        self._uvs: list[np.ndarray] = []
        self._mats: list[np.ndarray] = []
        self._norms: list[np.ndarray] = []
        self._count = 0

    @property
    def num_faces(self) -> int:
        return int(sum(len(f) for f in self._faces))

    def add(self, verts: np.ndarray,  # [N, 3]
            faces: np.ndarray,  # [M, 3] int, indices into verts
            uvs: np.ndarray,  # [M, 3, 2] per-corner texture coordinates (metres)
            mats: np.ndarray | int,  # [M] or one material for all
            normals: np.ndarray | None = None,  # [M, 3, 3] per-corner shading normals; None: flat faces
            ) -> None:
        """Append triangles (vertex indices local to ``verts``)."""
        verts = np.asarray(verts, dtype=np.float64).reshape(-1, 3)
        faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
        if normals is None:
            tri = verts[faces]
            n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
            n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-12)
            normals = np.repeat(n[:, None], 3, axis=1)
        self._verts.append(verts)
        self._faces.append(faces + self._count)
        self._uvs.append(np.asarray(uvs, dtype=np.float64).reshape(-1, 3, 2))
        self._mats.append(np.broadcast_to(np.asarray(mats, dtype=np.int32), (len(faces),)).copy())
        self._norms.append(np.asarray(normals, dtype=np.float64).reshape(-1, 3, 3))
        self._count += len(verts)

    def extend(self, other: "MeshBuilder", transform: np.ndarray | None = None  # [4, 4]
               ) -> None:
        """Append another builder's triangles, optionally moved by a rigid transform."""
        v, f, uv, m, n = other.build(with_normals=True)
        if transform is not None:
            v = v.astype(np.float64) @ transform[:3, :3].T + transform[:3, 3]
            n = n.astype(np.float64) @ transform[:3, :3].T
        self.add(v, f, uv, m, n)

    # -- primitives ----------------------------------------------------------------------

    def quad(self, p: np.ndarray,  # [4, 3] corners in order around the quad
             uv: np.ndarray,  # [4, 2]
             mat: int,
             normals: np.ndarray | None = None,  # [4, 3] per-corner shading normals, None: flat
             ) -> None:
        """Two triangles (0, 1, 2) and (0, 2, 3)."""
        uv = np.asarray(uv, dtype=np.float64)
        idx = [[0, 1, 2], [0, 2, 3]]
        n = None if normals is None else np.asarray(normals, dtype=np.float64)[idx]
        self.add(p, idx, uv[idx], mat, n)

    def vertical_quad(self, a: np.ndarray, b: np.ndarray, z0: float, z1: float, mat: int,
                      ground: float = 0.0, u0: float = 0.0) -> None:
        """Wall from (a, z0) to (b, z1): a and b are xy points, u runs from a to b, v = z - ground."""
        a = np.asarray(a, dtype=np.float64)[:2]
        b = np.asarray(b, dtype=np.float64)[:2]
        length = float(np.linalg.norm(b - a))
        p = np.array([[a[0], a[1], z0], [b[0], b[1], z0], [b[0], b[1], z1], [a[0], a[1], z1]])
        uv = np.array([[u0, z0 - ground], [u0 + length, z0 - ground], [u0 + length, z1 - ground], [u0, z1 - ground]])
        self.quad(p, uv, mat)

    def box(self, T: np.ndarray,  # [4, 4] box frame -> output frame, box centred at its origin
            size: tuple[float, float, float], mats: dict[str, int], ground: float | None = None) -> None:
        """A box of ``size`` (x, y, z extents) with materials per face.

        ``mats`` keys: "+x", "-x", "+y", "-y", "+z", "-z" (missing faces fall back to "side" for
        the vertical ones and "top"/"bottom" for +z/-z; a face whose material is None is skipped).
        ``ground`` sets v = 0 of the vertical faces (default: the box bottom).
        """
        hx, hy, hz = (0.5 * s for s in size)
        R, t = T[:3, :3], T[:3, 3]
        corners = np.array([[sx * hx, sy * hy, sz * hz] for sz in (-1, 1) for sy in (-1, 1) for sx in (-1, 1)])
        w = corners @ R.T + t  # index = (sz>0)*4 + (sy>0)*2 + (sx>0)
        z_base = (t[2] - hz) if ground is None else ground
        faces = {
            "+x": [1, 3, 7, 5], "-x": [2, 0, 4, 6], "+y": [3, 2, 6, 7], "-y": [0, 1, 5, 4],
            "+z": [4, 5, 7, 6], "-z": [0, 2, 3, 1],
        }
        for name, idx in faces.items():
            fallback = "side" if name[1] in "xy" else ("top" if name == "+z" else "bottom")
            mat = mats.get(name, mats.get(fallback))
            if mat is None:
                continue
            p = w[idx]
            if name[1] in "xy":
                # corners are (bottom-left, bottom-right, top-right, top-left) seen from outside
                self.vertical_quad(p[0], p[1], p[0][2], p[3][2], mat, ground=z_base)
            else:
                ax = R[:, 0]
                ay = R[:, 1]
                uv = np.stack([p @ ax, p @ ay], axis=1)
                self.quad(p, uv - uv.min(axis=0), mat)

    def prism(self, center: np.ndarray,  # [3] centre of the axis segment
              axis: np.ndarray,  # [3] unit axis
              radius: float, length: float, sides: int, side_mat: int, cap_mat: int | None,
              cap_uv_centered: bool = True) -> None:
        """A regular n-gon prism (poles, trunks, wheels). Caps get uv centred on the axis (metres)."""
        axis = np.asarray(axis, dtype=np.float64)
        axis = axis / np.linalg.norm(axis)
        helper = np.array([1.0, 0.0, 0.0]) if abs(axis[0]) < 0.9 else np.array([0.0, 0.0, 1.0])
        e1 = np.cross(axis, helper)
        e1 /= np.linalg.norm(e1)
        e2 = np.cross(axis, e1)
        ang = 2 * np.pi * np.arange(sides + 1) / sides
        ring = np.cos(ang)[:, None] * e1 + np.sin(ang)[:, None] * e2  # [sides+1, 3]
        c0 = np.asarray(center) - 0.5 * length * axis
        c1 = np.asarray(center) + 0.5 * length * axis
        arc = radius * ang
        for k in range(sides):
            p = np.array([c0 + radius * ring[k], c0 + radius * ring[k + 1], c1 + radius * ring[k + 1],
                          c1 + radius * ring[k]])
            # radial shading normals: the prism shades like the cylinder it stands for
            normals = np.array([ring[k], ring[k + 1], ring[k + 1], ring[k]])
            self.quad(p, [[arc[k], 0.0], [arc[k + 1], 0.0], [arc[k + 1], length], [arc[k], length]], side_mat,
                      normals)
        if cap_mat is None:
            return
        for c, flip in ((c0, True), (c1, False)):
            pts = c + radius * ring[:-1]
            verts = np.concatenate([c[None], pts])
            idx = np.arange(1, sides + 1)
            tri = np.stack([np.zeros(sides, dtype=int), idx, np.roll(idx, -1)], axis=1)
            if flip:
                tri = tri[:, [0, 2, 1]]
            local = np.stack([(verts - c) @ e1, (verts - c) @ e2], axis=1)
            if not cap_uv_centered:
                local = local - local.min(axis=0)
            self.add(verts, tri, local[tri], cap_mat)

    def blob(self, center: np.ndarray,  # [3]
             radii: tuple[float, float, float], mat: int, rng: np.random.Generator, subdivisions: int = 2,
             roughness: float = 0.25) -> None:
        """A lumpy ellipsoid (tree canopies, bushes): an icosphere with random low-frequency bumps."""
        v, f = icosphere(subdivisions)
        # a few random lobes make the outline irregular
        bump = np.zeros(len(v))
        for _ in range(6):
            dirn = rng.normal(size=3)
            dirn /= np.linalg.norm(dirn)
            bump += rng.uniform(0.3, 1.0) * np.maximum(v @ dirn, 0.0) ** 3
        bump = 1.0 + roughness * (bump / max(bump.max(), 1e-9) - 0.5) + rng.uniform(-0.04, 0.04, len(v))
        p = v * bump[:, None] * np.asarray(radii) + np.asarray(center)
        # Each face takes the world plane it faces most (a cube map): no stretched texture anywhere.
        tri = p[f]  # [F, 3, 3]
        n = np.abs(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]))
        axis = n.argmax(axis=1)
        keep = np.array([[1, 2], [0, 2], [0, 1]])[axis]  # [F, 2] the two other coordinates
        uv = np.take_along_axis(tri, keep[:, None, :], axis=2) + 17.0 * axis[:, None, None]
        # smooth normals of the ellipsoid (gradient of its implicit function)
        vn = v / np.asarray(radii)
        vn /= np.linalg.norm(vn, axis=1, keepdims=True)
        self.add(p, f, uv, mat, vn[f])

    # -- output --------------------------------------------------------------------------

    def build(self, with_normals: bool = False) -> tuple[np.ndarray, ...]:
        """(vertices [V, 3] float32, faces [F, 3] int32, face_uv [F, 3, 2] float32, face_material [F] int32)
        and, with ``with_normals``, face_normal [F, 3, 3] float32 (per-corner unit shading normals)."""
        if not self._verts:
            out = (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32), np.zeros((0, 3, 2), np.float32),
                   np.zeros(0, np.int32), np.zeros((0, 3, 3), np.float32))
        else:
            out = (np.concatenate(self._verts).astype(np.float32), np.concatenate(self._faces).astype(np.int32),
                   np.concatenate(self._uvs).astype(np.float32), np.concatenate(self._mats).astype(np.int32),
                   np.concatenate(self._norms).astype(np.float32))
        return out if with_normals else out[:4]


def icosphere(subdivisions: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit icosphere: vertices [V, 3] and faces [F, 3] (outward winding)."""
    t = (1.0 + 5 ** 0.5) / 2.0
    v = [[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t], [0, -1, -t], [0, 1, -t],
         [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]]
    f = [[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9], [5, 11, 4], [11, 10, 2],
         [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9], [4, 9, 5], [2, 4, 11],
         [6, 2, 10], [8, 6, 7], [9, 8, 1]]
    verts = [np.array(p, dtype=np.float64) / np.linalg.norm(p) for p in v]
    faces = f
    for _ in range(subdivisions):
        cache: dict[tuple[int, int], int] = {}

        def mid(a: int, b: int) -> int:
            key = (min(a, b), max(a, b))
            if key not in cache:
                m = verts[a] + verts[b]
                verts.append(m / np.linalg.norm(m))
                cache[key] = len(verts) - 1
            return cache[key]

        new = []
        for a, b, c in faces:
            ab, bc, ca = mid(a, b), mid(b, c), mid(c, a)
            new += [[a, ab, ca], [b, bc, ab], [c, ca, bc], [ab, bc, ca]]
        faces = new
    return np.array(verts), np.array(faces, dtype=np.int64)


def yaw_matrix(yaw: float) -> np.ndarray:
    """Rotation about +z by ``yaw`` radians. Returns [3, 3]."""
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def transform(R: np.ndarray, t) -> np.ndarray:
    """4x4 rigid transform from a rotation [3, 3] and a translation [3]."""
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = t
    return T
