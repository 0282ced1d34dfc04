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
            # normalised: under fast_math (the lidar projection) the sines of small angles carry relative
            # errors of ~1e-4 (an absolute 2^-21), which would scale the rotation by as much
            q = wp.normalize(q0 * (wp.sin((float_t(1.0) - a) * ang) / s) + q1 * (wp.sin(a * ang) / s))
        else:  # nearly equal: normalised lerp avoids 0/0
            q = wp.normalize(q0 * (float_t(1.0) - a) + q1 * a)
        return wp.quat_to_matrix(q), t0 * (float_t(1.0) - a) + t1 * a

    return to_quat, pose_at


@functools.lru_cache(maxsize=None)
def make_rotation_funcs(float_t):
    """``rotation_wxyz`` (the matrix of a unit quaternion (w, x, y, z)) and ``rotation_wxyz_vjp``
    (its gradient), for the hand-written backward passes; one pair per float type."""
    vec4 = wp.types.vector(4, float_t)
    mat33 = wp.types.matrix((3, 3), float_t)
    two = float_t(2.0)

    @wp.func
    def rotation_wxyz(q: vec4):
        """Rotation matrix of a unit quaternion (w, x, y, z) (the polynomial wp.quat_to_matrix evaluates)."""
        w = q[0]
        x = q[1]
        y = q[2]
        z = q[3]
        one = float_t(1.0)
        return mat33(one - two * (y * y + z * z), two * (x * y - w * z), two * (x * z + w * y),
                     two * (x * y + w * z), one - two * (x * x + z * z), two * (y * z - w * x),
                     two * (x * z - w * y), two * (y * z + w * x), one - two * (x * x + y * y))

    @wp.func
    def rotation_wxyz_vjp(q: vec4, g: mat33):
        """Gradient in (w, x, y, z) of sum(g * rotation_wxyz(q))."""
        w = q[0]
        x = q[1]
        y = q[2]
        z = q[3]
        gw = -z * g[0, 1] + y * g[0, 2] + z * g[1, 0] - x * g[1, 2] - y * g[2, 0] + x * g[2, 1]
        gx = (y * g[0, 1] + z * g[0, 2] + y * g[1, 0] - two * x * g[1, 1] - w * g[1, 2] + z * g[2, 0]
              + w * g[2, 1] - two * x * g[2, 2])
        gy = (-two * y * g[0, 0] + x * g[0, 1] + w * g[0, 2] + x * g[1, 0] + z * g[1, 2] - w * g[2, 0]
              + z * g[2, 1] - two * y * g[2, 2])
        gz = (-two * z * g[0, 0] - w * g[0, 1] + x * g[0, 2] + w * g[1, 0] - two * z * g[1, 1] + y * g[1, 2]
              + x * g[2, 0] + y * g[2, 1])
        return vec4(gw, gx, gy, gz) * two

    return rotation_wxyz, rotation_wxyz_vjp


@functools.lru_cache(maxsize=None)
def make_pose_rate_func(float_t):
    """``pose_rate``: the quaternion of ``pose_at`` and its derivative in a, for backward passes."""
    vec4 = wp.types.vector(4, float_t)
    quat = wp.types.quaternion(float_t)

    @wp.func
    def pose_rate(q0: quat, q1: quat, a: float_t):
        """(q(a), dq/da) of ``pose_at``'s rotation, both as (w, x, y, z)."""
        d = wp.dot(q0, q1)
        q = q0
        dq = q0
        if d < float_t(0.9999995):
            ang = wp.acos(wp.clamp(d, float_t(-1.0), float_t(1.0)))
            s = wp.sin(ang)
            q = q0 * (wp.sin((float_t(1.0) - a) * ang) / s) + q1 * (wp.sin(a * ang) / s)
            dq = (q1 * wp.cos(a * ang) - q0 * wp.cos((float_t(1.0) - a) * ang)) * (ang / s)
        else:  # the normalised lerp
            u = q0 * (float_t(1.0) - a) + q1 * a
            lu = wp.length(u)
            q = u / lu
            du = q1 - q0
            dq = (du - q * wp.dot(q, du)) / lu
        return vec4(q[3], q[0], q[1], q[2]), vec4(dq[3], dq[0], dq[1], dq[2])

    return pose_rate
