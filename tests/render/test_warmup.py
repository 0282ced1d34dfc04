"""The background kernel compile of a build: which modules it names, and that it stays out of the
way where there is nothing to do (the CUDA path is measured on the GPU, benchmarks/RESULTS.md)."""

from __future__ import annotations

import importlib

import warp as wp

from nurec_usd.render.warmup import BUILD_MODULES, BUILD_VARIANTS, KernelWarmup


def test_every_build_module_exists_and_holds_float32_kernels_only():
    for name in BUILD_MODULES:
        module = wp.get_module(importlib.import_module(f"warp_kernels.{name}").__name__)
        assert module.kernels, name
        assert not name.endswith("_f64")


def test_the_modules_the_renderers_launch_are_all_named():
    """BUILD_MODULES are the warp_kernels modules with kernels that the build's code imports."""
    import sys

    import nurec_usd.scene.init  # noqa: F401 - what a build runs: initialisation, rendering, training
    import nurec_usd.scene.neighbors  # noqa: F401
    import nurec_usd.scene.render  # noqa: F401
    import nurec_usd.train.trainer  # noqa: F401

    imported = {name.split(".")[1] for name in sys.modules
                if name.startswith("warp_kernels.") and wp.get_module(name).kernels}
    imported -= {"synth_raycast"}  # the capture generator, not a build
    assert imported == set(BUILD_MODULES)


def test_the_renderers_float32_kernels_are_all_warmed():
    """Every float32 kernel the camera and lidar renderers launch lives in a module the warm-up
    compiles, the variants that compile apart (warp_kernels.modules) included."""
    import torch

    from nurec_usd.render import camera, lidar
    from warp_kernels import camera_project

    warmed = {f"warp_kernels.{name}" for name in BUILD_MODULES + BUILD_VARIANTS}
    kernels = list(lidar._kernels(torch.float32).values()) + [camera_project.project_pinhole_backward_f32]
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
