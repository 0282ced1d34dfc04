"""Rendering a ``Scene``: Gaussians placed at a time, cameras with sky, exposure and lens falloff, lidar sweeps.

Used by training, evaluation and replay. A ``SceneRenderer`` packs the scene's
tracks for the fused interpolation once; each call then places every Gaussian for its time
(one kernel) and renders (``nurec_usd.ops.camera`` / ``nurec_usd.ops.lidar``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from nurec_usd.ops.camera import CameraBatch, CameraRender, RenderSettings, render_cameras
from nurec_usd.ops.interpolate import TrackKeys, interpolate_gaussians
from nurec_usd.ops.lidar import LidarBatch, LidarRender, LidarRenderSettings, render_lidar
from nurec_usd.ops.reference import sky_colors_reference
from nurec_usd.ops.sky import sky_lookup
from nurec_usd.scene.gaussians import Scene, intensities_of, opacities_of, scales_of
from nurec_usd.sensors.se3 import matrix_to_quat


@dataclass
class CameraView:
    """One camera frame to render: a one-camera batch, its time, and what the sky and exposure need."""

    batch: CameraBatch  # one camera (C = 1) with its poses over the readout
    camera_index: int  # into Scene.camera_ids (exposure)
    time: torch.Tensor  # [] seconds since the capture start, on the device: actors are placed then
    R_world_camera: torch.Tensor  # [3, 3] camera orientation at the readout's start (sky lookup)
    rays_camera: torch.Tensor  # [H, W, 3] unit ray of every pixel in the camera frame
    lens: torch.Tensor | None = None  # [H, W] bool: pixels the lens images (fisheye / f-theta circles); None: all


@dataclass
class CameraViews:
    """C camera frames of one resolution rendered in one call, the actors placed at one time."""

    batch: CameraBatch  # C cameras with their poses over their readouts
    camera_indices: torch.Tensor  # [C] long, into Scene.camera_ids (exposure)
    time: torch.Tensor  # [] seconds since the capture start, on the device: actors are placed then
    R_world_camera: torch.Tensor  # [C, 3, 3] camera orientations at the readouts' start (sky lookup)
    rays_camera: torch.Tensor  # [C, H, W, 3] unit ray of every pixel in each camera's frame
    lens: torch.Tensor | None = None  # [C, H, W] bool: pixels the lenses image; None: all


@dataclass
class SceneCameraRender:
    """A camera render of a scene: the final image and the raw render it came from."""

    image: torch.Tensor  # [H, W, 3] (one view) or [C, H, W, 3] (views): Gaussians over the sky, exposure applied
    raw: CameraRender  # Gaussians only (black background), [C, H, W, ...]; no depth unless asked for


@dataclass
class PlacedGaussians:
    """Every Gaussian of a scene in the world at one time, activated, ready for a renderer."""

    means: torch.Tensor  # [N, 3]
    quats: torch.Tensor  # [N, 4]
    scales: torch.Tensor  # [N, 3]
    opacities: torch.Tensor  # [N] (0 for actors outside their track's time range)
    sh: torch.Tensor  # [N, K, 3] SH coefficients, at least those of the scene's degree ((d+1)^2)
    intensities: torch.Tensor  # [N]


_IMAGE_ONLY = RenderSettings(depth=False)  # what a scene's camera image needs


def track_keys(scene: Scene, device: torch.device | str) -> TrackKeys:
    """The scene's tracks packed for the interpolation kernel (float32 on ``device``)."""
    tracks = [(t.times, t.T_world_box[:, :3, 3], matrix_to_quat(t.T_world_box[:, :3, :3])) for t in scene.tracks]
    return TrackKeys.from_tracks(tracks, dtype=torch.float32, device=device)


