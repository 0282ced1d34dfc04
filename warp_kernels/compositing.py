"""Constants of alpha compositing shared by the camera and lidar kernels (and their twins).

    alpha_i = min(ALPHA_MAX, opacity_i * G_i);  skipped when alpha_i < ALPHA_MIN;
    the walk stops before the transmittance T would fall to T_MIN or below.
"""

ALPHA_MIN = 1.0 / 255.0  # smaller contributions are skipped (and a splat's extent ends where it reaches this)
ALPHA_MAX = 0.99  # keeps 1 - alpha away from 0, so the backward can divide by it
T_MIN = 1e-4  # transmittance below which a pixel or ray is saturated
