"""Export of a reconstructed scene: USD layers (later), the 3DGS PLY, and readers for round trips.

- ``ply``: the static Gaussians as a standard 3D Gaussian Splatting ``.ply`` (the layout the
  original 3DGS code, gsplat, nerfstudio and viewers such as SuperSplat read), and our own
  reader of that layout.

Import the sub-modules directly (``from nurec_usd.export.ply import write_gaussian_ply``):
they import torch, which this package's ``__init__`` does not.
"""
