"""Differentiable rendering: torch autograd Functions over the Warp kernels in ``warp_kernels``.

``reference.py`` holds a slow pure-torch twin of every kernel, for tests.
"""
