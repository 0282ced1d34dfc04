"""Initial Gaussians from a capture: accumulated lidar points (or SfM points, or points in the camera frusta).

Steps, all tensor code on the training device:
1. every training sweep's points go into the world, each with the rig pose at its own firing
   time (``lidar_world_points``);
2. points inside a tracked box at their firing time become that actor's points, in the box
   frame; the rest are static;
3. voxel downsampling (static and per actor) and statistical outlier removal;
4. colours from the training frames that see each point (a coarse z-buffer keeps occluded
   points from taking a foreground colour), and in the same pass each frame's top of the
   lidar's coverage;
5. points where the cameras see above that coverage (``points_above_lidar``), less those a
   training sweep saw through (``nurec_usd.scene.free_space``);
6. isotropic initial scales from the mean distance to the 3 nearest neighbours (Warp hash
   grid), optionally flattened into discs on planar patches (``nurec_usd.scene.surface_frames``);
7. the sky map starts at the mean colour of the images' upper rows.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from nurec_usd.capture.model import Capture
from nurec_usd.ops.neighbors import knn_distances, statistical_outliers
from nurec_usd.scene.free_space import SweepRanges, seen_through
from nurec_usd.scene.gaussians import ActorTrack, GaussianParams, Scene
from nurec_usd.scene.surface_frames import flat_on_surfaces
from nurec_usd.scene.voxels import voxel_cells
from nurec_usd.sensors.se3 import PoseTrajectory, invert_transform, transform_points
from nurec_usd.util.options import option
from nurec_usd.util.prefetch import prefetched


@dataclass
class InitConfig:
    """Options of the initialisation (see ``nurec_usd.train.config`` for the presets); each
    declares its range beside its default (``nurec_usd.util.options.option``)."""

    voxel_m: float = option(0.1, low=1e-3, high=100)  # static voxel size; grown automatically to stay under max_points
    actor_voxel_m: float = option(0.05, low=1e-3, high=100)
    max_points: int = option(300_000, low=1, high=1_000_000_000)  # static Gaussians at most
    # boxes grown by this fraction when deciding which points are an actor's
    box_margin: float = option(0.05, low=0, high=10)
    # statistical outlier removal: mean kNN distance > mean + this * std
    outlier_std: float = option(2.5, low=0, high=1000, low_open=True)
    color_frames: int = option(12, low=1)  # frames per camera used to colour the points
    opacity: float = option(0.1, low=0, high=1, low_open=True, high_open=True)
    # captures without lidar or SfM points: points spread in the frusta
    random_points: int = option(100_000, low=1, high=100_000_000)
    # lidar captures: points where the cameras see above the lidar's reach (points_above_lidar;
    # 0: none); they count in max_points, of which they take at most a quarter
    above_lidar_points: int = option(50_000, low=0, high=100_000_000)
    # of those, the ones nearer than a training sweep's returns in their direction by more than
    # this (metres, or 5% of the return if more) are dropped (nurec_usd.scene.free_space); -1: kept
    above_lidar_free_space_m: float = option(0.3, low=-1, high=1000)
    sky_rows: int = option(16, low=1, high=1024)  # sky map size: rows (elevation) x 4 rows (azimuth)
    # lidar captures: the static Gaussians of planar patches of points (cells of 4 voxels) start
    # this thin across the patch, as a fraction of their size (nurec_usd.scene.surface_frames); 1: balls
    flat_start_thickness: float = option(0.2, low=0, high=1, low_open=True)


def _poses_at(traj: PoseTrajectory, times: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Poses at many times, interpolated once per distinct time. Returns ``[U, 4, 4]`` and the index ``[N]``."""
    unique, inverse = torch.unique(times, return_inverse=True)
    return traj.at(unique), inverse


