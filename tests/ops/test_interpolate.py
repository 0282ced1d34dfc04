"""The fused time interpolation (Warp) against its pure-torch twin, on the CPU.

Tolerances: float32 forward, means within 2e-5 m (scenes of ~10 m) and quaternions within 2e-6;
float32 backward within 1e-4 relative to the largest gradient entry; float64 gradients within
1e-10; exactness claims (key hits, zero corrections, static pass-through) are bit-exact.
"""

from __future__ import annotations

import math

import pytest
import torch

from nurec_usd.ops.interpolate import PoseCorrections, TrackKeys, actor_poses, interpolate_gaussians
from nurec_usd.ops.reference import actor_poses_reference, interpolate_gaussians_reference

wp = pytest.importorskip("warp")


def axis_angle_quat(axis, angle: float) -> torch.Tensor:
    axis = torch.nn.functional.normalize(torch.as_tensor(axis, dtype=torch.float64), dim=-1)
    return torch.cat((torch.tensor([math.cos(angle / 2)]), math.sin(angle / 2) * axis))


def make_tracks(dtype: torch.dtype = torch.float64) -> TrackKeys:
    """Three actors with different time ranges; track 0 has every slerp regime.

    Track 0, keys at 0, 1, 2, 3, 4 s: a large turn, a sign-flipped near-duplicate (q0.q1 < 0,
    same rotation: the shortest-arc flip), a near-identical pair (slerp's series branch), a
    quarter turn. Track 1: 1.5 .. 3.5 s, three keys. Track 2: a single key at 2.5 s.
    """
    q = [
        axis_angle_quat([0, 0, 1], 0.3),
        axis_angle_quat([1, 2, 0], 2.5),
        -axis_angle_quat([1, 2, 0], 2.45),
        -axis_angle_quat([1, 2, 0.001], 2.45),
        axis_angle_quat([0, 1, 0], 1.2),
    ]
    track0 = (torch.arange(5.0, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64) * 3, torch.stack(q))
    track1 = (
        torch.tensor([1.5, 2.25, 3.5], dtype=torch.float64),
        torch.randn(3, 3, dtype=torch.float64) * 3,
        torch.randn(3, 4, dtype=torch.float64),
    )
    f64 = dict(dtype=torch.float64)
    track2 = (torch.tensor([2.5], **f64), torch.randn(1, 3, **f64), torch.randn(1, 4, **f64))
    return TrackKeys.from_tracks([track0, track1, track2], dtype=dtype)


# Between keys; exactly on keys (0 s first key of track 0, 2.25 s inner key of track 1, 3.5 s last
# key of track 1, 2.5 s the single key of track 2); before / after every track.
TIMES = [0.6, 1.7, 2.25, 2.5, 3.5, 3.9, 0.0, -1.0, 7.0]


def make_gaussians(tracks: TrackKeys, ns: int, per_actor: int, dtype: torch.dtype, sort: bool = True):
    """Static and actor Gaussians (unnormalised quaternions), ``per_actor`` per track on average."""
    A = tracks.num_actors
    na = per_actor * A
    index = torch.randint(0, A, (na,))
    if sort:
        index = index.sort().values
    return dict(
        static_means=torch.randn(ns, 3, dtype=dtype) * 10,
        static_quats=torch.randn(ns, 4, dtype=dtype),
        actor_means=torch.randn(na, 3, dtype=dtype) * 2,
        actor_quats=torch.randn(na, 4, dtype=dtype),
        actor_index=index.to(torch.int32),
    )


def make_corrections(tracks: TrackKeys, scale: float = 0.2) -> PoseCorrections:
    K = tracks.num_keys
    return PoseCorrections(scale * torch.randn(K, 3, dtype=tracks.dtype), scale * torch.randn(K, 3, dtype=tracks.dtype))


def time(tracks: TrackKeys, value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=tracks.dtype)


# ---------------------------------------------------------------------------------------------
# Forward


@pytest.mark.parametrize("with_corrections", [False, True])
def test_forward_matches_twin_float32(with_corrections):
    torch.manual_seed(0)
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, ns=50, per_actor=40, dtype=torch.float32)
    corr = make_corrections(tracks) if with_corrections else None
    for tv in TIMES:
        t = time(tracks, tv)
        means, quats, vis = interpolate_gaussians(t, **g, tracks=tracks, pose_corrections=corr)
        r_means, r_quats, r_vis = interpolate_gaussians_reference(t, **g, tracks=tracks, pose_corrections=corr)
        assert means.shape == (50 + 120, 3) and quats.shape == (170, 4) and vis.shape == (170,)
        torch.testing.assert_close(means, r_means, atol=2e-5, rtol=0, msg=f"means at t={tv}")
        torch.testing.assert_close(quats, r_quats, atol=2e-6, rtol=0, msg=f"quats at t={tv}")
        assert torch.equal(vis, r_vis), f"visibility at t={tv}"
        # Static Gaussians are copied bit for bit.
        assert torch.equal(means[:50], g["static_means"]) and torch.equal(quats[:50], g["static_quats"])


def test_visibility_and_clamping_outside_tracks():
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, ns=3, per_actor=4, dtype=torch.float32)
    for tv, expected in [(-1.0, [0, 0, 0]), (0.5, [1, 0, 0]), (2.5, [1, 1, 1]), (3.9, [1, 0, 0]), (7.0, [0, 0, 0])]:
        q, p, vis = actor_poses(time(tracks, tv), tracks)
        assert vis.tolist() == expected, tv
        _, _, gvis = interpolate_gaussians(time(tracks, tv), **g, tracks=tracks)
        assert torch.equal(gvis[3:], vis[g["actor_index"].long()]) and bool((gvis[:3] == 1).all())
    # Outside the range: the end poses, exactly.
    first = tracks.key_offsets[:-1].long()
    last = tracks.key_offsets[1:].long() - 1
    q, p, _ = actor_poses(time(tracks, -1.0), tracks)
    assert torch.equal(q, tracks.key_quats[first]) and torch.equal(p, tracks.key_translations[first])
    q, p, _ = actor_poses(time(tracks, 7.0), tracks)
    assert torch.equal(q, tracks.key_quats[last]) and torch.equal(p, tracks.key_translations[last])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_key_time_hits_are_exact(dtype):
    torch.manual_seed(1)
    tracks = make_tracks(dtype)
    zero = PoseCorrections(torch.zeros(tracks.num_keys, 3, dtype=dtype), torch.zeros(tracks.num_keys, 3, dtype=dtype))
    off = tracks.key_offsets.tolist()
    for a in range(tracks.num_actors):
        for k in range(off[a], off[a + 1]):
            t = tracks.key_times[k].clone()
            for corr in (None, zero):
                q, p, vis = actor_poses(t, tracks, corr)
                assert torch.equal(q[a], tracks.key_quats[k]), (a, k)
                assert torch.equal(p[a], tracks.key_translations[k]), (a, k)
                assert vis[a] == 1


def test_actor_poses_match_twin():
    torch.manual_seed(2)
    tracks = make_tracks(torch.float64)
    corr = make_corrections(tracks)
    for tv in TIMES:
        for c in (None, corr):
            got = actor_poses(time(tracks, tv), tracks, c)
            ref = actor_poses_reference(time(tracks, tv), tracks, c)
            for x, y in zip(got, ref):
                torch.testing.assert_close(x, y, atol=1e-12, rtol=0)


def test_zero_corrections_reproduce_uncorrected_exactly():
    torch.manual_seed(3)
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, ns=5, per_actor=20, dtype=torch.float32)
    zero = PoseCorrections(torch.zeros(tracks.num_keys, 3), torch.zeros(tracks.num_keys, 3))
    for tv in TIMES:
        a = interpolate_gaussians(time(tracks, tv), **g, tracks=tracks)
        b = interpolate_gaussians(time(tracks, tv), **g, tracks=tracks, pose_corrections=zero)
        for x, y in zip(a, b):
            assert torch.equal(x, y), tv