class SceneRenderer:
    """Renders one scene's cameras and lidars at any time (the scene's tensors may be trained in place)."""

    def __init__(self, scene: Scene, actor_motion: bool = True):
        """``actor_motion``: lidar sweeps see actors where they are when each column fires
        (``sweep_motion``); False places them at the sweep's middle."""
        self.scene = scene
        self.keys = track_keys(scene, scene.device)
        self.actor_motion = actor_motion

    def place(self, t: torch.Tensor) -> PlacedGaussians:  # t: [] seconds, on the scene's device
        """All Gaussians in the world at time t, activated (differentiable)."""
        s = self.scene
        a = s.actors
        means, quats, visible = interpolate_gaussians(t, s.static.means, s.static.quats, a.means, a.quats,
                                                      s.actor_index, self.keys, s.pose_corrections)
        scales = scales_of(torch.cat((s.static.log_scales, a.log_scales)))
        opacities = opacities_of(torch.cat((s.static.opacity_logits, a.opacity_logits))) * visible
        # Only the coefficients of the degree in use: the rest are neither read by the renderer nor
        # given a gradient, and concatenating all 16 moved 200 MB per step at 1M Gaussians.
        higher = (s.sh_degree + 1) ** 2 - 1
        sh = torch.cat((torch.cat((s.static.sh0, a.sh0)), torch.cat((s.static.shN[:, :higher], a.shN[:, :higher]))),
                       dim=1)
        intensities = intensities_of(torch.cat((s.static.intensity_logits, a.intensity_logits)))
        return PlacedGaussians(means, quats, scales, opacities, sh, intensities)

    def sky(self, directions: torch.Tensor) -> torch.Tensor:  # [..., 3] unit, world
        """Sky colour for world directions. Returns ``[..., 3]``."""
        return sky_colors(self.scene.sky, directions)

    def camera(self, view: CameraView, settings: RenderSettings | None = None,
               placed: PlacedGaussians | None = None) -> SceneCameraRender:
        """Render one camera frame: Gaussians over the sky, then the camera's exposure.

        ``settings`` default to ``RenderSettings(depth=False)``: the image needs no depth, and
        the render is faster without it; pass settings with ``depth=True`` for ``raw.depth``.
        """
        g = placed if placed is not None else self.place(view.time)
        raw = render_cameras(g.means, g.quats, g.scales, g.opacities, g.sh, view.batch,
                             sh_degree=self.scene.sh_degree, settings=settings or _IMAGE_ONLY)
        c = view.camera_index
        image = self._finish(raw.rgb, raw.alpha, view.rays_camera[None], view.R_world_camera[None],
                             self.scene.exposure[c][None], self.scene.vignetting[c][None],
                             None if view.lens is None else view.lens[None])
        return SceneCameraRender(image[0], raw)

    def cameras(self, views: CameraViews, settings: RenderSettings | None = None,
                placed: PlacedGaussians | None = None) -> SceneCameraRender:
        """Render C camera frames in one call (``SceneCameraRender.image`` is ``[C, H, W, 3]``); as
        :meth:`camera` otherwise."""
        g = placed if placed is not None else self.place(views.time)
        raw = render_cameras(g.means, g.quats, g.scales, g.opacities, g.sh, views.batch,
                             sh_degree=self.scene.sh_degree, settings=settings or _IMAGE_ONLY)
        image = self._finish(raw.rgb, raw.alpha, views.rays_camera, views.R_world_camera,
                             self.scene.exposure[views.camera_indices], self.scene.vignetting[views.camera_indices],
                             views.lens)
        return SceneCameraRender(image, raw)

    def _finish(self, rgb: torch.Tensor,  # [C, H, W, 3] Gaussians over black
                alpha: torch.Tensor,  # [C, H, W]
                rays: torch.Tensor,  # [C, H, W, 3] camera frame
                R_world_camera: torch.Tensor,  # [C, 3, 3]
                exposure: torch.Tensor,  # [C, 6] log gains, biases
                vignetting: torch.Tensor,  # [C, 2] (k1, k2)
                lens: torch.Tensor | None,  # [C, H, W] bool
                ) -> torch.Tensor:  # [C, H, W, 3]
        """The Gaussians over the sky, then each camera's exposure and lens falloff (``Scene``),
        and black outside its lens."""
        dirs = torch.einsum("chwj,ckj->chwk", rays, R_world_camera)  # world directions
        image = rgb + (1.0 - alpha)[..., None] * self.sky(dirs)
        u = 1.0 - rays[..., 2]  # [C, H, W] 1 - cos of the angle off the optical axis
        falloff = u * (vignetting[:, 0, None, None] + u * vignetting[:, 1, None, None])  # [C, H, W] log gain
        image = image * (exposure[:, None, None, :3] + falloff[..., None]).exp() + exposure[:, None, None, 3:]
        if lens is not None:  # outside the lens's field of view the sensor sees black
            image = image * lens[..., None].to(image.dtype)
        return image

    def lidar(self, batch: LidarBatch, t: torch.Tensor,  # t: [] seconds, the sweep's middle: actors are placed then
              settings: LidarRenderSettings | None = None, placed: PlacedGaussians | None = None,
              motion: torch.Tensor | None = None) -> LidarRender:
        """Render one lidar sweep (``batch`` carries the lidar's poses over the sweep).

        Actors' Gaussians are seen where they are when their column fires: ``motion`` (each
        Gaussian's position at the sweep's end minus at its start, see ``render_lidar``)
        defaults to the scene's own (``sweep_motion``, unless the renderer was made with
        ``actor_motion=False``), so ``placed`` must then be this scene's Gaussians.
        """
        g = placed if placed is not None else self.place(t)
        if motion is None and self.actor_motion:
            motion = self.sweep_motion(t, 1.0 / batch.scan_rate_hz)
        return render_lidar(g.means, g.quats, g.scales, g.opacities, g.intensities, batch, settings, motion=motion)

    def sweep_motion(self, t: torch.Tensor, period_s: float) -> torch.Tensor | None:  # t: [] seconds
        """Each Gaussian's position at ``t + period_s / 2`` minus at ``t - period_s / 2`` (no
        gradient), ``[N, 3]``; None for a scene without actors (nothing moves)."""
        s = self.scene
        if not s.tracks or s.actors.means.shape[0] == 0:
            return None
        with torch.no_grad():
            ends = [interpolate_gaussians(t + dt, s.static.means, s.static.quats, s.actors.means, s.actors.quats,
                                          s.actor_index, self.keys, s.pose_corrections)[0]
                    for dt in (-0.5 * period_s, 0.5 * period_s)]
        return ends[1] - ends[0]


