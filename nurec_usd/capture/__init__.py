"""Captures: the native format's dataclasses, loader, validation and writer.

Importers for other formats (``nurec_usd.capture.importers``) produce the same ``Capture``.
"""

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.loader import load_capture, validate_capture
from nurec_usd.capture.model import (
    CAMERA_MODELS,
    Camera,
    CameraFrame,
    Capture,
    Lidar,
    LidarSweep,
    LidarSweepFile,
    RigTrajectory,
    RollingShutter,
    Track,
)
from nurec_usd.capture.summary import capture_summary, format_summary
from nurec_usd.capture.writer import CaptureWriter

__all__ = [
    "CAMERA_MODELS", "Camera", "CameraFrame", "Capture", "CaptureError", "CaptureWriter", "Lidar",
    "LidarSweep", "LidarSweepFile", "Problem", "RigTrajectory", "RollingShutter", "Track",
    "capture_summary", "format_summary", "load_capture", "validate_capture",
]
