"""direct_apply: the same results and gradients as Function.apply, and functorch still goes through it."""

import pytest
import torch

from nurec_usd.ops.autograd_apply import direct_apply


class _Cube(torch.autograd.Function):
    """x^3 with a hand-written backward and a non-differentiable second output."""

    @staticmethod
    def forward(ctx, x, scale: float):
        ctx.save_for_backward(x)
        ctx.scale = scale
        flag = x > 0
        ctx.mark_non_differentiable(flag)
        return scale * x**3, flag

    @staticmethod
    def backward(ctx, grad, _grad_flag):
        (x,) = ctx.saved_tensors
        return 3 * ctx.scale * x**2 * grad, None


def test_direct_apply_matches_function_apply():
    x = torch.randn(7, dtype=torch.float64, requires_grad=True)
    fast = direct_apply(_Cube)
    y_fast, flag_fast = fast(x, 2.0)
    y_slow, flag_slow = _Cube.apply(x, 2.0)
    assert torch.equal(y_fast, y_slow) and torch.equal(flag_fast, flag_slow)
    assert y_fast.grad_fn is not None and not flag_fast.requires_grad
    (g_fast,) = torch.autograd.grad(y_fast.sum(), x)
    (g_slow,) = torch.autograd.grad(y_slow.sum(), x)
    torch.testing.assert_close(g_fast, g_slow, rtol=0, atol=0)
    torch.testing.assert_close(g_fast, 6 * x.detach() ** 2)
    assert torch.autograd.gradcheck(lambda v: fast(v, 0.5)[0], (x,))


def test_direct_apply_under_no_grad_builds_no_graph():
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        y, _ = direct_apply(_Cube)(x, 1.0)
    assert y.grad_fn is None and not y.requires_grad


def test_functorch_transforms_take_function_apply():
    # Function.apply refuses a Function without setup_context inside a transform; reaching that
    # refusal shows the call went through it rather than around it.
    fast = direct_apply(_Cube)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda v: fast(v, 1.0)[0].sum())(torch.randn(3))