def test_slerp_stays_unit_norm():
    tracks = make_tracks(torch.float32)
    corr = make_corrections(tracks, scale=0.5)
    for tv in torch.linspace(-0.5, 4.5, 201).tolist():
        for c in (None, corr):
            q, _, _ = actor_poses(time(tracks, tv), tracks, c)
            assert (torch.linalg.vector_norm(q, dim=-1) - 1).abs().max() < 1e-6, tv
    # Unit local rotations stay unit in the world.
    g = make_gaussians(tracks, ns=0, per_actor=10, dtype=torch.float32)
    g["actor_quats"] = torch.nn.functional.normalize(g["actor_quats"], dim=-1)
    _, quats, _ = interpolate_gaussians(time(tracks, 1.37), **g, tracks=tracks, pose_corrections=corr)
    assert (torch.linalg.vector_norm(quats, dim=-1) - 1).abs().max() < 1e-6


def test_slerp_takes_the_shortest_arc():
    # Keys 1 and 2 of track 0 are the same rotation up to 0.05 rad with opposite quaternion signs:
    # halfway, the pose must be within that small angle of both, not half a turn away.
    tracks = make_tracks(torch.float64)
    q, _, _ = actor_poses(time(tracks, 1.5), tracks)
    for k in (1, 2):
        cos_half = (q[0] * tracks.key_quats[k]).sum().abs()
        assert cos_half > math.cos(0.05 / 2)


def test_invalid_actor_index_left_in_place_and_invisible():
    tracks = make_tracks(torch.float32)
    am = torch.randn(3, 3)
    aq = torch.randn(3, 4)
    index = torch.tensor([-1, 1, 3], dtype=torch.int32)
    empty = torch.zeros(0, 3), torch.zeros(0, 4)
    means, quats, vis = interpolate_gaussians(time(tracks, 2.0), *empty, am, aq, index, tracks)
    assert torch.equal(means[[0, 2]], am[[0, 2]]) and torch.equal(quats[[0, 2]], aq[[0, 2]])
    assert vis.tolist() == [0.0, 1.0, 0.0]


def test_query_time_forms_agree():
    """t as a 0-dim tensor, a one-element tensor, or another float dtype (cast on the device):
    the same result."""
    torch.manual_seed(3)
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, 20, 10, torch.float32)
    ref = interpolate_gaussians(time(tracks, 2.25), **g, tracks=tracks)
    for t in (torch.tensor([2.25]), torch.tensor(2.25, dtype=torch.float64), torch.tensor([2.25], dtype=torch.float64)):
        out = interpolate_gaussians(t, **g, tracks=tracks)
        for a, b in zip(out, ref):
            assert torch.equal(a, b), t


def test_actor_gaussians_without_any_track_or_static_gaussian():
    """No tracks and no static Gaussians: the actor Gaussians are still written, in place and
    invisible (their indices name no track)."""
    no_tracks = TrackKeys.from_tracks([])
    am, aq = torch.randn(3, 3), torch.randn(3, 4)
    index = torch.tensor([0, -1, 2], dtype=torch.int32)
    means, quats, vis = interpolate_gaussians(time(no_tracks, 1.0), torch.zeros(0, 3), torch.zeros(0, 4), am, aq,
                                              index, no_tracks)
    assert torch.equal(means, am) and torch.equal(quats, aq) and vis.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_static_copy_every_remainder_and_misaligned_views(dtype, monkeypatch):
    """The static means move as one flat run of floats, four at a time, and the last thread
    copies the rows the fours leave short: every static count from 1 to 9 covers each remainder
    of 3 * Ns / 4. Inputs that start off a 16-byte boundary (views into a larger tensor) are
    copied to an aligned buffer first; the values and the gradients reach the original."""
    tracks = make_tracks(dtype)
    for ns in range(1, 10):
        torch.manual_seed(ns)
        g = make_gaussians(tracks, ns=ns, per_actor=3, dtype=dtype)
        means, quats, vis = interpolate_gaussians(time(tracks, 1.7), **g, tracks=tracks)
        assert torch.equal(means[:ns], g["static_means"]) and torch.equal(quats[:ns], g["static_quats"]), ns
        assert bool((vis[:ns] == 1).all()), ns
        r_means, r_quats, _ = interpolate_gaussians_reference(time(tracks, 1.7), **g, tracks=tracks)
        torch.testing.assert_close(means, r_means, atol=2e-5, rtol=0)
        torch.testing.assert_close(quats, r_quats, atol=2e-6, rtol=0)

    torch.manual_seed(0)
    g = make_gaussians(tracks, ns=7, per_actor=5, dtype=dtype)
    bases = {k: torch.cat((torch.zeros(1, dtype=dtype), g[k].reshape(-1))).requires_grad_()
             for k in ("static_means", "static_quats", "actor_quats")}
    views = {k: b[1:].view(-1, g[k].shape[1]) for k, b in bases.items()}  # one element past the start
    assert all(v.data_ptr() % 16 != 0 for v in views.values())
    # On the CPU a misaligned row reads fine; on CUDA a 16-byte load from it faults. So check
    # what the kernels are given: every float tensor starts on a 16-byte boundary.
    from nurec_usd.ops import interpolate as interp_module

    launched = []
    real_launch = interp_module._warp_torch.launch

    def recording_launch(kernel, dim, inputs, **kwargs):
        launched.extend(x.data_ptr() for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point())
        return real_launch(kernel, dim, inputs, **kwargs)

    monkeypatch.setattr(interp_module._warp_torch, "launch", recording_launch)
    means, quats, _ = interpolate_gaussians(time(tracks, 2.25), **{**g, **views}, tracks=tracks)
    monkeypatch.undo()
    assert launched and all(ptr % 16 == 0 for ptr in launched)
    r_means, r_quats, _ = interpolate_gaussians(time(tracks, 2.25), **g, tracks=tracks)
    assert torch.equal(means, r_means) and torch.equal(quats, r_quats)
    (means.sum() + 2 * quats.sum()).backward()
    for k, b in bases.items():
        assert b.grad is not None and b.grad[0] == 0 and bool((b.grad[1:] != 0).any()), k


