"""MCMC-style relocation and growth: opacity sharing, row bookkeeping, Adam state, actor order."""

from __future__ import annotations

import math

import pytest
import torch

from nurec_usd.ops.adam import FusedAdam
from nurec_usd.scene.gaussians import GaussianParams
from nurec_usd.ops.reference import perturb_transparent_reference
from nurec_usd.train import densify as densify_module
from nurec_usd.train.densify import (perturb_transparent, relocate_and_grow,
                                    split_opacity_and_scale)


def test_opacity_shared_by_copies_composites_to_the_original():
    o = torch.tensor([0.05, 0.3, 0.7, 0.95, 0.5])
    n = torch.tensor([1, 2, 3, 5, 40])
    o_new, factor = split_opacity_and_scale(o, n)
    # n coincident copies of opacity o_new let through (1 - o_new)^n of the light: as the original did
    torch.testing.assert_close(1 - (1 - o_new) ** n.float(), o, rtol=1e-5, atol=1e-6)
    assert factor[0] == 1.0 and o_new[0] == o[0]  # one copy: unchanged
    assert bool(((factor > 0) & (factor <= 1)).all())
    assert bool((factor[1:4] < 1).all())  # more copies: each smaller


def test_scale_factor_matches_the_brute_force_series():
    # n = 2: denominator = o' + (o' - o'^2 / sqrt 2); factor = o / denominator
    o = torch.tensor([0.6], dtype=torch.float64)
    o_new, factor = split_opacity_and_scale(o, torch.tensor([2]))
    expected = 0.6 / (2 * o_new - o_new ** 2 / 2 ** 0.5)
    torch.testing.assert_close(factor, expected)


def test_opacity_split_in_chunks_equals_one_pass(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    o = torch.rand(1000, generator=gen).clamp(0.01, 0.99)
    n = torch.randint(1, 60, (1000,), generator=gen)
    whole = split_opacity_and_scale(o, n)
    monkeypatch.setattr(densify_module, "_SPLIT_CHUNK", 77)
    chunked = split_opacity_and_scale(o, n)
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])


def _params(opacities: list[float]) -> GaussianParams:
    n = len(opacities)
    g = GaussianParams.create(torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 3),
                              torch.full((n, 3), 0.1), torch.rand(n, 3, generator=torch.Generator().manual_seed(0)))
    g.opacity_logits = torch.logit(torch.tensor(opacities))
    return g.map(lambda t: torch.nn.Parameter(t.contiguous()))


def _optimizer(g: GaussianParams) -> FusedAdam:
    # lr 0: the step fills the moments but leaves the values, so rows stay recognisable
    opt = FusedAdam([{"params": [p], "lr": 0.0} for p in g.tensors().values()])
    for p in g.tensors().values():
        p.grad = torch.ones_like(p)
    opt.step()
    return opt


def _counts(stats: dict) -> dict[str, int]:
    """The refinement's counts as ints (``dead`` and ``relocated`` are device tensors)."""
    return {k: int(v) for k, v in stats.items()}


def test_relocation_moves_dead_onto_live_and_resets_their_moments():
    g = _params([0.9, 0.001, 0.5, 0.002, 0.8])
    opt = _optimizer(g)
    gen = torch.Generator().manual_seed(1)
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=0, generator=gen)
    assert _counts(stats) == {"relocated": 2, "added": 0, "dead": 2}
    assert len(new) == 5
    op = torch.sigmoid(new.opacity_logits.detach())
    assert bool((op > 0.005).all())
    # each relocated row is a copy of a live source: same position as one of rows 0, 2, 4
    for row in (1, 3):
        assert float(new.means.detach()[row, 0]) in (0.0, 2.0, 4.0)
    # the optimizer now holds the new tensors, with moments zeroed on every touched row
    ids = {id(p) for group in opt.param_groups for p in group["params"]}
    assert all(id(p) in ids for p in new.tensors().values())
    m = opt.state[new.means]["exp_avg"]
    assert bool((m[1] == 0).all()) and bool((m[3] == 0).all())
    untouched = [r for r in (0, 2, 4) if float(new.opacity_logits.detach()[r]) == float(g.opacity_logits.detach()[r])]
    for r in untouched:
        assert bool((m[r] != 0).all())


