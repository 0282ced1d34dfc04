"""Export of a reconstructed scene, and readers for round trips.

- ``usd_layers``: the scene and its sensor rig as OpenUSD layers (USD.md); ``usd_schema`` holds
  the names the writer and the readers share; ``usd_check`` validates a written stage.
- ``collision``: a triangle mesh of the static scene for physics; ``usdz``: one-file packages.
- ``ply``: the static Gaussians as a standard 3D Gaussian Splatting ``.ply`` (the layout the
  original 3DGS code, gsplat, nerfstudio and viewers such as SuperSplat read), and our own
  reader of that layout; ``actor_ply``: one PLY per actor with its track.

Import the sub-modules directly (``from nurec_usd.export.ply import write_gaussian_ply``):
they import torch, which this package's ``__init__`` does not.
"""
