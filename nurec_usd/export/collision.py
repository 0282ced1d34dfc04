"""A collision mesh of a scene's static Gaussians, for physics (``collision.usdc`` of USD.md).

Gaussians have no surface a physics engine can collide with. We render the expected depth
of the STATIC Gaussians only (moving actors must not become colliders) from the capture's
own camera poses, fuse those depth maps into a truncated signed distance field and extract
its zero level set as a triangle mesh, which is cleaned of small floating clusters and
decimated to a triangle budget.

The TSDF is open3d's ``t.geometry.VoxelBlockGrid`` (sparse voxel blocks, grown on demand).
The legacy ``pipelines.integration.ScalableTSDFVolume`` is not used: in open3d(-cpu) 0.20 it
integrates nothing (a plane 3 m in front of an identity camera yields an empty volume),
while ``UniformTSDFVolume`` and ``VoxelBlockGrid`` fuse the same image correctly.

Each view is a virtual global-shutter pinhole camera at the real camera's pose (mid
readout), ``width`` pixels wide with the camera's aspect ratio (the TSDF needs pinhole
intrinsics): the camera's own focal length for pinhole / OpenCV cameras. A fisheye or f-theta
lens gets three 90 degree views, straight ahead and turned left and right until their outer
edges meet the lens's horizontal edge. The renderer's per-Gaussian depth is the camera z for
pinhole cameras, which is what the TSDF expects.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from nurec_usd.export.usd_schema import register_schema
from nurec_usd.ops.camera import CameraBatch, RenderSettings, render_cameras
from nurec_usd.scene.gaussians import Scene, opacities_of, scales_of
from nurec_usd.sensors.cameras import camera_model
from nurec_usd.sensors.se3 import PoseTrajectory, invert_transform

__all__ = ["collision_mesh", "write_collision", "vertex_normals"]

WIDE_FOV_DEG = 90.0  # horizontal field of view of each virtual camera of a fisheye / f-theta lens
MIN_ALPHA = 0.5  # pixels less opaque than this carry no depth
MIN_CLUSTER_TRIANGLES = 50  # connected pieces smaller than this are dropped as floaters
TRUNC_VOXELS = 4.0  # TSDF truncation distance, in voxels


def _default_voxel(means: np.ndarray) -> float:  # means: [N, 3]
    """Voxel size from the robust extent (1st-99th percentile box diagonal) of the Gaussians."""
    lo, hi = np.percentile(means, [1.0, 99.0], axis=0)
    return float(np.clip(np.linalg.norm(hi - lo) / 1000.0, 0.05, 0.5))


def _views(rig: dict[str, Any], max_views: int) -> list[tuple[dict[str, Any], float]]:
    """(camera, seconds since the capture start at mid readout) of at most ``max_views`` frames,
    shared round-robin between cameras and spread evenly over each camera's frames."""
    cams = [c for c in rig.get("cameras", []) if len(c["timestamps_us"])]
    counts = [len(c["timestamps_us"]) for c in cams]
    budget = min(max(int(max_views), 0), sum(counts))
    take = [0] * len(cams)
    while sum(take) < budget:
        for k in range(len(cams)):
            if sum(take) < budget and take[k] < counts[k]:
                take[k] += 1
    views = []
    for cam, n, m in zip(cams, counts, take):
        rs = cam.get("rolling_shutter", {})
        readout_us = rs.get("readout_time_us", 0) if rs.get("direction", "global") != "global" else 0
        for i in ((np.arange(m) + 0.5) * n / m).astype(int) if m else []:
            t_us = cam["timestamps_us"][i] + 0.5 * readout_us
            views.append((cam, (t_us - rig["start_us"]) * 1e-6))
    return sorted(views, key=lambda v: v[1])


def _pinhole(cam: dict[str, Any], width: int) -> tuple[int, np.ndarray]:
    """Height and intrinsic matrix ``[3, 3]`` of the virtual pinhole camera of ``cam``."""
    s = width / cam["width"]
    height = max(1, round(cam["height"] * s))
    p = cam["intrinsics"]
    if cam["model"] in ("pinhole", "opencv"):
        fx, fy = p["fx"] * s, p["fy"] * s
        cx, cy = (p["cx"] + 0.5) * s - 0.5, (p["cy"] + 0.5) * s - 0.5  # pixel centres at integers
    else:
        fx = fy = 0.5 * width / math.tan(math.radians(WIDE_FOV_DEG) / 2)
        cx, cy = (width - 1) / 2, (height - 1) / 2
    return height, np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


