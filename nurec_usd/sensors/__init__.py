"""Sensor models: rigid transforms and pose interpolation, cameras, rolling shutter, spinning lidar."""

from .cameras import (
    CAMERA_MODELS,
    CameraModel,
    FThetaCamera,
    OpenCVCamera,
    OpenCVFisheyeCamera,
    PinholeCamera,
    camera_model,
)
from .lidar import SpinningLidarModel
from .rolling_shutter import (
    ROLLING_SHUTTER_DIRECTIONS,
    line_time_offsets,
    project_rolling_shutter,
    row_times,
)
from .se3 import (
    PoseTrajectory,
    interpolate_poses,
    invert_transform,
    make_transform,
    matrix_to_quat,
    quat_conjugate,
    quat_multiply,
    quat_normalize,
    quat_slerp,
    quat_to_matrix,
    transform_points,
)

__all__ = [
    "CAMERA_MODELS",
    "CameraModel",
    "FThetaCamera",
    "OpenCVCamera",
    "OpenCVFisheyeCamera",
    "PinholeCamera",
    "camera_model",
    "SpinningLidarModel",
    "ROLLING_SHUTTER_DIRECTIONS",
    "line_time_offsets",
    "project_rolling_shutter",
    "row_times",
    "PoseTrajectory",
    "interpolate_poses",
    "invert_transform",
    "make_transform",
    "matrix_to_quat",
    "quat_conjugate",
    "quat_multiply",
    "quat_normalize",
    "quat_slerp",
    "quat_to_matrix",
    "transform_points",
]
