"""A scene's sensors rendered: the model (``nurec_usd.scene``) composed with the ops (``nurec_usd.ops``).

- ``scene_renderer``: :class:`SceneRenderer`, every Gaussian placed at a time and activated, then a
  camera frame (over the sky, with the camera's exposure and lens falloff) or a lidar sweep rendered.
- ``views``: a capture's cameras and lidars as the ops' batches (geometry, poses at a time).

Import the sub-modules directly: they import torch and Warp, which this package's ``__init__``
does not.
"""
