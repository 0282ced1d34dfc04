"""How consistent a real capture's lidar sweeps are with each other, before any training.

    python benchmarks/lidar_real_sweeps.py                      # every real capture in ../shared/data
    python benchmarks/lidar_real_sweeps.py --captures kitti_udacity --no-consistency

Two measures, both on the CPU, per capture (loaded with its importer):

* consistency: each sweep placed in the world (``nurec_usd.scene.init.lidar_world_points``: every
  point with the rig pose at its firing time) against the previous sweep: the median distance of
  its points to their nearest neighbour in the previous sweep (points 3 to 40 m away whose
  neighbour is within 1 m: newly seen surfaces are left out). It is computed with the points'
  times as imported and with them changed: all at the sweep's start (points already compensated
  to it), all at its middle, shifted by +-50 ms (points and poses out of step), and, for
  lidars with per-point times, with the azimuth timing reversed. A lower figure is the more
  consistent placement. On a capture whose poses came from lidar odometry, the poses were
  estimated under the imported timing, which favours it.
* projected: the training sweeps' points themselves put into each held-out sweep and binned as
  the build bins a measured one, against that sweep's own range image (``projected``): the
  floor the held-out lidar figure of ``build`` has before any reconstruction error.

A scene of opaque splats at the training points is no such floor: isotropic splats the size of
their point spacing stop a ray at whatever they overlap along it (4-13 m of median error on
tri_dgp, against 0.07 m for the points themselves), so this script no longer renders one.

Prints one table per measure.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DATA = REPO.parent / "shared" / "data"
CAPTURES = {"kitti_udacity": "kitti_udacity/2011_09_26", "tri_dgp": "tri_dgp/scene_dataset_v1.0.json"}
EVAL_EVERY = {"kitti_udacity": 4, "tri_dgp": 2}


def load(name: str):
    from nurec_usd.capture.importers import load_any

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_any(DATA / CAPTURES[name])


# -- consistency -------------------------------------------------------------------------


def world_points(capture, lidar_id: str, index: int, mode: str) -> np.ndarray:
    """One sweep's points 3 to 40 m from the sensor, in the world under a timing assumption. ``[N, 3]``."""
    lidar = capture.lidars[lidar_id]
    sweep = lidar.load_sweep(index)
    sweep_start_us = lidar.sweeps[index].timestamp_us
    ts = sweep.timestamps_us.astype(np.int64)
    if mode == "start":
        t = capture.seconds(np.full_like(ts, sweep_start_us))
    elif mode == "middle":
        t = capture.seconds(np.full_like(ts, sweep_start_us + lidar.sweep_duration_us // 2))
    elif mode == "reversed":
        t = capture.seconds(sweep_start_us + (lidar.sweep_duration_us - 1 - (ts - sweep_start_us)))
    elif mode in ("+50ms", "-50ms"):
        t = capture.seconds(ts + (50_000 if mode[0] == "+" else -50_000))
    else:
        t = capture.seconds(ts)
    r = np.linalg.norm(sweep.points, axis=1)
    keep = (r > 3.0) & (r < 40.0)
    lo, hi = capture.seconds(capture.rig.timestamps_us[[0, -1]])
    t = np.clip(t[keep], lo, hi)  # shifted times stay on the trajectory
    p = torch.from_numpy(sweep.points[keep].astype(np.float64))
    from nurec_usd.sensors.se3 import transform_points

    rig = capture.rig_trajectory()
    unique, inverse = np.unique(t, return_inverse=True)
    T = rig.at(torch.from_numpy(unique)) @ torch.as_tensor(lidar.T_rig_lidar, dtype=torch.float64)
    return transform_points(T[torch.from_numpy(inverse)], p).numpy()


def plane_distances(source: np.ndarray, target: np.ndarray, max_m: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Point-to-plane distance of each source point to the target's surface at its nearest
    target point (normals from the target's neighbours within 0.5 m), for source points whose
    nearest target point is within ``max_m``; and whether that surface is upright (normal within
    45 degrees of horizontal: walls, cars, poles, where a misplacement along the road shows).
    ``[N, 3]``, ``[M, 3]`` -> ``[K]``, ``[K]`` bool."""
    import open3d as o3d

    nns = o3d.core.nns.NearestNeighborSearch(o3d.core.Tensor(target))
    nns.knn_index()
    idx, d2 = nns.knn_search(o3d.core.Tensor(source), 1)
    idx, d = idx.numpy()[:, 0], np.sqrt(d2.numpy()[:, 0])
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(target))
    cloud.estimate_normals(o3d.geometry.KDTreeSearchParamHybrid(radius=0.5, max_nn=30))
    normals = np.asarray(cloud.normals)[idx]
    near = d < max_m
    dist = np.abs(np.einsum("nk,nk->n", source - target[idx], normals))
    return dist[near], np.abs(normals[near, 2]) < math.sqrt(0.5)


def consistency(capture, modes: list[str], eval_every: int) -> dict[str, tuple[float, float, float]]:
    """Per timing mode: medians over the held-out sweeps (``build``'s rule) of their points'
    (nearest-neighbour distance, point-to-plane distance, the same on upright surfaces) to the
    union of the training sweeps' points, metres."""
    from nurec_usd.train.data import held_out

    lidar_id = next(iter(capture.lidars))
    n = len(capture.lidars[lidar_id].sweeps)
    evals = [i for i in range(n) if held_out(i, eval_every, n)]
    out = {}
    for mode in modes:
        cap = capture
        if mode == "middle+odometry":  # poses re-estimated with the points taken as compensated
            if capture.metadata.get("source") != "kitti":
                continue  # only KITTI's poses come from the importer's lidar odometry
            cap, mode_used = odometry_without_deskew(capture), "middle"
        else:
            mode_used = mode
        pts = [world_points(cap, lidar_id, i, mode_used) for i in range(n)]
        train = np.concatenate([p for i, p in enumerate(pts) if i not in evals])
        rows = []
        for i in evals:
            plane, upright = plane_distances(pts[i], train)
            import open3d as o3d

            a = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts[i]))
            b = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(train))
            nn = np.asarray(a.compute_point_cloud_distance(b))
            rows.append((float(np.median(nn[nn < 1.0])), float(np.median(plane)), float(np.median(plane[upright]))))
        out[mode] = tuple(float(np.median([r[k] for r in rows])) for k in range(3))
    return out


def odometry_without_deskew(capture):
    """A KITTI capture whose rig poses are re-estimated by the importer's lidar odometry with
    every point at its revolution's middle (no deskewing): the poses the "already
    compensated" assumption would give."""
    from nurec_usd.capture.importers.kitti import _LidarOdometry, extend_trajectory

    lidar = capture.lidars["velodyne"]
    odo = _LidarOdometry()
    for i, ref in enumerate(lidar.sweeps):
        sweep = lidar.load_sweep(i)
        mid = ref.timestamp_us + lidar.sweep_duration_us // 2
        odo.add(sweep.points.astype(np.float64), np.full(len(sweep), mid, np.int64), mid, str(i))
    ts = np.asarray(odo.times_us, np.int64)
    T = np.stack(odo.poses)
    ts, T, _ = extend_trajectory(ts, T, int(capture.rig.timestamps_us[0]), int(capture.rig.timestamps_us[-1]))
    T[:, :3, 3] -= T[0, :3, 3]
    from nurec_usd.capture.model import RigTrajectory

    return dataclasses.replace(capture, rig=RigTrajectory(ts, T))


# -- projected ---------------------------------------------------------------------------


def projected(capture, eval_every: int, drop_near_m: float = 0.0) -> dict[str, float]:
    """Held-out median range error of the training sweeps' points themselves: every training
    point is put into each held-out sweep's lidar frame (at the firing time of the column it
    falls in, one fixed-point step) and binned as the build bins a measured sweep (nearest
    return per channel and column); bins holding both a projected and a measured return are
    compared. No splats: what is left is the poses and timing, returns off the ego vehicle,
    moving objects without tracks and the bins' size. ``drop_near_m``: leave out the training
    points within this horizontal distance of their lidar (the ego vehicle's own returns)."""
    from nurec_usd.scene.init import lidar_world_points
    from nurec_usd.sensors.se3 import invert_transform, transform_points
    from nurec_usd.train.data import CaptureData, SweepPoints, range_image
    from nurec_usd.capture.importers.sweep_cache import nearest_channel

    factor = max(1, min(min(c.width, c.height) // 16 for c in capture.cameras.values())) if capture.cameras else 1
    data = CaptureData(capture, "cpu", eval_every=eval_every, downscale=factor)
    loaded = {k: SweepPoints(v.points[keep], v.intensity[keep], v.times_s[keep])
              for k, v in data.sweep_points.items() for keep in [v.points[:, :2].norm(dim=1) >= drop_near_m]}
    sweeps = [(data.lidars[s.lidar].id, s.sweep) for s in data.train_sweeps]
    world, _, _ = lidar_world_points(capture, sweeps, loaded=loaded)
    rig = capture.rig_trajectory()
    errors, shares = [], []
    for ref in data.eval_sweeps:
        lidar = capture.lidars[data.lidars[ref.lidar].id]
        model = lidar.sensor_model(dtype=torch.float64)
        T_rig_lidar = torch.as_tensor(lidar.T_rig_lidar, dtype=torch.float64)
        t0 = float(capture.seconds(lidar.sweeps[ref.sweep].timestamp_us))
        fixed = bool(np.all(lidar.load_sweep(ref.sweep).timestamps_us == lidar.sweeps[ref.sweep].timestamp_us))
        # first at the sweep's middle, then at the time of the column each point falls in
        t = torch.full((len(world),), t0 + 0.5 / lidar.scan_rate_hz, dtype=torch.float64)
        for _ in range(2):
            T = invert_transform(rig.at(t) @ T_rig_lidar) if not fixed else \
                invert_transform(rig.at(torch.tensor([t0], dtype=torch.float64)) @ T_rig_lidar).expand(len(world), 4, 4)
            local = transform_points(T, world)
            if fixed:
                break
            t = t0 + model.time_offset_of_points(local)
        _, el, _ = model.spherical(local)
        channel = torch.from_numpy(nearest_channel(np.degrees(el.numpy()), lidar.elevation_deg))
        predicted, _ = range_image(local.float().numpy(), np.zeros(len(local), np.float32), channel.numpy(), model,
                                   lidar.channels, lidar.columns)
        measured, _ = data.lidar_target(ref)
        both = (predicted > 0) & (measured > 0)
        errors.append(float((predicted - measured).abs()[both].median()))
        shares.append(float(both.sum() / max(1, int((measured > 0).sum()))))
    return {"median_range_error_m": float(np.median(errors)), "compared_share": float(np.mean(shares)),
            "held_out_sweeps": len(errors)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--captures", default=",".join(CAPTURES), help="comma-separated: " + ", ".join(CAPTURES))
    parser.add_argument("--modes", default="as-imported,start,middle,middle+odometry,reversed,+50ms")
    parser.add_argument("--no-consistency", action="store_true")
    parser.add_argument("--no-projected", action="store_true")
    args = parser.parse_args(argv)
    from nurec_usd.ops.warp_torch import init_warp

    init_warp()
    names = [c for c in args.captures.split(",") if c]
    for name in names:
        if not (DATA / CAPTURES[name]).exists():
            print(f"{name}: not found under {DATA}; skipped")
            continue
        capture = load(name)
        if not args.no_consistency:
            t0 = time.perf_counter()
            c = consistency(capture, args.modes.split(","), EVAL_EVERY[name])
            print(f"\n{name}: held-out sweeps against the training sweeps, in the world ({time.perf_counter() - t0:.0f} s)")
            print(f"  {'point times':<12} {'nearest m':>10} {'to plane m':>11} {'upright m':>10}")
            for mode, (nn, plane, upright) in c.items():
                print(f"  {mode:<12} {nn:>10.4f} {plane:>11.4f} {upright:>10.4f}")
        if not args.no_projected:
            print(f"\n{name}: training points projected into the held-out sweeps (eval_every {EVAL_EVERY[name]})")
            print(f"  {'training points':<24} {'median err m':>12} {'compared':>9}")
            for near in (0.0, 2.5):
                t0 = time.perf_counter()
                p = projected(capture, EVAL_EVERY[name], near)
                what = "all" if near == 0 else f"beyond {near:g} m of the lidar"
                print(f"  {what:<24} {p['median_range_error_m']:>12.4f} {p['compared_share']:>9.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
