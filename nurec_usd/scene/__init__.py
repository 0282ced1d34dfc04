"""The reconstructed scene: Gaussian parameter sets and their activations, actors and their tracks,
the rig, and the initial scene.

Import the sub-modules directly: they import torch, which this package's ``__init__`` does not.
"""
