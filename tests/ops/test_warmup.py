"""The background kernel compile of a build: which modules it names, and that it stays out of the
way where there is nothing to do (the CUDA path is measured on the GPU, benchmarks/RESULTS.md)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import warp as wp

import nurec_usd
from nurec_usd.ops.warmup import BUILD_MODULES, BUILD_VARIANTS, KernelWarmup


def test_every_build_module_exists_and_holds_float32_kernels_only():
    for name in BUILD_MODULES:
        module = wp.get_module(importlib.import_module(f"warp_kernels.{name}").__name__)
        assert module.kernels, name
        assert not name.endswith("_f64")


def _warp_kernels_imported_by(path: Path) -> set[str]:
    """The ``warp_kernels`` modules a source file imports, at its top or inside functions (lazily)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("warp_kernels.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "warp_kernels":
                found |= {a.name for a in node.names}
            elif node.module.startswith("warp_kernels."):
                found.add(node.module.split(".")[1])
    return found


def test_the_modules_the_renderers_launch_are_all_named():
    """BUILD_MODULES are the warp_kernels modules with kernels that the build's code imports, eagerly
    or inside the functions that launch them (read from the source: which lazy imports have run
    depends on the tests run before in the same process), and the warp_kernels they import."""
    root = Path(nurec_usd.__file__).parent
    todo = set()
    for path in root.rglob("*.py"):
        if "synth" not in path.relative_to(root).parts:  # the capture generator, not a build
            todo |= _warp_kernels_imported_by(path)
    imported = set()
    while todo:
        name = todo.pop()
        imported.add(name)
        path = root.parent / "warp_kernels" / f"{name}.py"
        todo |= _warp_kernels_imported_by(path) - imported
    with_kernels = {name for name in imported
                    if wp.get_module(importlib.import_module(f"warp_kernels.{name}").__name__).kernels}
    assert with_kernels == set(BUILD_MODULES)


def test_the_renderers_float32_kernels_are_all_warmed():
    """Every float32 kernel the camera and lidar renderers launch lives in a module the warm-up
    compiles, the variants that compile apart (warp_kernels.modules) included."""
    import torch

    from nurec_usd.ops import camera, lidar
    from warp_kernels import camera_project

    warmed = {f"warp_kernels.{name}" for name in BUILD_MODULES + BUILD_VARIANTS}
    kernels = list(lidar._kernels(torch.float32).values()) + [camera_project.project_pinhole_backward_f32,
                                                               camera_project.project_gaussians_backward_f32]
    for pinhole in (False, True):
        for entry in camera._kernels(torch.float32, pinhole):
            kernels += list(entry) if isinstance(entry, tuple) else [entry]
    for kernel in kernels:
        assert kernel.module.name in warmed, (kernel.key, kernel.module.name)
    for name in BUILD_VARIANTS:
        assert wp.get_module(f"warp_kernels.{name}").kernels, name


def test_nothing_happens_on_the_cpu():
    warmup = KernelWarmup("cpu")
    assert warmup.wait() == 0.0 and warmup.error is None
