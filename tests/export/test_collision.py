"""Collision mesh: static Gaussians on known surfaces -> a mesh on those surfaces, actors left out.

The scene is built by hand in the world of samples/tiny (the rig drives from x = 0 to 8.5 m
along +x, cameras 1.2-1.45 m up): flat opaque Gaussians on the ground z = 0, on a box ahead
of the rig and on a wall to its left, plus an actor (a car-sized box of Gaussians with a
track) to the front right that must not become part of the mesh.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from conftest import REPO, assert_openusd_valid

pytest.importorskip("pxr")
o3d = pytest.importorskip("open3d")

from nurec_usd.export.usd_schema import register_schema  # noqa: E402

register_schema()  # before anything below uses pxr

from pxr import Usd, UsdGeom, UsdPhysics  # noqa: E402

from nurec_usd.export import collision  # noqa: E402
from nurec_usd.export.collision import collision_mesh, write_collision  # noqa: E402
from nurec_usd.scene.gaussians import ActorTrack, GaussianParams, Scene  # noqa: E402

VOXEL = 0.15
TOL = 2 * VOXEL  # how far from the true surfaces the mesh may stray
SPACING = 0.2  # between Gaussian centres on every surface
# Rectangles (normal axis, its value, (lo, hi) of the other two axes in increasing axis order)
GROUND = (2, 0.0, ((-10.0, 30.0), (-10.0, 10.0)))
WALL = (1, 6.0, ((0.0, 20.0), (0.0, 3.0)))
BOX_LO, BOX_HI = np.array([14.0, -1.5, 0.0]), np.array([16.0, 1.5, 2.0])
ACTOR_AT, ACTOR_SIZE = np.array([8.0, -3.5, 0.75]), np.array([4.0, 2.0, 1.5])
# the box's faces above ground, as rectangles
BOX_FACES = [(0, BOX_LO[0], ((BOX_LO[1], BOX_HI[1]), (BOX_LO[2], BOX_HI[2]))),
             (0, BOX_HI[0], ((BOX_LO[1], BOX_HI[1]), (BOX_LO[2], BOX_HI[2]))),
             (1, BOX_LO[1], ((BOX_LO[0], BOX_HI[0]), (BOX_LO[2], BOX_HI[2]))),
             (1, BOX_HI[1], ((BOX_LO[0], BOX_HI[0]), (BOX_LO[2], BOX_HI[2]))),
             (2, BOX_HI[2], ((BOX_LO[0], BOX_HI[0]), (BOX_LO[1], BOX_HI[1])))]
SURFACES = [GROUND, WALL, *BOX_FACES]
# a flat Gaussian's thin axis is its local z; these rotations (w, x, y, z) turn it onto each world axis
NORMAL_QUAT = {0: (math.sqrt(0.5), 0.0, math.sqrt(0.5), 0.0), 1: (math.sqrt(0.5), -math.sqrt(0.5), 0.0, 0.0),
               2: (1.0, 0.0, 0.0, 0.0)}


def _rect_points(rect, spacing: float) -> np.ndarray:
    """Grid points on a rectangle. Returns [M, 3]."""
    axis, value, ((a0, a1), (b0, b1)) = rect
    a = np.arange(a0, a1 + 1e-9, spacing)
    b = np.arange(b0, b1 + 1e-9, spacing)
    aa, bb = np.meshgrid(a, b, indexing="ij")
    others = [k for k in range(3) if k != axis]
    p = np.zeros((aa.size, 3))
    p[:, axis] = value
    p[:, others[0]], p[:, others[1]] = aa.ravel(), bb.ravel()
    return p


def _distance_to_rects(p: np.ndarray, rects) -> np.ndarray:  # p: [M, 3]
    """Euclidean distance from points to the nearest of the rectangles. Returns [M]."""
    best = np.full(len(p), np.inf)
    for axis, value, bounds in rects:
        others = [k for k in range(3) if k != axis]
        d2 = (p[:, axis] - value) ** 2
        for k, (lo, hi) in zip(others, bounds):
            d2 = d2 + np.maximum(0.0, np.maximum(lo - p[:, k], p[:, k] - hi)) ** 2
        best = np.minimum(best, np.sqrt(d2))
    return best


def _flat_gaussians(rects, drop=None) -> GaussianParams:
    """Opaque flat Gaussians (thin along each rectangle's normal) on a grid over each rectangle."""
    means, quats = [], []
    for rect in rects:
        p = _rect_points(rect, SPACING)
        if drop is not None:
            p = p[~drop(p)]
        means.append(p)
        quats.append(np.tile(NORMAL_QUAT[rect[0]], (len(p), 1)))
    means_t = torch.from_numpy(np.concatenate(means)).float()
    n = len(means_t)
    scales = torch.tensor([0.6 * SPACING, 0.6 * SPACING, 0.01]).expand(n, 3)
    return GaussianParams.create(means_t, scales, torch.full((n, 3), 0.5), opacity=0.99,
                                 quats=torch.from_numpy(np.concatenate(quats)).float())


def _inside_box(p: np.ndarray) -> np.ndarray:
    return np.all((p >= BOX_LO) & (p <= BOX_HI), axis=1)


@pytest.fixture(scope="module")
def scene() -> Scene:
    from nurec_usd.capture.loader import load_capture
    from nurec_usd.scene.rig import describe_rig

    rig = describe_rig(load_capture(REPO / "samples" / "tiny"))
    ground = _flat_gaussians([GROUND], drop=_inside_box)  # no ground under the box
    others = _flat_gaussians([WALL, *BOX_FACES])
    static = GaussianParams(**{k: torch.cat((getattr(ground, k), getattr(others, k))) for k in GaussianParams.FIELDS})
    half = ACTOR_SIZE / 2  # the actor: a box of Gaussians in its own frame, parked at ACTOR_AT
    actor_faces = [(ax, s * half[ax], tuple((-half[k], half[k]) for k in range(3) if k != ax))
                   for ax in range(3) for s in (-1.0, 1.0)]
    actors = _flat_gaussians(actor_faces)
    T = torch.eye(4, dtype=torch.float64).repeat(2, 1, 1)
    T[:, :3, 3] = torch.from_numpy(ACTOR_AT)
    track = ActorTrack("car_00", "car", ACTOR_SIZE.tolist(), torch.tensor([0.0, 1.0], dtype=torch.float64), T)
    return Scene(static=static, actors=actors, actor_index=torch.zeros(len(actors), dtype=torch.int32),
                 tracks=[track], sky=torch.zeros(3, 4, 8), camera_ids=[c["id"] for c in rig["cameras"]],
                 exposure=torch.zeros(len(rig["cameras"]), 6), metadata={"rig": rig})


@pytest.fixture(scope="module")
def fused(scene):
    calls = []
    vertices, faces = collision_mesh(scene, voxel_m=VOXEL, max_views=12, width=160, max_depth_m=25.0,
                                     progress=lambda done, total: calls.append((done, total)))
    return vertices, faces, calls


def _distance_to_mesh(vertices: np.ndarray, faces: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Distance from points [M, 3] to the triangle mesh. Returns [M]."""
    rc = o3d.t.geometry.RaycastingScene()
    rc.add_triangles(o3d.core.Tensor(vertices.astype(np.float32)), o3d.core.Tensor(faces.astype(np.uint32)))
    return rc.compute_distance(o3d.core.Tensor(points.astype(np.float32))).numpy()


def _surface_samples(vertices: np.ndarray, faces: np.ndarray, per_face: int = 4, seed: int = 0) -> np.ndarray:
    """Random points on every triangle (catches large spurious triangles, not only stray vertices). [F * k, 3]"""
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(3), size=(len(faces), per_face))  # [F, k, 3] barycentric
    return np.einsum("fkj,fjd->fkd", w, vertices[faces]).reshape(-1, 3)


def test_mesh_is_a_valid_triangle_mesh(fused):
    vertices, faces, calls = fused
    assert vertices.dtype == np.float32 and vertices.ndim == 2 and vertices.shape[1] == 3
    assert faces.dtype == np.int32 and faces.ndim == 2 and faces.shape[1] == 3
    assert len(faces) > 100
    assert faces.min() >= 0 and faces.max() < len(vertices)
    assert len(np.unique(faces)) == len(vertices), "unreferenced vertices"
    assert np.all((faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2]))
    # manifold: every edge has at most two faces (asset validators reject pinched meshes)
    edges = np.sort(faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    _, uses = np.unique(edges, axis=0, return_counts=True)
    assert uses.max() <= 2
    assert _same_direction_edges(faces) == 0, "inconsistent winding"
    # one progress call per view, in order, ending at the total
    assert calls == [(k + 1, 12) for k in range(12)]


def _same_direction_edges(faces: np.ndarray) -> int:  # [F, 3]
    """Edges that two faces run in the same direction: 0 where the winding is consistent."""
    _, uses = np.unique(faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=0, return_counts=True)
    return int((uses > 1).sum())


def test_a_flipped_face_is_turned_back_and_the_pieces_keep_their_winding():
    """Two closed boxes, outward: one face of the first flipped (as decimation can leave it), the
    second flipped all over but for one face. The helper winds each consistently and as most of
    its faces were: the first outward again, the second inward."""
    box = o3d.geometry.TriangleMesh.create_box()
    v = np.asarray(box.vertices)
    f = np.asarray(box.triangles)
    verts = np.concatenate([v, v + 3.0])
    second = f[:, ::-1] + len(v)
    second[0] = second[0][::-1]
    faces = np.concatenate([f, second])
    faces[0] = faces[0][::-1]  # the first face of each piece is the odd one: orienting from it turns the rest
    assert _same_direction_edges(faces) > 0
    mesh = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(verts), o3d.utility.Vector3iVector(faces))
    collision._orient_consistently(mesh)
    got = np.asarray(mesh.triangles)
    assert len(got) == 24 and _same_direction_edges(got) == 0
    normals = np.cross(verts[got[:, 1]] - verts[got[:, 0]], verts[got[:, 2]] - verts[got[:, 0]])  # [24, 3]
    centres = verts[got].mean(1)
    outward = (normals * (centres - np.where(np.arange(24)[:, None] < 12, 0.5, 3.5))).sum(-1) > 0
    assert outward[:12].all() and not outward[12:].any()


def test_mesh_lies_on_the_true_surfaces(fused):
    vertices, faces, _ = fused
    for name, points in (("vertices", vertices.astype(np.float64)),
                         ("triangle samples", _surface_samples(vertices, faces))):
        d = _distance_to_rects(points, SURFACES)
        assert np.mean(d <= TOL) >= 0.99, f"{name}: only {np.mean(d <= TOL):.3f} within {TOL} m"
        assert np.percentile(d, 99.9) <= 3 * TOL, f"{name}: 99.9th percentile {np.percentile(d, 99.9):.2f} m"


@pytest.mark.parametrize("rect", [
    (2, 0.0, ((7.0, 13.5), (-2.0, 2.0))),  # the road ahead of the rig, up to the box
    (0, BOX_LO[0], ((-1.2, 1.2), (0.2, 1.8))),  # the box's face towards the rig
    (1, WALL[1], ((8.0, 18.0), (0.2, 2.5))),  # the wall, seen by the front-left camera
], ids=["ground", "box_front", "wall"])
def test_surfaces_in_view_are_covered(fused, rect):
    vertices, faces, _ = fused
    samples = _rect_points(rect, 0.25)
    d = _distance_to_mesh(vertices, faces, samples)
    assert np.mean(d <= TOL) >= 0.97, f"only {np.mean(d <= TOL):.3f} of the samples within {TOL} m of the mesh"


def test_actor_is_not_in_the_mesh(fused, scene):
    vertices, faces, _ = fused
    actor = scene.actors.means.double().numpy() + ACTOR_AT  # the track holds the actor at ACTOR_AT
    above_ground = actor[actor[:, 2] >= 0.6]
    d = _distance_to_mesh(vertices, faces, above_ground)
    assert d.min() > 0.4, f"mesh within {d.min():.2f} m of the actor"
    lo, hi = ACTOR_AT - ACTOR_SIZE / 2 - TOL, ACTOR_AT + ACTOR_SIZE / 2 + TOL
    inside = np.all((vertices >= lo) & (vertices <= hi), axis=1) & (vertices[:, 2] > TOL)
    assert not inside.any(), f"{inside.sum()} vertices in the actor's box"


def test_max_triangles_is_respected(scene):
    vertices, faces = collision_mesh(scene, voxel_m=VOXEL, max_views=4, width=96, max_depth_m=25.0,
                                     max_triangles=300)
    assert 0 < len(faces) <= 300
    assert faces.max() < len(vertices)


def test_views_are_spread_over_cameras_and_frames(scene):
    rig = scene.metadata["rig"]
    frames = {c["id"]: len(c["timestamps_us"]) for c in rig["cameras"]}  # 4 cameras, 10 frames each
    views = collision._views(rig, 6)
    per_camera = sorted(sum(1 for cam, _ in views if cam["id"] == cid) for cid in frames)
    assert per_camera == [1, 1, 2, 2]
    assert [t for _, t in views] == sorted(t for _, t in views)
    every = collision._views(rig, 1000)
    assert len(every) == sum(frames.values())
    assert len({(cam["id"], t) for cam, t in every}) == len(every)


def test_wide_lenses_are_covered_by_turned_pinhole_views(scene):
    """Pinhole and OpenCV cameras get one virtual view; fisheye and f-theta lenses get three 90 degree
    views whose outer edges meet the lens's own horizontal edge, and which overlap the centre view."""
    from nurec_usd.sensors.cameras import camera_model

    for cam in scene.metadata["rig"]["cameras"]:
        yaws = collision._yaws(cam)
        half = collision.horizontal_half_fov(cam)
        if cam["model"] in ("pinhole", "opencv"):
            assert yaws == [0.0]
            continue
        assert len(yaws) == 3 and yaws[1] == 0.0 and yaws[0] == -yaws[2]
        assert yaws[2] + math.radians(45) == pytest.approx(half)  # the side view ends at the lens's edge
        assert yaws[2] - math.radians(45) < math.radians(45)  # and overlaps the centre view
        # the lens really sees (almost) that far: a direction 1 degree inside projects into the image
        model = camera_model(cam["model"], cam["width"], cam["height"], cam["intrinsics"], dtype=torch.float64)
        for side in (-1.0, 1.0):
            a = half - math.radians(1.0)
            uv, valid = model.project(torch.tensor([[side * math.sin(a), 0.0, math.cos(a)]], dtype=torch.float64))
            assert bool(valid[0]) and 0 <= float(uv[0, 0]) <= cam["width"] - 1, (cam["id"], side)


def test_default_voxel_follows_the_extent():
    rng = np.random.default_rng(0)
    box = rng.uniform(0.0, 1.0, (10_000, 3))
    diagonal = 0.98 * math.sqrt(200**2 + 100**2 + 10**2)  # of the 1st-99th percentile box
    assert collision._default_voxel(box * [200.0, 100.0, 10.0]) == pytest.approx(diagonal / 1000, abs=0.003)
    assert collision._default_voxel(box) == 0.05
    assert collision._default_voxel(box * 5000.0) == 0.5


def test_empty_static_scene_raises(scene):
    empty = dataclasses.replace(scene, static=GaussianParams.empty())
    with pytest.raises(ValueError, match="no static Gaussians"):
        collision_mesh(empty)
    no_cameras = dataclasses.replace(scene, metadata={"rig": {**scene.metadata["rig"], "cameras": []}})
    with pytest.raises(ValueError, match="no camera frames"):
        collision_mesh(no_cameras)


def test_nothing_in_view_raises(scene):
    far = dataclasses.replace(scene, static=scene.static.map(lambda t: t.clone()))
    far.static.means[:, 2] += 500.0  # everything far above the cameras' views
    with pytest.raises(ValueError, match="nothing was fused"):
        collision_mesh(far, voxel_m=VOXEL, max_views=2, width=64)


def test_write_collision(fused, tmp_path):
    vertices, faces, _ = fused
    path = tmp_path / "collision.usda"
    stage = Usd.Stage.CreateNew(str(path))
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    write_collision(stage, "/World/Collision", vertices, faces)
    stage.SetDefaultPrim(stage.GetPrimAtPath("/World"))
    stage.Save()

    stage = Usd.Stage.Open(str(path))
    assert stage.GetPrimAtPath("/World").GetTypeName() == "Xform"
    assert stage.GetPrimAtPath("/World/Collision").GetTypeName() == "Xform"
    prim = stage.GetPrimAtPath("/World/Collision/Mesh")
    mesh = UsdGeom.Mesh(prim)
    assert mesh
    np.testing.assert_array_equal(np.asarray(mesh.GetPointsAttr().Get()), vertices)
    np.testing.assert_array_equal(np.asarray(mesh.GetFaceVertexIndicesAttr().Get()), faces.reshape(-1))
    assert set(mesh.GetFaceVertexCountsAttr().Get()) == {3}
    extent = np.asarray(mesh.GetExtentAttr().Get())
    np.testing.assert_allclose(extent, [vertices.min(0), vertices.max(0)])
    assert mesh.GetPurposeAttr().Get() == UsdGeom.Tokens.guide
    assert mesh.GetOrientationAttr().Get() == UsdGeom.Tokens.rightHanded
    assert mesh.GetSubdivisionSchemeAttr().Get() == UsdGeom.Tokens.none
    assert prim.HasAPI(UsdPhysics.CollisionAPI)
    assert prim.HasAPI(UsdPhysics.MeshCollisionAPI)
    assert UsdPhysics.MeshCollisionAPI(prim).GetApproximationAttr().Get() == UsdPhysics.Tokens.none
    normals = np.asarray(mesh.GetNormalsAttr().Get())
    assert mesh.GetNormalsInterpolation() == UsdGeom.Tokens.vertex and normals.shape == vertices.shape
    np.testing.assert_allclose(np.linalg.norm(normals, axis=1), 1.0, atol=1e-5)
    # the ground's vertices point up or down, consistently with the faces' winding
    ground = np.abs(vertices[:, 2]) < 0.05
    face_n = np.cross(vertices[faces[:, 1]] - vertices[faces[:, 0]], vertices[faces[:, 2]] - vertices[faces[:, 0]])
    assert np.median(np.abs(normals[ground, 2])) > 0.9
    assert np.sign(np.median(normals[ground, 2])) == np.sign(np.median(face_n[np.all(ground[faces], 1), 2]))

    assert_openusd_valid(stage)


def test_write_collision_rejects_bad_arrays():
    stage = Usd.Stage.CreateInMemory()
    with pytest.raises(ValueError):
        write_collision(stage, "/World/Collision", np.zeros((3, 3)), np.zeros((0, 3), np.int32))
    with pytest.raises(ValueError):
        write_collision(stage, "/World/Collision", np.zeros((3, 3)), np.array([[0, 1, 3]]))
