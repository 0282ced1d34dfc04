"""Image and lidar quality measures, shared by the training losses and the evaluation."""

from __future__ import annotations

import math

import torch

from nurec_usd.ops.reference import ssim  # noqa: F401  (the metric is the fused SSIM kernel's twin)


def psnr(image: torch.Tensor,  # [..., H, W, 3] in [0, 1]
         target: torch.Tensor,  # same shape
         mask: torch.Tensor | None = None,  # [..., H, W] bool, True where pixels count
         ) -> torch.Tensor:  # []
    """Peak signal-to-noise ratio in dB (peak 1), over the masked pixels."""
    err = (image - target).square()
    if mask is None:
        mse = err.mean()
    else:  # weights, not boolean indexing: no host sync on a GPU
        m = mask[..., None].to(err.dtype)
        mse = (err * m).sum() / (m.sum() * err.shape[-1]).clamp_min(1)
    return -10.0 * torch.log10(mse.clamp_min(1e-12))




LIDAR_ERROR_KEYS = ("median_range_error_m", "mean_range_error_m", "hit_accuracy", "rays", "returns")


def lidar_error_tensor(pred_range: torch.Tensor,  # [C, W] rendered expected range (0: no return predicted)
                       pred_hit: torch.Tensor,  # [C, W] rendered hit probability
                       true_range: torch.Tensor,  # [C, W] measured range, 0 where there was no return, < 0: unknown
                       ) -> torch.Tensor:  # [5] float64 on the device, in the order of LIDAR_ERROR_KEYS
    """``lidar_errors`` as one tensor on the device, without a host synchronisation (NaN where
    a figure has no rays to come from)."""
    real = true_range > 0
    known = true_range >= 0
    pred = pred_hit > 0.5
    both = real & pred
    err = torch.where(both, (pred_range - true_range).abs(), torch.full_like(pred_range, math.nan)).flatten().double()
    n_known = known.sum().double()
    return torch.stack((torch.nanquantile(err, 0.5), err.nanmean(), ((real == pred) & known).sum().double() / n_known,
                        n_known, real.sum().double()))


def lidar_errors(pred_range: torch.Tensor,  # [C, W] rendered expected range (0: no return predicted)
                 pred_hit: torch.Tensor,  # [C, W] rendered hit probability
                 true_range: torch.Tensor,  # [C, W] measured range, 0 where there was no return, < 0: unknown
                 ) -> dict[str, float]:
    """Held-out lidar figures: median absolute range error (rays with a measured and a
    predicted return), hit accuracy (predicted return = hit probability > 0.5), and counts.
    Rays marked unknown (a negative range: the ego vehicle's return, dropped) are left out."""
    return lidar_error_row(lidar_error_tensor(pred_range, pred_hit, true_range).tolist())


def lidar_error_row(values: list[float]) -> dict[str, float]:
    """``lidar_error_tensor``'s values by name (the counts as ints)."""
    row = dict(zip(LIDAR_ERROR_KEYS, values))
    row["rays"], row["returns"] = int(row["rays"]), int(row["returns"])
    return row
