"""Procedural driving captures with ground truth, rendered by Warp ray casting.

``generate(preset, out_dir, seed=...)`` (or ``python -m nurec_usd synth --preset NAME --out DIR``)
writes a capture in the native format (``docs/capture-format.md``) and, beside it, ground truth
(``nurec_usd.synth.groundtruth`` documents the layout). Modules:

* ``presets``: the presets (``tiny``, ``small``, ``drive30``) and their sensors;
* ``road``, ``street``: the street's centreline and the static scene built along it;
* ``traffic``, ``vehicles``: the ego's drive, the moving actors and their meshes;
* ``materials``, ``geometry``: procedural material table and triangle-mesh building blocks;
* ``scene``: assembles everything on the host; ``render``: the Warp device side;
* ``generator``: ``generate``, end to end with timings; ``groundtruth``: writing and reading ground truth;
* ``contact_sheet``: a picture of a few frames.

Importing this package is light: torch and warp load when ``generate`` runs.
"""

from nurec_usd.synth.groundtruth import GroundTruth, default_groundtruth_dir, load_groundtruth
from nurec_usd.synth.presets import PRESETS, CameraSpec, LidarSpec, Preset, get_preset


def generate(*args, **kwargs):
    """See :func:`nurec_usd.synth.generator.generate` (imported lazily: it pulls in torch and warp)."""
    from nurec_usd.synth.generator import generate as _generate

    return _generate(*args, **kwargs)


__all__ = ["PRESETS", "CameraSpec", "GroundTruth", "LidarSpec", "Preset", "default_groundtruth_dir", "generate",
           "get_preset", "load_groundtruth"]