def horizontal_half_fov(cam: dict[str, Any]) -> float:
    """Half the horizontal field of view of a capture camera (rad): the larger angle from the
    optical axis of the two ends of the image row through the principal point, within the lens's
    valid angles."""
    model = camera_model(cam["model"], cam["width"], cam["height"], cam["intrinsics"], dtype=torch.float64)
    cy = float(cam["intrinsics"]["cy"])
    rays = model.unproject(torch.tensor([[0.0, cy], [cam["width"] - 1.0, cy]], dtype=torch.float64))  # [2, 3]
    angles = torch.atan2(rays[:, 0].abs(), rays[:, 2])  # beyond 90 degrees when z < 0
    angles = angles[torch.isfinite(angles)]
    half = float(angles.max()) if len(angles) else math.radians(WIDE_FOV_DEG) / 2
    max_theta = getattr(model, "max_theta", None)
    return min(half, float(max_theta)) if max_theta is not None else half


def _yaws(cam: dict[str, Any]) -> list[float]:
    """Turns (rad, about the camera's y axis) of the virtual pinhole views of a camera. Pinhole and
    OpenCV cameras: one view. Wide lenses: a WIDE_FOV_DEG view straight ahead and, when the lens
    sees further, one turned to each side so that its outer edge meets the lens's (their 90 degree
    views overlap the centre one for any lens up to 270 degrees)."""
    if cam["model"] in ("pinhole", "opencv"):
        return [0.0]
    reach = horizontal_half_fov(cam) - math.radians(WIDE_FOV_DEG) / 2
    return [-reach, 0.0, reach] if reach > math.radians(1.0) else [0.0]


def _turn_y(angle: float) -> torch.Tensor:  # [4, 4]
    """A rotation about y (OpenCV camera axes: positive turns the view from +z toward +x)."""
    c, s = math.cos(angle), math.sin(angle)
    T = torch.eye(4, dtype=torch.float64)
    T[0, 0], T[0, 2], T[2, 0], T[2, 2] = c, s, -s, c
    return T


