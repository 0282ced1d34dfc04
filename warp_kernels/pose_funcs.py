"""Sensor poses inside kernels: the project's (w, x, y, z) quaternions, and the pose of a
rolling-shutter camera or spinning lidar part-way through its readout or sweep."""

import functools

import warp as wp


@functools.lru_cache(maxsize=None)
def make_pose_funcs(float_t):
    """``to_quat`` and ``pose_at`` for one float type (one pair per type, shared by every module)."""
    vec3 = wp.types.vector(3, float_t)
    vec4 = wp.types.vector(4, float_t)
    quat = wp.types.quaternion(float_t)

    @wp.func
    def to_quat(wxyz: vec4):
        """(w, x, y, z) as Warp's (x, y, z, w) quaternion: the conversion happens here only."""
        return quat(wxyz[1], wxyz[2], wxyz[3], wxyz[0])

    @wp.func
    def pose_at(q0: quat, t0: vec3, q1: quat, t1: vec3, a: float_t):
        """(R, t) of a pose between (q0, t0) at a = 0 and (q1, t1) at a = 1: slerp + lerp.

        q0 and q1 must lie in the same hemisphere (the callers' wrappers ensure it).
        """
        d = wp.dot(q0, q1)
        q = q0
        if d < float_t(0.9999995):
            ang = wp.acos(wp.clamp(d, float_t(-1.0), float_t(1.0)))
            s = wp.sin(ang)
            q = q0 * (wp.sin((float_t(1.0) - a) * ang) / s) + q1 * (wp.sin(a * ang) / s)
        else:  # nearly equal: normalised lerp avoids 0/0
            q = wp.normalize(q0 * (float_t(1.0) - a) + q1 * a)
        return wp.quat_to_matrix(q), t0 * (float_t(1.0) - a) + t1 * a

    return to_quat, pose_at
