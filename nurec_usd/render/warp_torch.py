"""Passing torch tensors to Warp kernels: zero-copy views and torch's stream."""

from __future__ import annotations

import contextlib
import functools
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


def wp_arg(t: torch.Tensor, dtype=None) -> _array_t:
    """A kernel-argument descriptor of a contiguous tensor, for ``wp.launch`` inputs and outputs only.

    ``wp.launch`` takes a descriptor verbatim, without building a ``wp.array`` (4 us against
    15 us of host time on a CI-like CPU): a render passes some 50 arrays, and small renders
    are bound by their host time (``benchmarks/host_profile.py``). ``dtype`` folds the last dim into a vector type as in ``to_wp``;
    the scalar size is checked, the kernel's declared dtype is not (the twin tests cover every launch).
    """
    if not t.is_contiguous():
        raise ValueError(f"tensor of shape {tuple(t.shape)} must be contiguous to pass to a Warp kernel")
    shape = tuple(t.shape)
    item = t.element_size()
    if dtype is not None:
        lanes, scalar = _lanes_and_bytes(dtype)
        if scalar != item or (lanes > 1 and (not shape or shape[-1] != lanes)):
            raise ValueError(f"tensor of shape {shape} and {t.dtype} cannot be viewed as an array of {dtype}")
        if lanes > 1:
            shape = shape[:-1] or (1,)
            item *= lanes
    strides = [item] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    arg = _array_t(data=t.data_ptr(), grad=0, ndim=len(shape), shape=shape, strides=strides)
    arg.owner = t  # keeps a temporary tensor alive for as long as the descriptor
    return arg


_streams: dict[tuple[int, int], wp.Stream] = {}  # (device index, torch stream handle) -> its Warp stream


@contextlib.contextmanager
def launch_stream(device: torch.device) -> Iterator[wp.context.Device]:
    """Launch Warp work on torch's current stream of ``device``; yields the Warp device.

    On CUDA, Warp's current stream of the device becomes torch's current stream and stays so
    (all of this project's Warp work goes to torch's stream): a render enters this a few times,
    and wrapping torch's stream and switching to it and back each time costs host time. A
    change of torch's stream is followed, ordered after the previous stream's work.
    """
    init_warp()
    if device.type != "cuda":
        yield wp.device_from_torch(device)
        return
    stream = torch.cuda.current_stream(device)
    key = (stream.device.index, stream.cuda_stream)  # the default stream's handle is 0 on every device
    warp_stream = _streams.get(key)
    if warp_stream is None:
        warp_stream = _streams[key] = wp.stream_from_torch(stream)
    wdev = warp_stream.device
    if wdev.stream is not warp_stream:
        wdev.set_stream(warp_stream, sync=True)
    yield wdev  # every launch names its device
