"""The ego vehicle in its own sensors' data: its body in each camera, a box around it for the lidars.

A camera that sees part of the vehicle carrying it (a hood, a mirror, a sensor pod) records
those pixels the same in every frame while the scene moves past: they must not be trained
on, or the reconstruction puts the hood in the world as streaks and floaters. Likewise a
lidar's returns off the vehicle's own body stay put in the sensor frame while the vehicle
drives: placed in the world, they trail along its path.

* ``estimate_static_mask``: the pixels of a camera that stay the same across frames taken at
  different places (low temporal spread), reaching the image's bottom border, cleaned up
  (opening, closing, holes filled). Only meaningful when the rig moves between the frames.
* ``estimate_ego_box``: a box (in the rig frame) around the returns near the lidar that sit
  in the same place of the rig frame in nearly every sweep, among sweeps taken at different
  places; ``parse_box`` reads a given one.
* ``read_mask_folder``: masks given by the user, one image per camera.

Everything here is numpy / torch on the CPU, on data already read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

# Static masks
MASK_WORK_SIDE = 320  # the estimation runs on images shrunk to about this longer side
MASK_SPREAD_FRACTION = 0.15  # static: temporal spread under this fraction of the image's median spread
MASK_SPREAD_MIN = 1.5  # ... but at least this (0..255 levels: sensor noise and compression)
MASK_SPREAD_MAX = 4.0  # ... and at most this (dark, shadowed road moves little more)
MASK_MAX_SHARE = 0.4  # a "static" region larger than this share of the image is not a hood: none
MASK_MIN_SHARE = 0.005  # smaller ones are noise: none
MASK_MARGIN_PX = 2  # the mask grows by this many pixels (of the output) past the estimate
# A body's outline is an edge at the same place in every frame: in the frames' mean, it stays
# sharp, where the edge of a plain surface (an even road) against the moving scene blurs away.
MASK_EDGE_LEVELS = 8.0  # the mean image's change across the outline (0..255 levels over 2 pixels)
MASK_EDGE_SHARE = 0.6  # ... at this share of the outline's pixels at least, or no mask
MIN_MASK_FRAMES = 4

# Lidar box
BOX_SEARCH_RADIUS_M = 2.5  # returns within this horizontal distance of the lidar are candidates
BOX_VOXEL_M = 0.2
BOX_PERSISTENCE = 0.8  # a voxel occupied in at least this share of the sweeps is the ego's
BOX_GROUND_CLEARANCE_M = 0.3  # voxels this close above the ground are left out (flat ground persists too)
BOX_MARGIN_M = 0.1
BOX_MAX_SIZE_M = (8.0, 3.5, 3.5)  # a larger box holds something else than the ego vehicle: none
MIN_BOX_SWEEPS = 4

# Both: the frames or sweeps used must be taken this far apart along the rig's path
SAMPLE_SPACING_M = 0.5
MAX_SAMPLES = 16


@dataclass(frozen=True)
class EgoBox:
    """An axis-aligned box in the rig frame (metres): ``lo`` and ``hi`` corners, each ``[3]``."""

    lo: tuple[float, float, float]
    hi: tuple[float, float, float]

    def contains(self, points: np.ndarray) -> np.ndarray:  # [N, 3] rig frame -> [N] bool
        """Whether each point lies inside the box."""
        lo, hi = np.asarray(self.lo), np.asarray(self.hi)
        return np.all((points >= lo) & (points <= hi), axis=1)

    def text(self) -> str:
        """The box as ``parse_box`` reads it: ``x0,y0,z0,x1,y1,z1``."""
        return ",".join(f"{v:g}" for v in (*self.lo, *self.hi))


BOX_FORMS = "'auto', 'off' or six numbers 'x0,y0,z0,x1,y1,z1' (metres, rig frame, x0 < x1, y0 < y1, z0 < z1)"
_NUMBER = r"\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*"
BOX_PATTERN = rf"auto|off|{_NUMBER}(,{_NUMBER}){{5}}"


def parse_box(text: str) -> EgoBox:
    """A box from ``x0,y0,z0,x1,y1,z1``; ValueError naming what is wrong."""
    if not re.fullmatch(r"(?:" + _NUMBER + r")(?:," + _NUMBER + r"){5}", text):
        raise ValueError(f"ego box {text!r}: expected {BOX_FORMS}")
    v = [float(x) for x in text.split(",")]
    if not all(math.isfinite(x) for x in v) or not (v[0] < v[3] and v[1] < v[4] and v[2] < v[5]):
        raise ValueError(f"ego box {text!r}: each lower corner value must be below the upper one (x0 < x1, ...)")
    return EgoBox((v[0], v[1], v[2]), (v[3], v[4], v[5]))


def spaced_samples(positions: np.ndarray,  # [K, 3] rig positions (world) of the candidates, in time order
                   spacing_m: float = SAMPLE_SPACING_M, most: int = MAX_SAMPLES) -> list[int]:
    """Indices of candidates taken at least ``spacing_m`` apart along the rig's path (greedy,
    in time order), then thinned evenly to ``most``: frames or sweeps that see the scene from
    different places, however long the rig stood still."""
    if len(positions) == 0:
        return []
    picked = [0]
    travelled = 0.0
    last = positions[0]
    for i in range(1, len(positions)):
        travelled += float(np.linalg.norm(positions[i] - positions[i - 1]))
        if travelled >= spacing_m and np.linalg.norm(positions[i] - last) > 0:
            picked.append(i)
            travelled = 0.0
            last = positions[i]
    if len(picked) > most:
        picked = [picked[j] for j in np.unique(np.linspace(0, len(picked) - 1, most).round().astype(int))]
    return picked


# --------------------------------------------------------------------------------------
# Static image regions (a camera's view of the ego vehicle)


def _dilate(mask: torch.Tensor, r: int) -> torch.Tensor:  # [H, W] bool
    if r <= 0:
        return mask
    return F.max_pool2d(mask[None, None].float(), 2 * r + 1, stride=1, padding=r)[0, 0] > 0.5


def _erode(mask: torch.Tensor, r: int) -> torch.Tensor:
    return ~_dilate(~mask, r)


def _flood(seed: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:  # [H, W] bool each
    """The pixels of ``inside`` 4-connected (through ``inside``) to ``seed``."""
    region = seed & inside
    kernel = torch.tensor([[0, 1, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.float32, device=seed.device)[None, None]
    while True:
        grown = (F.conv2d(region[None, None].float(), kernel, padding=1)[0, 0] > 0) & inside
        if torch.equal(grown, region):
            return region
        # several steps per check: the flood crosses the image in about its height
        for _ in range(15):
            grown = (F.conv2d(grown[None, None].float(), kernel, padding=1)[0, 0] > 0) & inside
        region = grown


def _shrink(images: torch.Tensor, factor: int) -> torch.Tensor:  # [F, H, W, 3] -> [F, H/f, W/f, 3] float32
    """Block means of ``factor`` x ``factor`` pixels (a partial last block is dropped)."""
    x = images.permute(0, 3, 1, 2).float()  # [F, 3, H, W]
    return F.avg_pool2d(x, factor, stride=factor).permute(0, 2, 3, 1).contiguous()


def _sharp_outline_share(mean: torch.Tensor,  # [h, w, 3] the frames' mean
                         mask: torch.Tensor, inside: torch.Tensor,  # [h, w] bool each
                         ) -> float:
    """The share of the mask's outline (its pixels next to an inside pixel that is not masked,
    off the bottom row) where the mean image changes by ``MASK_EDGE_LEVELS`` or more across
    two pixels, somewhere within a pixel of it. 1 when the mask has no such outline."""
    grey = mean.mean(dim=-1)  # [h, w]
    g = torch.zeros_like(grey)
    g[:, 1:-1] = (grey[:, 2:] - grey[:, :-2]).abs()
    g[1:-1] = torch.maximum(g[1:-1], (grey[2:] - grey[:-2]).abs())
    g = F.max_pool2d(g[None, None], 3, stride=1, padding=1)[0, 0]
    outline = mask & _dilate(~mask & inside, 1)
    outline[-1] = False
    if not bool(outline.any()):
        return 1.0
    return float((g[outline] >= MASK_EDGE_LEVELS).float().mean())


def estimate_static_mask(images: Sequence[np.ndarray] | Sequence[torch.Tensor],  # F x [H, W, 3] uint8
                         lens: np.ndarray | torch.Tensor | None = None,  # [H, W] bool: inside the lens; None: all
                         ) -> np.ndarray:  # [H, W] bool
    """The part of a camera's view that the ego vehicle covers: ``True`` on its pixels.

    ``images``: frames of one camera taken at different places (``spaced_samples``), at least
    ``MIN_MASK_FRAMES``: numpy arrays, or torch tensors, whose device the work then runs on (a
    build's decoded images: the GPU). A pixel is static when its temporal spread (standard
    deviation over the frames, the largest of the three channels, on images shrunk to about
    ``MASK_WORK_SIDE`` pixels) is under ``MASK_SPREAD_FRACTION`` of the image's median spread
    (kept within ``MASK_SPREAD_MIN`` .. ``MASK_SPREAD_MAX`` levels). The static pixels are
    opened (thin links to a static sky or wall are cut), the part of them reaching the
    bottom border is kept (a hood, a bonnet), closed, its holes filled (reflections on the
    paint), and grown by ``MASK_MARGIN_PX``. A region over ``MASK_MAX_SHARE`` of the image (a
    scene that did not move) or under ``MASK_MIN_SHARE`` gives no mask (all False), and so
    does one whose outline is not a sharp edge of the frames' mean at ``MASK_EDGE_SHARE`` of
    its pixels (``MASK_EDGE_LEVELS``): an even road or a plain wall stays the same while the
    rig moves too, but the moving scene around it blurs its edge in the mean.

    ``lens``: a fisheye's pixels outside its image circle are black in every frame, static but
    not the ego's: they are never static here, the bottom border is the lens's lowest pixel of
    each column, the shares are of the lens's pixels, and the mask stays inside the lens.
    """
    frames = torch.stack([im if isinstance(im, torch.Tensor) else torch.from_numpy(np.asarray(im))
                          for im in images])
    if frames.dim() != 4 or frames.shape[-1] != 3:
        raise ValueError(f"expected frames of shape [H, W, 3], got {tuple(frames.shape[1:])}")
    n, h, w, _ = frames.shape
    none = np.zeros((h, w), dtype=bool)
    if n < MIN_MASK_FRAMES:
        return none
    dev = frames.device
    factor = max(1, math.ceil(max(h, w) / MASK_WORK_SIDE))
    small = _shrink(frames, factor)  # [F, h, w, 3]
    if lens is None:
        inside = torch.ones(small.shape[1:3], dtype=torch.bool, device=dev)
    else:
        lens = (lens if isinstance(lens, torch.Tensor) else torch.from_numpy(np.asarray(lens))).to(dev, torch.bool)
        if tuple(lens.shape) != (h, w):
            raise ValueError(f"lens mask is {tuple(lens.shape)}, the frames are {(h, w)}")
        # a shrunk pixel is inside when all it covers is: the black rim is not averaged in
        inside = _shrink(lens[None, :, :, None].expand(1, h, w, 3).to(torch.uint8), factor)[0, :, :, 0] > 0.999
    if not bool(inside.any()):
        return none
    spread = small.std(dim=0, correction=0).amax(dim=-1)  # [h, w] levels
    level = float(torch.quantile(spread[inside].double(), 0.5))  # the median, halfway between two middles
    threshold = min(max(MASK_SPREAD_FRACTION * level, MASK_SPREAD_MIN), MASK_SPREAD_MAX)
    static = (spread < threshold) & inside
    static = _dilate(_erode(static, 1), 1) & inside  # opening
    below = torch.zeros_like(inside)
    below[:-1] = inside[1:]
    bottom = inside & ~below  # the lowest inside pixel of each column (the bottom row without a lens)
    mask = _flood(bottom, static)
    if not bool(mask.any()):  # nothing static reaches the bottom: no body (the rest would find none)
        return none
    mask = _erode(_dilate(mask, 2), 2) & inside  # closing
    border = ~inside
    border[0, :] = border[:, 0] = border[:, -1] = True
    outside = _flood(border, ~mask)  # what is not enclosed by the mask
    mask = ~outside & inside
    share = float(mask.float().sum() / inside.float().sum())
    if not MASK_MIN_SHARE <= share <= MASK_MAX_SHARE:
        return none
    if _sharp_outline_share(small.mean(dim=0), mask, inside) < MASK_EDGE_SHARE:
        return none  # a plain surface that looks the same wherever the rig is, not a body
    # back to the full size (nearest), rows and columns past the shrunk grid take the last ones
    full = mask.repeat_interleave(factor, 0).repeat_interleave(factor, 1)
    full = F.pad(full[None, None].float(), (0, w - full.shape[1], 0, h - full.shape[0]), mode="replicate")[0, 0] > 0.5
    full = _dilate(full, MASK_MARGIN_PX)
    full = full if lens is None else full & lens
    return full.cpu().numpy()


def read_mask_folder(folder: str | Path, cameras: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    """Ego masks given as images: ``<folder>/<camera id>.png`` (or .jpg / .jpeg / .bmp), the
    camera's full size, non-zero (white) on the ego vehicle. ``cameras``: id -> (width, height).

    Cameras without a file are left out. Returns ``[H, W]`` bool (True: the ego) by camera id.
    Raises ValueError naming the file: not an image, or the wrong size; and naming the folder
    when it does not exist or holds no file for any camera.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: ego mask folder does not exist")
    out = {}
    for cam_id, (width, height) in cameras.items():
        files = [folder / f"{cam_id}{ext}" for ext in (".png", ".jpg", ".jpeg", ".bmp")]
        path = next((f for f in files if f.is_file()), None)
        if path is None:
            continue
        try:
            with Image.open(path) as im:
                mask = np.asarray(im.convert("L")) > 0
        except OSError as err:
            raise ValueError(f"{path}: not a readable image ({err})") from err
        if mask.shape != (height, width):
            raise ValueError(f"{path}: mask is {mask.shape[1]}x{mask.shape[0]} pixels, camera {cam_id!r} is "
                             f"{width}x{height}")
        out[cam_id] = mask
    if not out:
        raise ValueError(f"{folder}: no ego mask for any camera (expected <camera id>.png for one of: "
                         f"{', '.join(cameras)})")
    return out


