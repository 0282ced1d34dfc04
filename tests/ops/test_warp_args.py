"""Kernel arguments: the launcher's descriptors equal the descriptors of Warp arrays (``to_wp``),
and its replayed launches (``launch``) compute what ``wp.launch`` computes, call after call."""

from __future__ import annotations

import pytest
import torch
import warp as wp

from nurec_usd.ops.warp_torch import _tensor_descriptor, init_warp, launch, to_wp, warp_device, warp_view


def _fields(desc) -> tuple:
    return (desc.data, desc.grad, desc.ndim, tuple(desc.shape[: desc.ndim]), tuple(desc.strides[: desc.ndim]))


@pytest.mark.parametrize("shape, dtype, wp_type, ndim", [
    ((7,), torch.float32, wp.float32, 1),
    ((5, 3), torch.float32, wp.vec3, 1),
    ((4, 6, 2), torch.float64, wp.vec2d, 2),
    ((3, 4), torch.int32, wp.int32, 2),
    ((2, 5, 4), torch.int32, wp.vec4i, 2),
    ((1, 3), torch.float32, wp.vec3, 1),
])
def test_descriptor_equals_warp_array_descriptor(shape, dtype, wp_type, ndim):
    init_warp()
    t = torch.arange(int(torch.tensor(shape).prod())).to(dtype).reshape(shape)
    folded = None if wp_type in (wp.float32, wp.int32) else wp_type
    assert _fields(_tensor_descriptor(t, wp_type, ndim, "t")) == _fields(to_wp(t, folded).__ctype__())


@wp.kernel
def _scale_by_first(s: wp.array(dtype=float), x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] * s[0]


def test_zero_dim_tensor_passes_as_one_element_array():
    """A 0-dim tensor (a query time, a scale) is read as s[0], with no reshape on the host."""
    init_warp()
    assert _fields(_tensor_descriptor(torch.tensor(3.0), wp.float32, 1, "s"))[2:] == (1, (1,), (4,))
    wdev = warp_device(torch.device("cpu"))
    x = torch.arange(4.0)
    launch(_scale_by_first, 4, [torch.tensor(3.0), x], device=wdev)
    launch(_scale_by_first, 4, [torch.tensor([0.5]), x], device=wdev)  # then a one-element 1-d tensor
    torch.testing.assert_close(x, torch.arange(4.0) * 1.5, atol=0, rtol=0)
    with pytest.raises(ValueError, match="'s' is a 1-d array of float32"):
        launch(_scale_by_first, 4, [torch.tensor(3.0, dtype=torch.float64), x], device=wdev)


def test_mismatched_tensors_are_refused():
    init_warp()
    with pytest.raises(ValueError, match="'x' is a 1-d array of vec3f"):
        _tensor_descriptor(torch.zeros(4, 2), wp.vec3, 1, "x")
    with pytest.raises(ValueError, match="'x' is a 1-d array of vec3f"):
        _tensor_descriptor(torch.zeros(4, 3, dtype=torch.float64), wp.vec3, 1, "x")


@wp.kernel
def _axpy(x: wp.array(dtype=wp.vec3), a: float, y: wp.array2d(dtype=float)):
    i = wp.tid()
    v = x[i]
    for k in range(3):
        y[i, k] = y[i, k] + a * v[k]


def test_launch_with_tensors_matches_launch_with_arrays():
    init_warp()
    x = torch.randn(50, 3)
    y1, y2 = torch.randn(50, 3), None
    y2 = y1.clone()
    wdev = warp_device(torch.device("cpu"))
    wp.launch(_axpy, dim=50, inputs=[to_wp(x, wp.vec3), 2.0, to_wp(y1)], device=wdev)
    # a temporary tensor needs to live only until the launch returns
    launch(_axpy, 50, [x.clone(), 2.0, y2], device=wdev)
    torch.testing.assert_close(y1, y2, atol=0, rtol=0)