def test_empty_inputs():
    tracks = make_tracks(torch.float32)
    e3, e4, ei = torch.zeros(0, 3), torch.zeros(0, 4), torch.zeros(0, dtype=torch.int32)
    means, quats, vis = interpolate_gaussians(time(tracks, 1.0), e3, e4, e3, e4, ei, tracks)
    assert means.shape == (0, 3) and quats.shape == (0, 4) and vis.shape == (0,)
    no_tracks = TrackKeys.from_tracks([])
    sm = torch.randn(4, 3)
    means, _, vis = interpolate_gaussians(time(no_tracks, 1.0), sm, torch.randn(4, 4), e3, e4, ei, no_tracks)
    assert torch.equal(means, sm) and bool((vis == 1).all())


# ---------------------------------------------------------------------------------------------
# Backward


def _leaf_inputs(tracks, g, corr, t):
    inputs = {k: (v.clone().requires_grad_() if v.is_floating_point() else v) for k, v in g.items()}
    corr = PoseCorrections(*(c.clone().requires_grad_() for c in corr))
    return dict(t=t, tracks=tracks, pose_corrections=corr, **inputs)


GRAD_NAMES = ["static_means", "static_quats", "actor_means", "actor_quats"]


@pytest.mark.parametrize("tv", [0.6, 2.25, 3.9, 7.0])
def test_backward_matches_twin_float32(tv):
    torch.manual_seed(4)
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, ns=20, per_actor=30, dtype=torch.float32)
    inputs = _leaf_inputs(tracks, g, make_corrections(tracks), time(tracks, tv))
    n = 20 + g["actor_means"].shape[0]
    upstream = (torch.randn(n, 3), torch.randn(n, 4))
    corr = inputs["pose_corrections"]

    def run(fn):
        means, quats, _ = fn(**inputs)
        loss = (means * upstream[0]).sum() + (quats * upstream[1]).sum()
        return torch.autograd.grad(loss, [inputs[k] for k in GRAD_NAMES] + list(corr))

    got = run(interpolate_gaussians)
    ref = run(interpolate_gaussians_reference)
    for name, x, y in zip(GRAD_NAMES + ["corr.translations", "corr.rotations"], got, ref):
        scale = y.abs().max().clamp_min(1e-6)
        assert (x - y).abs().max() / scale < 1e-4, name
    # Static Gaussians: the incoming gradient itself.
    assert torch.equal(got[0], upstream[0][:20]) and torch.equal(got[1], upstream[1][:20])