# --------------------------------------------------------------------------------------
# The lidar's returns off the ego vehicle


def estimate_ego_box(sweeps: Sequence[np.ndarray],  # S x [N, 3] rig frame, sweeps taken at different places
                     centre_xy: Sequence[float] = (0.0, 0.0),  # the lidar's position in the rig frame
                     ) -> EgoBox | None:
    """A box around the returns a lidar gets off the vehicle carrying it, or None (none seen).

    ``sweeps``: at least ``MIN_BOX_SWEEPS`` of them, taken at different places
    (``spaced_samples``). Returns within ``BOX_SEARCH_RADIUS_M`` of the lidar (horizontally)
    and more than ``BOX_GROUND_CLEARANCE_M`` above the ground (the lowest returns nearby:
    flat ground is at the same place of the rig frame in every sweep too) fall into voxels of
    ``BOX_VOXEL_M``; the voxels occupied in at least ``BOX_PERSISTENCE`` of the sweeps are
    the vehicle's own. The box bounds them, grown by ``BOX_MARGIN_M``; one larger than
    ``BOX_MAX_SIZE_M`` (something that drove along with the vehicle) gives None.
    """
    if len(sweeps) < MIN_BOX_SWEEPS:
        return None
    cx, cy = float(centre_xy[0]), float(centre_xy[1])
    near = [p[np.hypot(p[:, 0] - cx, p[:, 1] - cy) < BOX_SEARCH_RADIUS_M] for p in sweeps]
    wide = np.concatenate([p[np.hypot(p[:, 0] - cx, p[:, 1] - cy) < 3 * BOX_SEARCH_RADIUS_M] for p in sweeps])
    if len(wide) == 0:
        return None
    ground = float(np.quantile(wide[:, 2], 0.02))
    counts: dict[tuple[int, int, int], int] = {}
    for p in near:
        p = p[p[:, 2] > ground + BOX_GROUND_CLEARANCE_M]
        for key in set(map(tuple, np.floor(p / BOX_VOXEL_M).astype(np.int64).tolist())):
            counts[key] = counts.get(key, 0) + 1
    ego = np.array([k for k, c in counts.items() if c >= BOX_PERSISTENCE * len(sweeps)], dtype=np.int64)
    if len(ego) == 0:
        return None
    lo = ego.min(0) * BOX_VOXEL_M - BOX_MARGIN_M
    hi = (ego.max(0) + 1) * BOX_VOXEL_M + BOX_MARGIN_M
    if np.any(hi - lo > np.asarray(BOX_MAX_SIZE_M)):
        return None
    return EgoBox(tuple(float(v) for v in lo), tuple(float(v) for v in hi))
