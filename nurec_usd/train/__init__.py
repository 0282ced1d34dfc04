"""Training: optimiser (and, later, the trainer, losses, densification and schedules)."""
