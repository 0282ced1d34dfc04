"""sky_lookup (Warp kernels) against its torch twin sky_colors_reference, on the CPU.

Tolerances: float32 colours within 1e-5 (atan2 and asin round differently in Warp and torch)
and map gradients within 1e-5 of the largest entry; float64 within 1e-12; float64 gradcheck on
a tiny map. The warp-level sums of the backward run
on CUDA only (a CPU "warp" is one thread); ``benchmarks/sky.py`` checks them on a GPU, and the
CUDA code generation of both modules is checked here.
"""

from __future__ import annotations

import math

import pytest
import torch

from nurec_usd.ops.reference import sky_colors_reference
from nurec_usd.ops.sky import sky_lookup
from nurec_usd.render.scene_renderer import sky_colors

wp = pytest.importorskip("warp")


def directions(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random unit directions, plus the poles, both sides of the +-180 degree seam and the axes."""
    g = torch.Generator().manual_seed(seed)
    d = torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=dtype), dim=-1)
    special = torch.tensor([[0, 0, 1.0], [0, 0, -1.0], [-1, 1e-7, 0], [-1, -1e-7, 0], [1, 0, 0], [0, 1, 0],
                            [0.6, 0.0, 0.8], [0.0, -0.6, -0.8]], dtype=dtype)
    return torch.cat((special, d))


@pytest.mark.parametrize("dtype,value_tol,grad_tol", [(torch.float32, 1e-5, 1e-5), (torch.float64, 1e-12, 1e-12)])
@pytest.mark.parametrize("rows,cols", [(16, 64), (5, 8), (1, 1), (3, 2)])
def test_matches_twin(dtype, value_tol, grad_tol, rows, cols):
    torch.manual_seed(rows * 100 + cols)
    sky = (2 * torch.randn(3, rows, cols, dtype=dtype)).requires_grad_()
    d = directions(1992, dtype, seed=cols).view(40, 50, 3)  # any leading shape (8 special + 1992)
    ours, ref = sky_lookup(sky, d), sky_colors_reference(sky, d)
    assert ours.shape == (40, 50, 3)
    assert (ours - ref).abs().max().item() < value_tol
    upstream = torch.randn(ours.shape, dtype=dtype)
    (g_ours,) = torch.autograd.grad(ours, sky, upstream)
    (g_ref,) = torch.autograd.grad(ref, sky, upstream)
    assert ((g_ours - g_ref).abs().max() / g_ref.abs().max()).item() < grad_tol


def test_gradcheck_float64():
    torch.manual_seed(1)
    sky = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    d = directions(60, torch.float64, seed=2)
    assert torch.autograd.gradcheck(lambda s: sky_lookup(s, d), (sky,), eps=1e-6, atol=1e-8)


def test_scene_sky_gives_directions_their_gradient():
    """scene.render.sky_colors (the kernels on a GPU, the twin on the CPU or when directions need
    a gradient, which the kernels do not give): directions get one, and values agree."""
    sky = torch.randn(3, 6, 12, requires_grad=True)
    d = directions(100, torch.float32, seed=3)[8:].clone().requires_grad_()  # not the poles (asin' infinite)
    out = sky_colors(sky, d)
    (g_d,) = torch.autograd.grad(out.sum(), d)
    assert g_d.abs().sum() > 0
    with torch.no_grad():
        assert torch.allclose(sky_colors(sky, d), sky_lookup(sky, d), atol=1e-6)


def test_a_uniform_map_is_its_colour_everywhere():
    sky = torch.full((3, 16, 64), 0.0)
    sky[1] = math.log(3.0)  # sigmoid 0.75
    out = sky_lookup(sky, directions(500, torch.float32, seed=4))
    assert torch.allclose(out[:, 0], torch.full((508,), 0.5)) and torch.allclose(out[:, 1], torch.full((508,), 0.75))


def test_input_errors_say_what_is_wrong():
    d = directions(4, torch.float32, seed=0)
    with pytest.raises(ValueError, match=r"\[3, H, W\]"):
        sky_lookup(torch.zeros(4, 2, 2), d)
    with pytest.raises(ValueError, match=r"\[\.\.\., 3\]"):
        sky_lookup(torch.zeros(3, 2, 2), torch.zeros(5, 2))
    with pytest.raises(ValueError, match="float32 or float64"):
        sky_lookup(torch.zeros(3, 2, 2, dtype=torch.float16), d)


@pytest.mark.parametrize("scalar", ["float32", "float64"])
def test_cuda_code_generation_aot(tmp_path, scalar):
    """The kernel module, its warp-level sums included, compiles to sm_90 CUDA (NVRTC, no GPU)."""
    import warp_kernels.sky as kernels

    wp.init()
    module = kernels.overloads(getattr(wp, scalar))["sky_lookup_backward"].module
    assert module.name == ("warp_kernels.sky" if scalar == "float32" else "warp_kernels.sky_f64")
    paths = wp.compile_aot_module(module, arch=90, module_dir=tmp_path)
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)
    assert any("sm90" in p.name for p in paths)
