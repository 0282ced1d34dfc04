"""The ego vehicle in a build: which lidar returns and which pixels are not trained on.

Two hooks around ``CaptureData``, driven by the build options ``ego_box``, ``ego_mask`` and
``ego_mask_dir`` (``nurec_usd.train.config.TrainConfig``):

* ``lidar_filter`` (before the sweeps are read): returns inside the ego's box are dropped,
  and the rays they answered are left out of the lidar losses and figures (a ray that hit
  the vehicle's own body says nothing about the world behind it). ``ego_box``: "auto" (a
  box estimated from the training sweeps' returns near the lidar that stay put in the rig
  frame while it drives, ``nurec_usd.capture.ego.estimate_ego_box``; none when the rig does
  not move or nothing stays put), "off", or ``x0,y0,z0,x1,y1,z1`` in the rig frame.
* ``mask_cameras`` (after the images are decoded): the ego's pixels leave each camera's
  masks, in training and in the held-out figures alike. Masks the capture has (NCore's ego
  masks, nerfstudio's ``mask_path``) are used as they are. ``ego_mask_dir``: a folder of
  ``<camera id>.png`` (the camera's full size, white on the ego vehicle) for cameras that
  have none. Otherwise ``ego_mask``: "auto" estimates a static mask
  (``nurec_usd.capture.ego.estimate_static_mask``, on the training frames) for cameras
  without masks when the rig moves far enough for the scene to move in the images; "on"
  also when it barely moves (a static scene is then all "static": nothing is masked unless
  the estimate finds a bottom region); "off" estimates none.

Each returns a summary for ``metrics.json`` (``ego``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from nurec_usd.capture import ego
from nurec_usd.capture.model import Capture
from nurec_usd.util.options import OptionError
from nurec_usd.util.prefetch import default_workers, prefetched

MIN_TRAVEL_M = 2.0  # "auto": the rig must move this far over a camera's training frames


def _positions(capture: Capture, times_us: np.ndarray) -> np.ndarray:  # [K] -> [K, 3] world
    rig = capture.rig_trajectory()
    return rig.at(torch.as_tensor(capture.seconds(times_us)))[:, :3, 3].numpy()


def _travel(positions: np.ndarray) -> float:
    return float(np.linalg.norm(np.diff(positions, axis=0), axis=1).sum()) if len(positions) > 1 else 0.0


def lidar_filter(capture: Capture, box_option: str, eval_every: int,
                 log: Callable[[str], None] | None = None
                 ) -> tuple[Callable[[str, torch.Tensor], torch.Tensor] | None, dict[str, Any]]:
    """The returns to keep (``CaptureData``'s ``lidar_keep``), or None to keep all, and a summary.

    ``box_option``: the ``ego_box`` option. The estimate reads a few of each lidar's training
    sweeps (``eval_every`` decides which are held out, as ``CaptureData`` does).
    """
    from nurec_usd.train.data import held_out

    say = log or (lambda _m: None)
    summary: dict[str, Any] = {"box": None, "box_source": box_option if box_option in ("auto", "off") else "given"}
    if box_option == "off" or not capture.lidars:
        return None, summary
    if box_option != "auto":
        try:
            box = ego.parse_box(box_option)
        except ValueError as err:
            raise OptionError("ego_box", box_option, ego.BOX_FORMS) from err
    else:
        boxes = []
        for lidar in capture.lidars.values():
            train = [i for i in range(len(lidar.sweeps)) if not held_out(i, eval_every, len(lidar.sweeps))]
            picks = ego.spaced_samples(_positions(capture, lidar.timestamps_us[train]))
            T = lidar.T_rig_lidar

            def rig_points(i: int) -> np.ndarray:  # [N, 3] the sweep's returns, rig frame
                return lidar.load_sweep(train[i]).points.astype(np.float64) @ T[:3, :3].T + T[:3, 3]

            sweeps = list(prefetched(rig_points, picks, workers=min(8, default_workers()), depth=len(picks) or 1))
            found = ego.estimate_ego_box(sweeps, T[:2, 3])
            if found is not None:
                boxes.append(found)
        if not boxes:
            say("ego vehicle: no lidar returns off it found (the rig does not move, or none stay put)")
            return None, summary
        box = ego.EgoBox(tuple(np.min([b.lo for b in boxes], 0).tolist()), tuple(np.max([b.hi for b in boxes], 0).tolist()))
    summary["box"] = box.text()
    say(f"ego vehicle: lidar returns inside the box {box.text()} (rig frame, m) are dropped"
        + (" (estimated; --set ego_box=off keeps them)" if box_option == "auto" else ""))
    mountings = {lid_id: lidar.T_rig_lidar for lid_id, lidar in capture.lidars.items()}

    def keep(lidar_id: str, points: torch.Tensor) -> torch.Tensor:  # [N, 3] lidar frame -> [N] bool, on its device
        T = torch.as_tensor(mountings[lidar_id], dtype=torch.float64, device=points.device)
        rig = points.double() @ T[:3, :3].T + T[:3, 3]  # [N, 3]
        lo, hi = (torch.tensor(c, dtype=torch.float64, device=points.device) for c in (box.lo, box.hi))
        return ~((rig >= lo) & (rig <= hi)).all(1)

    return keep, summary


def given_masks(capture: Capture, folder: str) -> dict[str, np.ndarray]:
    """The masks of the ``ego_mask_dir`` option (``nurec_usd.capture.ego.read_mask_folder``;
    none for ""), read before any work: ValueError names a bad file."""
    if not folder:
        return {}
    return ego.read_mask_folder(folder, {c.id: (c.width, c.height) for c in capture.cameras.values()})


def mask_cameras(capture: Capture, data: Any, mode: str, given: dict[str, np.ndarray],
                 log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Take the ego's pixels out of ``data``'s camera masks (``nurec_usd.train.data.CaptureData``,
    images decoded). ``mode``: the ``ego_mask`` option; ``given``: ``given_masks``. Returns a
    summary: per camera, where its ego mask came from and the share of its pixels masked."""
    say = log or (lambda _m: None)
    out: dict[str, Any] = {}
    for ci, cam in enumerate(data.cameras):
        source = capture.cameras[cam.id]
        if cam.masks is not None:
            out[cam.id] = {"source": "capture", "share": float(1 - cam.masks.float().mean())}
            continue
        if cam.id in given:
            full = torch.from_numpy(given[cam.id])
            k = data.downscale  # a shrunk pixel is the ego's when any of the pixels it covers is
            pixels = full[:cam.height * k, :cam.width * k].reshape(cam.height, k, cam.width, k).any(3).any(1)
            what = "given"
        elif mode == "off":
            continue
        else:
            frames = [f.frame for f in data.train_frames if f.camera == ci]
            positions = _positions(capture, source.timestamps_us[frames]) if frames else np.zeros((0, 3))
            if mode == "auto" and _travel(positions) < MIN_TRAVEL_M:
                continue
            picks = ego.spaced_samples(positions) if mode == "auto" else \
                np.unique(np.linspace(0, len(frames) - 1, ego.MAX_SAMPLES).round().astype(int)).tolist()
            images = [cam.images[frames[i]] for i in picks]  # where they were decoded to (the GPU in a build)
            lens = cam.lens  # a fisheye's black rim is not the ego
            pixels = torch.from_numpy(ego.estimate_static_mask(images, lens)) if images else None
            if pixels is None or not bool(pixels.any()):
                out[cam.id] = {"source": "estimated", "share": 0.0}
                continue
            what = "estimated"
        pixels = pixels.to(data.device)
        cam.masks = (~pixels)[None].expand(len(source.frames), -1, -1)  # one mask for every frame: a view
        share = float(pixels.float().mean())
        out[cam.id] = {"source": what, "share": share}
        say(f"ego vehicle: {share:.1%} of camera {cam.id}'s pixels are its body ({what}); they are not trained on "
            "or scored" + (" (--set ego_mask=off keeps them)" if what == "estimated" else ""))
    return out
