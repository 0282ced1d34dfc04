"""nurec_usd: multi-sensor driving captures to simulation-ready OpenUSD scenes of time-varying 3D Gaussians.

Sub-packages: ``capture`` (format, loader, validation), ``sensors`` (camera and lidar
models, pose interpolation). Importing ``nurec_usd`` itself stays cheap: torch, warp
and pxr are imported by the parts that need them.
"""

__version__ = "0.1.0"


def build(*args, **kwargs):
    """Reconstruct a capture into a run directory: see :func:`nurec_usd.pipeline.build`."""
    from nurec_usd.pipeline import build as _build

    return _build(*args, **kwargs)


def batch(*args, **kwargs):
    """Build and export many captures, each into its own run directory: see :func:`nurec_usd.batch_runs.batch`."""
    from nurec_usd.batch_runs import batch as _batch

    return _batch(*args, **kwargs)