def lidar_world_points(capture: Capture, sweeps: list[tuple[str, int]], device: torch.device | str = "cpu",
                       progress: Callable[[], None] | None = None, chunk_points: int = 4_000_000,
                       loaded: Mapping[tuple[str, int], Any] | None = None,
                       sweep_counts: list[int] | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Points of the given sweeps in the world, each placed with the rig pose at its firing time.

    Sweeps are taken from ``loaded`` (``(lidar id, index)`` -> ``points``, ``intensity``,
    ``times_s`` tensors, as ``CaptureData.sweep_points`` keeps them) or read ahead in threads,
    and placed in chunks of about ``chunk_points`` points (one pose interpolation per chunk
    rather than per sweep). Points outside the lidar's range limits are left out.
    ``sweep_counts``: a list that gets each sweep's number of points, in order (they follow one
    another in the result).

    Returns world points ``[N, 3]`` float64, intensities ``[N]`` and times ``[N]`` (seconds), on ``device``.
    """
    rig = capture.rig_trajectory(device)
    pts, inten, times = [], [], []
    pending: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # per sweep: lidar-frame points, intensities, times
    lidar_of: list[str] = []

    def place() -> None:
        # one chunk's sweeps (of any lidars) into the world with the rig pose at each point's time
        p = torch.cat([x[0].to(device) for x in pending])
        t = torch.cat([x[2].to(device) for x in pending])
        i = torch.cat([x[1].to(device) for x in pending])
        T_rig, idx = _poses_at(rig, t)
        T_world_lidar = {lid: T_rig @ torch.as_tensor(capture.lidars[lid].T_rig_lidar, dtype=torch.float64,
                                                      device=device) for lid in set(lidar_of)}
        world = torch.empty_like(p)
        start = 0
        for (sp, _, _), lidar_id in zip(pending, lidar_of):  # each sweep through its own lidar's mounting
            end = start + sp.shape[0]
            world[start:end] = transform_points(T_world_lidar[lidar_id][idx[start:end]], p[start:end])
            start = end
        pts.append(world)
        inten.append(i)
        times.append(t)
        pending.clear()
        lidar_of.clear()

    def read(item: tuple[str, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lidar_id, index = item
        lidar = capture.lidars[lidar_id]
        if loaded is not None and item in loaded:
            sweep = loaded[item]
            p, i, t = sweep.points.double(), sweep.intensity.double(), sweep.times_s
        else:
            sweep = lidar.load_sweep(index)
            p = torch.from_numpy(np.asarray(sweep.points, dtype=np.float64))
            i = torch.from_numpy(np.asarray(sweep.intensity, dtype=np.float64))
            t = torch.from_numpy(np.asarray(capture.seconds(sweep.timestamps_us), dtype=np.float64))
        rng = p.norm(dim=-1)
        keep = (rng >= lidar.min_range_m) & (rng <= lidar.max_range_m) & torch.isfinite(rng)
        return p[keep], i[keep], t[keep]

    count = 0
    source = map(read, sweeps) if loaded is not None else prefetched(read, sweeps)
    for (lidar_id, _), sweep in zip(sweeps, source):
        if sweep_counts is not None:
            sweep_counts.append(sweep[0].shape[0])
        pending.append(sweep)
        lidar_of.append(lidar_id)
        count += sweep[0].shape[0]
        if count >= chunk_points:
            place()
            count = 0
        if progress:
            progress()
    if pending:
        place()
    if not pts:
        z = torch.zeros(0, dtype=torch.float64, device=device)
        return z.view(0, 3), z, z
    return torch.cat(pts), torch.cat(inten), torch.cat(times)


def _near_track(points: torch.Tensor,  # [N, 3] world
                times: torch.Tensor,  # [N] seconds
                track: ActorTrack, radius: float, chunk: int = 4_000_000) -> torch.Tensor:  # [N] bool
    """Points that may lie in the track's box at their time: within ``radius`` (the box's grown
    half-diagonal) of the box centre's path between the keys around their time. The centre
    moves linearly between keys, so the test is exact to keep and only skips points that
    cannot be inside: those go through no pose interpolation."""
    key_times = track.times.to(device=points.device, dtype=torch.float64)
    centres = track.T_world_box[:, :3, 3].to(device=points.device, dtype=points.dtype)  # [K, 3]
    K = key_times.shape[0]
    if K == 1:
        lo = hi = centres
    else:
        lo = torch.minimum(centres[:-1], centres[1:])  # [K-1, 3] per key interval
        hi = torch.maximum(centres[:-1], centres[1:])
    slack = radius * (1 + 1e-9) + 1e-9  # rounding: never drop a point the exact test would keep
    near = torch.empty(points.shape[0], dtype=torch.bool, device=points.device)
    for s in range(0, points.shape[0], chunk):
        p, t = points[s:s + chunk], times[s:s + chunk].to(torch.float64)
        seg = (torch.searchsorted(key_times, t.contiguous(), right=True).clamp(1, max(K - 1, 1)) - 1
               if K > 1 else torch.zeros_like(t, dtype=torch.long))
        near[s:s + chunk] = ((p >= lo[seg] - slack) & (p <= hi[seg] + slack)).all(-1)
    return near


def split_actor_points(points: torch.Tensor,  # [N, 3] world
                       times: torch.Tensor,  # [N] seconds
                       tracks: list[ActorTrack], margin: float,
                       indices: list[torch.Tensor] | None = None,
                       ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Which points belong to which actor: ``static_mask [N]`` and, per track, its points in the box frame ``[n_a, 3]``.

    A point belongs to an actor when it lies inside the actor's box (grown by ``margin``)
    at the point's own time, within the track's time range. ``indices``: a list that gets, per
    track, the indices of its points into ``points`` (``[n_a]``, ascending).
    """
    static = torch.ones(points.shape[0], dtype=torch.bool, device=points.device)
    per_actor = []
    for track in tracks:
        traj = PoseTrajectory(track.times.to(points.device), track.T_world_box.to(points.device))
        half = torch.as_tensor(track.size_m, dtype=points.dtype, device=points.device) / 2 * (1 + margin)
        inside_time = (times >= track.times[0]) & (times <= track.times[-1])
        near = _near_track(points, times, track, float(half.norm()))
        cand = torch.nonzero(inside_time & near & static).flatten()
        if cand.numel() == 0:
            per_actor.append(torch.zeros(0, 3, dtype=points.dtype, device=points.device))
            if indices is not None:
                indices.append(cand)
            continue
        T, idx = _poses_at(traj, times[cand])
        local = transform_points(invert_transform(T)[idx], points[cand])
        inside = (local.abs() <= half).all(-1)
        static[cand[inside]] = False
        per_actor.append(local[inside])
        if indices is not None:
            indices.append(cand[inside])
    return static, per_actor


def voxel_downsample(points: torch.Tensor,  # [N, 3]
                     voxel: float, *features: torch.Tensor,  # each [N, ...]
                     ) -> tuple[torch.Tensor, ...]:
    """One point per occupied voxel: the mean of its points (and of each feature)."""
    return _voxel_means(points, voxel, features)[0]


