"""Passing torch tensors to Warp kernels: zero-copy views and torch's stream."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from typing import Iterator

import torch
import warp as wp
# Warp's kernel-argument descriptor is not exported; warp-lang is pinned to 1.19.x, and
# tests/render/test_warp_args.py checks it against the descriptor of a wp.array.
from warp._src.types import array_t as _array_t

_initialised = False


def init_warp() -> None:
    """Initialise Warp once, quietly (its banner is noise in a CLI or a test log)."""
    global _initialised
    if not _initialised:
        wp.config.log_level = 30  # warnings and errors only (no banner, no module-load lines)
        # Tiled kernels on the CPU run one lane per block unless told otherwise.
        wp.config.enable_cpu_blocks = True
        wp.init()
        _initialised = True


def wp_vector(n: int, dtype: torch.dtype):
    """The Warp vector type of length n whose scalars match a torch float dtype."""
    return wp.types.vector(n, wp.float32 if dtype == torch.float32 else wp.float64)


def to_wp(t: torch.Tensor, dtype=None) -> wp.array:
    """A zero-copy Warp view of a contiguous tensor; ``dtype`` folds the last dim into a vector type."""
    init_warp()
    if not t.is_contiguous():
        raise ValueError(f"tensor of shape {tuple(t.shape)} must be contiguous to pass to a Warp kernel")
    if dtype is None:
        return wp.from_torch(t, requires_grad=False)
    return wp.from_torch(t, dtype=dtype, requires_grad=False)


@functools.lru_cache(maxsize=None)
def _lanes_and_bytes(dtype) -> tuple[int, int]:
    """(scalars per element, bytes per scalar) of a Warp scalar or vector type."""
    if hasattr(dtype, "_length_"):
        return int(dtype._length_), wp.types.type_size_in_bytes(dtype._wp_scalar_type_)
    return 1, wp.types.type_size_in_bytes(dtype)


def _descriptor_template(shape: tuple, item: int, dtype) -> _array_t:
    """The descriptor of a contiguous tensor of this shape and scalar size, with a null pointer."""
    if dtype is not None:
        lanes, scalar = _lanes_and_bytes(dtype)
        if scalar != item or (lanes > 1 and (not shape or shape[-1] != lanes)):
            raise ValueError(f"tensor of shape {shape} with {item}-byte scalars cannot be viewed as an array "
                             f"of {dtype}")
        if lanes > 1:
            shape = shape[:-1] or (1,)
            item *= lanes
    strides = [item] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return _array_t(data=0, grad=0, ndim=len(shape), shape=shape, strides=strides)


# (shape, scalar bytes, Warp dtype) -> descriptor template. A training run sees a few shapes per
# step (the Gaussian count changes when densifying): the cache is emptied when it grows large.
_templates: dict[tuple, _array_t] = {}
_TEMPLATES_MAX = 4096


def wp_arg(t: torch.Tensor, dtype=None) -> _array_t:
    """A kernel-argument descriptor of a contiguous tensor, for ``launch`` and ``wp.launch`` arguments only.

    A launch takes a descriptor verbatim, without building a ``wp.array``: a render passes
    some 50 arrays, and small renders are bound by their host time
    (``benchmarks/host_profile.py``). The descriptor is copied from a cached template of
    the tensor's shape, so only its pointer is new (about 1 us against 15 us for a
    ``wp.array`` on a CI-like CPU). ``dtype`` folds the last dim into a vector type as in
    ``to_wp``; the scalar size is checked, the kernel's declared dtype is not (the twin tests
    cover every launch).
    """
    if not t.is_contiguous():
        raise ValueError(f"tensor of shape {tuple(t.shape)} must be contiguous to pass to a Warp kernel")
    key = (t.shape, t.element_size(), dtype)
    template = _templates.get(key)
    if template is None:
        if len(_templates) >= _TEMPLATES_MAX:
            _templates.clear()
        template = _templates[key] = _descriptor_template(tuple(t.shape), t.element_size(), dtype)
    arg = _array_t.from_buffer_copy(template)
    arg.data = t.data_ptr()
    arg.owner = t  # keeps a temporary tensor alive for as long as the descriptor
    return arg


_DESCRIPTOR_BYTES = ctypes.sizeof(_array_t)
_NULL_ARRAY = _array_t()


def _tensor_template(t: torch.Tensor, arg) -> _array_t:
    """The descriptor template (null pointer) of tensor ``t`` as kernel argument ``arg``.

    The kernel's declared array type says how to view the tensor: a vector dtype folds the
    tensor's last dim. Scalar type and dimensions must agree: the error names both.
    """
    declared = arg.type.dtype
    scalar = getattr(declared, "_wp_scalar_type_", declared)
    lanes = int(getattr(declared, "_length_", 1))
    shape = tuple(t.shape)
    view = shape[:-1] if lanes > 1 and shape and shape[-1] == lanes else shape
    if (wp.dtype_from_torch(t.dtype) is not scalar or (lanes > 1 and view == shape)
            or len(view) != arg.type.ndim):
        raise ValueError(f"argument {arg.label!r} is a {arg.type.ndim}-d array of {wp.types.type_repr(declared)}: "
                         f"a {t.dtype} tensor of shape {shape} cannot be viewed as one")
    return _descriptor_template(view, t.element_size() * lanes, None)


class _Command:
    """A recorded launch of one kernel whose parameter slots are rewritten in place per launch.

    Each array parameter owns a descriptor slot of its own (no tensor outlives its launch
    through here); a tensor of the slot's last shape and dtype only rewrites the pointer.
    Scalars are set through their ctypes value.
    """

    __slots__ = ("launch", "dim", "kinds", "slots", "keys", "args")

    def __init__(self, launch: wp.Launch, dim: tuple, kernel):
        self.launch, self.dim = launch, dim
        launch.fwd_args = launch.adj_args = None  # kept by Warp for its own captures only; they hold tensors
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

    def set_array(self, j: int, a) -> None:
        """Point array slot j at a tensor, a descriptor (``wp_arg``) or nothing (None)."""
        slot = self.slots[j]
        if isinstance(a, torch.Tensor):
            if not a.is_contiguous():
                raise ValueError(f"argument {self.args[j].label!r}: tensor of shape {tuple(a.shape)} must be "
                                 "contiguous to pass to a Warp kernel")
            key = (a.shape, a.dtype)
            if key != self.keys[j]:
                template = _tensor_template(a, self.args[j])  # held: memmove reads it after addressof
                ctypes.memmove(ctypes.addressof(slot), ctypes.addressof(template), _DESCRIPTOR_BYTES)
                self.keys[j] = key
            slot.data = a.data_ptr()
        else:
            ctypes.memmove(ctypes.addressof(slot), ctypes.addressof(_NULL_ARRAY if a is None else a),
                           _DESCRIPTOR_BYTES)
            self.keys[j] = None


_commands: dict[tuple, _Command] = {}


def launch(kernel, dim, inputs: list, outputs: list = (), *, device: wp.context.Device, block_dim: int | None = None,
           tiled: bool = False, adjoint: bool = False, adj_inputs: list = (), adj_outputs: list = ()) -> None:
    """``wp.launch`` (``wp.launch_tiled`` with ``tiled``) for hot paths: the launch is recorded once
    per (kernel, device, block size, adjoint, thread) and replayed with its parameters rewritten.

    ``wp.launch`` checks and packs every argument on every call; a render makes some 20
    launches, and small renders are bound by that host time. Arrays are passed as torch
    tensors, viewed as the kernel declares them (a vector dtype folds the last dim; shapes
    and dtypes are checked), or as ``wp_arg`` descriptors or None; scalars as Python numbers.
    Work goes to the device's current stream (``warp_device``), and a tensor passed here
    needs to live only until this returns (torch's allocator reuses memory only for work
    queued later on the same stream).
    """
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (int(dim),)
    if 0 in dims:
        return
    key = (kernel, device.ordinal, block_dim, adjoint, threading.get_ident())
    args = [*inputs, *outputs, *adj_inputs, *adj_outputs]
    cmd = _commands.get(key)
    if cmd is None:
        def packed(values):  # wp.launch's own argument checks, once
            return [wp_arg(v) if isinstance(v, torch.Tensor) else v for v in values]
        make = wp.launch_tiled if tiled else wp.launch
        recorded = make(kernel, dim=list(dims), inputs=packed(inputs), outputs=packed(outputs),
                        adj_inputs=packed(adj_inputs), adj_outputs=packed(adj_outputs), adjoint=adjoint,
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
        kind = kinds[j]
        if kind == "array":
            # the common case inline: a tensor of the slot's last shape and dtype
            if isinstance(a, torch.Tensor) and keys[j] == (a.shape, a.dtype) and a.is_contiguous():
                slots[j].data = a.data_ptr()
            else:
                cmd.set_array(j, a)
        elif kind == "scalar":
            params[j + 1].value = 0 if a is None else getattr(a, "value", a)
        else:
            recorded.set_param_at_index(j % len(kernel.adj.args), a, adjoint=j >= len(kernel.adj.args))
    recorded.launch()


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
    stream = torch.cuda.current_stream(device)
    key = (stream.device.index, stream.cuda_stream)  # the default stream's handle is 0 on every device
    warp_stream = _streams.get(key)
    if warp_stream is None:
        warp_stream = _streams[key] = wp.stream_from_torch(stream)
    wdev = warp_stream.device
    if wdev.stream is not warp_stream:
        # ordered after the previous stream's work; not while torch captures a CUDA graph, where
        # the capture stream already waits for it and a wait on outside work would end the capture
        wdev.set_stream(warp_stream, sync=not torch.cuda.is_current_stream_capturing())
    return wdev


@contextlib.contextmanager
def launch_stream(device: torch.device) -> Iterator[wp.context.Device]:
    """``warp_device`` as a context: launch Warp work on torch's current stream; yields the Warp device."""
    yield warp_device(device)
