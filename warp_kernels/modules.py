"""Which Warp module a float variant of a kernel compiles in.

Warp compiles a whole module (every kernel in it, with generated adjoints) when the first of
its kernels launches. The float64 variants exist for the tests' gradient checks only, so they
go into a module of their own, ``<module>_f64``, with the same options: a float32 run never
compiles them, and they would otherwise be a large part of a cold build's kernel compile time
(benchmarks/RESULTS.md, cold build).
"""

from __future__ import annotations

import warp as wp


def variant_module(name: str, float_t, variant: str = "", **options) -> str | None:
    """The module for ``float_t`` kernels of module ``name``: None (the module itself) for float32,
    ``<name>_f64`` for float64; a named ``variant`` (a specialised kernel that should not make
    every user of ``name`` compile it) goes to ``<name>_<variant>`` and ``<name>_<variant>_f64``.
    New modules get a copy of ``name``'s options, updated by ``options``."""
    parts = ([variant] if variant else []) + ([] if float_t == wp.float32 else ["f64"])
    if not parts:
        return None
    module = "_".join([name, *parts])
    wp.set_module_options({**dict(wp.get_module(name).options), **options}, module=module)
    return module
