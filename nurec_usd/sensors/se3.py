"""Rigid transforms, unit quaternions and pose interpolation in torch.

Conventions:
  * Poses are 4x4 homogeneous matrices named ``T_a_b``: they map points from frame b into
    frame a, ``p_a = T_a_b @ p_b``.
  * Quaternions are (w, x, y, z), Hamilton product, and represent rotations when unit length.
  * Every function broadcasts over arbitrary leading dimensions and is differentiable; dtype and
    device follow the inputs.
"""

from __future__ import annotations

import torch

__all__ = [
    "quat_normalize",
    "quat_multiply",
    "quat_conjugate",
    "quat_to_matrix",
    "matrix_to_quat",
    "quat_slerp",
    "make_transform",
    "invert_transform",
    "transform_points",
    "interpolate_poses",
    "PoseTrajectory",
]

# Below this value of 1 - cos(angle) between two quaternions, slerp switches to its Taylor series
# (angle < ~0.014 rad), where acos loses precision and its gradient blows up.
_SLERP_SERIES_BELOW = 1e-4


def quat_normalize(q: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Scale quaternions to unit length.

    Args:
        q: quaternions (w, x, y, z).  # [..., 4]
        eps: lower bound on the norm, so a zero quaternion does not divide by zero.

    Returns:
        Unit quaternions.  # [..., 4]
    """
    return q / torch.linalg.vector_norm(q, dim=-1, keepdim=True).clamp_min(eps)


def quat_multiply(q1: torch.Tensor, q2: torch.Tensor) -> torch.Tensor:
    """Hamilton product ``q1 * q2`` (the rotation q2 followed by q1).

    Args:
        q1: quaternions (w, x, y, z).  # [..., 4]
        q2: quaternions (w, x, y, z).  # [..., 4]

    Returns:
        The products, broadcast over the leading dimensions.  # [..., 4]
    """
    w1, x1, y1, z1 = q1.unbind(-1)
    w2, x2, y2, z2 = q2.unbind(-1)
    return torch.stack(
        (
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ),
        dim=-1,
    )


def quat_conjugate(q: torch.Tensor) -> torch.Tensor:
    """Conjugate (w, -x, -y, -z); the inverse rotation for unit quaternions.

    Args:
        q: quaternions (w, x, y, z).  # [..., 4]

    Returns:
        Conjugated quaternions.  # [..., 4]
    """
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


def quat_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices of quaternions (normalised first, so any non-zero q is accepted).

    Args:
        q: quaternions (w, x, y, z).  # [..., 4]

    Returns:
        Rotation matrices.  # [..., 3, 3]
    """
    w, x, y, z = quat_normalize(q).unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    rows = (
        torch.stack((1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy)), dim=-1),
        torch.stack((2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx)), dim=-1),
        torch.stack((2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy)), dim=-1),
    )
    return torch.stack(rows, dim=-2)


def matrix_to_quat(R: torch.Tensor) -> torch.Tensor:
    """Unit quaternions of rotation matrices, with w >= 0.

    Uses Shepperd's method: of the four algebraically equivalent formulas, each divides by one of
    4w, 4x, 4y, 4z; the one with the largest divisor is picked per matrix, which stays accurate
    for every rotation including those near 180 degrees.

    Args:
        R: rotation matrices.  # [..., 3, 3]

    Returns:
        Unit quaternions (w, x, y, z) with w >= 0.  # [..., 4]
    """
    r00, r01, r02 = R[..., 0, 0], R[..., 0, 1], R[..., 0, 2]
    r10, r11, r12 = R[..., 1, 0], R[..., 1, 1], R[..., 1, 2]
    r20, r21, r22 = R[..., 2, 0], R[..., 2, 1], R[..., 2, 2]
    # 4w^2, 4x^2, 4y^2, 4z^2; they sum to 4, so the largest is >= 1.
    four_sq = torch.stack(
        (1 + r00 + r11 + r22, 1 + r00 - r11 - r22, 1 - r00 + r11 - r22, 1 - r00 - r11 + r22), dim=-1
    )
    # Clamping at 0.25 only touches candidates that are never picked (the picked one is >= 1), and
    # keeps their values and gradients finite so torch.gather's zero gradient does not become NaN.
    four_q = 2.0 * torch.sqrt(four_sq.clamp_min(0.25))  # 4|w|, 4|x|, 4|y|, 4|z|
    dx, dy, dz = r21 - r12, r02 - r20, r10 - r01  # 4wx, 4wy, 4wz
    sxy, sxz, syz = r01 + r10, r02 + r20, r12 + r21  # 4xy, 4xz, 4yz
    fw, fx, fy, fz = four_q.unbind(-1)
    cand = torch.stack(
        (
            torch.stack((fw / 4, dx / fw, dy / fw, dz / fw), dim=-1),
            torch.stack((dx / fx, fx / 4, sxy / fx, sxz / fx), dim=-1),
            torch.stack((dy / fy, sxy / fy, fy / 4, syz / fy), dim=-1),
            torch.stack((dz / fz, sxz / fz, syz / fz, fz / 4), dim=-1),
        ),
        dim=-2,
    )  # [..., 4 candidates, 4]
    best = four_sq.argmax(dim=-1)  # [...]
    idx = best[..., None, None].expand(*best.shape, 1, 4)
    q = torch.gather(cand, -2, idx).squeeze(-2)
    q = torch.where(q[..., :1] < 0, -q, q)
    return quat_normalize(q)


