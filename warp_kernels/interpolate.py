"""Fused time interpolation of Gaussians: actor poses from keyframed tracks, actor Gaussians into
the world, static Gaussians copied alongside, in two launches (below).

Memory layout (what the torch side passes in, zero-copy):
  * quaternions are stored (w, x, y, z) as ``vec4``; inside the kernels they become Warp
    ``quaternion`` values (x, y, z, w) through :func:`load_quat` / :func:`store_quat` and nowhere
    else;
  * tracks are CSR: actor ``a`` owns keys ``key_offsets[a] .. key_offsets[a+1]-1``, with strictly
    increasing ``key_times`` (seconds), key translations and unit key quaternions;
  * optional pose corrections per key: a translation delta ``dt`` and a rotation vector ``w``
    (so(3)); the corrected key pose is ``(exp(w) * q_k, p_k + dt)``.

Every kernel is generic over the float type; float32 overloads run on the GPU, float64 overloads
exist so tests can run float64 gradient checks (in a module of their own, see
``warp_kernels.modules``).

Kernels (the forward is two launches):
  * :data:`poses_and_static`: one thread per actor, its pose at t (key search, slerp, lerp), then
    one thread per static Gaussian, copied to the output. A pose is a chain of dependent reads
    that the copy hides; the launch is queued early, so both run while the
    host prepares the second.
  * :data:`interpolate_actors`: one thread per actor Gaussian, which reads its actor's pose.
    (Each thread searching its track itself would cost many registers and hundreds of
    instructions per warp: benchmarks/RESULTS.md, interp.)
  * :data:`actor_poses`: the poses alone (``nurec_usd.ops.interpolate.actor_poses``); and with
    ``adjoint=True`` it carries the actor-pose gradients to the per-key pose corrections (one
    thread per actor owns its keys, so its atomics never contend).
  * :data:`interpolate_backward_actors`: one thread per actor Gaussian, hand-written gradients of
    the per-Gaussian transform, and a per-block reduction of the actor-pose gradients before the
    atomics (Gaussians of one actor sit next to each other, so most blocks hold one actor).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from warp_kernels.modules import variant_module
from warp_kernels.wide_io import load_row4, store_row4

# Threads per block of the actor backward kernel: the width of its per-block reduction.
BACKWARD_BLOCK_DIM = 256

# Below this squared rotation angle (rad^2) exp() uses its Taylor series, which keeps the value
# and the gradient finite at w = 0 (the sqrt of the angle has no derivative there).
_EXP_SERIES_BELOW = 1.0e-6
# Below this value of 1 - cos(angle) slerp uses the Taylor series of its weights (the same
# threshold and series as nurec_usd.sensors.se3.quat_slerp, which the torch twin uses).
_SLERP_SERIES_BELOW = 1.0e-4


# ---------------------------------------------------------------------------------------------
# Device functions


@wp.func
def load_quat(q: Any):
    """(w, x, y, z) stored as a vec4 -> Warp quaternion (x, y, z, w)."""
    return wp.quaternion(q[1], q[2], q[3], q[0])


@wp.func
def store_quat(q: Any):
    """Warp quaternion (x, y, z, w) -> (w, x, y, z) as a vec4."""
    return wp.vector(q[3], q[0], q[1], q[2])


@wp.func
def so3_exp(w: Any):
    """Unit quaternion of the rotation vector ``w`` (axis * angle, rad)."""
    th2 = wp.dot(w, w)
    one = type(th2)(1.0)
    c = one
    s = type(th2)(0.5)
    if th2 < type(th2)(_EXP_SERIES_BELOW):
        # cos(th/2) and sin(th/2)/th as series in th^2: no sqrt, so the gradient at 0 is exact.
        c = one - th2 / type(th2)(8.0) + th2 * th2 / type(th2)(384.0)
        s = type(th2)(0.5) - th2 / type(th2)(48.0) + th2 * th2 / type(th2)(3840.0)
    else:
        th = wp.sqrt(th2)
        c = wp.cos(th * type(th2)(0.5))
        s = wp.sin(th * type(th2)(0.5)) / th
    return wp.quaternion(w[0] * s, w[1] * s, w[2] * s, c)


@wp.func
def slerp_weight_series(k: Any, t2: Any):
    """sin(k th) / sin(th) as a series in th^2 (t2), accurate for small th."""
    k2 = k * k
    t4 = t2 * t2
    one = type(k)(1.0)
    return k * (
        one
        + (one - k2) * t2 / type(k)(6.0)
        + (type(k)(7.0) - type(k)(10.0) * k2 + type(k)(3.0) * k2 * k2) * t4 / type(k)(360.0)
    )


@wp.func
def slerp(q0: Any, q1: Any, alpha: Any):
    """Shortest-arc slerp of unit quaternions; returns q0 / q1 bit-exactly at alpha 0 / 1."""
    d = wp.dot(q0, q1)
    q1s = q1
    if d < type(d)(0.0):
        # Shortest arc: interpolate towards -q1 (the same rotation).
        q1s = -q1
        d = -d
    d = wp.min(d, type(d)(1.0))
    e = type(d)(1.0) - d  # 1 - cos(th), th = half the rotation angle between the keys
    w0 = type(d)(1.0) - alpha
    w1 = alpha
    if e < type(d)(_SLERP_SERIES_BELOW):
        t2 = type(d)(2.0) * e + e * e / type(d)(3.0)  # th^2 = acos(1 - e)^2 to O(e^3)
        w0 = slerp_weight_series(type(d)(1.0) - alpha, t2)
        w1 = slerp_weight_series(alpha, t2)
    else:
        th = wp.acos(d)
        st = wp.sin(th)
        w0 = wp.sin((type(d)(1.0) - alpha) * th) / st
        w1 = wp.sin(alpha * th) / st
    q = wp.normalize(q0 * w0 + q1s * w1)
    # Exact key poses at the keys (normalize() would move them by an ulp).
    if alpha == type(d)(0.0):
        q = q0
    if alpha == type(d)(1.0):
        q = q1
    return q


@wp.func
def track_pose(
    t: Any,
    a: int,
    key_offsets: wp.array(dtype=wp.int32),
    key_times: wp.array(dtype=Any),
    key_translations: wp.array(dtype=Any),
    key_quats: wp.array(dtype=Any),
    corr_translations: wp.array(dtype=Any),
    corr_rotations: wp.array(dtype=Any),
    has_corr: int,
):
    """Pose (quaternion, translation) of actor ``a`` at time ``t`` and whether its track covers t.

    Slerp + lerp between the two keys around t; outside the track the end pose is held. The
    segment is the one whose right key is the first key strictly after t, so a query exactly at
    key j returns key j with alpha == 0, bit-exactly.
    """
    b = key_offsets[a]
    e = key_offsets[a + 1]
    zero = type(t)(0.0)
    one = type(t)(1.0)
    q = wp.quaternion(zero, zero, zero, one)
    p = wp.vector(zero, zero, zero)
    visible = zero
    if e > b:
        # First key in [b+1, e) with time >= t (e-1 when none), then step past a key equal to t.
        i1 = b
        if e - b > 1:
            i1 = wp.lower_bound(key_times, b + 1, e, t)
            if key_times[i1] == t and i1 < e - 1:
                i1 = i1 + 1
        i0 = wp.max(i1 - 1, b)
        t0 = key_times[i0]
        t1 = key_times[i1]
        alpha = zero
        if t1 > t0:
            alpha = wp.clamp((t - t0) / (t1 - t0), zero, one)
        q0 = load_quat(key_quats[i0])
        q1 = load_quat(key_quats[i1])
        p0 = key_translations[i0]
        p1 = key_translations[i1]
        if has_corr != 0:
            q0 = so3_exp(corr_rotations[i0]) * q0
            q1 = so3_exp(corr_rotations[i1]) * q1
            p0 = p0 + corr_translations[i0]
            p1 = p1 + corr_translations[i1]
        q = slerp(q0, q1, alpha)
        p = p0 * (one - alpha) + p1 * alpha
        if t >= key_times[b] and t <= key_times[e - 1]:
            visible = one
    return q, p, visible


@wp.func
def pack_pose(q: Any, p: Any, visible: Any):
    """A pose as one 8-vector (w, x, y, z, tx, ty, tz, visible): one buffer, one kernel argument."""
    return wp.vector(q[3], q[0], q[1], q[2], p[0], p[1], p[2], visible)


@wp.func
def pose_translation(pose: Any):
    """The translation of a packed pose."""
    return wp.vector(pose[4], pose[5], pose[6])


# 16-byte loads and stores (here and ``warp_kernels.wide_io``). A Warp vec3 or vec4 of float32 is
# read and written one float at a time; these move 16 bytes per instruction, which shortens the
# forward's two launches (benchmarks/RESULTS.md, interp). They need 16-byte aligned,
# contiguous arrays: the caller guarantees it (``nurec_usd.ops.interpolate``). float64 runs only
# in tests and copies element by element.

_COPY_FLOATS4_F32 = """
#if defined(__CUDA_ARCH__)
reinterpret_cast<float4*>(dst.data)[k] = reinterpret_cast<const float4*>(src.data)[k];
#else
const float* s = reinterpret_cast<const float*>(src.data);
float* d = reinterpret_cast<float*>(dst.data);
for (int e = 4 * k; e < 4 * k + 4; ++e) d[e] = s[e];
#endif
"""


@wp.func_native(_COPY_FLOATS4_F32)
def copy_floats4(src: wp.array(dtype=wp.vec3f), dst: wp.array(dtype=wp.vec3f), k: int):
    """Copy floats [4k, 4k + 4) of ``src``'s flat buffer to ``dst``'s (one 16-byte move on CUDA)."""
    ...


@wp.func_native("""
const double* s = reinterpret_cast<const double*>(src.data);
double* d = reinterpret_cast<double*>(dst.data);
for (int e = 4 * k; e < 4 * k + 4; ++e) d[e] = s[e];
""")
def copy_floats4(src: wp.array(dtype=wp.vec3d), dst: wp.array(dtype=wp.vec3d), k: int):  # noqa: F811
    """float64 :func:`copy_floats4` (element by element)."""
    ...


# ---------------------------------------------------------------------------------------------
# Kernels


@wp.kernel(enable_backward=False)
def poses_and_static(
    t: wp.array(dtype=Any),  # [1] query time, seconds
    num_poses: int,  # A, or 0 when no actor Gaussian reads a pose (launched with A + Ns threads)
    key_offsets: wp.array(dtype=wp.int32),  # [A+1]
    key_times: wp.array(dtype=Any),  # [K]
    key_translations: wp.array(dtype=Any),  # [K] vec3
    key_quats: wp.array(dtype=Any),  # [K] vec4 (w, x, y, z)
    corr_translations: wp.array(dtype=Any),  # [K] vec3 or empty
    corr_rotations: wp.array(dtype=Any),  # [K] vec3 or empty
    has_corr: int,
    static_means: wp.array(dtype=Any),  # [Ns] vec3
    static_quats: wp.array(dtype=Any),  # [Ns] vec4 (w, x, y, z)
    poses: wp.array(dtype=Any),  # [A] vec8 (w, x, y, z, tx, ty, tz, visible) out
    out_means: wp.array(dtype=Any),  # [Ns+Na] vec3 out (the first Ns rows here)
    out_quats: wp.array(dtype=Any),  # [Ns+Na] vec4 out
    out_visible: wp.array(dtype=Any),  # [Ns+Na] out
):
    """Threads [0, num_poses): the actors' poses at t; then one thread per static Gaussian, copied."""
    i = wp.tid()
    if i < num_poses:
        q, p, vis = track_pose(t[0], i, key_offsets, key_times, key_translations, key_quats, corr_translations,
                               corr_rotations, has_corr)
        poses[i] = pack_pose(q, p, vis)
    else:
        # The means as one flat run of floats, four at a time: thread j moves floats [4j, 4j+4)
        # while there are whole fours; the last thread copies the rows the fours leave short.
        j = i - num_poses
        num_static = static_means.shape[0]
        fours = (3 * num_static) // 4
        if j < fours:
            copy_floats4(static_means, out_means, j)
        if j == num_static - 1:
            for r in range((4 * fours) // 3, num_static):
                out_means[r] = static_means[r]
        store_row4(out_quats, j, load_row4(static_quats, j))
        out_visible[j] = type(out_visible[j])(1.0)


@wp.kernel(enable_backward=False)
def interpolate_actors(
    num_static: int,
    actor_means: wp.array(dtype=Any),  # [Na] vec3, box frame
    actor_quats: wp.array(dtype=Any),  # [Na] vec4 (w, x, y, z), box frame
    actor_index: wp.array(dtype=wp.int32),  # [Na]
    poses: wp.array(dtype=Any),  # [A] vec8 (w, x, y, z, tx, ty, tz, visible), from poses_and_static
    out_means: wp.array(dtype=Any),  # [Ns+Na] vec3, world (rows Ns.. here)
    out_quats: wp.array(dtype=Any),  # [Ns+Na] vec4 (w, x, y, z), world
    out_visible: wp.array(dtype=Any),  # [Ns+Na] 1 or 0
):
    """One thread per actor Gaussian: moved by its actor's pose into the world."""
    j = wp.tid()
    a = actor_index[j]
    qv = load_row4(actor_quats, j)
    m = actor_means[j]
    vis = type(qv[0])(0.0)
    if a >= 0 and a < poses.shape[0]:
        pose = poses[a]
        q = load_quat(pose)  # its first four entries
        m = wp.quat_rotate(q, m) + pose_translation(pose)
        qv = store_quat(q * load_quat(qv))
        vis = pose[7]
    out_means[num_static + j] = m
    store_row4(out_quats, num_static + j, qv)
    out_visible[num_static + j] = vis


@wp.kernel(enable_backward=False)
def interpolate_backward_actors(
    num_static: int,
    num_actor_gaussians: int,
    actor_means: wp.array(dtype=Any),  # [Na] vec3
    actor_quats: wp.array(dtype=Any),  # [Na] vec4 (w, x, y, z)
    actor_index: wp.array(dtype=wp.int32),  # [Na]
    poses: wp.array(dtype=Any),  # [A] vec8 (w, x, y, z, tx, ty, tz, visible), the forward's
    grad_out_means: wp.array(dtype=Any),  # [Ns+Na] vec3
    grad_out_quats: wp.array(dtype=Any),  # [Ns+Na] vec4
    accumulate_pose: int,
    grad_actor_means: wp.array(dtype=Any),  # [Na] vec3
    grad_actor_quats: wp.array(dtype=Any),  # [Na] vec4
    grad_pose_quats: wp.array(dtype=Any),  # [A] vec4 (w, x, y, z), accumulated
    grad_pose_translations: wp.array(dtype=Any),  # [A] vec3, accumulated
):
    """Gradients of the actor Gaussians, and (when ``accumulate_pose``) of each actor's pose.

    Launch with a dimension rounded up to a multiple of the block size: the per-block
    reduction needs every thread of a block.
    """
    j = wp.tid()
    num_actors = poses.shape[0]
    zero = type(grad_out_means[0][0])(0.0)
    gq_pose = wp.vector(zero, zero, zero, zero)  # dL/d(pose quaternion), (w, x, y, z)
    gp_pose = wp.vector(zero, zero, zero)  # dL/d(pose translation)
    a = -1
    if j < num_actor_gaussians:
        a = actor_index[j]
        if a >= 0 and a < num_actors:
            q = load_quat(poses[a])  # its first four entries
            m = actor_means[j]
            ql = load_quat(actor_quats[j])
            gm = grad_out_means[num_static + j]
            gq = load_quat(grad_out_quats[num_static + j])
            # mean_w = rotate(q, m) + p  ->  dL/dm = R^T gm.
            grad_actor_means[j] = wp.quat_rotate_inv(q, gm)
            # quat_w = q * ql: left multiplication by q is a linear map whose transpose is the
            # left multiplication by conj(q); right multiplication by ql likewise with conj(ql).
            grad_actor_quats[j] = store_quat(wp.quat_inverse(q) * gq)
            if accumulate_pose != 0:
                # Derivative of Warp's quat_rotate(q, m) = m (2w^2 - 1) + 2 u (u.m) + 2 w (u x m),
                # u = (x, y, z), contracted with gm.
                u = wp.vector(q[0], q[1], q[2])
                w = q[3]
                two = type(w)(2.0)
                gu = gm * (two * wp.dot(u, m)) + m * (two * wp.dot(u, gm)) + wp.cross(m, gm) * (two * w)
                gw = type(w)(4.0) * w * wp.dot(gm, m) + two * wp.dot(gm, wp.cross(u, m))
                gqp = gq * wp.quat_inverse(ql)
                gq_pose = wp.vector(gw + gqp[3], gu[0] + gqp[0], gu[1] + gqp[1], gu[2] + gqp[2])
                gp_pose = gm
        else:
            # Actors without a track pass through unchanged (identity pose).
            grad_actor_means[j] = grad_out_means[num_static + j]
            grad_actor_quats[j] = grad_out_quats[num_static + j]
    if accumulate_pose != 0:
        # Sum over the block the contributions of the block's first actor, then one atomic per
        # block; threads of any other actor (a block straddling two actors, or unsorted input)
        # add their own. Every thread of the block reaches the tile ops (uniform branch).
        first = j - j % wp.block_dim()
        a_first = actor_index[wp.min(first, num_actor_gaussians - 1)]
        same = a == a_first and a >= 0 and a < num_actors
        sq = gq_pose * zero
        sp = gp_pose * zero
        if same:
            sq = gq_pose
            sp = gp_pose
        tq = wp.tile_sum(wp.tile(sq, preserve_type=True))
        tp = wp.tile_sum(wp.tile(sp, preserve_type=True))
        if a_first >= 0 and a_first < num_actors:
            wp.tile_atomic_add(grad_pose_quats, tq, offset=a_first)
            wp.tile_atomic_add(grad_pose_translations, tp, offset=a_first)
        if not same and a >= 0 and a < num_actors:
            wp.atomic_add(grad_pose_quats, a, gq_pose)
            wp.atomic_add(grad_pose_translations, a, gp_pose)


@wp.kernel
def actor_poses(
    t: wp.array(dtype=Any),  # [1]
    key_offsets: wp.array(dtype=wp.int32),  # [A+1]
    key_times: wp.array(dtype=Any),  # [K]
    key_translations: wp.array(dtype=Any),  # [K] vec3
    key_quats: wp.array(dtype=Any),  # [K] vec4 (w, x, y, z)
    corr_translations: wp.array(dtype=Any),  # [K] vec3 or empty
    corr_rotations: wp.array(dtype=Any),  # [K] vec3 or empty
    has_corr: int,
    out_quats: wp.array(dtype=Any),  # [A] vec4 (w, x, y, z)
    out_translations: wp.array(dtype=Any),  # [A] vec3
    out_visible: wp.array(dtype=Any),  # [A]
):
    """One thread per actor: its ``track_pose`` at t (quaternions stored (w, x, y, z))."""
    a = wp.tid()
    q, p, vis = track_pose(t[0], a, key_offsets, key_times, key_translations, key_quats, corr_translations,
                           corr_rotations, has_corr)
    out_quats[a] = store_quat(q)
    out_translations[a] = p
    out_visible[a] = vis


# ---------------------------------------------------------------------------------------------
# Overloads: float32 (GPU path) and float64 (gradient checks). Declared explicitly so that
# ahead-of-time compilation sees them all.


_OVERLOADS: dict[type, dict[str, wp.Kernel]] = {}


def overloads(scalar: type) -> dict[str, wp.Kernel]:
    """The concrete kernels for ``scalar`` (wp.float32 or wp.float64), by kernel name.

    Launching these rather than the generic kernels skips Warp's per-launch type inference.
    """
    return _OVERLOADS[scalar]


def _generic_kernels(scalar: type) -> tuple[wp.Kernel, ...]:
    """The generic kernels to overload for ``scalar``: for float64, copies registered in a module of
    their own (``warp_kernels.modules``), so that float32 runs never compile them."""
    module = variant_module(__name__, scalar)
    if module is None:
        return poses_and_static, interpolate_actors, interpolate_backward_actors, actor_poses
    return (wp.kernel(enable_backward=False, module=module)(poses_and_static.func),
            wp.kernel(enable_backward=False, module=module)(interpolate_actors.func),
            wp.kernel(enable_backward=False, module=module)(interpolate_backward_actors.func),
            wp.kernel(module=module)(actor_poses.func))


def _declare_overloads(scalar: type) -> None:
    first, actors, backward_actors, poses = _generic_kernels(scalar)
    vec3 = wp.types.vector(3, scalar)
    vec4 = wp.types.vector(4, scalar)
    vec8 = wp.types.vector(8, scalar)
    s = wp.array(dtype=scalar)
    v3 = wp.array(dtype=vec3)
    v4 = wp.array(dtype=vec4)
    v8 = wp.array(dtype=vec8)
    i32 = wp.array(dtype=wp.int32)
    keys = {
        "key_offsets": i32,
        "key_times": s,
        "key_translations": v3,
        "key_quats": v4,
        "corr_translations": v3,
        "corr_rotations": v3,
        "has_corr": int,
    }
    found = _OVERLOADS[scalar] = {}
    found["poses_and_static"] = wp.overload(
        first,
        {
            "t": s,
            "num_poses": int,
            **keys,
            "static_means": v3,
            "static_quats": v4,
            "poses": v8,
            "out_means": v3,
            "out_quats": v4,
            "out_visible": s,
        },
    )
    found["interpolate_actors"] = wp.overload(
        actors,
        {
            "num_static": int,
            "actor_means": v3,
            "actor_quats": v4,
            "actor_index": i32,
            "poses": v8,
            "out_means": v3,
            "out_quats": v4,
            "out_visible": s,
        },
    )
    found["interpolate_backward_actors"] = wp.overload(
        backward_actors,
        {
            "num_static": int,
            "num_actor_gaussians": int,
            "actor_means": v3,
            "actor_quats": v4,
            "actor_index": i32,
            "poses": v8,
            "grad_out_means": v3,
            "grad_out_quats": v4,
            "accumulate_pose": int,
            "grad_actor_means": v3,
            "grad_actor_quats": v4,
            "grad_pose_quats": v4,
            "grad_pose_translations": v3,
        },
    )
    found["actor_poses"] = wp.overload(
        poses,
        {"t": s, **keys, "out_quats": v4, "out_translations": v3, "out_visible": s},
    )


_declare_overloads(wp.float32)
_declare_overloads(wp.float64)
