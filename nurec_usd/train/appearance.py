"""Per-frame colour corrections, learnt with the scene in training only.

Real cameras change exposure and white balance from frame to frame. The scene has one
exposure per camera (``Scene.exposure``: gain and bias per channel, applied in
``nurec_usd.render.scene_renderer``); with ``frame_appearance`` set, each training frame also gets
an affine correction of the rendered colours, applied after the camera's exposure:

* ``"gain_bias"``: ``rgb * (1 + g) + b`` per channel (6 numbers a frame);
* ``"affine"``: ``(I + M) rgb + b`` with a full 3x3 ``M`` (12 numbers a frame), which also
  mixes channels (white balance).

The corrections are centred per camera: what a frame gets is its own correction minus the
mean of its camera's training frames', so they average to no correction, and the camera's
exposure carries what the frames share. They are not part of the scene: the export and
replay never see them, and held-out frames, which have none, are rendered with the camera's
exposure alone (so the held-out figures are those of the exported scene). A penalty on
their squared size (``frame_appearance_reg``) keeps them to what the scene cannot explain.
"""

from __future__ import annotations

from typing import Any

import torch

MODES = ("gain_bias", "affine")


class FrameAppearance:
    """The corrections of every frame of a ``CaptureData`` (held-out frames' stay unused)."""

    def __init__(self, data: Any, mode: str):
        """``data``: a ``nurec_usd.train.data.CaptureData``; ``mode``: one of ``MODES``."""
        if mode not in MODES:
            raise ValueError(f"frame appearance mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        device = data.device
        counts = [int(cam.images.shape[0]) for cam in data.cameras]
        self.offsets = [sum(counts[:c]) for c in range(len(counts))]  # first row of each camera
        total = sum(counts)
        self.delta = torch.nn.Parameter(torch.zeros(total, 12 if mode == "affine" else 6, device=device))
        self.camera_of_row = torch.cat([torch.full((n,), c, dtype=torch.long) for c, n in enumerate(counts)]
                                       ).to(device) if total else torch.zeros(0, dtype=torch.long, device=device)
        train = torch.zeros(total, dtype=torch.float32)
        for ref in data.train_frames:
            train[self.offsets[ref.camera] + ref.frame] = 1.0
        self.train = train.to(device)[:, None]  # [R, 1]
        self.train_per_camera = torch.zeros(len(counts), device=device).index_add_(
            0, self.camera_of_row, self.train[:, 0]).clamp_min(1)[:, None]  # [C, 1]
        self._rows: dict[Any, torch.Tensor] = {}  # per frame group: its rows, on the device

    def rows(self, group: Any) -> torch.Tensor:  # [V] long
        """The rows of a group's frames (``nurec_usd.train.data.FrameGroup``), kept per group."""
        rows = self._rows.get(group)
        if rows is None:
            rows = torch.tensor([self.offsets[r.camera] + r.frame for r in group.frames], dtype=torch.long,
                                device=self.delta.device)
            self._rows[group] = rows
        return rows

    def centred(self, rows: torch.Tensor) -> torch.Tensor:  # [V] -> [V, 6 or 12]
        """The frames' corrections minus their camera's mean over its training frames."""
        mean = torch.zeros(self.train_per_camera.shape[0], self.delta.shape[1], device=self.delta.device)
        mean = mean.index_add(0, self.camera_of_row, self.delta * self.train) / self.train_per_camera
        return self.delta[rows] - mean[self.camera_of_row[rows]]

    def apply(self, image: torch.Tensor,  # [V, H, W, 3] rendered, the camera's exposure applied
              group: Any,
              lens: torch.Tensor | None = None,  # [V, H, W] bool: pixels inside the lens (black outside)
              ) -> tuple[torch.Tensor, torch.Tensor]:  # [V, H, W, 3], [V, 6 or 12]
        """The group's images with their frames' corrections, and the corrections used (for the penalty)."""
        d = self.centred(self.rows(group))
        if self.mode == "affine":
            M = torch.eye(3, device=d.device) + d[:, :9].view(-1, 3, 3)
            out = torch.einsum("vij,vhwj->vhwi", M, image) + d[:, None, None, 9:]
        else:
            out = image * (1 + d[:, None, None, :3]) + d[:, None, None, 3:]
        if lens is not None:  # outside the lens the sensor sees black, whatever the frame's colours
            out = out * lens[..., None].to(out.dtype)
        return out, d

    def penalty(self, corrections: torch.Tensor) -> torch.Tensor:  # [V, K] -> []
        """The sum over the views of their corrections' squared size."""
        return corrections.square().sum()

    @torch.no_grad()
    def summary(self) -> dict[str, Any]:
        """For ``metrics.json``: the mode and the size of the training frames' corrections
        (the largest and the mean absolute gain change and bias, over frames and channels)."""
        rows = torch.nonzero(self.train[:, 0] > 0)[:, 0]
        if len(rows) == 0:
            return {"mode": self.mode, "frames": 0}
        d = self.centred(rows)  # [T, 6 or 12]
        gain = d[:, :9] if self.mode == "affine" else d[:, :3]
        bias = d[:, 9:] if self.mode == "affine" else d[:, 3:]
        return {"mode": self.mode, "frames": int(len(rows)),
                "mean_abs_gain": float(gain.abs().mean()), "max_abs_gain": float(gain.abs().max()),
                "mean_abs_bias": float(bias.abs().mean()), "max_abs_bias": float(bias.abs().max())}
