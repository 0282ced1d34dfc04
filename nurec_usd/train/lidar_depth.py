"""Depth supervision of camera renders from the lidar (the ``depth_weight`` term).

Where views are few (a single forward camera, a short drive), a scene fits the training images
with floaters in front of the surfaces that a held-out view then sees. The lidar measured where
those surfaces are: each training frame gets sparse depth targets, the returns of the training
sweep nearest to it in time placed in the world (each point with the rig pose at its firing
time) and projected into the frame as the renderer places a Gaussian's centre
(``nurec_usd.ops.camera.project_points``: every camera model, rolling shutters, the renderer's
depth convention). The step compares its depth image with them (``depth_loss``).

Which returns become targets:
- static ones only: a return inside a tracked actor's box (at its time) is carried with its box
  to the frame's time, where it hides what lies behind it, but is no target itself (its box's
  pose is an estimate);
- visible ones: the lidar sits elsewhere than the camera and sees behind what the camera sees,
  so a return is kept only within 5% (+0.2 m) of the nearest return (static or actor) projected
  within a few pixels of it (``VISIBILITY_WINDOW_PX``: the gaps between a lidar's returns on a
  near object, at the stored image size);
- not on the ego vehicle's masked pixels nor outside the lens, at most ``points_per_frame`` per
  frame (a random subset, seeded).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nurec_usd.ops.camera import project_points
from nurec_usd.scene.init import lidar_world_points, scene_tracks, split_actor_points
from nurec_usd.sensors.se3 import PoseTrajectory, transform_points
from nurec_usd.train.data import CaptureData, FrameGroup, FrameRef

VISIBLE_RATIO = 1.05  # a return is visible within this factor (+ VISIBLE_SLACK_M) of its neighbourhood's nearest
VISIBLE_SLACK_M = 0.2
VISIBILITY_WINDOW_PX = 9  # the neighbourhood: this many pixels square, centred on the return's pixel


@dataclass
class FrameDepth:
    """One frame's depth targets, at the stored image size."""

    pixels: torch.Tensor  # [P] int64, y * width + x of the nearest pixel centre
    depths: torch.Tensor  # [P] float32 metres (z for pinhole / opencv, the distance for fisheye / f-theta)


