import math

import pytest
import torch

from nurec_usd.sensors import (
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

ORTHO_TOL = {torch.float32: 1e-6, torch.float64: 1e-12}


def rot_z(angle: float, dtype=torch.float64) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=dtype)


def axis_angle_quat(axis, angle, dtype=torch.float64) -> torch.Tensor:
    axis = torch.nn.functional.normalize(torch.as_tensor(axis, dtype=dtype), dim=-1)
    angle = torch.as_tensor(angle, dtype=dtype)
    return torch.cat((torch.cos(angle / 2)[..., None], torch.sin(angle / 2)[..., None] * axis), dim=-1)


def assert_on_so3(R: torch.Tensor) -> None:
    tol = ORTHO_TOL[R.dtype]
    eye = torch.eye(3, dtype=R.dtype).expand_as(R)
    assert (R.transpose(-1, -2) @ R - eye).abs().max() < tol
    assert (torch.linalg.det(R) - 1).abs().max() < tol


def random_quats(n: int, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return quat_normalize(torch.randn(n, 4, generator=g, dtype=dtype))


def test_quat_multiply_matches_matrix_product_and_conjugate_inverts():
    q1, q2 = random_quats(50, seed=1), random_quats(50, seed=2)
    R12 = quat_to_matrix(quat_multiply(q1, q2))
    torch.testing.assert_close(R12, quat_to_matrix(q1) @ quat_to_matrix(q2), rtol=0, atol=1e-12)
    ident = quat_multiply(q1, quat_conjugate(q1))
    torch.testing.assert_close(ident, torch.tensor([1.0, 0, 0, 0], dtype=torch.float64).expand(50, 4), rtol=0, atol=1e-12)


def test_quat_to_matrix_hand_value():
    # 90 degrees about +z: q = (cos 45, 0, 0, sin 45) maps x -> y.
    q = torch.tensor([math.sqrt(0.5), 0.0, 0.0, math.sqrt(0.5)], dtype=torch.float64)
    torch.testing.assert_close(quat_to_matrix(q), rot_z(math.pi / 2), rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matrix_quat_round_trip(dtype):
    q = random_quats(1000, dtype=dtype)
    R = quat_to_matrix(q)
    assert_on_so3(R)
    q2 = matrix_to_quat(R)
    assert (q2[:, 0] >= 0).all()
    q_pos = torch.where(q[:, :1] < 0, -q, q)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(q2, q_pos, rtol=0, atol=tol)


def test_matrix_quat_round_trip_near_180_degrees():
    g = torch.Generator().manual_seed(3)
    axes = torch.randn(200, 3, generator=g, dtype=torch.float64)
    angles = math.pi - torch.rand(200, generator=g, dtype=torch.float64) * 1e-6
    angles[:20] = math.pi  # exactly 180 degrees: w == 0
    q = axis_angle_quat(axes, angles)
    R = quat_to_matrix(q)
    torch.testing.assert_close(quat_to_matrix(matrix_to_quat(R)), R, rtol=0, atol=1e-12)
    # Also the three coordinate axes at exactly 180 degrees (diagonal matrices).
    for axis in torch.eye(3, dtype=torch.float64):
        R = quat_to_matrix(axis_angle_quat(axis, math.pi))
        torch.testing.assert_close(quat_to_matrix(matrix_to_quat(R)), R, rtol=0, atol=1e-15)


def test_transform_helpers():
    g = torch.Generator().manual_seed(4)
    R = quat_to_matrix(random_quats(10, seed=5))
    t = torch.randn(10, 3, generator=g, dtype=torch.float64)
    T = make_transform(R, t)
    assert T.shape == (10, 4, 4)
    torch.testing.assert_close(T[:, 3], torch.tensor([0, 0, 0, 1.0], dtype=torch.float64).expand(10, 4))
    p = torch.randn(10, 7, 3, generator=g, dtype=torch.float64)
    p_a = transform_points(T[:, None], p)
    torch.testing.assert_close(p_a, (R[:, None] @ p[..., None])[..., 0] + t[:, None])
    torch.testing.assert_close(transform_points(invert_transform(T)[:, None], p_a), p, rtol=0, atol=1e-12)
    torch.testing.assert_close(invert_transform(T) @ T, torch.eye(4, dtype=torch.float64).expand(10, 4, 4), rtol=0, atol=1e-12)


def _keys(dtype=torch.float64):
    times = torch.tensor([0.0, 1.0, 2.5, 3.0], dtype=torch.float64)
    q = random_quats(4, seed=6)
    R = quat_to_matrix(q).to(dtype)
    t = torch.tensor([[0, 0, 0], [1, 2, 3], [-1, 0, 5], [2, 2, 2]], dtype=dtype)
    return times, make_transform(R, t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_interpolation_hits_keys_exactly_and_stays_on_so3(dtype):
    times, key_T = _keys(dtype)
    out = interpolate_poses(times, key_T, times)
    assert torch.equal(out, key_T)
    t = torch.linspace(-0.5, 3.5, 101, dtype=torch.float64)
    T = interpolate_poses(times, key_T, t)
    assert T.dtype == dtype and T.shape == (101, 4, 4)
    assert_on_so3(T[:, :3, :3])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_interpolation_170_degree_turn(dtype):
    times = torch.tensor([0.0, 1.0], dtype=torch.float64)
    angle = math.radians(170)
    key_T = make_transform(torch.stack((rot_z(0.0), rot_z(angle))).to(dtype), torch.zeros(2, 3, dtype=dtype))
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    R = interpolate_poses(times, key_T, t)[:, :3, :3]
    assert_on_so3(R)
    yaw = torch.atan2(R[:, 1, 0], R[:, 0, 0]).double()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(yaw, angle * t, rtol=0, atol=tol)


def test_interpolation_midpoint_of_90_degree_yaw_is_45():
    times = torch.tensor([10.0, 12.0], dtype=torch.float64)
    key_T = make_transform(torch.stack((rot_z(0.0), rot_z(math.pi / 2))), torch.tensor([[0.0, 0, 0], [2.0, 4.0, 0]], dtype=torch.float64))
    T = interpolate_poses(times, key_T, torch.tensor([11.0], dtype=torch.float64))[0]
    torch.testing.assert_close(T[:3, :3], rot_z(math.pi / 4), rtol=0, atol=1e-15)
    torch.testing.assert_close(T[:3, 3], torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64))


def test_slerp_shortest_path_for_q_and_minus_q():
    q0 = axis_angle_quat([0, 0, 1], 0.0)
    q1 = axis_angle_quat([0, 0, 1], math.radians(60))
    expected = axis_angle_quat([0, 0, 1], math.radians(30))
    a = torch.tensor(0.5, dtype=torch.float64)
    for q in (q1, -q1):
        out = quat_slerp(q0, q, a)
        # Same rotation (30 degrees, not the long way round, which would be 210 degrees).
        torch.testing.assert_close(quat_to_matrix(out), quat_to_matrix(expected), rtol=0, atol=1e-15)


def test_slerp_identical_and_nearly_identical_quaternions():
    q = random_quats(5, seed=7)
    alpha = torch.linspace(0, 1, 5, dtype=torch.float64)
    torch.testing.assert_close(quat_slerp(q, q, alpha), q, rtol=0, atol=1e-15)
    torch.testing.assert_close(quat_slerp(q, -q, alpha).abs(), q.abs(), rtol=0, atol=1e-15)
    # Tiny rotation: slerp = rotation by alpha * angle about the same axis (series branch).
    for angle in (1e-3, 1e-6, 0.05):
        q0 = axis_angle_quat([1, 2, 3], 0.3)
        dq = axis_angle_quat([0, 1, 0], angle)
        out = quat_slerp(q0, quat_multiply(dq, q0), alpha)
        ref = quat_multiply(axis_angle_quat([0, 1, 0], angle * alpha), q0.expand(5, 4))
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-15)


def test_slerp_gradcheck_including_identical_inputs():
    q0 = random_quats(3, seed=8).requires_grad_()
    q1 = torch.cat((random_quats(2, seed=9), q0[:1].detach() + 1e-9)).requires_grad_()
    alpha = torch.tensor([0.3, 0.7, 0.5], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(quat_slerp, (q0, q1, alpha))
    q = random_quats(2, seed=10).requires_grad_()
    out = quat_slerp(q, q.detach().clone().requires_grad_(), torch.tensor([0.25, 0.5], dtype=torch.float64))
    (g,) = torch.autograd.grad(out.sum(), q)
    assert torch.isfinite(g).all()


def test_outside_clamp_and_error():
    times, key_T = _keys()
    T = interpolate_poses(times, key_T, torch.tensor([-1.0, 4.0], dtype=torch.float64), outside="clamp")
    assert torch.equal(T[0], key_T[0]) and torch.equal(T[1], key_T[-1])
    with pytest.raises(ValueError, match=r"outside the keyed range"):
        interpolate_poses(times, key_T, torch.tensor([0.5, 3.25], dtype=torch.float64), outside="error")
    with pytest.raises(ValueError):
        interpolate_poses(times, key_T, times, outside="extrapolate")
    interpolate_poses(times, key_T, times, outside="error")  # key range itself is fine


def test_single_key_is_constant():
    T0 = make_transform(rot_z(0.3), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    traj = PoseTrajectory(torch.tensor([5.0], dtype=torch.float64), T0[None])
    out = traj.at(torch.tensor([0.0, 5.0, 9.0], dtype=torch.float64))
    assert torch.equal(out, T0.expand(3, 4, 4))
    with pytest.raises(ValueError):
        traj.at(torch.tensor([6.0], dtype=torch.float64), outside="error")


def test_pose_trajectory_validation_and_shapes():
    times, key_T = _keys()
    traj = PoseTrajectory(times, key_T)
    assert traj.at(torch.zeros(2, 3, dtype=torch.float64)).shape == (2, 3, 4, 4)
    torch.testing.assert_close(traj.at(1.0), key_T[1])
    with pytest.raises(ValueError, match="strictly increasing"):
        PoseTrajectory(torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64), key_T[:3])
    with pytest.raises(ValueError, match="K >= 1"):
        PoseTrajectory(torch.zeros(0, dtype=torch.float64), key_T[:0])
    with pytest.raises(ValueError, match="key_T"):
        PoseTrajectory(times, key_T[:2])


def test_absolute_timestamps_in_float64():
    # 1.7e9 s (Unix time): float32 times would be off by ~100 s; float64 keeps microseconds.
    base = 1.7e9
    times = torch.tensor([base, base + 0.1], dtype=torch.float64)
    key_T = make_transform(torch.eye(3).expand(2, 3, 3), torch.tensor([[0.0, 0, 0], [1.0, 0, 0]]))
    T = interpolate_poses(times, key_T, torch.tensor([base + 0.025], dtype=torch.float64))
    assert abs(float(T[0, 0, 3]) - 0.25) < 1e-5


def test_interpolate_poses_gradcheck_wrt_key_translations():
    times, key_T = _keys()
    R = key_T[:, :3, :3]
    trans = key_T[:, :3, 3].clone().requires_grad_()
    t = torch.tensor([0.2, 1.0, 1.7, 2.9], dtype=torch.float64)

    def f(tr):
        return interpolate_poses(times, make_transform(R, tr), t)

    assert torch.autograd.gradcheck(f, (trans,))