def test_backward_only_what_is_asked():
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, ns=4, per_actor=5, dtype=torch.float32)
    corr = make_corrections(tracks)
    rot = corr.rotations.clone().requires_grad_()
    kwargs = dict(t=time(tracks, 1.2), **g, tracks=tracks, pose_corrections=(corr.translations, rot))
    means, quats, vis = interpolate_gaussians(**kwargs)
    assert not vis.requires_grad
    (grad,) = torch.autograd.grad(means.sum() + quats.sum(), [rot])
    r_means, r_quats, _ = interpolate_gaussians_reference(**kwargs)
    (ref,) = torch.autograd.grad(r_means.sum() + r_quats.sum(), [rot])
    torch.testing.assert_close(grad, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("used", ["means", "quats"])
def test_backward_with_one_output_unused(used):
    """A loss of one output only: the other's gradient arrives as None (not materialised)."""
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, ns=6, per_actor=8, dtype=torch.float32)
    inputs = _leaf_inputs(tracks, g, make_corrections(tracks), time(tracks, 2.25))
    leaves = [inputs[k] for k in GRAD_NAMES] + list(inputs["pose_corrections"])

    def run(fn):
        means, quats, _ = fn(**inputs)
        out = means if used == "means" else quats
        weights = torch.linspace(-1.0, 1.0, out.numel()).view(out.shape)
        return torch.autograd.grad((out * weights).sum(), leaves, allow_unused=True)

    for x, y in zip(run(interpolate_gaussians), run(interpolate_gaussians_reference)):
        if y is None or not bool(y.abs().sum() > 0):
            assert x is None or not bool(x.abs().sum() > 0)
        else:
            assert (x - y).abs().max() / y.abs().max() < 1e-4


def test_without_gradients_no_graph_and_the_same_values():
    """Under no_grad, or when no input needs a gradient, the outputs carry no autograd node and
    equal those of a differentiable call."""
    torch.manual_seed(5)
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, ns=6, per_actor=4, dtype=torch.float32)
    inputs = _leaf_inputs(tracks, g, make_corrections(tracks), time(tracks, 2.25))
    ref = interpolate_gaussians(**inputs)
    assert ref[0].grad_fn is not None and ref[1].grad_fn is not None
    with torch.no_grad():
        no_grad = interpolate_gaussians(**inputs)
    plain = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    plain["pose_corrections"] = PoseCorrections(*(c.detach() for c in inputs["pose_corrections"]))
    detached = interpolate_gaussians(**plain)
    for out in (no_grad, detached):
        assert all(x.grad_fn is None and not x.requires_grad for x in out)
        for a, b in zip(out, ref):
            assert torch.equal(a, b.detach())


@pytest.mark.parametrize("sort", [True, False])
def test_block_reduction_of_pose_gradients(sort, monkeypatch):
    """The GPU path: 256-thread blocks reduce pose gradients before their atomics.

    With ``enable_cpu_blocks`` the CPU runs real 256-lane blocks, so blocks that straddle two
    actors (sorted input) or hold many (unsorted input) are exercised; float64, so the comparison
    is tight.
    """
    monkeypatch.setattr(wp.config, "enable_cpu_blocks", True)
    torch.manual_seed(5)
    tracks = make_tracks(torch.float64)
    g = make_gaussians(tracks, ns=7, per_actor=233, dtype=torch.float64, sort=sort)  # 699: partial last block
    inputs = _leaf_inputs(tracks, g, make_corrections(tracks), time(tracks, 2.3))
    n = 7 + g["actor_means"].shape[0]
    upstream = (torch.randn(n, 3, dtype=torch.float64), torch.randn(n, 4, dtype=torch.float64))
    corr = inputs["pose_corrections"]

    def run(fn):
        means, quats, _ = fn(**inputs)
        loss = (means * upstream[0]).sum() + (quats * upstream[1]).sum()
        return torch.autograd.grad(loss, [inputs["actor_means"], inputs["actor_quats"], *corr])

    for x, y in zip(run(interpolate_gaussians), run(interpolate_gaussians_reference)):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=1e-10)