def sky_colors(sky: torch.Tensor,  # [3, H, W] pre-sigmoid equirectangular map
               directions: torch.Tensor,  # [..., 3] unit, world (Z up)
               ) -> torch.Tensor:  # [..., 3]
    """Bilinear lookup in the equirectangular sky map, wrapping around in azimuth.

    On a GPU the Warp kernels of ``nurec_usd.ops.sky`` (their backward adds into the small map
    without the twin's contended atomics); the torch twin on the CPU, where it is the faster, and
    when the directions need a gradient, which the kernels do not give.
    """
    if not directions.is_cuda or (directions.requires_grad and torch.is_grad_enabled()):
        return sky_colors_reference(sky, directions)
    return sky_lookup(sky, directions)


def with_single_camera(batch: CameraBatch, index: int) -> CameraBatch:
    """Camera ``index`` of a batch as a batch of one (views of the same tensors; no host sync)."""
    pick = lambda t: t[index:index + 1]  # noqa: E731
    return dataclasses.replace(batch, model=pick(batch.model), params=pick(batch.params),
                               rot_start=pick(batch.rot_start), trans_start=pick(batch.trans_start),
                               rot_end=pick(batch.rot_end), trans_end=pick(batch.trans_end),
                               shutter=pick(batch.shutter))
