"""Kernel arguments passed as descriptors (``wp_arg``) equal the descriptors of Warp arrays
(``to_wp``), and a launch with them computes what a launch with Warp arrays computes."""

from __future__ import annotations

import pytest
import torch
import warp as wp

from nurec_usd.render.warp_torch import init_warp, launch_stream, to_wp, wp_arg


def _fields(desc) -> tuple:
    return (desc.data, desc.grad, desc.ndim, tuple(desc.shape[: desc.ndim]), tuple(desc.strides[: desc.ndim]))


@pytest.mark.parametrize("shape, dtype, wp_type", [
    ((7,), torch.float32, None),
    ((5, 3), torch.float32, wp.vec3),
    ((4, 6, 2), torch.float64, wp.vec2d),
    ((3, 4), torch.int32, None),
    ((2, 5, 4), torch.int32, wp.vec4i),
    ((1, 3), torch.float32, wp.vec3),
])
def test_descriptor_equals_warp_array_descriptor(shape, dtype, wp_type):
    init_warp()
    t = torch.arange(int(torch.tensor(shape).prod())).to(dtype).reshape(shape)
    assert _fields(wp_arg(t, wp_type)) == _fields(to_wp(t, wp_type).__ctype__())


def test_mismatched_or_strided_tensors_are_refused():
    init_warp()
    with pytest.raises(ValueError, match="cannot be viewed"):
        wp_arg(torch.zeros(4, 2), wp.vec3)
    with pytest.raises(ValueError, match="cannot be viewed"):
        wp_arg(torch.zeros(4, 3, dtype=torch.float64), wp.vec3)
    with pytest.raises(ValueError, match="contiguous"):
        wp_arg(torch.zeros(4, 6)[:, ::2])


@wp.kernel
def _axpy(x: wp.array(dtype=wp.vec3), a: float, y: wp.array2d(dtype=float)):
    i = wp.tid()
    v = x[i]
    for k in range(3):
        y[i, k] = y[i, k] + a * v[k]


def test_launch_with_descriptors_matches_launch_with_arrays():
    init_warp()
    x = torch.randn(50, 3)
    y1, y2 = torch.randn(50, 3), None
    y2 = y1.clone()
    device = torch.device("cpu")
    with launch_stream(device) as wdev:
        wp.launch(_axpy, dim=50, inputs=[to_wp(x, wp.vec3), 2.0, to_wp(y1)], device=wdev)
        # a temporary tensor stays alive through its descriptor until the launch is done
        wp.launch(_axpy, dim=50, inputs=[wp_arg(x.clone(), wp.vec3), 2.0, wp_arg(y2)], device=wdev)
    torch.testing.assert_close(y1, y2, atol=0, rtol=0)