def _voxel_means(points: torch.Tensor,  # [N, 3]
                 voxel: float, features: Sequence[torch.Tensor],  # each [N, ...]
                 weights: torch.Tensor | None = None,  # [N]; None: 1 each
                 ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """``voxel_downsample`` with each point counted ``weights`` times. Returns the voxels' weighted
    means (points, then features) and their total weights ``[M]``."""
    if points.shape[0] == 0:
        return (points, *features), torch.zeros(0, dtype=points.dtype, device=points.device)
    inverse, counts = voxel_cells(points, voxel)
    if weights is None:
        total = counts.to(points.dtype)
    else:
        total = torch.zeros(counts.shape[0], dtype=weights.dtype, device=weights.device).index_add_(0, inverse, weights)
    out = []
    for x in (points, *features):
        column = [-1] + [1] * (x.dim() - 1)  # a weight per row of x
        acc = torch.zeros((counts.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        acc.index_add_(0, inverse, x if weights is None else x * weights.view(column).to(x.dtype))
        out.append(acc / total.view(column).to(x.dtype))
    return tuple(out), total


def _downsample_to(points: torch.Tensor, voxel: float, max_points: int, *features: torch.Tensor):
    """Voxel downsampling, growing the voxel by 1.25x until at most ``max_points`` remain: the
    cloud that the first fitting voxel gives from the raw points, found without downsampling the
    raw points at every growth. The first voxels' means, each weighted by its point count, merge
    into the larger voxels (a fraction of the points) until they fit; then the raw points are
    downsampled from the growth before that, a growth at a time, up (or down) to the first that
    fits. A drive's tens of millions of returns go through about three times, not once per
    growth. The means fill about as many voxels as the raw points or a few fewer; where the raw
    count does not fall at every growth (contrived clouds), a later fitting voxel may be found.
    ValueError for a cap under 1 or a voxel that is not positive (either would loop forever:
    one voxel always keeps a point), and when 200 growths (1.25^200, about 1e19 times the
    voxel) do not get under the cap (non-finite points fall in voxels of their own)."""
    if max_points < 1 or not voxel > 0:
        raise ValueError(f"voxel downsampling needs a positive cap and voxel size, got {max_points} and {voxel}")
    too_many = ValueError(f"voxel downsampling could not get {points.shape[0]:,} points under {max_points:,} "
                          f"(are some of them non-finite?)")
    voxels = [voxel]
    for _ in range(200):
        voxels.append(voxels[-1] * 1.25)  # a multiplication a growth: the same sizes to the last bit
    out, weights = _voxel_means(points, voxel, features)
    if out[0].shape[0] <= max_points:
        return out, voxel
    k, merged = 0, out
    while merged[0].shape[0] > max_points:
        k += 1
        if k == len(voxels):
            raise too_many
        merged, weights = _voxel_means(merged[0], voxels[k], merged[1:], weights)
    k = max(1, k - 1)
    out = voxel_downsample(points, voxels[k], *features)
    if out[0].shape[0] <= max_points:  # fits a growth early: the first one that fits
        while k > 1:
            smaller = voxel_downsample(points, voxels[k - 1], *features)
            if smaller[0].shape[0] > max_points:
                break
            out, k = smaller, k - 1
        return out, voxels[k]
    while out[0].shape[0] > max_points:
        k += 1
        if k == len(voxels):
            raise too_many
        out = voxel_downsample(points, voxels[k], *features)
    return out, voxels[k]


def initial_scales(points: torch.Tensor,  # [N, 3]
                   floor: float, ceiling: float) -> torch.Tensor:  # [N, 3]
    """Isotropic scales from the mean distance to the 3 nearest neighbours, clamped to [floor, ceiling]."""
    if points.shape[0] < 2:
        return torch.full((points.shape[0], 3), ceiling, dtype=points.dtype, device=points.device)
    if points.shape[0] <= 3:  # fewer than 3 neighbours: the missing ones count as the ceiling
        d = knn_distances(points.float(), k=3)
        d = torch.where(torch.isfinite(d), d, torch.full_like(d, ceiling)).mean(-1)
    else:
        # a point whose 3rd neighbour lies past 3 x ceiling has a mean past the ceiling: no need
        # to find it (isolated points, such as those drawn above the lidar, cost search rounds)
        d = knn_distances(points.float(), k=3, max_radius=3 * ceiling)
        d = torch.where(torch.isinf(d).any(-1), torch.full_like(d[:, 0], ceiling), d.mean(-1))
    return d.clamp(floor, ceiling).to(points.dtype)[:, None].expand(-1, 3).contiguous()


def remove_outliers(points: torch.Tensor, std_ratio: float, *features: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Drop statistical outliers (isolated points, e.g. dust or multipath returns)."""
    if points.shape[0] < 16:
        return (points, *features)
    keep = ~statistical_outliers(points.float(), k=8, std_ratio=std_ratio)
    return tuple(x[keep] for x in (points, *features))


ImageSource = Callable[[str, int], torch.Tensor]  # (camera id, frame index) -> uint8 [H, W, 3] at full size
# (camera id, frame index) -> bool [H, W] at full size, True where a pixel counts (not the ego
# vehicle's), or None where all of them do
MaskSource = Callable[[str, int], "torch.Tensor | None"]


def full_size_images(shrunk: Callable[[str, int], torch.Tensor | None],
                     sizes: dict[str, tuple[int, int]]) -> Callable[[str, int], torch.Tensor | None]:
    """The frames (or masks) of ``shrunk`` (decoded at a downscale) stretched back to each
    camera's full ``(height, width)`` in ``sizes`` by nearest neighbour: every full-size pixel
    takes the shrunk pixel that covers it, so a downscaled build colours its points without
    decoding a frame twice. None (a frame without a mask) stays None."""
    def image(cam_id: str, index: int) -> torch.Tensor | None:  # [H, W, ...] like the shrunk one
        small = shrunk(cam_id, index)  # [h, w, ...]
        if small is None:
            return None
        h, w = sizes[cam_id]
        rows = torch.arange(h, device=small.device) * small.shape[0] // h  # [H]
        cols = torch.arange(w, device=small.device) * small.shape[1] // w  # [W]
        return small[rows[:, None], cols[None, :]]

    return image


def decoded_images(capture: Capture) -> ImageSource:
    """The capture's frames, decoded from their files at each call."""
    return lambda cam_id, index: torch.from_numpy(np.array(capture.cameras[cam_id].frames[index].load_image()))


ABOVE_BANDS = 64  # image columns are split into this many bands to find the top of the lidar's coverage
ABOVE_PIXELS_PER_POINT = 32  # a frame seeds at most one point per this many pixels above the coverage
SPREAD = 1024  # slots a contended scatter's target is spread over (band_coverage, the colours' depth buffer)


def _spread(n: int, device: torch.device) -> torch.Tensor:  # [n] long in [0, SPREAD)
    """Which of ``SPREAD`` slots each of ``n`` scattered values goes to. On a GPU a float64
    minimum is a compare-and-swap loop: thousands of values on one target (a frame's points out
    of view) queue on it, spread over slots they do not."""
    return torch.arange(n, device=device) % SPREAD


def _project(model: Any, pc: torch.Tensor  # [N, 3] camera frame
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pixels ``[N, 2]``, whether each point lands in front of the camera ``[N]`` (projected, finite,
    more than 0.1 m ahead) and its distance ``[N]``."""
    uv, valid = model.project(pc)
    depth = pc.norm(dim=-1)
    valid = valid & torch.isfinite(depth) & (pc[:, 2] > 0.1) & torch.isfinite(uv).all(-1)
    return uv, valid, depth


def _camera_poses(capture: Capture, frames: list[tuple[str, int]],
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each frame's time ``[F]`` (seconds, float64, on the host) and camera-to-world pose
    ``[F, 4, 4]`` (float64, on ``device``): the rig's pose at the frame's time, then the camera's
    mount. All at once and copied once, so that loops over the frames only queue device work (a
    copy from pageable host memory waits for the device's queue)."""
    times = torch.tensor([float(capture.seconds(capture.cameras[c].frames[i].timestamp_us)) for c, i in frames],
                         dtype=torch.float64)  # [F]
    T_world_rig = capture.rig_trajectory().at(times)  # [F, 4, 4]
    poses = [T_world_rig[k] @ torch.as_tensor(capture.cameras[c].T_rig_camera, dtype=torch.float64)
             for k, (c, _) in enumerate(frames)]
    return times, (torch.stack(poses) if poses else torch.zeros(0, 4, 4, dtype=torch.float64)).to(device)


def _camera_models(capture: Capture, device: torch.device) -> Callable[[str], Any]:
    """Each camera's float64 sensor model on ``device``, built on first use."""
    models: dict[str, Any] = {}

    def model(cam_id: str) -> Any:
        if cam_id not in models:
            models[cam_id] = capture.cameras[cam_id].sensor_model(dtype=torch.float64, device=device)
        return models[cam_id]

    return model


def _stacked_coverage(covered: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Frames' ``band_coverage`` rows as ``[F, 2, ABOVE_BANDS + 1]`` (F may be 0)."""
    if not covered:
        return torch.zeros(0, 2, ABOVE_BANDS + 1, dtype=torch.float64, device=device)
    return torch.stack(covered)


def colour_points(capture: Capture, frames: list[tuple[str, int]], static_pts: torch.Tensor,  # [Ns, 3] world
                  actor_pts: list[torch.Tensor],  # per track [n_a, 3] box frame
                  tracks: list[ActorTrack], device: torch.device,
                  images: ImageSource | None = None,
                  masks: MaskSource | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Mean colour of every point over the frames that see it (grey 0.5 where none does).

    ``images``: where the frames come from (default: decoded from the files); a build passes
    the ones it has already decoded. ``masks``: pixels that do not count (the ego vehicle's
    body) colour nothing; default: every pixel counts.

    Visibility: points are splatted into a coarse depth buffer (cells of about 1/160 of the
    image width); a point counts for a frame when it is within 5% (+0.2 m) of its cell's
    nearest depth.
    Returns the static colours ``[Ns, 3]`` and per track ``[n_a, 3]``, in [0, 1].
    """
    static_rgb, actor_rgb, _ = colour_and_coverage(capture, frames, static_pts, actor_pts, tracks, device, images,
                                                   masks, coverage=False)
    return static_rgb, actor_rgb


def colour_and_coverage(capture: Capture, frames: list[tuple[str, int]], static_pts: torch.Tensor,  # [Ns, 3] world
                        actor_pts: list[torch.Tensor],  # per track [n_a, 3] box frame
                        tracks: list[ActorTrack], device: torch.device,
                        images: ImageSource | None = None, masks: MaskSource | None = None,
                        coverage: bool = True) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None]:
    """``colour_points`` and, from the same projection of the static points, each frame's
    ``lidar_coverage`` (``[F, 2, ABOVE_BANDS + 1]``; None when ``coverage`` is False), which
    ``points_above_lidar`` takes: one pass over the frames instead of two (drive30 projects
    a million points into 72 frames)."""
    images = images or decoded_images(capture)
    sizes = [static_pts.shape[0]] + [p.shape[0] for p in actor_pts]
    n = sum(sizes)
    acc = torch.zeros(n, 3, dtype=torch.float32, device=device)
    cnt = torch.zeros(n, dtype=torch.float32, device=device)
    # every frame's camera and box poses at once, on the device, every camera's model once: per
    # frame, the loop below only queues device work (drive30 colours from 72 frames with 13 actors)
    times, T_world_cam = _camera_poses(capture, frames, device)  # [F], [F, 4, 4]
    T_cam_world = invert_transform(T_world_cam)  # [F, 4, 4]
    box_poses = [PoseTrajectory(t.times, t.T_world_box).at(times).to(device) for t in tracks]  # per track [F, 4, 4]
    model_of = _camera_models(capture, device)
    covered = []
    for k, (cam_id, fi) in enumerate(frames):
        cam = capture.cameras[cam_id]
        t = float(times[k])
        world = [static_pts]
        for poses, track, local in zip(box_poses, tracks, actor_pts):
            if track.times[0] <= t <= track.times[-1]:
                world.append(transform_points(poses[k], local.to(device)))
            else:  # not there at t: push far behind every camera
                world.append(torch.full_like(local, float("nan")))
        pc = transform_points(T_cam_world[k], torch.cat(world).to(device))
        uv, valid, depth = _project(model_of(cam_id), pc)
        if coverage:
            ns = static_pts.shape[0]
            covered.append(band_coverage(uv[:ns], valid[:ns], depth[:ns], cam.width, cam.height))
        uv = torch.where(valid[:, None], uv, torch.zeros_like(uv))  # NaN pixels would index out of bounds
        cell = max(1, cam.width // 160)
        gw, gh = -(-cam.width // cell), -(-cam.height // cell)
        cu = (uv[:, 0] + 0.5).floor().clamp(0, cam.width - 1).long()
        cv = (uv[:, 1] + 0.5).floor().clamp(0, cam.height - 1).long()
        # masks rather than boolean indexing: no host synchronisation per frame
        spare = gw * gh + _spread(valid.shape[0], device)  # points out of view: SPREAD spare cells, not one
        key = torch.where(valid, (cv // cell) * gw + (cu // cell), spare)
        zbuf = torch.full((gw * gh + SPREAD,), float("inf"), dtype=depth.dtype, device=device)
        zbuf.scatter_reduce_(0, key, torch.where(valid, depth, torch.full_like(depth, float("inf"))), reduce="amin")
        seen = valid & (depth <= zbuf[key] * 1.05 + 0.2)
        mask = None if masks is None else masks(cam_id, fi)
        if mask is not None:  # a point behind the ego's body takes none of the body's colour
            seen = seen & mask.to(device)[cv, cu]
        colour = images(cam_id, fi).to(device)[cv, cu].float() / 255.0
        acc += torch.where(seen[:, None], colour, torch.zeros_like(colour))
        cnt += seen.to(cnt.dtype)
    rgb = torch.where(cnt[:, None] > 0, acc / cnt.clamp_min(1)[:, None], torch.full_like(acc, 0.5))
    parts = list(torch.split(rgb, sizes))
    return parts[0], parts[1:], (_stacked_coverage(covered, device) if coverage else None)


def band_coverage(uv: torch.Tensor,  # [N, 2] pixels
                  valid: torch.Tensor,  # [N] bool: in front of the camera and projected
                  dist: torch.Tensor,  # [N] metres from the camera
                  width: int, height: int) -> torch.Tensor:
    """The top of the lidar's coverage in one frame: per band of image columns (``ABOVE_BANDS``,
    and a spare one for points outside the image), the highest pixel row a point lands on
    (inf where none does) and the mean distance of the points within 2% of the image's height
    of it. Returns ``[2, ABOVE_BANDS + 1]`` (rows; distances)."""
    valid = valid & (uv[:, 0] >= -0.5) & (uv[:, 0] < width - 0.5) & (uv[:, 1] >= -0.5) & (uv[:, 1] < height - 0.5)
    band_w = -(-width // ABOVE_BANDS)
    col = torch.where(valid, uv[:, 0], torch.zeros_like(uv[:, 0]))  # NaN would not floor to a band
    band = torch.where(valid, (col + 0.5).floor().clamp(0, width - 1).long() // band_w, ABOVE_BANDS)
    slot = band * SPREAD + _spread(band.shape[0], band.device)  # most points share the spare band
    v = torch.where(valid, uv[:, 1], torch.full_like(uv[:, 1], float("inf")))
    top = torch.full(((ABOVE_BANDS + 1) * SPREAD,), float("inf"), dtype=v.dtype, device=v.device)
    top = top.scatter_reduce_(0, slot, v, reduce="amin").view(ABOVE_BANDS + 1, SPREAD).amin(1)
    near_top = valid & (v <= top[band] + 0.02 * height)
    dist = dist.to(v.dtype)
    sums = torch.zeros(2, (ABOVE_BANDS + 1) * SPREAD, dtype=v.dtype, device=v.device)
    sums[0].scatter_add_(0, slot, torch.where(near_top, dist, torch.zeros_like(dist)))
    sums[1].scatter_add_(0, slot, near_top.to(v.dtype))
    total, n = sums.view(2, ABOVE_BANDS + 1, SPREAD).sum(2)
    return torch.stack((top, total / n.clamp_min(1)))


def lidar_coverage(capture: Capture, frames: list[tuple[str, int]], static_pts: torch.Tensor,  # [Ns, 3] world
                   device: torch.device) -> torch.Tensor:
    """Every frame's ``band_coverage`` of the static points: ``[F, 2, ABOVE_BANDS + 1]``."""
    _, T_world_cam = _camera_poses(capture, frames, device)  # [F, 4, 4]
    T_cam_world = invert_transform(T_world_cam)  # [F, 4, 4]
    model_of = _camera_models(capture, device)
    covered = []
    static_pts = static_pts.to(device)
    for k, (cam_id, _fi) in enumerate(frames):
        cam = capture.cameras[cam_id]
        pc = transform_points(T_cam_world[k], static_pts)
        uv, valid, depth = _project(model_of(cam_id), pc)
        covered.append(band_coverage(uv, valid, depth, cam.width, cam.height))
    return _stacked_coverage(covered, device)


def points_above_lidar(capture: Capture, frames: list[tuple[str, int]], static_pts: torch.Tensor,  # [Ns, 3] world
                       count: int, device: torch.device, images: ImageSource | None = None,
                       masks: MaskSource | None = None, seed: int = 0,
                       pixels_per_point: float = ABOVE_PIXELS_PER_POINT,
                       coverage: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Points where the cameras see above the lidar's reach, coloured by their pixel.

    A spinning lidar sees a few degrees above the horizon at most, so the upper part of a view
    (a building's upper floors, an overpass, tree tops) starts with no Gaussian, and the sky map
    takes its colours as a blur. In each frame, per band of image columns, the highest lidar
    point marks the top of the coverage; pixels above it (and not masked) are drawn at random,
    each placed along its ray at the distance of that band's highest points (what stands above
    a facade's last return is mostly more facade), spread by a factor of about 1.25 either way.
    Bands without a lidar point get none (no distance to guess from). Each frame draws an equal
    share of ``count``, at most one point per ``pixels_per_point`` pixels above its coverage
    (small images get few points: on a CPU every Gaussian costs).

    ``coverage``: the frames' ``lidar_coverage`` of ``static_pts`` where the caller has it
    already (``colour_and_coverage``); default: computed here.
    Returns world points ``[M, 3]`` float64 and colours ``[M, 3]`` in [0, 1] (M <= ``count``).
    """
    if not frames:
        return torch.zeros(0, 3, dtype=torch.float64, device=device), torch.zeros(0, 3, device=device)
    if coverage is None:
        coverage = lidar_coverage(capture, frames, static_pts, device)
    elif coverage.shape != (len(frames), 2, ABOVE_BANDS + 1):
        raise ValueError(f"coverage of shape {tuple(coverage.shape)} for {len(frames)} frames: "
                         f"expected ({len(frames)}, 2, {ABOVE_BANDS + 1}) (lidar_coverage's)")
    gen = torch.Generator().manual_seed(seed)
    images = images or decoded_images(capture)
    per = -(-count // max(1, len(frames)))
    _, T_world_cam = _camera_poses(capture, frames, device)  # [F, 4, 4]
    model_of = _camera_models(capture, device)
    cover = coverage.cpu()  # [F, 2, B + 1]: the one read back
    tops_host, dists_host = cover[:, 0], cover[:, 1]
    # the draws on the host first, then one copy to the device: a copy per frame would wait for
    # the device work of the frames before it. Frames are taken camera by camera, so that each
    # camera's rays are unprojected in one call (drive30 draws in 72 frames of 6 cameras).
    by_camera: dict[str, list[int]] = {}
    for k, (cam_id, _fi) in enumerate(frames):
        by_camera.setdefault(cam_id, []).append(k)
    drawn: dict[str, list[tuple[int, int]]] = {}  # per camera (frame, samples), in the samples' order
    samples = []  # per frame [4, m]: column, row, distance, frame
    for cam_id, ks in by_camera.items():
        cam = capture.cameras[cam_id]
        band_w = -(-cam.width // ABOVE_BANDS)
        # no more points than the room above the coverage has pixels to tell them apart
        widths = (cam.width - torch.arange(ABOVE_BANDS) * band_w).clamp(0, band_w)
        for k in ks:
            rows = (tops_host[k][:ABOVE_BANDS] - 2.0).nan_to_num(0.0, posinf=0.0).clamp(0, cam.height)
            area = float((widths * torch.where(rows >= 1.0, rows, torch.zeros_like(rows))).sum())
            draws = min(per, int(area / pixels_per_point))
            if draws < 1:
                continue
            u = torch.randint(0, cam.width, (draws,), generator=gen)
            b = u // band_w
            room = tops_host[k][b] - 2.0  # pixel rows above the band's top, less a margin
            ok = torch.isfinite(room) & (room >= 1.0)
            v_px = (torch.rand(draws, generator=gen, dtype=torch.float64) * room.clamp(0, cam.height)).floor().long()
            spread = torch.exp(torch.randn(draws, generator=gen, dtype=torch.float64) * 0.2)
            u, v_px, b, spread = u[ok], v_px[ok], b[ok], spread[ok]
            if u.numel() == 0:
                continue
            drawn.setdefault(cam_id, []).append((k, u.numel()))
            samples.append(torch.stack((u.double(), v_px.double(), dists_host[k][b] * spread,
                                        torch.full_like(spread, float(k)))))
    if not drawn:
        return torch.zeros(0, 3, dtype=torch.float64, device=device), torch.zeros(0, 3, device=device)
    on_device = torch.cat(samples, dim=1).to(device)  # [4, M]
    uv = on_device[:2].T.long()  # [M, 2]
    rays = torch.empty(uv.shape[0], 3, dtype=torch.float64, device=device)  # [M, 3]
    cols, kept = [], []
    start = 0
    for cam_id, frames_drawn in drawn.items():
        first = start
        for k, m in frames_drawn:
            fi = frames[k][1]
            u_d, v_d = uv[start:start + m, 0], uv[start:start + m, 1]
            start += m
            mask = None if masks is None else masks(cam_id, fi)
            # masked samples are dropped after the loop: a boolean index here would wait for the device
            kept.append(torch.ones(m, dtype=torch.bool, device=device) if mask is None else mask.to(device)[v_d, u_d])
            cols.append(images(cam_id, fi).to(device)[v_d, u_d].float() / 255.0)
        rays[first:start] = model_of(cam_id).unproject(uv[first:start].double())
    T = T_world_cam[on_device[3].long()]  # [M, 4, 4] each sample's frame's camera pose
    local = rays / rays.norm(dim=-1, keepdim=True) * on_device[2, :, None]  # [M, 3] camera frame
    pts = (T[:, :3, :3] @ local[:, :, None])[:, :, 0] + T[:, :3, 3]
    keep = torch.cat(kept)
    return pts[keep][:count], torch.cat(cols)[keep][:count]


def spread_evenly(items: list, count: int) -> list:
    """``count`` items spread evenly over the list, first and last included (all of them when there are fewer)."""
    if len(items) <= count:
        return list(items)
    idx = np.linspace(0, len(items) - 1, count).round().astype(int)
    return [items[i] for i in idx]


def sky_init(capture: Capture, frames: list[tuple[str, int]], rows: int,
             images: ImageSource | None = None, masks: MaskSource | None = None) -> torch.Tensor:
    """A uniform sky map (``[3, rows, 4 rows]``, pre-sigmoid) at the mean colour of the images' top
    rows (a tenth of each image), leaving out the pixels ``masks`` sets False (the ego vehicle's)."""
    images = images or decoded_images(capture)
    tops = []
    for cam_id, fi in frames:
        img = images(cam_id, fi)
        rows_top = max(1, img.shape[0] // 10)
        top = img[:rows_top].reshape(-1, 3).double()  # [P, 3]
        mask = None if masks is None else masks(cam_id, fi)
        if mask is not None:
            top = top[mask[:rows_top].reshape(-1).to(top.device)]
        if top.shape[0]:
            tops.append(top.mean(0).cpu() / 255.0)
    colour = (torch.stack(tops).mean(0) if tops else torch.tensor([0.6, 0.7, 0.8])).float()
    return torch.logit(colour.clamp(0.02, 0.98))[:, None, None].expand(3, rows, 4 * rows).contiguous()


def frustum_points(capture: Capture, frames: list[tuple[str, int]], count: int,
                   near: float = 2.0, far: float = 100.0, seed: int = 0, images: ImageSource | None = None,
                   masks: MaskSource | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random points in the training cameras' frusta (uniform in inverse depth), coloured by their pixel.

    ``images``: where the frames come from (default: decoded from the files). ``masks``: pixels
    set False (the ego vehicle's) seed no point.
    Returns world points ``[M, 3]`` float64 and colours ``[M, 3]`` (M <= ``count``: the draws
    that fell on masked pixels are left out).
    """
    gen = torch.Generator().manual_seed(seed)
    rig = capture.rig_trajectory()
    images = images or decoded_images(capture)
    per = -(-count // max(1, len(frames)))
    pts, cols = [], []
    for cam_id, fi in frames:
        cam = capture.cameras[cam_id]
        frame = cam.frames[fi]
        u = torch.randint(0, cam.width, (per,), generator=gen)
        v = torch.randint(0, cam.height, (per,), generator=gen)
        inv = 1.0 / far + torch.rand(per, generator=gen, dtype=torch.float64) * (1.0 / near - 1.0 / far)
        mask = None if masks is None else masks(cam_id, fi)
        if mask is not None:
            keep = mask.cpu()[v, u]
            u, v, inv = u[keep], v[keep], inv[keep]
        rays = cam.sensor_model(dtype=torch.float64).unproject(torch.stack((u, v), -1).double())
        rays = rays / rays.norm(dim=-1, keepdim=True)
        t = float(capture.seconds(frame.timestamp_us))
        T_wc = rig.at(torch.tensor([t], dtype=torch.float64))[0] @ torch.as_tensor(cam.T_rig_camera,
                                                                                 dtype=torch.float64)
        pts.append(transform_points(T_wc, rays / inv[:, None]))
        cols.append(images(cam_id, fi).cpu()[v, u].float() / 255.0)
    return torch.cat(pts)[:count], torch.cat(cols)[:count]


def scene_tracks(capture: Capture) -> list[ActorTrack]:
    """The capture's tracks, times in seconds since the capture start."""
    return [ActorTrack(t.id, t.label, [float(x) for x in t.size_m],
                       torch.as_tensor(capture.seconds(t.timestamps_us)),
                       torch.as_tensor(t.T_world_box, dtype=torch.float64))
            for t in capture.tracks.values()]


def seed_empty_actors(actor_pts: list[torch.Tensor], tracks: list[ActorTrack], count: int = 200,
                      seed: int = 0) -> list[torch.Tensor]:
    """Actors without points (no lidar return inside the box, or no lidar) get ``count`` points
    spread through their box: relocation only moves Gaussians within the actor set, so an
    actor that starts empty would stay empty and static Gaussians would smear its motion."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for pts, track in zip(actor_pts, tracks):
        if pts.shape[0] > 0:
            out.append(pts)
            continue
        size = torch.tensor(track.size_m, dtype=torch.float64) * 0.9
        out.append(((torch.rand(count, 3, generator=gen, dtype=torch.float64) - 0.5) * size).to(pts.device))
    return out


def initialize_scene(capture: Capture, train_sweeps: list[tuple[str, int]], train_frames: list[tuple[str, int]],
                     config: InitConfig, device: torch.device | str,
                     log: Callable[[str], None] | None = None, intensity_scale: float | None = None,
                     images: ImageSource | None = None, masks: MaskSource | None = None,
                     clock: Callable[[str], Any] | None = None,
                     sweep_points: Mapping[tuple[str, int], Any] | None = None,
                     free_space: Sequence[SweepRanges] = ()) -> Scene:
    """The initial scene of a capture, built from its training sweeps and frames only.

    ``intensity_scale``: lidar intensities are divided by it (as the training targets are);
    None: the 99th percentile of the points used here. ``images``: the frames, already decoded
    at full size (default: decoded from the files). ``masks``: pixels that colour no point (the
    ego vehicle's; default: none). ``clock``: times the parts
    (a ``nurec_usd.util.profiling.StageClock``). ``sweep_points``: the sweeps, already read
    (``lidar_world_points``' ``loaded``; default: read from the files). ``free_space``: the training
    sweeps' range images, per lidar: the points above the lidar that they saw through are dropped
    (``config.above_lidar_free_space_m``; none given: all kept).
    """
    say = log or (lambda _m: None)
    part = clock or (lambda _name: contextlib.nullcontext())
    device = torch.device(device)
    tracks = scene_tracks(capture)
    per_camera: dict[str, list[tuple[str, int]]] = {}
    for cam_id, fi in train_frames:
        per_camera.setdefault(cam_id, []).append((cam_id, fi))
    colour_frames = [f for frames in per_camera.values() for f in spread_evenly(frames, config.color_frames)]

    sfm = capture.metadata.get("sfm_points") if isinstance(capture.metadata, dict) else None
    if train_sweeps:
        with part("place points"):
            pts, inten, times = lidar_world_points(capture, train_sweeps, device, loaded=sweep_points)
        say(f"accumulated {pts.shape[0]:,} lidar points from {len(train_sweeps)} sweeps")
        if pts.shape[0] == 0:
            raise ValueError("the capture's training sweeps hold no points inside the lidars' range limits")
        if intensity_scale is None:
            intensity_scale = float(torch.quantile(inten[:: max(1, inten.shape[0] // 100_000)].float(), 0.99)) or 1.0
        inten = (inten / intensity_scale).clamp(0, 1)
        with part("split actors"):
            static_mask, actor_local = split_actor_points(pts, times, tracks, config.box_margin)
            static_pts, static_int = pts[static_mask], inten[static_mask]
            actor_pts = actor_local
            del pts, inten, times
        above = min(config.above_lidar_points, config.max_points // 4)  # the lidar's points stay the most
        with part("downsample"):
            (static_pts, static_int), voxel = _downsample_to(static_pts, config.voxel_m, config.max_points - above,
                                                             static_int)
            static_pts, static_int = remove_outliers(static_pts, config.outlier_std, static_int)
            actor_pts = seed_empty_actors([voxel_downsample(p, config.actor_voxel_m)[0] for p in actor_pts], tracks)
        # actors start at the static mean intensity (their own returns are few and sparse)
        mean_int = float(static_int.mean()) if static_int.numel() else 0.2
        actor_int = [torch.full((p.shape[0],), mean_int, dtype=torch.float64, device=device) for p in actor_pts]
        say(f"static points: {static_pts.shape[0]:,} (voxel {voxel:.3f} m); actor points: "
            + ", ".join(f"{t.id} {p.shape[0]}" for t, p in zip(tracks, actor_pts)))
        with part("colour"):
            static_rgb, actor_rgb, coverage = colour_and_coverage(capture, colour_frames, static_pts, actor_pts,
                                                                  tracks, device, images, masks, coverage=above > 0)
        if above > 0:
            with part("above the lidar"):
                extra, extra_rgb = points_above_lidar(capture, colour_frames, static_pts, above, device, images,
                                                      masks, coverage=coverage)
            drawn = extra.shape[0]
            if config.above_lidar_free_space_m >= 0 and free_space:
                with part("free space"):
                    clear = ~torch.stack([seen_through(extra, sweeps, config.above_lidar_free_space_m)
                                          for sweeps in free_space]).any(0)
                    extra, extra_rgb = extra[clear], extra_rgb[clear]
            say(f"points above the lidar's reach: {extra.shape[0]:,}"
                + (f" ({drawn - extra.shape[0]:,} more were in space the lidar saw through)"
                   if extra.shape[0] < drawn else ""))
            static_pts = torch.cat([static_pts, extra])
            static_rgb = torch.cat([static_rgb, extra_rgb.to(static_rgb.dtype)])
            static_int = torch.cat([static_int, torch.full((extra.shape[0],), mean_int, dtype=static_int.dtype,
                                                           device=device)])
    elif sfm is not None:
        static_pts = torch.as_tensor(np.asarray(sfm["xyz"]), dtype=torch.float64, device=device)
        static_rgb = torch.as_tensor(np.asarray(sfm["rgb"]), dtype=torch.float32, device=device) / 255.0
        # SfM units are arbitrary: merge only points closer than a thousandth of the cloud's extent
        lo, hi = torch.quantile(static_pts[:: max(1, static_pts.shape[0] // 100_000)], torch.tensor(
            [0.01, 0.99], dtype=torch.float64, device=device), dim=0)
        extent = float((hi - lo).max()) or 1.0
        (static_pts, static_rgb), voxel = _downsample_to(static_pts, extent / 1000, config.max_points, static_rgb)
        static_int = torch.full((static_pts.shape[0],), 0.2, dtype=torch.float64, device=device)
        say(f"no lidar: {static_pts.shape[0]:,} SfM points")
    else:
        static_pts, static_rgb = frustum_points(capture, colour_frames, config.random_points, images=images,
                                                masks=masks)
        static_pts, static_rgb = static_pts.to(device), static_rgb.to(device)
        static_int = torch.full((static_pts.shape[0],), 0.2, dtype=torch.float64, device=device)
        voxel = config.voxel_m
        say(f"no lidar and no SfM points: {static_pts.shape[0]:,} random points in the camera frusta")
    if static_pts.shape[0] == 0:
        raise ValueError("initialisation found no points to start from")
    if not train_sweeps:  # camera-only captures: tracked actors start from points in their boxes
        actor_pts = seed_empty_actors([torch.zeros(0, 3, dtype=torch.float64, device=device) for _ in tracks],
                                      tracks)
        _, actor_rgb = colour_points(capture, colour_frames, static_pts[:0], actor_pts, tracks, device, images,
                                     masks)
        actor_int = [torch.full((p.shape[0],), 0.2, dtype=torch.float64, device=device) for p in actor_pts]

    def gaussians(p: torch.Tensor, rgb: torch.Tensor, inten: torch.Tensor, vox: float,
                  flat: bool = False) -> GaussianParams:
        scales, quats = initial_scales(p, floor=vox * 0.05, ceiling=vox * 10), None
        if flat and config.flat_start_thickness < 1:
            scales, quats = flat_on_surfaces(p, scales[:, 0], 4 * vox, config.flat_start_thickness)
            quats = quats.float()
            discs = int((scales[:, 2] < scales[:, 0]).sum())
            say(f"flat starting discs: {discs:,} of {p.shape[0]:,} static Gaussians lie in planar cells "
                f"({discs / max(1, p.shape[0]):.0%})")
        return GaussianParams.create(p.float(), scales.float(), rgb.float(), config.opacity, inten.float(), quats)

    with part("scales"):
        static = gaussians(static_pts, static_rgb, static_int, voxel, flat=bool(train_sweeps))
        actor_sets = [gaussians(p, c, i, config.actor_voxel_m) for p, c, i in zip(actor_pts, actor_rgb, actor_int)]
    if actor_sets:
        actors = GaussianParams(**{k: torch.cat([getattr(a, k) for a in actor_sets])
                                   for k in GaussianParams.FIELDS})
        actor_index = torch.cat([torch.full((len(a),), i, dtype=torch.int32, device=device)
                                 for i, a in enumerate(actor_sets)])
    else:
        actors = GaussianParams.empty(device)
        actor_index = torch.zeros(0, dtype=torch.int32, device=device)
    cam_ids = list(capture.cameras)
    # Position learning rates are in metres for lidar captures; camera-only captures have
    # arbitrary units: scale by the spread of the rig's path (10 m of driving = 1).
    position_scale = 1.0
    if not train_sweeps:
        centres = torch.as_tensor(capture.rig.T_world_rig[:, :3, 3])
        position_scale = max(float((centres - centres.mean(0)).norm(dim=-1).max()) / 10.0, 1e-3)
    with part("sky"):
        sky = sky_init(capture, colour_frames, config.sky_rows, images, masks).to(device)
    return Scene(static=static, actors=actors, actor_index=actor_index, tracks=tracks, sky=sky, camera_ids=cam_ids,
                 exposure=torch.zeros(len(cam_ids), 6, device=device), sh_degree=0,
                 world_offset_m=[float(x) for x in capture.world_offset_m],
                 metadata={"intensity_scale": intensity_scale or 1.0, "init_voxel_m": voxel,
                           "position_scale": position_scale})
