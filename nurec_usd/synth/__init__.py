"""Procedural driving captures with ground truth, rendered by Warp ray casting."""
