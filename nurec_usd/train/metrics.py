"""Image and lidar quality measures, shared by the training losses and the evaluation."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


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


# SSIM's stabilising constants (K1 = 0.01, K2 = 0.03, images in [0, 1])
SSIM_C1 = 0.01 ** 2
SSIM_C2 = 0.03 ** 2


def gaussian_window(size: int, sigma: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:  # [size]
    """The 1D Gaussian window of SSIM, normalised to sum 1."""
    x = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    g = torch.exp(-x.square() / (2 * sigma * sigma))
    return g / g.sum()


def ssim(image: torch.Tensor,  # [H, W, 3] or [B, H, W, 3] in [0, 1]
         target: torch.Tensor,  # same shape
         window: int = 11, sigma: float = 1.5) -> torch.Tensor:  # []
    """Structural similarity (Wang et al. 2004): Gaussian window 11 / sigma 1.5, K1 = 0.01, K2 = 0.03,
    per channel, averaged over the windows that fit inside the image (no padding). Differentiable."""
    x = image if image.dim() == 4 else image[None]
    y = target if target.dim() == 4 else target[None]
    x = x.permute(0, 3, 1, 2)  # [B, 3, H, W]
    y = y.permute(0, 3, 1, 2)
    c = x.shape[1]
    g = gaussian_window(window, sigma, x.dtype, x.device)
    gx = g.view(1, 1, 1, -1).expand(c, 1, 1, window)
    gy = g.view(1, 1, -1, 1).expand(c, 1, window, 1)

    def blur(z: torch.Tensor) -> torch.Tensor:  # separable Gaussian, valid region only
        return F.conv2d(F.conv2d(z, gx, groups=c), gy, groups=c)

    mu_x, mu_y = blur(x), blur(y)
    sxx = blur(x * x) - mu_x.square()
    syy = blur(y * y) - mu_y.square()
    sxy = blur(x * y) - mu_x * mu_y
    c1, c2 = SSIM_C1, SSIM_C2
    s = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x.square() + mu_y.square() + c1) * (sxx + syy + c2))
    return s.mean()


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
