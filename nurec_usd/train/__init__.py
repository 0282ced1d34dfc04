"""Training: the single reader of a capture's images and sweeps (``data``, ``sweep_reads``), the
trainer, losses, densification, per-frame appearance, the ego vehicle's masks and box, metrics and
the configuration."""
