"""Passing torch tensors to Warp kernels: zero-copy views and torch's stream."""

from __future__ import annotations

import ctypes
import threading

import torch
import warp as wp
import warp._src.context as _warp_context

# Warp's kernel-argument descriptor is not exported; warp-lang is pinned to 1.19.x, and
# tests/ops/test_warp_args.py checks the launcher's against the descriptor of a wp.array.
from warp._src.types import array_t as _array_t

from nurec_usd.ops.warp_init import init_warp  # noqa: F401 (re-exported: callers import it from here)


def to_wp(t: torch.Tensor, dtype=None) -> wp.array:
    """A zero-copy Warp view of a contiguous tensor; ``dtype`` folds the last dim into a vector type."""
    init_warp()
    if not t.is_contiguous():
        raise ValueError(f"tensor of shape {tuple(t.shape)} must be contiguous to pass to a Warp kernel")
    if dtype is None:
        return wp.from_torch(t, requires_grad=False)
    return wp.from_torch(t, dtype=dtype, requires_grad=False)


def aligned16(x: torch.Tensor) -> torch.Tensor:
    """``x`` (contiguous), copied when it does not start on a 16-byte boundary, for kernels that move
    its rows 16 bytes at a time (``warp_kernels.wide_io``). torch's allocators align every new
    tensor, so only a view into the middle of one is ever copied (autograd passes through the copy)."""
    return x if x.data_ptr() % 16 == 0 else x.clone()


def _tensor_descriptor(t: torch.Tensor, declared, ndim: int, label: str) -> _array_t:
    """The kernel-argument descriptor of contiguous tensor ``t`` as an ``ndim``-d array of
    ``declared`` (a scalar or vector type: a vector folds the tensor's last dim).

    Scalar type and dimensions must agree: the error names the argument and both.
    """
    scalar = getattr(declared, "_wp_scalar_type_", declared)
    lanes = int(getattr(declared, "_length_", 1))
    shape = tuple(t.shape) or (1,)  # a 0-dim tensor passes as a one-element array
    view = shape[:-1] if lanes > 1 and shape and shape[-1] == lanes else shape
    if wp.dtype_from_torch(t.dtype) is not scalar or (lanes > 1 and view == shape) or len(view) != ndim:
        raise ValueError(f"argument {label!r} is a {ndim}-d array of {wp.types.type_repr(declared)}: "
                         f"a {t.dtype} tensor of shape {shape} cannot be viewed as one")
    strides = [t.element_size() * lanes] * len(view)
    for k in range(len(view) - 2, -1, -1):
        strides[k] = strides[k + 1] * view[k + 1]
    return _array_t(data=t.data_ptr(), grad=0, ndim=len(view), shape=view, strides=strides)


_DESCRIPTOR_BYTES = ctypes.sizeof(_array_t)
_NULL_ARRAY = _array_t()


# Warp's native launcher, called with the recorded launch's own values (``_Command.queue``).
# warp-lang is pinned to 1.19.x; tests/ops/test_warp_args.py checks its signature.
_NATIVE_LAUNCH_ARGS = 11