def _gradcheck_case(tracks: TrackKeys, corr: PoseCorrections, tv: float) -> bool:
    torch.manual_seed(6)
    g = make_gaussians(tracks, ns=2, per_actor=2, dtype=torch.float64)
    idx = g.pop("actor_index")
    t = time(tracks, tv)
    leaves = [x.clone().requires_grad_() for x in (*g.values(), *corr)]

    def f(sm, sq, am, aq, ct, cw):
        return interpolate_gaussians(t, sm, sq, am, aq, idx, tracks, (ct, cw))[:2]

    return torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("tv", [0.6, 1.5, 2.5, 3.0, 2.25, -1.0, 7.0])
def test_gradcheck_float64(tv):
    """Warp path, float64: between keys (all slerp regimes), on keys, outside the tracks."""
    torch.manual_seed(7)
    tracks = make_tracks(torch.float64)
    assert _gradcheck_case(tracks, make_corrections(tracks), tv)


@pytest.mark.parametrize("tv", [0.6, 2.5])
def test_gradcheck_float64_at_zero_corrections(tv):
    """exp() at w = 0 uses its series; at 2.5 s track 0's near-identical keys use slerp's series."""
    tracks = make_tracks(torch.float64)
    K = tracks.num_keys
    zero = PoseCorrections(torch.zeros(K, 3, dtype=torch.float64), torch.zeros(K, 3, dtype=torch.float64))
    assert _gradcheck_case(tracks, zero, tv)


# ---------------------------------------------------------------------------------------------
# Validation and plumbing


def test_input_errors_name_the_argument():
    tracks = make_tracks(torch.float32)
    g = make_gaussians(tracks, ns=2, per_actor=2, dtype=torch.float32)
    t = time(tracks, 1.0)
    cases = [
        (dict(static_means=torch.zeros(2, 4)), "static_means"),
        (dict(static_quats=torch.zeros(3, 4)), "static_quats"),
        (dict(actor_means=g["actor_means"].double()), "actor_means"),  # refused after the first launch
        (dict(actor_means=torch.zeros(6)), "actor_means"),  # refused before it (its rows size the outputs)
        (dict(actor_quats=torch.zeros(6, 3)), "actor_quats"),
        (dict(actor_index=g["actor_index"].long()), "actor_index"),
        (dict(actor_index=g["actor_index"][:2]), "actor_index"),
        (dict(t=torch.zeros(2)), "t"),
        (dict(t=1.0), "t"),
        (dict(pose_corrections=(torch.zeros(2, 3), torch.zeros(2, 3))), "pose_corrections.translations"),
    ]
    for override, name in cases:
        kwargs = dict(t=t, **g, tracks=tracks)
        kwargs.update(override)
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            interpolate_gaussians(**kwargs)


def test_track_keys_validation():
    times = torch.tensor([0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="increase strictly"):
        TrackKeys.from_tracks([(times, torch.zeros(3, 3), torch.randn(3, 4))])
    with pytest.raises(ValueError, match="k >= 1"):
        TrackKeys.from_tracks([(torch.zeros(0), torch.zeros(0, 3), torch.zeros(0, 4))])
    with pytest.raises(ValueError, match="key_offsets must be int32"):
        TrackKeys(torch.tensor([0, 1]), torch.zeros(1), torch.zeros(1, 3), torch.zeros(1, 4))
    with pytest.raises(ValueError, match="key_quats"):
        TrackKeys(torch.tensor([0, 1], dtype=torch.int32), torch.zeros(1), torch.zeros(1, 3), torch.zeros(1, 3))
    # Times may repeat across tracks (only within a track must they increase).
    two = TrackKeys.from_tracks([(torch.tensor([0.0, 1.0]), torch.zeros(2, 3), torch.randn(2, 4))] * 2)
    assert two.num_actors == 2 and two.num_keys == 4


@pytest.mark.parametrize("scalar", [wp.float32, wp.float64])
def test_cuda_code_generation_aot(tmp_path, scalar):
    """The kernel module compiles to sm_90 CUDA (NVRTC, no GPU needed); the float64 overloads
    live in a module of their own, which float32 runs never compile."""
    import warp_kernels.interpolate as kernels

    wp.init()
    module = kernels.overloads(scalar)["interpolate_actors"].module
    assert module.name == ("warp_kernels.interpolate" if scalar == wp.float32 else "warp_kernels.interpolate_f64")
    paths = wp.compile_aot_module(module, arch=90, module_dir=tmp_path)
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)
    assert any("sm90" in p.name for p in paths)
