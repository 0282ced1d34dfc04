"""FusedAdam (one Warp kernel per tensor) against torch.optim.Adam, step by step."""

from __future__ import annotations

import pytest
import torch

from nurec_usd.ops.adam import FusedAdam


def _problem(seed: int):
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(257, 3, generator=g)
    a = torch.randn(257, 3, generator=g)
    b = torch.randn(1000, generator=g)
    return target, a, b


def _loss(target, a, b):
    return ((a - target) ** 2).sum() + (b.sin() * 3).pow(2).mean() + (a[:10].abs() * b[:30].view(10, 3)).sum()


def test_matches_torch_adam_over_many_steps():
    target, a0, b0 = _problem(0)
    ours = [a0.clone().requires_grad_(True), b0.clone().requires_grad_(True)]
    ref = [a0.clone().requires_grad_(True), b0.clone().requires_grad_(True)]
    groups = lambda ps: [{"params": [ps[0]], "lr": 0.05}, {"params": [ps[1]], "lr": 0.01}]  # noqa: E731
    opt = FusedAdam(groups(ours), betas=(0.9, 0.99), eps=1e-12)
    opt_ref = torch.optim.Adam(groups(ref), betas=(0.9, 0.99), eps=1e-12)
    for _ in range(50):
        for o, params in ((opt, ours), (opt_ref, ref)):
            o.zero_grad()
            _loss(target, *params).backward()
            o.step()
    for x, y in zip(ours, ref):
        # float32 rounding in a different order of operations, accumulated over 50 steps
        torch.testing.assert_close(x, y, atol=2e-5, rtol=1e-5)
    assert (ours[0] - a0).abs().max() > 0.5, "the parameters must actually move"
    torch.testing.assert_close(opt.state[ours[0]]["exp_avg_sq"], opt_ref.state[ref[0]]["exp_avg_sq"],
                               atol=1e-6, rtol=1e-4)


def test_each_parameter_keeps_its_recorded_launch(monkeypatch):
    """Parameters of different shapes each have their own recorded launch: after the first step
    a step only rewrites pointers, building no argument descriptor (host time per step)."""
    from nurec_usd.ops import warp_torch

    target, a0, b0 = _problem(1)
    params = [a0.clone().requires_grad_(True), b0.clone().requires_grad_(True)]
    opt = FusedAdam(params, lr=0.01)
    built = []
    real = warp_torch._tensor_descriptor
    monkeypatch.setattr(warp_torch, "_tensor_descriptor", lambda *a: built.append(a[-1]) or real(*a))
    for step in range(3):
        opt.zero_grad(set_to_none=True)  # a new gradient tensor every step, as in training
        _loss(target, *params).backward()
        built.clear()
        opt.step()
        if step > 0:
            assert built == [], step


def test_parameters_without_gradient_are_left_alone():
    p = torch.ones(4, requires_grad=True)
    q = torch.ones(4, requires_grad=True)
    opt = FusedAdam([p, q], lr=0.1)
    (p * 2).sum().backward()
    opt.step()
    assert torch.equal(q, torch.ones(4)) and q not in opt.state
    assert torch.all(p < 1)


def test_refuses_what_it_cannot_update():
    p = torch.ones(4, dtype=torch.float64, requires_grad=True)
    opt = FusedAdam([p])
    p.sum().backward()
    with pytest.raises(ValueError, match="float32"):
        opt.step()
    with pytest.raises(ValueError, match="invalid Adam"):
        FusedAdam([torch.ones(2, requires_grad=True)], lr=-1.0)


def test_cuda_code_generation(tmp_path):
    import warp as wp

    from nurec_usd.ops.warp_torch import init_warp
    from warp_kernels import adam

    init_warp()
    try:
        paths = wp.compile_aot_module(adam, arch=90, module_dir=tmp_path)
    except Exception as exc:  # pragma: no cover - Warp builds without NVRTC
        if "nvrtc" in str(exc).lower():
            pytest.skip(f"no NVRTC here: {exc}")
        raise
    assert paths and all(p.stat().st_size > 0 for p in paths)


def test_groups_take_the_defaults_and_zero_grad_works_both_ways():
    a = torch.ones(4, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    opt = FusedAdam([{"params": [a], "lr": 0.5}, {"params": [b]}], lr=0.1, betas=(0.8, 0.9), eps=1e-6)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.1]
    assert opt.param_groups[1]["betas"] == (0.8, 0.9) and opt.param_groups[1]["eps"] == 1e-6
    (a.sum() + b.sum()).backward()
    opt.zero_grad(set_to_none=False)
    assert a.grad is not None and float(a.grad.abs().sum()) == 0.0
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    with pytest.raises(ValueError, match="empty parameter list"):
        FusedAdam([])
    with pytest.raises(ValueError, match="invalid Adam settings"):
        FusedAdam([a], betas=(1.0, 0.9))


def test_does_not_import_dynamo():
    """A torch.optim.Optimizer imports torch._dynamo when constructed (seconds of a build's wall
    time); FusedAdam must not."""
    import subprocess
    import sys

    code = ("import sys, torch\nfrom nurec_usd.ops.adam import FusedAdam\n"
            "p = torch.zeros(3, requires_grad=True)\nopt = FusedAdam([p], lr=0.1)\n"
            "(p * 2).sum().backward()\nopt.step()\nopt.zero_grad()\nprint('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr
