"""The sensor rig of a capture as plain data, kept with the scene (``Scene.metadata["rig"]``).

Export and replay need the cameras, lidars and rig trajectory without the capture itself:
``describe_rig`` writes them as JSON-able lists and dicts (world coordinates re-centred as in
the loaded capture; absolute microsecond timestamps, with ``start_us`` the capture's time zero).
"""

from __future__ import annotations

from typing import Any

from nurec_usd.capture.model import Capture


def _plain(value: Any) -> Any:
    """numpy values and arrays as Python numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def describe_rig(capture: Capture) -> dict[str, Any]:
    """Cameras (model, intrinsics, mounting, shutter, frame times), lidars (channel table,
    mounting, sweep times) and the rig trajectory of a capture."""
    return {
        "capture_name": capture.name,
        "start_us": int(capture.start_us),
        "world_offset_m": _plain(capture.world_offset_m),
        "trajectory": {"timestamps_us": _plain(capture.rig.timestamps_us),
                       "T_world_rig": _plain(capture.rig.T_world_rig)},
        "cameras": [{
            "id": c.id, "model": c.model, "width": int(c.width), "height": int(c.height),
            "intrinsics": _plain(dict(c.intrinsics)), "T_rig_camera": _plain(c.T_rig_camera),
            "rolling_shutter": {"direction": c.rolling_shutter.direction,
                                "readout_time_us": int(c.rolling_shutter.readout_time_us)},
            "timestamps_us": _plain(c.timestamps_us),
        } for c in capture.cameras.values()],
        "lidars": [{
            "id": lid.id, "T_rig_lidar": _plain(lid.T_rig_lidar), "elevation_deg": _plain(lid.elevation_deg),
            "azimuth_offset_deg": _plain(lid.azimuth_offset_deg), "columns": int(lid.columns),
            "rotation": lid.rotation, "scan_rate_hz": float(lid.scan_rate_hz),
            "start_azimuth_deg": float(lid.start_azimuth_deg), "min_range_m": float(lid.min_range_m),
            "max_range_m": float(lid.max_range_m), "timestamps_us": _plain(lid.timestamps_us),
        } for lid in capture.lidars.values()],
        "tracks": [{"id": t.id, "label": t.label, "timestamps_us": _plain(t.timestamps_us)}
                   for t in capture.tracks.values()],
    }