def collision_mesh(scene: Scene, device: str | torch.device = "cpu", voxel_m: float | None = None,
                   max_triangles: int = 200_000, max_views: int = 200, width: int = 320,
                   max_depth_m: float = 80.0, progress: Callable[[int, int], None] | None = None,
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Triangle mesh of the static scene fused from rendered depth maps.

    Args:
        scene: a scene whose ``metadata["rig"]`` describes the capture (``describe_rig``).
        device: where to render.
        voxel_m: TSDF voxel size; None: 1/1000 of the static scene's extent, in [0.05, 0.5] m.
        max_triangles: the mesh is decimated to at most this many triangles.
        max_views: at most this many camera frames are rendered and fused.
        width: width in pixels of the rendered depth maps (height keeps each camera's aspect).
        max_depth_m: depths beyond this are ignored (far surfaces are too coarse to trust).
        progress: called with (views done, views in total) after each view.

    Returns:
        vertices ``[V, 3]`` float32 in the world frame, faces ``[F, 3]`` int32.

    Raises:
        ValueError: no static Gaussians, no camera frames, or nothing was fused.
    """
    import open3d as o3d

    if len(scene.static) == 0:
        raise ValueError("collision mesh: the scene has no static Gaussians")
    rig = scene.metadata.get("rig")
    if not rig:
        raise ValueError("collision mesh: the scene has no sensor rig (metadata['rig'])")
    views = _views(rig, max_views)
    if not views:
        raise ValueError("collision mesh: the rig has no camera frames to render from")
    traj = rig["trajectory"]
    rig_pose = PoseTrajectory(
        (torch.as_tensor(traj["timestamps_us"], dtype=torch.float64) - rig["start_us"]) * 1e-6,
        torch.as_tensor(traj["T_world_rig"], dtype=torch.float64))

    g = scene.static
    with torch.no_grad():
        f32 = lambda t: t.detach().to(device=device, dtype=torch.float32).contiguous()  # noqa: E731
        means, quats = f32(g.means), f32(g.quats)  # [N, 3], [N, 4]
        scales, opacities = scales_of(f32(g.log_scales)), opacities_of(f32(g.opacity_logits))  # [N, 3], [N]
        colors = torch.zeros_like(means)  # [N, 3]: only depth and alpha are used
    if voxel_m is None:
        voxel_m = _default_voxel(means.cpu().numpy())
    grid = o3d.t.geometry.VoxelBlockGrid(
        attr_names=("tsdf", "weight"), attr_dtypes=(o3d.core.float32, o3d.core.float32), attr_channels=(1, 1),
        voxel_size=float(voxel_m), block_resolution=8, block_count=4096, device=o3d.core.Device("CPU:0"))
    settings = RenderSettings(far=2.0 * max_depth_m)
    fused = 0
    for done, (cam, t) in enumerate(views, start=1):
        T_world_camera = rig_pose.at(torch.tensor([t], dtype=torch.float64))[0] @ torch.as_tensor(
            cam["T_rig_camera"], dtype=torch.float64)  # [4, 4]
        height, K = _pinhole(cam, width)
        for yaw in _yaws(cam):
            T_camera_world = invert_transform(T_world_camera @ _turn_y(yaw))  # [4, 4]
            batch = CameraBatch.pinhole(T_camera_world[None].to(device), torch.from_numpy(K)[None], width, height)
            with torch.no_grad():
                out = render_cameras(means, quats, scales, opacities, colors, batch, settings=settings)
                alpha = out.alpha[0]  # [H, W]
                depth = out.depth[0] / alpha.clamp_min(1e-6)  # [H, W] expected camera z (pinhole depth is z)
                keep = (alpha > MIN_ALPHA) & (depth > 0) & (depth <= max_depth_m) & torch.isfinite(depth)
                depth = torch.where(keep, depth, torch.zeros_like(depth)).cpu().numpy()  # [H, W], 0: no data
            if keep.any():  # open3d refuses a depth map that touches no voxel block
                image = o3d.t.geometry.Image(o3d.core.Tensor(np.ascontiguousarray(depth)))
                intrinsic = o3d.core.Tensor(K, o3d.core.float64)  # [3, 3]
                extrinsic = o3d.core.Tensor(T_camera_world.numpy(), o3d.core.float64)  # [4, 4] world -> camera
                blocks = grid.compute_unique_block_coordinates(image, intrinsic, extrinsic, 1.0,
                                                               float(max_depth_m), TRUNC_VOXELS)
                grid.integrate(blocks, image, intrinsic, extrinsic, 1.0, float(max_depth_m), TRUNC_VOXELS)
                fused += 1
        if progress is not None:
            progress(done, len(views))
    if not fused:
        raise ValueError(f"collision mesh: nothing was fused from {len(views)} views (no opaque static "
                         f"surface within {max_depth_m} m of the cameras)")

    # weight counts the views that saw a voxel: keep every observed one
    try:
        mesh = grid.extract_triangle_mesh(weight_threshold=0.5).to_legacy()
    except RuntimeError as err:  # open3d fails this way when the volume holds no surface
        raise ValueError(f"collision mesh: no surface could be extracted from {fused} views ({err})") from err
    mesh.remove_duplicated_vertices()  # join the pieces of neighbouring voxel blocks
    if len(mesh.triangles):
        clusters, sizes, _ = mesh.cluster_connected_triangles()
        mesh.remove_triangles_by_mask(np.asarray(sizes)[np.asarray(clusters)] < MIN_CLUSTER_TRIANGLES)
    target = int(max_triangles)
    while len(mesh.triangles) > max_triangles and target > 0:  # decimation may stop short of its target
        mesh = mesh.simplify_quadric_decimation(target_number_of_triangles=target)
        target //= 2
    mesh.remove_degenerate_triangles()
    mesh.remove_duplicated_triangles()
    mesh.remove_duplicated_vertices()
    # Non-manifold edges and vertices (where decimation pinched the surface) trouble mesh tools
    # and asset validators; physics does not need them.
    for _ in range(10):  # removing a pinch can expose another
        mesh.remove_non_manifold_edges()
        pinched = np.asarray(mesh.get_non_manifold_vertices())
        if not len(pinched):
            break
        mesh.remove_vertices_by_index(pinched.tolist())
    mesh.remove_unreferenced_vertices()
    _orient_consistently(mesh)
    vertices = np.asarray(mesh.vertices, dtype=np.float32)  # [V, 3]
    faces = np.asarray(mesh.triangles, dtype=np.int32)  # [F, 3]
    if len(faces) == 0:
        raise ValueError(f"collision mesh: no surface of at least {MIN_CLUSTER_TRIANGLES} triangles was found "
                         f"in {fused} views")
    return vertices, faces


def _face_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:  # [V, 3], [F, 3] -> [F, 3]
    v = vertices.astype(np.float64)
    return np.cross(v[faces[:, 1]] - v[faces[:, 0]], v[faces[:, 2]] - v[faces[:, 0]])


def _orient_consistently(mesh: Any) -> None:
    """Winds the triangles of an edge-manifold open3d mesh consistently (each edge in opposite
    directions in its two faces, as validators and physics engines expect; decimation can flip
    single faces), keeping the winding most faces of each connected piece had. Where a piece
    cannot be oriented, the faces on its clashing edges are dropped until it can."""
    import open3d as o3d

    for _ in range(10):
        faces = np.asarray(mesh.triangles).copy()  # [F, 3]
        if not len(faces):
            return
        before = _face_normals(np.asarray(mesh.vertices), faces)  # [F, 3]
        if mesh.orient_triangles():
            break
        # not orientable as it is: drop the faces of every edge two faces run in the same direction
        edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])  # [3F, 2]
        _, inverse, counts = np.unique(edges, axis=0, return_inverse=True, return_counts=True)
        clash = (counts[inverse.reshape(-1)] > 1).reshape(3, -1).any(0)  # [F]
        mesh.triangles = o3d.utility.Vector3iVector(faces[~clash])  # the winding before the failed attempt
        mesh.remove_unreferenced_vertices()
    else:
        return  # still not orientable: left as it is (not seen on any scene)
    oriented = np.asarray(mesh.triangles).copy()  # [F, 3]
    flipped = (_face_normals(np.asarray(mesh.vertices), oriented) * before).sum(-1) < 0  # [F]
    piece = np.asarray(mesh.cluster_connected_triangles()[0])  # [F]
    share = np.bincount(piece, weights=flipped.astype(np.float64)) / np.bincount(piece)
    back = share[piece] > 0.5  # the piece was oriented from one of its few flipped faces: turn it all back
    if back.any():
        oriented[back] = oriented[back][:, ::-1]
        mesh.triangles = o3d.utility.Vector3iVector(np.ascontiguousarray(oriented))


def vertex_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:  # [V, 3], [F, 3] -> [V, 3]
    """Unit vertex normals: the area-weighted sum of the adjacent faces' normals (+z where none)."""
    face_n = _face_normals(vertices, faces)  # length = 2 x area
    n = np.zeros((len(vertices), 3))
    for k in range(3):
        np.add.at(n, faces[:, k], face_n)
    length = np.linalg.norm(n, axis=1, keepdims=True)
    n = np.where(length > 0, n / np.where(length > 0, length, 1.0), np.array([0.0, 0.0, 1.0]))
    return np.ascontiguousarray(n, dtype=np.float32)


def write_collision(stage, path: str, vertices: np.ndarray, faces: np.ndarray) -> None:
    """Define ``path`` (an Xform) and ``path/Mesh``, a triangle collision mesh, on an open ``Usd.Stage``.

    The mesh has purpose ``guide`` (renderers skip it), ``UsdPhysics.CollisionAPI`` and
    ``UsdPhysics.MeshCollisionAPI`` with approximation ``none`` (collide with the triangles
    themselves). Missing ancestors of ``path`` are defined as Xforms (validators reject
    untyped ancestors).

    Args:
        stage: an open ``Usd.Stage``.
        path: absolute prim path, e.g. ``/World/Collision``.
        vertices: ``[V, 3]`` points in the stage's world frame.
        faces: ``[F, 3]`` vertex indices of triangles.
    """
    register_schema()
    from pxr import Sdf, UsdGeom, UsdPhysics, Vt

    vertices = np.ascontiguousarray(vertices, dtype=np.float32)
    faces = np.ascontiguousarray(faces, dtype=np.int32)
    if vertices.ndim != 2 or vertices.shape[1] != 3 or faces.ndim != 2 or faces.shape[1] != 3 or not len(faces):
        raise ValueError(f"collision mesh: expected vertices [V, 3] and faces [F>0, 3], got "
                         f"{vertices.shape} and {faces.shape}")
    if faces.min() < 0 or faces.max() >= len(vertices):
        raise ValueError(f"collision mesh: face indices must lie in [0, {len(vertices)})")
    prim_path = Sdf.Path(path)
    for ancestor in prim_path.GetParentPath().GetPrefixes():  # root first
        if not stage.GetPrimAtPath(ancestor).IsValid():
            UsdGeom.Xform.Define(stage, ancestor)
    UsdGeom.Xform.Define(stage, prim_path)
    mesh = UsdGeom.Mesh.Define(stage, prim_path.AppendChild("Mesh"))
    points = Vt.Vec3fArray.FromNumpy(vertices)
    mesh.CreatePointsAttr(points)
    mesh.CreateFaceVertexCountsAttr(Vt.IntArray.FromNumpy(np.full(len(faces), 3, np.int32)))
    mesh.CreateFaceVertexIndicesAttr(Vt.IntArray.FromNumpy(faces.reshape(-1)))
    mesh.CreateExtentAttr(UsdGeom.PointBased.ComputeExtent(points))
    mesh.CreateNormalsAttr(Vt.Vec3fArray.FromNumpy(vertex_normals(vertices, faces)))
    mesh.SetNormalsInterpolation(UsdGeom.Tokens.vertex)
    mesh.CreateOrientationAttr(UsdGeom.Tokens.rightHanded)
    mesh.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)
    mesh.CreatePurposeAttr(UsdGeom.Tokens.guide)
    UsdPhysics.CollisionAPI.Apply(mesh.GetPrim())
    UsdPhysics.MeshCollisionAPI.Apply(mesh.GetPrim()).CreateApproximationAttr(UsdPhysics.Tokens.none)