@wp.kernel
def _blend(x: wp.array(dtype=wp.vec3), w: wp.array2d(dtype=float), k: int, a: float, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = a * x[i][k] + w[i, 1]


def _blend_reference(x, w, k, a):
    return a * x[:, k] + w[:, 1]


def test_replayed_launch_follows_new_tensors_shapes_and_scalars():
    """``launch`` records a kernel's launch once and rewrites it: each call must compute with
    its own tensors, shapes, launch size and scalars, as ``wp.launch`` would."""
    init_warp()
    wdev = warp_device(torch.device("cpu"))
    torch.manual_seed(0)
    for n, k, a in ((5, 0, 2.0), (5, 2, -1.0), (9, 1, 0.5), (9, 1, 3.0), (3, 2, 1.5)):
        x, w, y = torch.randn(n, 3), torch.randn(n, 2), torch.full((n,), float("nan"))
        if k == 1:  # parameters are tensors too
            x = torch.nn.Parameter(x)
        launch(_blend, n, [x, w, k, a], [y], device=wdev)
        torch.testing.assert_close(y, _blend_reference(x.detach(), w, k, a), atol=1e-6, rtol=1e-6)


def test_replayed_launch_refuses_tensors_the_kernel_cannot_view():
    init_warp()
    wdev = warp_device(torch.device("cpu"))
    x, w, y = torch.randn(4, 3), torch.randn(4, 2), torch.zeros(4)
    launch(_blend, 4, [x, w, 0, 1.0], [y], device=wdev)
    with pytest.raises(ValueError, match="'x' is a 1-d array of vec3f"):
        launch(_blend, 4, [torch.randn(4, 2), w, 0, 1.0], [y], device=wdev)
    with pytest.raises(ValueError, match="'w' is a 2-d array of float32"):
        launch(_blend, 4, [x, w.double(), 0, 1.0], [y], device=wdev)
    with pytest.raises(ValueError, match="'w' is a 2-d array"):
        launch(_blend, 4, [x, w.reshape(-1), 0, 1.0], [y], device=wdev)
    with pytest.raises(ValueError, match="'w'.*contiguous"):
        launch(_blend, 4, [x, torch.randn(4, 4)[:, ::2], 0, 1.0], [y], device=wdev)
    with pytest.raises(TypeError, match="'w' takes a torch tensor or None"):
        launch(_blend, 4, [x, to_wp(w), 0, 1.0], [y], device=wdev)
    with pytest.raises(ValueError, match="takes 5 arguments, got 4"):
        launch(_blend, 4, [x, w, 0], [y], device=wdev)
    launch(_blend, 4, [x, w, 0, 1.0], [y], device=wdev)  # still usable after the refusals
    torch.testing.assert_close(y, _blend_reference(x, w, 0, 1.0))


def test_replayed_launch_keeps_no_tensor_alive():
    """The recorded launch owns its descriptors: a tensor passed once is freed when its last
    reference goes (a cached launch holding the last render's buffers would pin them)."""
    import gc
    import weakref

    init_warp()
    wdev = warp_device(torch.device("cpu"))
    x, y = torch.randn(6, 3), torch.zeros(6)
    w = torch.randn(6, 2)
    ref = weakref.ref(w)
    launch(_blend, 6, [x, w, 1, 1.0], [y], device=wdev)
    launch(_blend, 6, [x, torch.randn(6, 2), 1, 1.0], [y], device=wdev)  # the same shape: only the pointer moves
    del w
    gc.collect()
    assert ref() is None


@wp.kernel
def _square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


def test_replayed_adjoint_and_tiled_launches_match_warp():
    init_warp()
    device = torch.device("cpu")
    x = torch.randn(8)
    wdev = warp_device(device)
    for scale in (1.0, -2.0):  # the second call replays the recorded adjoint launch
        g_y, g_x = torch.full((8,), scale), torch.zeros(8)
        launch(_square, 8, [x], [torch.empty(8)], adj_inputs=[g_x], adj_outputs=[g_y], adjoint=True, device=wdev)
        torch.testing.assert_close(g_x, 2 * x * scale)
    for blocks in (2, 3):
        y = torch.zeros(3 * 16)
        launch(_tile_copy, [blocks], [x.repeat(6)], [y], device=wdev, block_dim=16, tiled=True)
        torch.testing.assert_close(y[: blocks * 16], x.repeat(6)[: blocks * 16])
        assert not y[blocks * 16:].any()


@wp.kernel
def _tile_copy(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    b, lane = wp.tid()
    t = wp.tile_load(x, shape=16, offset=b * 16)
    wp.tile_store(y, t, offset=b * 16)


def test_warp_view_is_found_again_and_owns_nothing():
    import weakref

    init_warp()
    t = torch.arange(10, dtype=torch.int32)
    view = warp_view(t)
    assert warp_view(t) is view and view.ptr == t.data_ptr() and view.shape == (10,)
    assert warp_view(t[:5]) is not view  # another length, another view
    ref = weakref.ref(t)
    del t
    assert ref() is None


def test_native_launcher_takes_what_the_command_passes():
    """On CUDA a replayed launch calls Warp's native launcher itself (``_Command.queue``), in the
    order Warp's ``Launch.launch`` does; CI has no GPU, so this pins that call and its signature
    (warp-lang 1.19.x): a Warp release that changes either fails here, not on a GPU."""
    import ctypes
    import inspect
    import re

    import warp._src.context as warp_context

    from nurec_usd.ops import warp_torch

    init_warp()
    argtypes = warp_context.runtime.core.wp_cuda_launch_kernel.argtypes
    assert len(argtypes) == warp_torch._NATIVE_LAUNCH_ARGS
    assert argtypes[2] is ctypes.c_size_t and argtypes[8] == ctypes.POINTER(ctypes.c_void_p)
    assert all(t is ctypes.c_int for t in argtypes[3:8])
    source = re.sub(r"\s+", "", inspect.getsource(wp.Launch.launch))
    for hook in ("forward", "backward"):
        assert (f"wp_cuda_launch_kernel(self.device.context,self.hooks.{hook},self.bounds.size,self.max_blocks,"
                f"self.block_dim,int(self.grid_stride),self.cluster_dim,self.hooks.{hook}_smem_bytes,"
                "self.params_addr,stream.cuda_stream,apic_info_ptr,)") in source
    # on the CPU a command keeps Warp's own launch
    launch(_square, 4, [torch.randn(4)], [torch.empty(4)], device=warp_device(torch.device("cpu")))
    assert all(cmd.native is None for key, cmd in warp_torch._commands.items() if key[0] is _square)


def test_public_launches_render_what_the_recorded_ones_do(monkeypatch):
    """``RECORDED_LAUNCHES = False`` routes every launch through Warp's public ``wp.launch`` with
    ``wp.from_torch`` views (the measure of what recording saves): the camera renderer's
    forward and backward (tiled kernels, the projection's and the colours' backward, the sort's
    views) give the same values bit for bit, and the recorded launcher is not used."""
    import nurec_usd.ops.warp_torch as warp_torch
    from nurec_usd.ops.camera import render_cameras
    from tests.ops.test_camera_render import make_cameras, make_gaussians

    init_warp()
    cams = make_cameras(torch.float32)
    results = {}
    for recorded in (True, False):
        monkeypatch.setattr(warp_torch, "RECORDED_LAUNCHES", recorded)
        warp_torch._commands.clear()
        params = [p.clone().requires_grad_(True) for p in make_gaussians(300, torch.float32, sh_dim=4)]
        out = render_cameras(*params, cams, sh_degree=1)
        (out.rgb.square().sum() + out.depth.sum()).backward()
        results[recorded] = [out.rgb.detach(), out.depth.detach()] + [p.grad for p in params]
        assert bool(warp_torch._commands) == recorded
    for a, b in zip(results[True], results[False]):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
