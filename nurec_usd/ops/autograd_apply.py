"""Calling a ``torch.autograd.Function`` with less host time."""

from __future__ import annotations

from typing import Callable

import torch


def direct_apply(function: type[torch.autograd.Function]) -> Callable:
    """``function.apply``, minus its Python wrapper whenever no functorch transform is active.

    ``torch.autograd.Function.apply`` is a Python wrapper (functorch's transforms) around the
    C++ apply; outside a transform it only calls the latter. The wrapper is a measurable share
    of the interpolation's host time per forward call (the kernels stubbed, on the CPU), and the
    renders' forward calls are as host-bound on small scenes.
    Inside a transform the call goes through ``function.apply`` as usual.
    """
    node_apply = super(torch.autograd.Function, function).apply  # the C++ apply, bound to the class
    wrapped = function.apply
    active = torch._C._are_functorch_transforms_active

    def apply(*args):
        return wrapped(*args) if active() else node_apply(*args)

    apply.__doc__ = f"{function.__name__}.apply (see direct_apply)"
    return apply
