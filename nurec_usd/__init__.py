"""nurec_usd: multi-sensor driving captures to simulation-ready OpenUSD scenes of time-varying 3D Gaussians.

Sub-packages: ``capture`` (format, loader, validation), ``sensors`` (camera and lidar
models, pose interpolation). Importing ``nurec_usd`` itself stays cheap: torch, warp
and pxr are imported by the parts that need them.
"""

__version__ = "0.1.0"