def test_growth_adds_rows_up_to_the_request_and_keeps_actor_order():
    g = _params([0.9, 0.001, 0.5, 0.7])
    index = torch.tensor([1, 0, 1, 0], dtype=torch.int32)
    opt = _optimizer(g)
    new, new_index, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=3,
                                              generator=torch.Generator().manual_seed(2), actor_index=index)
    assert len(new) == 7 and _counts(stats) == {"relocated": 1, "added": 3, "dead": 1}
    assert new_index.tolist() == sorted(new_index.tolist())
    assert opt.state[new.means]["exp_avg"].shape == (7, 3)
    # each Gaussian keeps its actor: a row's x position identifies its original row
    original_actor = {0.0: 1, 2.0: 1, 3.0: 0}
    for row in range(7):
        assert original_actor[float(new.means.detach()[row, 0])] == int(new_index[row])


def test_relocation_is_bounded_to_a_share_of_the_set_least_opaque_first():
    g = _params([0.9, 0.004, 0.001, 0.5, 0.003, 0.8, 0.002, 0.7, 0.6, 0.95])
    g.means.data[4, 0] = float("nan")  # non-finite: relocated before any other
    opt = _optimizer(g)
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=0, max_fraction=0.2,
                                      generator=torch.Generator().manual_seed(0))
    assert _counts(stats) == {"relocated": 2, "added": 0, "dead": 4}
    x = new.means.detach()[:, 0]
    assert bool(torch.isfinite(new.means.detach()).all())
    assert float(x[2]) in (0.0, 3.0, 5.0, 7.0, 8.0, 9.0)  # the least opaque finite one moved
    assert float(x[1]) == 1.0 and float(x[6]) == 6.0  # the others wait for a later refinement
    assert float(torch.sigmoid(new.opacity_logits.detach()[1])) == pytest.approx(0.004)


def test_source_weights_pick_where_copies_go():
    g = _params([0.9, 0.001, 0.5, 0.002, 0.8, 0.001])
    opt = _optimizer(g)
    # only row 2 of the live ones has a gradient; the dead row 1's is large (dead rows are never sources)
    weights = torch.tensor([0.0, 1e4, 1.0, 0.0, 0.0, 0.0])
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=2, source_weights=weights,
                                      generator=torch.Generator().manual_seed(0))
    assert _counts(stats) == {"relocated": 3, "added": 2, "dead": 3}
    x = new.means.detach()[:, 0].tolist()
    assert [x[r] for r in (1, 3, 5, 6, 7)] == [2.0] * 5  # every copy of row 2, none of a dead row
    assert x[0] == 0.0 and x[4] == 4.0  # the sources without gradient are left as they were


def test_a_small_set_still_relocates_under_the_bound():
    g = _params([0.9, 0.001, 0.5])  # 5% of 3 Gaussians: rounded up to one
    opt = _optimizer(g)
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=0, max_fraction=0.05,
                                      generator=torch.Generator().manual_seed(0))
    assert _counts(stats) == {"relocated": 1, "added": 0, "dead": 1}
    assert float(new.means.detach()[1, 0]) in (0.0, 2.0)


def test_source_weights_all_zero_fall_back_to_opacity():
    """A set none of whose live Gaussians drew a gradient since the last refinement (actors out of
    view) still relocates its dead, by opacity."""
    g = _params([0.9, 0.001, 0.5, 0.002])
    opt = _optimizer(g)
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=1, source_weights=torch.zeros(4),
                                      generator=torch.Generator().manual_seed(0))
    assert _counts(stats) == {"relocated": 2, "added": 1, "dead": 2}
    assert all(x in (0.0, 2.0) for x in new.means.detach()[[1, 3, 4], 0].tolist())


def test_a_set_without_live_gaussians_relocates_none_and_still_grows():
    """Nothing alive to copy: no row moves (the work is sized without reading the dead count
    back), and the grown rows copy dead ones, for a later refinement to relocate."""
    g = _params([0.001, 0.002, 0.003])
    opt = _optimizer(g)
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=2, generator=torch.Generator().manual_seed(0))
    assert _counts(stats) == {"relocated": 0, "added": 2, "dead": 3}
    x = new.means.detach()[:, 0].tolist()
    assert x[:3] == [0.0, 1.0, 2.0] and all(v in (0.0, 1.0, 2.0) for v in x[3:])
    assert bool((torch.sigmoid(new.opacity_logits.detach()) <= 0.005).all())


