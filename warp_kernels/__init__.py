"""Warp kernels of nurec_usd: ``@wp.func`` / ``@wp.kernel`` code and tiny launch helpers only.

No torch and no I/O here; ``nurec_usd.render`` wraps these kernels for PyTorch. One
Python file is one Warp module (compiled together), so kernels are grouped by what
changes together.
"""