class _Command:
    """A recorded launch of one kernel whose parameter slots are rewritten in place per launch.

    Each array parameter owns a descriptor slot (no tensor outlives its launch through
    here); a tensor of the slot's last shape and dtype only rewrites the pointer.
    Scalars are set through their ctypes value.
    """

    __slots__ = ("launch", "dim", "kinds", "slots", "keys", "args", "native")

    def __init__(self, launch: wp.Launch, dim: tuple, kernel):
        self.launch, self.dim = launch, dim
        launch.fwd_args = launch.adj_args = None  # kept by Warp for its own captures only; they hold tensors
        self.native = None
        launcher = _warp_context.runtime.core.wp_cuda_launch_kernel
        if launch.device.is_cuda and len(launcher.argtypes) == _NATIVE_LAUNCH_ARGS:
            # What Warp's Launch.launch passes its native launcher, but the launch size
            # (set_dim changes it) and the stream (the device's current one).
            hooks = launch.hooks
            self.native = (launch.device.context, hooks.backward if launch.adjoint else hooks.forward,
                           launch.max_blocks, launch.block_dim, int(launch.grid_stride), launch.cluster_dim,
                           hooks.backward_smem_bytes if launch.adjoint else hooks.forward_smem_bytes,
                           launch.params_addr)
        self.args = list(kernel.adj.args) * (2 if launch.adjoint else 1)
        self.kinds, self.slots, self.keys = [], [], []
        for j in range(1, len(launch.params)):
            param = launch.params[j]
            slot, kind = None, "other"  # composite values (vectors, structs): packed by Warp per launch
            if isinstance(param, _array_t):
                slot, kind = _array_t(), "array"
                launch.params[j] = slot
                if launch.params_addr is not None:
                    launch.params_addr[j] = ctypes.c_void_p(ctypes.addressof(slot))
            elif isinstance(param, ctypes._SimpleCData):
                kind = "scalar"
            self.kinds.append(kind)
            self.slots.append(slot)
            self.keys.append(None)

    def set_array(self, j: int, a: torch.Tensor | None) -> None:
        """Point array slot j at a tensor (a new descriptor when its shape or dtype changed) or at nothing."""
        slot = self.slots[j]
        if a is None:
            ctypes.memmove(ctypes.addressof(slot), ctypes.addressof(_NULL_ARRAY), _DESCRIPTOR_BYTES)
            self.keys[j] = None
            return
        arg = self.args[j]
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"argument {arg.label!r} takes a torch tensor or None, got {type(a).__name__}")
        if not a.is_contiguous():
            raise ValueError(f"argument {arg.label!r}: tensor of shape {tuple(a.shape)} must be contiguous to pass "
                             "to a Warp kernel")
        key = (a.shape, a.dtype)
        if key != self.keys[j]:
            descriptor = _tensor_descriptor(a, arg.type.dtype, arg.type.ndim, arg.label)  # held past addressof
            ctypes.memmove(ctypes.addressof(slot), ctypes.addressof(descriptor), _DESCRIPTOR_BYTES)
            self.keys[j] = key
        slot.data = a.data_ptr()

    def queue(self) -> None:
        """Queue the launch on the device's current stream.

        On CUDA this calls Warp's native launcher with the values recorded here, without
        ``Launch.launch``'s per-call Python (its capture checks, its attribute reads): a render
        makes some 20 launches, and small renders are bound by host time. Warp's own path runs
        whenever one of its captures is active (it records launches there), and on the CPU.
        """
        recorded = self.launch
        native = self.native
        runtime = _warp_context.runtime
        if native is None or runtime.captures or runtime._apic_capture is not None:
            recorded.launch()
            return
        context, hook, max_blocks, block_dim, grid_stride, cluster_dim, smem, params_addr = native
        if runtime.core.wp_cuda_launch_kernel(context, hook, recorded.bounds.size, max_blocks, block_dim, grid_stride,
                                              cluster_dim, smem, params_addr, recorded.device.stream.cuda_stream,
                                              None):
            _warp_context._raise_cuda_launch_error(recorded.kernel, recorded.device, recorded.hooks,
                                                   recorded.adjoint)


_commands: dict[tuple, _Command] = {}


def _scalar_value(a: object) -> object:
    """A scalar parameter's value from None (0), a ctypes or Warp scalar (its ``value``) or a number."""
    return 0 if a is None else getattr(a, "value", a)


# False: every launch goes through Warp's public ``wp.launch`` with ``wp.from_torch`` views
# (``launch_public``), the measure of what the recorded launches save (benchmarks/RESULTS.md,
# "launches").
RECORDED_LAUNCHES = True


def _public_arg(a: object, arg) -> object:
    """A kernel argument as ``wp.launch`` takes it: a tensor as a zero-copy Warp view of the
    declared dtype (a 0-dim tensor as a one-element array), anything else as it is."""
    if not isinstance(a, torch.Tensor):
        return a
    return wp.from_torch(a.reshape(1) if a.dim() == 0 else a, dtype=arg.type.dtype, requires_grad=False)


def launch_public(kernel, dim, inputs: list, outputs: list = (), *, device: wp.context.Device,
                  block_dim: int | None = None, tiled: bool = False, adjoint: bool = False, adj_inputs: list = (),
                  adj_outputs: list = ()) -> None:
    """``launch`` through Warp's public API alone: ``wp.launch`` (or ``wp.launch_tiled``), every
    tensor wrapped by ``wp.from_torch`` on every call."""
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (int(dim),)
    if 0 in dims:
        return
    declared = kernel.adj.args
    fwd = [_public_arg(a, arg) for a, arg in zip([*inputs, *outputs], declared)]
    adj = [_public_arg(a, arg) for a, arg in zip([*adj_inputs, *adj_outputs], declared)]
    k, n_in = len(inputs), len(adj_inputs)
    make = wp.launch_tiled if tiled else wp.launch
    make(kernel, dim=list(dims), inputs=fwd[:k], outputs=fwd[k:], adj_inputs=adj[:n_in], adj_outputs=adj[n_in:],
         adjoint=adjoint, device=device, block_dim=block_dim)