def test_jitter_leaves_live_candidates_where_they_were():
    """The bound's candidates include live Gaussians when few are dead; those are not moved, even
    when their own Gaussian is too wide to draw from (an infinite offset), and their sources' draws
    are not copies."""
    g = _params([0.9, 0.001, 0.5])
    g.log_scales.data[2] = 100.0  # exp overflows in float32
    opt = _optimizer(g)
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=1, max_fraction=1.0, jitter=1.0,
                                      source_weights=torch.tensor([1.0, 0.0, 0.0]),
                                      generator=torch.Generator().manual_seed(0))
    assert _counts(stats) == {"relocated": 1, "added": 1, "dead": 1}
    means = new.means.detach()
    assert means[2].tolist() == [2.0, 2.0, 2.0] and means[0].tolist() == [0.0, 0.0, 0.0]
    # row 0 is shared by exactly the copies made (itself, row 1, the grown row 3), not by the
    # draws of the live candidates that stayed, and the grown row copies its split values
    opacity = torch.sigmoid(new.opacity_logits.detach())
    assert float(opacity[0]) == pytest.approx(1 - 0.1 ** (1 / 3), rel=1e-5)
    assert torch.equal(new.opacity_logits.detach()[3], new.opacity_logits.detach()[0])
    assert torch.equal(new.log_scales.detach()[3], new.log_scales.detach()[0])
    m = opt.state[new.opacity_logits]["exp_avg"]
    assert float(m[0]) == 0 and float(m[1]) == 0 and float(m[3]) == 0  # the source and its copies start afresh
    assert float(m[2]) != 0  # the live candidate that stayed keeps its moments


