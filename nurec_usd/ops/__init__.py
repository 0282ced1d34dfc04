"""The torch-Warp layer: torch autograd Functions and launches over the kernels in ``warp_kernels``.

The only package that launches the reconstruction's Warp kernels; one module per kernel family:

- ``interpolate``: the fused time interpolation (actor poses at t, actor Gaussians into the world).
- ``camera``: camera rendering (projection for every camera model with rolling shutter, tile
  binning and sorting, compositing), forward and hand-written backward; ``graphed``: one set of
  Gaussians rendered from many camera poses by replaying a captured CUDA graph.
- ``lidar``: lidar rendering (spherical projection, tiles in azimuth and elevation, compositing
  along each ray), forward and hand-written backward.
- ``sky``, ``ssim`` (fused SSIM loss), ``adam`` (fused Adam), ``perturb`` (densification noise),
  ``neighbors`` (k nearest points).
- ``reference``: the slow pure-torch twins of the kernels, for tests (and torch SSIM for metrics).
- ``warp_torch``, ``autograd_apply``, ``warp_init``, ``warmup``: launching from torch (recorded
  launches on torch's stream), Warp's start, compiling the kernels ahead of their first use.

Import the sub-modules directly (``from nurec_usd.ops.camera import render_cameras``): each
imports torch and Warp, which this package's ``__init__`` does not.
"""
