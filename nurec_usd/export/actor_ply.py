"""Each actor's Gaussians as a 3DGS PLY in its box frame, with its track beside it.

A single ``scene.ply`` holds the static scene only: a PLY has no time. For tools that take
PLYs (viewers, other splat renderers), ``export --ply-actors`` also writes, per track::

    actors/<name>.ply          the actor's Gaussians in its box frame (origin at the box centre,
                               x forward, y left, z up; metres), in the layout of scene.ply
    actors/<name>.track.json   its timed poses T_world_box: where the box frame is in the
                               stage's world at each key

``<name>`` is the track's prim name in ``actors.usdc`` (the track id made a valid
identifier). The track file::

    {"format": "nurec_usd.actor_track", "version": 1,
     "track_id": "car/01", "label": "car", "size_m": [4.5, 1.9, 1.6], "ply": "car_01.ply",
     "absolute_time_offset_us": 1700000000000000,
     "columns": ["t_s", "tx", "ty", "tz", "qw", "qx", "qy", "qz"],
     "poses": [[0.3, 1.0, 2.0, 0.0, 1.0, 0.0, 0.0, 0.0], ...]}

``t_s`` is seconds since the capture start (``absolute_time_offset_us`` is that start, in
absolute microseconds, as the stage's ``customLayerData.absoluteTimeOffsetMicroSec``);
(tx, ty, tz) and the unit quaternion (qw, qx, qy, qz) are the box's pose in the world (the
stage's frame: metres, Z up), with any pose corrections of the reconstruction applied: the
same keys as the actor's ``xformOp:translate`` / ``xformOp:orient`` samples. Between keys
the pose is interpolated linearly (translation) and by slerp (rotation); before the first
key and after the last the actor is not there.
"""

from __future__ import annotations

import json
from pathlib import Path

from nurec_usd.export.ply import write_gaussian_ply

__all__ = ["TRACK_FORMAT", "TRACK_COLUMNS", "write_actor_plys"]

TRACK_FORMAT = "nurec_usd.actor_track"
TRACK_COLUMNS = ["t_s", "tx", "ty", "tz", "qw", "qx", "qy", "qz"]


def write_actor_plys(scene, folder: str | Path, names: list[str], pad_to_degree: int | None = None) -> list[Path]:
    """Write ``<name>.ply`` and ``<name>.track.json`` per track of ``scene`` into ``folder``
    (``names``: one file name per track, in track order). Returns the files written."""
    import numpy as np

    from nurec_usd.export.usd_layers import Timing, actor_keys

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    start_us = Timing.of_scene(scene).start_us
    index = scene.actor_index.detach().cpu().long()
    written = []
    for i, (track, name, (times, p, q)) in enumerate(zip(scene.tracks, names, actor_keys(scene))):
        rows = (index == i).nonzero().flatten()
        params = scene.actors.map(lambda t: t.detach().cpu()[rows])  # noqa: B023 (used at once)
        written.append(write_gaussian_ply(params, scene.sh_degree, folder / f"{name}.ply", pad_to_degree))
        poses = np.concatenate([np.asarray(times, np.float64)[:, None], p, q], axis=1)  # [K, 8]
        record = {
            "format": TRACK_FORMAT, "version": 1, "track_id": str(track.id), "label": str(track.label),
            "size_m": [float(v) for v in track.size_m], "ply": f"{name}.ply",
            "absolute_time_offset_us": int(start_us), "columns": TRACK_COLUMNS,
            "poses": [[float(v) for v in row] for row in poses],
        }
        path = folder / f"{name}.track.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        written.append(path)
    return written