def test_jitter_draws_copies_from_their_source_distribution():
    n = 4001
    g = _params([0.9] + [0.001] * (n - 1))
    g.log_scales.data[0] = torch.tensor([0.3, 0.1, 0.02]).log()
    angle = 0.6  # a rotation about z by 0.6 rad
    g.quats.data[0] = torch.tensor([math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)])
    opt = _optimizer(g)
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=n // 2, jitter=1.0,
                                      generator=torch.Generator().manual_seed(0))
    assert _counts(stats) == {"relocated": n - 1, "added": n // 2, "dead": n - 1}
    means = new.means.detach()
    assert float(means[0, 0]) == 0.0  # the source stays where it was
    grown = means[n:] - means[0]
    assert bool((grown.norm(dim=-1) > 0).all())  # the grown copies are spread too
    offsets = means[1:n] - means[0]
    # the copies' spread is the source's (shrunk) Gaussian: its axes rotated by the quaternion
    scale = new.log_scales.detach()[0].exp()
    c, s_ = math.cos(angle), math.sin(angle)
    R = torch.tensor([[c, -s_, 0.0], [s_, c, 0.0], [0.0, 0.0, 1.0]])
    local = offsets @ R  # rows: R^T offset
    torch.testing.assert_close(local.std(0), scale, rtol=0.06, atol=0.0)
    assert bool((local.mean(0).abs() < 4 * scale / math.sqrt(n - 1)).all())  # centred: within 4 standard errors
    corr = torch.corrcoef(local.T)
    assert float((corr - torch.eye(3)).abs().max()) < 0.06  # independent along the rotated axes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: what waits for the device is CUDA's")
def test_a_refinement_never_waits_for_the_device():
    """Relocation, growth and the actor sort queue their work behind the training steps: none of
    them reads a value back (torch's sync debug mode turns a synchronising call into an error)."""
    n = 20_000
    gen = torch.Generator(device="cuda").manual_seed(0)
    g = GaussianParams.create(torch.randn(n, 3), torch.rand(n, 3), torch.rand(n, 3))
    g.opacity_logits = torch.logit(torch.rand(n).clamp(1e-4, 0.9))
    g = g.map(lambda t: torch.nn.Parameter(t.cuda().contiguous()))
    opt = FusedAdam([{"params": [p], "lr": 0.0} for p in g.tensors().values()])
    index = torch.randint(0, 5, (n,), dtype=torch.int32, device="cuda")
    weights = torch.rand(n, device="cuda")
    for p in g.tensors().values():  # Adam's moments, to be carried along the rows
        p.grad = torch.ones_like(p)
    opt.step()
    densify_module._COEFFS_ON.clear()  # the opacity table's first copy to the GPU included
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        new, new_index, stats = relocate_and_grow(g, opt, dead_opacity=0.02, add=1000, generator=gen,
                                                  actor_index=index, max_fraction=0.05, source_weights=weights,
                                                  jitter=1.0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(new) == n + 1000 and int(stats["relocated"]) == min(int(stats["dead"]), 1000)
    assert new_index.tolist() == sorted(new_index.tolist())


def test_noise_moves_only_transparent_gaussians():
    g = _params([0.9, 0.0001])
    before = g.means.detach().clone()
    perturb_transparent(g, scale=1.0, dead_opacity=0.005, generator=torch.Generator().manual_seed(0))
    moved = (g.means.detach() - before).norm(dim=-1)
    assert float(moved[0]) < 1e-6 < float(moved[1])
    assert float(moved[1]) < 1.0  # about its own scale (0.1)


def test_noise_kernel_matches_twin():
    """The Warp kernel against the torch twin, the same noise (same generator seed): means within
    1e-6 m plus 2 ulp (the sum's rounding at 20-60 m) on Gaussians of every opacity, rotation and
    size, unnormalised quaternions included."""
    g_gen = torch.Generator().manual_seed(3)
    n = 5000
    # around dead_opacity (0.005): every gate value; and opaque ones, which stay put
    opacities = torch.cat((torch.rand(n // 2, generator=g_gen) * 0.02, 0.3 + 0.7 * torch.rand(n - n // 2, generator=g_gen)))
    g = GaussianParams.create(torch.randn(n, 3, generator=g_gen) * 20, torch.rand(n, 3, generator=g_gen) * 0.5,
                              torch.rand(n, 3, generator=g_gen))
    g.quats = torch.randn(n, 4, generator=g_gen) * 3
    g.log_scales = torch.randn(n, 3, generator=g_gen) - 2
    g.opacity_logits = torch.logit(opacities.clamp_min(1e-6))
    ours = g.map(lambda t: torch.nn.Parameter(t.clone().contiguous()))
    twin = g.map(lambda t: torch.nn.Parameter(t.clone().contiguous()))
    perturb_transparent(ours, scale=2.0, dead_opacity=0.005, generator=torch.Generator().manual_seed(11))
    perturb_transparent_reference(twin.means, twin.quats, twin.log_scales, twin.opacity_logits, scale=2.0, dead_opacity=0.005, generator=torch.Generator().manual_seed(11))
    moved = (twin.means.detach() - g.means).norm(dim=-1)
    assert int((moved > 1e-3).sum()) > n // 4 and int((moved < 1e-7).sum()) > n // 4  # both regimes present
    torch.testing.assert_close(ours.means.detach(), twin.means.detach(), atol=1e-6, rtol=2.5e-7)
    for name in ("quats", "log_scales", "opacity_logits"):  # read only
        assert torch.equal(getattr(ours, name).detach(), getattr(g, name)), name


@pytest.mark.parametrize("n", [0])
def test_empty_sets_are_left_alone(n):
    g = GaussianParams.empty().map(lambda t: torch.nn.Parameter(t))
    opt = FusedAdam([{"params": [p]} for p in g.tensors().values()])
    new, _, stats = relocate_and_grow(g, opt, dead_opacity=0.005, add=5)
    assert len(new) == n and stats["added"] == 0


def test_noise_kernel_cuda_code_generation(tmp_path):
    """The noise kernel's module compiles to sm_90 CUDA (NVRTC, no GPU needed)."""
    import warp as wp

    from nurec_usd.ops.warp_torch import init_warp
    from warp_kernels import perturb

    init_warp()
    paths = wp.compile_aot_module(perturb, arch=90, module_dir=tmp_path)
    assert paths and all(p.stat().st_size > 0 for p in paths) and any("sm90" in p.name for p in paths)
