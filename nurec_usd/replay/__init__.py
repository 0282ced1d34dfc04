"""Reading an exported scene back from its USD alone, and rendering it.

- ``stage``: :class:`Replay`, a stage's sensors and Gaussians, each sensor rendered at a recorded
  time (the replay check of a build, the ``render`` command).
- ``renderer``: :class:`Renderer`, a scene's cameras and lidars at any rig pose and time, batched,
  with actors removed, moved or duplicated (rendering-only workflows: simulation, RL, synthetic data).
- ``files``: the ``render`` command's files (PNG frames, depth PNGs, PLY sweeps, videos);
  ``trajectory``: rig trajectory files (CSV or JSON) read and written.

The readers take the USD's names from ``nurec_usd.export.usd_schema``, never from the writer.
``Replay`` and ``Renderer`` are imported on first use: torch, Warp and USD stay out of
``import nurec_usd.replay``.
"""

__all__ = ["Renderer", "Replay"]


def __getattr__(name: str):
    if name == "Renderer":
        from nurec_usd.replay.renderer import Renderer
        return Renderer
    if name == "Replay":
        from nurec_usd.replay.stage import Replay
        return Replay
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
