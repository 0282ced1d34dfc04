"""Differentiable rendering: torch autograd Functions over the Warp kernels in ``warp_kernels``.

- ``interpolate``: the fused time interpolation (actor poses at t, actor Gaussians into the world).
- ``camera``: camera rendering (projection for every camera model with rolling shutter,
  tile binning and sorting, compositing), forward and hand-written backward.
- ``lidar``: lidar rendering (spherical projection, tiles in azimuth and elevation, compositing
  along each ray), forward and hand-written backward.
- ``graphed``: one set of Gaussians rendered from many camera poses by replaying a captured
  CUDA graph (simulators, RL rollouts, synthetic data).
- ``reference``: a slow pure-torch twin of every kernel, for tests.
- ``renderer``: :class:`Renderer`, a scene's cameras and lidars at any rig pose and time, batched,
  with actors removed, moved or duplicated (rendering-only workflows: simulation, RL, synthetic data).

Import the sub-modules directly (``from nurec_usd.render.camera import render_cameras``):
each imports torch and Warp, which this package's ``__init__`` does not. ``Renderer`` is also
``nurec_usd.render.Renderer``, imported on first use.
"""

__all__ = ["Renderer"]


def __getattr__(name: str):
    if name == "Renderer":  # imported on first use: torch, Warp and USD stay out of ``import nurec_usd.render``
        from nurec_usd.render.renderer import Renderer

        return Renderer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
