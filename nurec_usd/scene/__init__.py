"""The reconstructed scene: Gaussian parameter sets, actors and their tracks, initialisation.

Import the sub-modules directly: they import torch (and ``neighbors`` Warp), which this
package's ``__init__`` does not.
"""
