"""Which Warp module a float variant of a kernel compiles in.

Warp compiles a whole module (every kernel in it, with generated adjoints) when the first of
its kernels launches. The float64 variants exist for the tests' gradient checks only, so they
go into a module of their own, ``<module>_f64``, with the same options: a float32 run never
compiles them. On an H200 they were about half of a cold build's kernel compile time.
"""

from __future__ import annotations

import warp as wp


def variant_module(name: str, float_t) -> str | None:
    """The module for ``float_t`` kernels of module ``name``: None (the module itself) for float32,
    ``<name>_f64`` (created with a copy of ``name``'s options) for float64."""
    if float_t == wp.float32:
        return None
    module = f"{name}_f64"
    wp.set_module_options(dict(wp.get_module(name).options), module=module)
    return module