def launch(kernel, dim, inputs: list, outputs: list = (), *, device: wp.context.Device, block_dim: int | None = None,
           tiled: bool = False, adjoint: bool = False, adj_inputs: list = (), adj_outputs: list = (),
           slot: object = None) -> None:
    """``wp.launch`` (``wp.launch_tiled`` with ``tiled``) for hot paths: the launch is recorded once
    per (kernel, device, block size, adjoint, thread, ``slot``) and replayed with its parameters
    rewritten. A caller that launches one kernel on tensors of several shapes in turn (an
    optimizer over its parameters) gives each its own ``slot``: a recorded launch whose shapes
    stay the same only rewrites pointers, where a change of shape rebuilds its descriptors.

    ``wp.launch`` checks and packs every argument on every call; a render makes some 20
    launches, and small renders are bound by that host time. Arrays are passed as torch
    tensors (or None; a 0-dim tensor is a one-element array), viewed as the kernel declares
    them (a vector dtype folds the last dim; shapes and dtypes are checked, and the error names
    the argument); scalars as Python numbers. Work goes to the device's current stream
    (``warp_device``), and a tensor passed here needs to live only until this returns (torch's
    allocator reuses memory only for work queued later on the same stream).
    """
    if not RECORDED_LAUNCHES:
        launch_public(kernel, dim, inputs, outputs, device=device, block_dim=block_dim, tiled=tiled, adjoint=adjoint,
                      adj_inputs=adj_inputs, adj_outputs=adj_outputs)
        return
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (int(dim),)
    if 0 in dims:
        return
    key = (kernel, device.ordinal, block_dim, adjoint, threading.get_ident(), slot)
    args = [*inputs, *outputs, *adj_inputs, *adj_outputs]
    cmd = _commands.get(key)
    if cmd is None:
        def null_arrays(values):  # the slots are filled below, as on every launch
            return [None if isinstance(v, torch.Tensor) else v for v in values]
        make = wp.launch_tiled if tiled else wp.launch
        recorded = make(kernel, dim=list(dims), inputs=null_arrays(inputs), outputs=null_arrays(outputs),
                        adj_inputs=null_arrays(adj_inputs), adj_outputs=null_arrays(adj_outputs), adjoint=adjoint,
                        device=device, block_dim=block_dim, record_cmd=True)
        cmd = _commands[key] = _Command(recorded, dims, kernel)
    if len(args) != len(cmd.kinds):
        raise ValueError(f"kernel {kernel.key!r} takes {len(cmd.kinds)} arguments, got {len(args)}")
    recorded = cmd.launch
    if dims != cmd.dim:
        recorded.set_dim([*dims, recorded.block_dim] if tiled else list(dims))
        cmd.dim = dims
    params, kinds, keys, slots = recorded.params, cmd.kinds, cmd.keys, cmd.slots
    for j, a in enumerate(args):
        slot = slots[j]
        if slot is not None:  # an array parameter
            key = keys[j]
            if a is None:
                if key is not None:
                    cmd.set_array(j, None)
                continue
            # The common case inline: a tensor of the slot's last dtype and shape, contiguous. The
            # attribute reads raise for what is not a tensor; set_array then says what is wrong.
            try:
                if a.dtype is key[1] and a.shape == key[0] and a.is_contiguous():
                    slot.data = a.data_ptr()
                    continue
            except (AttributeError, TypeError):
                pass
            cmd.set_array(j, a)
        elif kinds[j] == "scalar":
            params[j + 1].value = a if type(a) is int or type(a) is float else _scalar_value(a)
        else:
            recorded.set_param_at_index(j % len(kernel.adj.args), a, adjoint=j >= len(kernel.adj.args))
    cmd.queue()


_views: dict[tuple, wp.array] = {}
_VIEWS_MAX = 64


def warp_view(t: torch.Tensor) -> wp.array:
    """``to_wp(t)`` of a contiguous 1-d tensor, cached by (pointer, length, dtype, device).

    For Warp's utilities that want a ``wp.array`` (the radix sort). A render's buffers come
    from torch's caching allocator, which hands the same blocks back step after step, so the
    views are found again; a view owns no memory, and one found by its pointer describes
    exactly the same memory as a new one would.
    """
    if t.dim() != 1 or not t.is_contiguous():
        raise ValueError(f"warp_view takes a contiguous 1-d tensor, got shape {tuple(t.shape)}")
    key = (t.data_ptr(), t.shape[0], t.dtype, t.device)
    view = _views.get(key)
    if view is None:
        if len(_views) >= _VIEWS_MAX:
            _views.clear()
        view = _views[key] = to_wp(t)
        view._tensor = None  # from_torch keeps the tensor alive through the view: not here
    return view


_streams: dict[tuple[int, int], wp.Stream] = {}  # (device index, torch stream handle) -> its Warp stream


def warp_device(device: torch.device) -> wp.context.Device:
    """The Warp device of torch's ``device``, with torch's current stream as its current stream.

    All of this project's Warp work goes to torch's stream: Warp's current stream of the
    device becomes torch's current one and stays so (wrapping torch's stream and switching
    to it and back on each launch group costs host time). A change of torch's stream is
    followed, ordered after the previous stream's work.
    """
    init_warp()
    if device.type != "cuda":
        return wp.device_from_torch(device)
    index = torch.cuda.current_device() if device.index is None else device.index
    # the raw handle, not torch.cuda.current_stream(): that builds a Stream object per call
    key = (index, torch._C._cuda_getCurrentRawStream(index))  # the default stream's handle is 0 on every device
    warp_stream = _streams.get(key)
    if warp_stream is None:
        warp_stream = _streams[key] = wp.stream_from_torch(torch.cuda.current_stream(index))
    wdev = warp_stream.device
    if wdev.stream is not warp_stream:
        # ordered after the previous stream's work; not while torch captures a CUDA graph, where
        # the capture stream already waits for it and a wait on outside work would end the capture
        wdev.set_stream(warp_stream, sync=not torch.cuda.is_current_stream_capturing())
    return wdev
