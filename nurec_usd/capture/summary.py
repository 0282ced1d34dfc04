"""A readable summary of a capture (what ``inspect`` prints), and the same as a dict."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from nurec_usd.capture.model import Camera, Capture, Lidar


# A step t[i + m] - t[i] is steady when this share of them lies within this of their median.
STEADY_SHARE = 0.8
STEADY_TOLERANCE = 0.1
MAX_GROUP = 8  # poses per period looked for


def rate(timestamps_us: np.ndarray) -> tuple[float | None, int]:
    """The rate of some timestamps (Hz) and how many of them fall in each period.

    Poses gathered from several sensors come in groups: DGP gives a pose per datum, so a scene
    whose lidar and cameras fire once a second a few hundred ms apart has two poses a second at
    uneven gaps, where the median gap would claim several Hz. The period is the smallest
    ``m``-step ``t[i + m] - t[i]`` (``m`` = 1, 2, ...) that is steady; the rate is one over it.
    Without a steady step the timestamps are irregular: returns their mean rate and 0.
    None (and 0) for fewer than two timestamps.
    """
    ts = np.asarray(timestamps_us, dtype=np.int64)
    if len(ts) < 2:
        return None, 0
    for m in range(1, min(MAX_GROUP, len(ts) - 1) + 1):
        steps = (ts[m:] - ts[:-m]).astype(np.float64)
        period = float(np.median(steps))
        if period > 0 and np.mean(np.abs(steps - period) <= STEADY_TOLERANCE * period) >= STEADY_SHARE:
            return 1e6 / period, m
    span = float(ts[-1] - ts[0])
    return ((len(ts) - 1) * 1e6 / span if span > 0 else None), 0


def _rate_hz(timestamps_us: np.ndarray) -> float | None:
    return rate(timestamps_us)[0]


def _rate_text(hz: float | None, per_period: int) -> str:
    if hz is None:
        return ""
    if per_period == 1:
        return f" ({hz:.1f} Hz)"
    if per_period > 1:
        return f" ({hz:.1f} Hz, in groups of {per_period})"
    return f" (irregular, {hz:.1f} Hz on average)"


def _shutter(cam: Camera) -> str:
    rs = cam.rolling_shutter
    if rs.direction == "global":
        return "global shutter"
    return f"rolling {rs.direction.replace('_', '-')} {rs.readout_time_us / 1000:.1f} ms"


def _focal(cam: Camera) -> str:
    i = cam.intrinsics
    if cam.model == "ftheta":
        return f"{i['max_fov_deg']:.0f} deg fov"
    if cam.model == "opencv_fisheye":
        return f"fx {i['fx']:.1f}"
    # Ignores distortion: a size hint, not a calibration figure.
    fov = 2 * np.degrees(np.arctan(cam.width / (2 * i["fx"])))
    return f"fx {i['fx']:.1f} (~{fov:.0f} deg hfov)"


def capture_summary(capture: Capture) -> dict[str, Any]:
    """The facts ``inspect`` shows, as plain JSON-able values."""
    rig_rate, rig_group = rate(capture.rig.timestamps_us)
    steps = np.diff(capture.rig.T_world_rig[:, :3, 3], axis=0)
    return {
        "name": capture.name,
        "root": str(capture.root),
        "start_us": capture.start_us,
        "end_us": capture.end_us,
        "duration_s": capture.duration_s,
        "rig_poses": len(capture.rig.timestamps_us),
        "rig_rate_hz": rig_rate,
        # poses per period (several sensors' poses at once: DGP), 0 when irregular
        "rig_poses_per_period": rig_group,
        "ego_path_m": float(np.linalg.norm(steps, axis=1).sum()),
        "world_offset_m": capture.world_offset_m.tolist(),
        "cameras": [{
            "id": c.id, "model": c.model, "width": c.width, "height": c.height,
            "shutter": c.rolling_shutter.direction, "readout_time_us": c.rolling_shutter.readout_time_us,
            "frames": len(c.frames), "rate_hz": _rate_hz(c.timestamps_us),
            "masks": sum(f.mask_path is not None for f in c.frames),
        } for c in capture.cameras.values()],
        "lidars": [{
            "id": lidar.id, "model": "spinning", "channels": lidar.channels, "columns": lidar.columns,
            "scan_rate_hz": lidar.scan_rate_hz, "rotation": lidar.rotation,
            "elevation_deg": [float(lidar.elevation_deg.min()), float(lidar.elevation_deg.max())],
            "range_m": [lidar.min_range_m, lidar.max_range_m], "sweeps": len(lidar.sweeps),
            "sweep_formats": sorted({s.path.suffix.lower().lstrip(".") for s in lidar.sweeps}),
        } for lidar in capture.lidars.values()],
        "tracks": [{
            "id": t.id, "class": t.label, "size_m": t.size_m.tolist(), "poses": len(t.timestamps_us),
            "start_us": int(t.timestamps_us[0]), "end_us": int(t.timestamps_us[-1]),
            "path_m": float(np.linalg.norm(np.diff(t.T_world_box[:, :3, 3], axis=0), axis=1).sum()),
        } for t in capture.tracks.values()],
        "tracks_by_class": dict(sorted(Counter(t.label for t in capture.tracks.values()).items())),
        "metadata": _jsonable(capture.metadata),
    }


def _jsonable(value):
    """Metadata as JSON can hold it: arrays (e.g. an importer's SfM points) summarised by shape and type."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"array": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _lidar_line(lidar: Lidar) -> str:
    lo, hi = lidar.elevation_deg.min(), lidar.elevation_deg.max()
    rot = "cw" if lidar.rotation == "clockwise" else "ccw"
    return (f"spinning {lidar.channels} ch x {lidar.columns} col, {lidar.scan_rate_hz:g} Hz {rot}, "
            f"elevation {lo:+.1f}..{hi:+.1f} deg, range {lidar.min_range_m:g}..{lidar.max_range_m:g} m")


def format_summary(capture: Capture) -> str:
    """The multi-line text ``inspect`` prints."""
    s = capture_summary(capture)
    rig_rate = _rate_text(s["rig_rate_hz"], s["rig_poses_per_period"])
    lines = [
        f"capture   {s['name']}   ({s['root']})",
        f"time      {s['duration_s']:.2f} s, from {s['start_us']} to {s['end_us']} us",
        f"rig       {s['rig_poses']} poses{rig_rate}, ego path {s['ego_path_m']:.1f} m",
    ]
    if capture.metadata.get("poses_estimated"):
        lines.append("poses     estimated from lidar (ICP), not measured")
    if np.any(capture.world_offset_m != 0):
        x, y, z = capture.world_offset_m
        lines.append(f"world     re-centred on the first rig pose (offset {x:.3f}, {y:.3f}, {z:.3f} m)")

    lines.append(f"cameras   {len(capture.cameras)}")
    w = max([len(c) for c in capture.cameras] + [2])
    for cam, info in zip(capture.cameras.values(), s["cameras"]):
        hz = f"{info['rate_hz']:.1f} Hz" if info["rate_hz"] else "-"
        masks = f", {info['masks']} masks" if info["masks"] else ""
        lines.append(f"  {cam.id:<{w}}  {cam.model:<14} {cam.width}x{cam.height}  {_focal(cam)}, {_shutter(cam)}, "
                     f"{info['frames']} frames at {hz}{masks}")

    lines.append(f"lidars    {len(capture.lidars)}")
    w = max([len(k) for k in capture.lidars] + [2])
    for lidar, info in zip(capture.lidars.values(), s["lidars"]):
        fmt = "/".join(info["sweep_formats"]) or "-"
        lines.append(f"  {lidar.id:<{w}}  {_lidar_line(lidar)}, {info['sweeps']} sweeps ({fmt})")

    by_class = ", ".join(f"{n} {c}" for c, n in s["tracks_by_class"].items())
    lines.append(f"tracks    {len(capture.tracks)}" + (f": {by_class}" if by_class else ""))
    w = max([len(k) for k in capture.tracks] + [2])
    for t in s["tracks"]:
        span = (t["end_us"] - t["start_us"]) * 1e-6
        size = "x".join(f"{v:.1f}" for v in t["size_m"])
        start = (t["start_us"] - s["start_us"]) * 1e-6
        lines.append(f"  {t['id']:<{w}}  {t['class']:<12} {size} m, {t['poses']} poses over {span:.2f} s "
                     f"from t={start:+.2f} s, moves {t['path_m']:.1f} m")
    return "\n".join(lines)