def quat_slerp(q0: torch.Tensor, q1: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """Spherical linear interpolation along the shortest arc (q1 is flipped when q0.q1 < 0).

    Near-identical quaternions use a Taylor series of the slerp weights, so values and gradients
    stay finite and accurate when q0 ~ q1 (including q0 == q1 and q0 == -q1).

    Args:
        q0: start quaternions (w, x, y, z), normalised internally.  # [..., 4]
        q1: end quaternions (w, x, y, z), normalised internally.  # [..., 4]
        alpha: interpolation parameter, 0 gives q0 and 1 gives q1.  # [...] or scalar

    Returns:
        Unit quaternions.  # [..., 4]
    """
    q0 = quat_normalize(q0)
    q1 = quat_normalize(q1)
    alpha = torch.as_tensor(alpha, dtype=q0.dtype, device=q0.device)
    dot = (q0 * q1).sum(-1)
    q1 = torch.where((dot < 0)[..., None], -q1, q1)
    d = dot.abs().clamp(max=1.0)
    e = 1.0 - d  # 1 - cos(theta), theta = angle between the 4-vectors (half the rotation angle)
    small = e < _SLERP_SERIES_BELOW

    # Exact weights sin(k theta) / sin(theta), evaluated on a safe dummy where the series is used.
    theta = torch.acos(torch.where(small, torch.zeros_like(d), d))
    sin_theta = torch.sin(theta)
    w0_exact = torch.sin((1 - alpha) * theta) / sin_theta
    w1_exact = torch.sin(alpha * theta) / sin_theta

    # Series: sin(k t)/sin(t) = k (1 + (1 - k^2) t^2/6 + (7 - 10 k^2 + 3 k^4) t^4/360 + O(t^6)),
    # with t^2 = acos(1 - e)^2 = 2e + e^2/3 + O(e^3).
    t2 = 2 * e + e * e / 3
    t4 = t2 * t2

    def series(k: torch.Tensor) -> torch.Tensor:
        k2 = k * k
        return k * (1 + (1 - k2) * t2 / 6 + (7 - 10 * k2 + 3 * k2 * k2) * t4 / 360)

    w0 = torch.where(small, series(1 - alpha), w0_exact)
    w1 = torch.where(small, series(alpha), w1_exact)
    return quat_normalize(w0[..., None] * q0 + w1[..., None] * q1)


def _broadcast(a: torch.Size, b: torch.Size) -> tuple[int, ...]:
    """The broadcast of two shapes. (``torch.broadcast_shapes`` imports sympy on its first call,
    about a second of a build's host time.)"""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


def make_transform(R: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Homogeneous transforms from rotations and translations.

    Args:
        R: rotation matrices.  # [..., 3, 3]
        t: translations.  # [..., 3]

    Returns:
        ``[[R, t], [0, 0, 0, 1]]``, broadcast over the leading dimensions.  # [..., 4, 4]
    """
    batch = _broadcast(R.shape[:-2], t.shape[:-1])
    R = R.expand(*batch, 3, 3)
    t = t.expand(*batch, 3)
    top = torch.cat((R, t[..., None]), dim=-1)
    bottom = torch.zeros(*batch, 1, 4, dtype=top.dtype, device=top.device)
    bottom[..., 0, 3] = 1.0  # fresh constant tensor, not part of any graph
    return torch.cat((top, bottom), dim=-2)


def invert_transform(T: torch.Tensor) -> torch.Tensor:
    """Inverse of rigid transforms, using R^T rather than a general matrix inverse.

    Args:
        T: rigid transforms ``T_a_b``.  # [..., 4, 4]

    Returns:
        ``T_b_a``.  # [..., 4, 4]
    """
    Rt = T[..., :3, :3].transpose(-1, -2)
    t = T[..., :3, 3]
    return make_transform(Rt, -(Rt @ t[..., None])[..., 0])


def transform_points(T: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Apply transforms ``T_a_b`` to points ``p_b``.

    Args:
        T: transforms.  # [..., 4, 4]
        p: points.  # [..., 3]

    Returns:
        ``p_a``, broadcast over the leading dimensions.  # [..., 3]
    """
    return (T[..., :3, :3] @ p[..., None])[..., 0] + T[..., :3, 3]


def _time_dtype(a: torch.Tensor, b: torch.Tensor) -> torch.dtype:
    # Absolute timestamps (~1e9 s) need float64; never compute time differences in less than
    # the more precise of the two inputs.
    dt = torch.promote_types(a.dtype, b.dtype)
    return dt if dt.is_floating_point else torch.float64


def interpolate_poses(
    key_times: torch.Tensor,
    key_T: torch.Tensor,
    t: torch.Tensor,
    outside: str = "clamp",
) -> torch.Tensor:
    """Poses at query times: slerp of rotations and lerp of translations between bracketing keys.

    At a key time the key pose is returned exactly. Times are compared in the more precise of the
    dtypes of ``key_times`` and ``t`` (use float64 for absolute timestamps); the result has the
    dtype of ``key_T``.

    Args:
        key_times: strictly increasing key times in seconds (not checked here).  # [K]
        key_T: key poses.  # [K, 4, 4]
        t: query times in seconds.  # [...] (typically [M])
        outside: "clamp" holds the first/last pose outside the keyed range; "error" raises
            ValueError (this check synchronises with the device).

    Returns:
        Interpolated poses.  # [..., 4, 4]
    """
    if outside not in ("clamp", "error"):
        raise ValueError(f"outside must be 'clamp' or 'error', got {outside!r}")
    if key_times.ndim != 1 or key_times.shape[0] < 1:
        raise ValueError(f"key_times must have shape [K] with K >= 1, got {tuple(key_times.shape)}")
    K = key_times.shape[0]
    if key_T.shape != (K, 4, 4):
        raise ValueError(f"key_T must have shape [{K}, 4, 4], got {tuple(key_T.shape)}")
    t = torch.as_tensor(t, device=key_times.device)
    tdt = _time_dtype(key_times, t)
    kt = key_times.to(tdt)
    tq = t.to(tdt)

    if outside == "error" and tq.numel() > 0:
        lo, hi = tq.min(), tq.max()
        if bool(lo < kt[0]) or bool(hi > kt[-1]):
            raise ValueError(
                f"query times [{lo.item():.9f}, {hi.item():.9f}] s fall outside the keyed range "
                f"[{kt[0].item():.9f}, {kt[-1].item():.9f}] s"
            )

    if K == 1:
        return key_T[0].expand(*t.shape, 4, 4)

    # Index of the right key: first key strictly after t, kept in [1, K-1] so both neighbours
    # exist; a query exactly at key j then gets alpha == 0 on segment (j, j+1).
    i1 = torch.searchsorted(kt, tq.contiguous(), right=True).clamp(1, K - 1)
    i0 = i1 - 1
    t0, t1 = kt[i0], kt[i1]
    alpha = ((tq - t0) / (t1 - t0)).clamp(0.0, 1.0).to(key_T.dtype)

    q_keys = matrix_to_quat(key_T[:, :3, :3])
    R = quat_to_matrix(quat_slerp(q_keys[i0], q_keys[i1], alpha))
    T0, T1 = key_T[i0], key_T[i1]
    # Return key rotations bit-exactly at the keys (the quaternion round trip is only ~1 ulp).
    R = torch.where((alpha == 0)[..., None, None], T0[..., :3, :3], R)
    R = torch.where((alpha == 1)[..., None, None], T1[..., :3, :3], R)
    a = alpha[..., None]
    trans = (1 - a) * T0[..., :3, 3] + a * T1[..., :3, 3]
    return make_transform(R, trans)


class PoseTrajectory:
    """A pose over time, ``T_a_b(t)``, from key poses (slerp + lerp between keys).

    Args:
        key_times: strictly increasing key times in seconds.  # [K]
        key_T: key poses.  # [K, 4, 4]

    With K == 1 the pose is constant.
    """

    def __init__(self, key_times: torch.Tensor, key_T: torch.Tensor) -> None:
        key_times = torch.as_tensor(key_times)
        key_T = torch.as_tensor(key_T)
        if not key_times.is_floating_point():
            key_times = key_times.to(torch.float64)
        if key_times.ndim != 1 or key_times.shape[0] < 1:
            raise ValueError(f"key_times must have shape [K] with K >= 1, got {tuple(key_times.shape)}")
        K = key_times.shape[0]
        if key_T.shape != (K, 4, 4):
            raise ValueError(f"key_T must have shape [{K}, 4, 4], got {tuple(key_T.shape)}")
        if not bool(torch.isfinite(key_times).all()):
            raise ValueError("key_times must be finite")
        if K > 1 and not bool((key_times[1:] > key_times[:-1]).all()):
            raise ValueError("key_times must be strictly increasing")
        self.key_times = key_times
        self.key_T = key_T

    def __len__(self) -> int:
        return self.key_times.shape[0]

    @property
    def start_time(self) -> float:
        """First key time in seconds."""
        return float(self.key_times[0])

    @property
    def end_time(self) -> float:
        """Last key time in seconds."""
        return float(self.key_times[-1])

    def at(self, t: torch.Tensor | float, outside: str = "clamp") -> torch.Tensor:
        """Poses at times ``t`` (see :func:`interpolate_poses`).

        Args:
            t: query times in seconds.  # [...]
            outside: "clamp" or "error".

        Returns:
            Poses.  # [..., 4, 4]
        """
        t = torch.as_tensor(t, device=self.key_times.device)
        if not t.is_floating_point():
            t = t.to(self.key_times.dtype)
        return interpolate_poses(self.key_times, self.key_T, t, outside=outside)