class LidarDepthTargets:
    """Sparse lidar depth targets of every training frame, and each group's gathered per level."""

    def __init__(self, data: CaptureData, groups: list[FrameGroup], points_per_frame: int = 20_000,
                 seed: int = 0, box_margin: float = 0.05):
        """Targets of the frames of ``groups`` from ``data``'s training sweeps; ``data.sweep_points``
        must still hold them (before ``release_sweep_points``)."""
        self.data = data
        self.frames: dict[FrameRef, FrameDepth] = {}
        self._gathered: dict[tuple[FrameGroup, int], tuple[torch.Tensor, torch.Tensor]] = {}
        gen = torch.Generator(device="cpu").manual_seed(seed)
        if not data.train_sweeps:
            return
        # each group's nearest training sweep; those sweeps placed in the world and split into static
        # and actor returns in one pass
        sweep_times = torch.tensor([s.time_s for s in data.train_sweeps], dtype=torch.float64)
        nearest = [int((sweep_times - sum(r.time_s for r in g.frames) / len(g.frames)).abs().argmin())
                   for g in groups]
        used = sorted(set(nearest))
        counts: list[int] = []
        keys = [(data.lidars[data.train_sweeps[i].lidar].id, data.train_sweeps[i].sweep) for i in used]
        pts, _, times = lidar_world_points(data.capture, keys, data.device, loaded=data.sweep_points,
                                           sweep_counts=counts)
        tracks = scene_tracks(data.capture)
        static = torch.ones(len(pts), dtype=torch.bool, device=pts.device)
        movers = []  # per track with returns: its returns in its box's frame, and its box at each group's time
        if tracks:
            index: list[torch.Tensor] = []
            static, local = split_actor_points(pts, times, tracks, box_margin, indices=index)
            group_times = torch.tensor([sum(r.time_s for r in g.frames) / len(g.frames) for g in groups],
                                       dtype=torch.float64)
            starts_t = torch.tensor([sum(counts[:k]) for k in range(len(counts) + 1)], device=pts.device)
            for track, loc, idx in zip(tracks, local, index):
                if loc.shape[0] == 0:
                    continue
                path = PoseTrajectory(track.times.to(pts.device), track.T_world_box.to(pts.device))
                during = (group_times >= float(track.times[0])) & (group_times <= float(track.times[-1]))
                # [S + 1] where each used sweep's returns of this track start (one read per track)
                bounds = torch.searchsorted(idx, starts_t).tolist()
                movers.append((loc.float(), path.at(group_times.to(pts.device)).float(), during.tolist(), bounds))
        pts = pts.float()
        slot = {s: k for k, s in enumerate(used)}
        starts = [sum(counts[:k]) for k in range(len(counts) + 1)]
        for g, (group, i) in enumerate(zip(groups, nearest)):
            k = slot[i]
            part = slice(starts[k], starts[k + 1])
            # the actors' returns where their boxes are when the group's readouts start: occluders only
            moved = [transform_points(T[g], loc[b[k]:b[k + 1]]) for loc, T, during, b in movers
                     if during[g] and b[k + 1] > b[k]]
            points = torch.cat([pts[part], *moved])
            is_static = torch.cat([static[part], torch.zeros(points.shape[0] - (part.stop - part.start),
                                                             dtype=torch.bool, device=points.device)])
            uv, depth, inside = project_points(points, data.camera_views(group, 1).batch)  # [C, N, (2)]
            for c, ref in enumerate(group.frames):
                self.frames[ref] = self._frame_targets(ref, uv[c], depth[c], inside[c], is_static,
                                                       points_per_frame, gen)

    def _frame_targets(self, ref: FrameRef, uv: torch.Tensor, depth: torch.Tensor, inside: torch.Tensor,
                       static: torch.Tensor, limit: int, gen: torch.Generator) -> FrameDepth:
        cam = self.data.cameras[ref.camera]
        w, h = cam.width, cam.height
        x = (uv[:, 0] + 0.5).floor().long().clamp(0, w - 1)
        y = (uv[:, 1] + 0.5).floor().long().clamp(0, h - 1)
        pixel = y * w + x
        # the nearest return at each pixel, then over the window around it
        nearest = torch.full((h * w,), float("inf"), dtype=depth.dtype, device=depth.device)
        nearest.scatter_reduce_(0, pixel[inside], depth[inside], reduce="amin")
        r = VISIBILITY_WINDOW_PX // 2
        nearest = -F.max_pool2d(-nearest.view(1, 1, h, w), 2 * r + 1, stride=1, padding=r).view(-1)
        keep = inside & static & (depth <= nearest[pixel] * VISIBLE_RATIO + VISIBLE_SLACK_M)  # actors only hide
        if cam.masks is not None:  # the ego vehicle's pixels are not trained on
            keep &= cam.masks[ref.frame].reshape(-1)[pixel]
        if cam.lens is not None:
            keep &= cam.lens.reshape(-1)[pixel]
        index = torch.nonzero(keep).flatten()
        if index.numel() > limit:
            pick = torch.randperm(index.numel(), generator=gen)[:limit].to(index.device)
            index = index[pick.sort().values]
        return FrameDepth(pixel[index].contiguous(), depth[index].float().contiguous())

    def gathered(self, group: FrameGroup, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The group's targets for its ``[C, H, W]`` depth image at ``level`` (images ``level``
        times smaller than stored): flat indices into it ``[P]`` and depths ``[P]``. Built once per
        (group, level): a step only looks them up."""
        key = (group, level)
        got = self._gathered.get(key)
        if got is not None:
            return got
        flat, depths = [], []
        for k, ref in enumerate(group.frames):
            cam = self.data.cameras[ref.camera]
            target = self.frames.get(ref)
            if target is None:
                continue
            w_l, h_l = cam.width // level, cam.height // level
            x = (target.pixels % cam.width) // level
            y = (target.pixels // cam.width) // level
            ok = (x < w_l) & (y < h_l)  # odd sizes: the last row / column is not in the shrunk image
            flat.append(((k * h_l + y) * w_l + x)[ok])
            depths.append(target.depths[ok])
        device = self.data.device
        got = (torch.cat(flat) if flat else torch.zeros(0, dtype=torch.long, device=device),
               torch.cat(depths) if depths else torch.zeros(0, device=device))
        self._gathered[key] = got
        return got

    @property
    def count(self) -> int:
        """Targets over all frames."""
        return sum(int(f.depths.numel()) for f in self.frames.values())


def depth_loss(depth_sum: torch.Tensor,  # [C, H, W] rendered sum of w_i depth_i
               flat: torch.Tensor,  # [P] indices into depth_sum
               target: torch.Tensor,  # [P] metres
               ) -> torch.Tensor:  # []
    """Mean relative L1 between the rendered depth sums and the lidar's depths at the targets'
    pixels. The sum is not divided by the pixel's opacity: a pixel the lidar hit is opaque
    there, so a transparent render is pulled towards both the surface's depth and full opacity
    (and a floater in front pulls the sum short of the surface)."""
    if target.numel() == 0:
        return depth_sum.sum() * 0
    pred = depth_sum.reshape(-1)[flat]
    return ((pred - target).abs() / target.clamp_min(1.0)).mean()

