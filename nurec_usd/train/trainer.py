"""The reconstruction loop: interpolate(t) -> render camera and lidar -> losses -> backward -> fused Adam.

A step reads nothing back from the device: the frame and sweep are chosen on the host, the
intersection buffers have fixed capacities sized from earlier steps' counts (copied back
without blocking), and losses stay on the device. Every ``log_interval`` steps the loss and
PSNR are read back (one sync) for the progress bar, the divergence check and the log; every
``refine_interval`` steps the relocation and growth run (they sync: the number of dead
Gaussians sizes their work).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from nurec_usd.render.camera import IntersectionCapacity, RenderSettings
from nurec_usd.render.lidar import LidarRenderSettings
from nurec_usd.scene.gaussians import GaussianParams, Scene
from nurec_usd.scene.render import SceneRenderer
from nurec_usd.train.adam import FusedAdam
from nurec_usd.train.config import TrainConfig
from nurec_usd.train.data import CaptureData
from nurec_usd.train.densify import perturb_transparent, relocate_and_grow
from nurec_usd.train.losses import image_loss, lidar_loss, regularisers
from nurec_usd.train.metrics import psnr


@dataclass
class TrainResult:
    """What a training run did."""

    steps: int  # steps completed
    status: str  # "completed", "budget" (stopped at the wall-clock budget), "interrupted" or "diverged"
    message: str
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)  # one row per log interval
    overflows: int = 0  # steps whose intersections exceeded the buffer (re-sized afterwards)


def _as_parameters(params: GaussianParams) -> GaussianParams:
    return params.map(lambda t: torch.nn.Parameter(t.detach().contiguous()))


class Trainer:
    """Optimises a ``Scene`` (in place) against a ``CaptureData``."""

    GROUPS = {"means": "lr_means", "quats": "lr_quats", "log_scales": "lr_scales", "opacity_logits": "lr_opacity",
              "sh0": "lr_sh0", "shN": "lr_shN", "intensity_logits": "lr_intensity"}

    def __init__(self, scene: Scene, data: CaptureData, config: TrainConfig,
                 log: Callable[[str], None] | None = None):
        if not data.train_frames:
            raise ValueError("the capture has no camera frames to train on (all are held out, or there are none)")
        self.scene, self.data, self.cfg = scene, data, config
        self.say = log or (lambda _m: None)
        self.device = data.device
        self.rng = np.random.default_rng(config.seed)
        self.gen = torch.Generator(device=self.device).manual_seed(config.seed)
        scene.static = _as_parameters(scene.static)
        scene.actors = _as_parameters(scene.actors)
        scene.sky = torch.nn.Parameter(scene.sky.detach().contiguous())
        scene.exposure = torch.nn.Parameter(scene.exposure.detach().contiguous())
        groups = []
        for set_name in ("static", "actors"):
            for name, lr_key in self.GROUPS.items():
                groups.append({"params": [getattr(getattr(scene, set_name), name)], "lr": getattr(config, lr_key),
                               "name": f"{set_name}.{name}"})
        groups.append({"params": [scene.sky], "lr": config.lr_sky, "name": "sky"})
        groups.append({"params": [scene.exposure], "lr": config.lr_exposure, "name": "exposure"})
        if config.refine_tracks and scene.tracks:
            k = sum(len(t.times) for t in scene.tracks)
            scene.pose_corrections = tuple(torch.nn.Parameter(torch.zeros(k, 3, device=self.device)) for _ in range(2))
            groups.append({"params": list(scene.pose_corrections), "lr": config.lr_track, "name": "tracks"})
        self.optimizer = FusedAdam(groups)
        self.renderer = SceneRenderer(scene, actor_motion=config.lidar_actor_motion)
        self.exact = self.device.type != "cuda"  # on the CPU a host read costs nothing: size buffers exactly
        self.cam_capacity = IntersectionCapacity(initial=1 << 22)
        self.lidar_capacity = IntersectionCapacity(initial=1 << 22)
        self._last_camera: Any = None  # the latest renders (their exact counts size the buffers after step 0)
        self._last_lidar: Any = None
        self._frame_order: list[int] = []
        self._sweep_order: list[int] = []
        self.max_gaussians = config.max_gaussians
        self.position_scale = float(scene.metadata.get("position_scale", 1.0))  # see initialize_scene

    # -- sampling (host only) --------------------------------------------------------------

    def _next(self, order: list[int], count: int) -> int:
        if not order:
            order.extend(self.rng.permutation(count).tolist())
        return order.pop()

    # -- one step --------------------------------------------------------------------------

    def _settings(self, step: int) -> tuple[RenderSettings | None, LidarRenderSettings | None]:
        if self.exact or step == 0:  # the first step sizes the buffers exactly (one sync)
            return None, None
        cam = self.cam_capacity.settings(depth=False)  # the losses use no camera depth
        self.lidar_capacity.settings()
        return cam, LidarRenderSettings(capacity=self.lidar_capacity.capacity)

    def step(self, step: int) -> dict[str, torch.Tensor]:
        """One optimisation step; returns device tensors (loss, psnr, overflow)."""
        cfg, data, scene = self.cfg, self.data, self.scene
        cam_settings, lidar_settings = self._settings(step)
        ref = data.train_frames[self._next(self._frame_order, len(data.train_frames))]
        view = data.camera_view(ref)
        target, mask = data.target_image(ref)
        out = self.renderer.camera(view, cam_settings)
        loss = image_loss(out.image, target, mask, cfg.ssim_weight)
        overflow = out.raw.overflow.int()
        self.cam_capacity.observe(out.raw)
        self._last_camera = out.raw
        if cfg.lidar_every and data.train_sweeps and step % cfg.lidar_every == 0:
            sref = data.train_sweeps[self._next(self._sweep_order, len(data.train_sweeps))]
            batch, t = data.lidar_batch(sref)
            true_range, true_int = data.lidar_target(sref)
            lid = self.renderer.lidar(batch, t, lidar_settings)
            loss = loss + lidar_loss(lid.range, lid.hit_prob, lid.intensity, true_range, true_int,
                                     cfg.lidar_range_weight, cfg.lidar_hit_weight, cfg.lidar_intensity_weight)
            overflow = overflow + lid.overflow.int()
            self.lidar_capacity.observe(lid)
            self._last_lidar = lid
        s, a = scene.static, scene.actors
        loss = loss + regularisers(torch.cat((s.opacity_logits, a.opacity_logits)),
                                   torch.cat((s.log_scales, a.log_scales)), cfg.opacity_reg, cfg.scale_reg)
        # A render that overflowed its intersection buffer lost Gaussians (the last ones: actors
        # and new ones first): such a step contributes no gradient (decided on the device).
        applied = loss * (overflow.sum() == 0).to(loss.dtype)
        self.optimizer.zero_grad(set_to_none=True)
        applied.backward()
        self.optimizer.step()
        decay = self._lr_factor(step)
        for p in (scene.static, scene.actors):
            perturb_transparent(p, cfg.noise_scale * decay, cfg.dead_opacity, self.gen)
        with torch.no_grad():
            quality = psnr(out.image.detach().clamp(0, 1), target, mask)
        return {"loss": loss.detach(), "psnr": quality, "overflow": overflow.sum()}

    def _lr_factor(self, step: int) -> float:
        """Exponential decay of the position learning rate: 1 at the start, 0.01 at the end."""
        return 0.01 ** (step / max(1, self.cfg.steps - 1))

    def _schedule(self, step: int) -> None:
        cfg = self.cfg
        factor = self._lr_factor(step)
        for group in self.optimizer.param_groups:
            if group["name"].endswith(".means"):
                group["lr"] = cfg.lr_means * self.position_scale * factor
        self.scene.sh_degree = min(cfg.sh_degree, step // max(1, cfg.sh_interval))

    def _refine(self, step: int) -> dict[str, int]:
        cfg, scene = self.cfg, self.scene
        total = scene.num_gaussians
        room = max(0, self.max_gaussians - total)
        add = min(room, int(len(scene.static) * (cfg.grow_factor - 1)))
        scene.static, _, s_stats = relocate_and_grow(scene.static, self.optimizer, dead_opacity=cfg.dead_opacity,
                                                     add=add, generator=self.gen)
        scene.actors, index, a_stats = relocate_and_grow(scene.actors, self.optimizer, dead_opacity=cfg.dead_opacity,
                                                         add=0, generator=self.gen, actor_index=scene.actor_index)
        if index is not None:
            scene.actor_index = index
        return {"relocated": s_stats["relocated"] + a_stats["relocated"], "added": s_stats["added"]}

    # -- the loop --------------------------------------------------------------------------

    def _nonfinite_parameters(self) -> torch.Tensor:  # [] on the device
        """How many parameter values are NaN or infinite (NaN means can hide behind a finite loss:
        the renderer culls such Gaussians)."""
        tensors = [*self.scene.static.tensors().values(), *self.scene.actors.tensors().values(),
                   self.scene.sky, self.scene.exposure]
        return torch.stack([(~torch.isfinite(t.detach())).sum() for t in tensors]).sum()

    def run(self, budget_s: float | None = None, progress: Any = None) -> TrainResult:
        """Train for ``cfg.steps`` steps or until ``budget_s`` seconds have passed.

        ``progress``: a tqdm-like object (``update``, ``set_postfix``) or None.
        On a non-finite loss or parameter the scene is restored to the last good checkpoint and
        the result's status is "diverged". Ctrl-C ends training like the budget does
        (status "interrupted"): what was learned so far is kept.
        """
        cfg, scene = self.cfg, self.scene
        start = time.monotonic()
        history: list[dict[str, Any]] = []
        # A checkpoint is trusted once the steps after it gave finite losses: the state taken at
        # one log ("candidate") becomes the checkpoint at the next log if that interval is clean.
        checkpoint, checkpoint_step = scene.detached(), 0
        candidate: tuple[Scene, int] | None = None
        overflows = 0
        pending: list[dict[str, torch.Tensor]] = []
        status, message, done = "completed", f"{cfg.steps} steps", 0
        refine_stop = int(cfg.steps * cfg.refine_stop_fraction)
        # short runs still refine: start by a fifth of the steps at the latest
        refine_start = min(cfg.refine_start, cfg.steps // 5)
        last_log = 0
        try:
            for step in range(cfg.steps):
                self._schedule(step)
                pending.append(self.step(step))
                if step == 0 and not self.exact:  # size the buffers from the first step's exact counts
                    self.cam_capacity.sync_grow(self._last_camera)
                    if self._last_lidar is not None:
                        self.lidar_capacity.sync_grow(self._last_lidar)
                done = step + 1
                if refine_start <= step < refine_stop and step % cfg.refine_interval == 0 and step > 0:
                    before = scene.num_gaussians
                    stats = self._refine(step)
                    self.renderer = SceneRenderer(scene, actor_motion=cfg.lidar_actor_motion)
                    self._grow_capacities(scene.num_gaussians / max(1, before))
                    history.append({"step": done, "event": "refine", **stats, "gaussians": scene.num_gaussians})
                at_log = done % cfg.log_interval == 0 or done == cfg.steps
                over_budget = budget_s is not None and time.monotonic() - start >= budget_s
                if not (at_log or over_budget):
                    continue
                losses = torch.stack([p["loss"] for p in pending]).cpu()
                psnrs = torch.stack([p["psnr"] for p in pending]).cpu()
                overflows += int(torch.stack([p["overflow"] for p in pending]).sum())
                nonfinite = int(self._nonfinite_parameters())
                pending.clear()
                if not bool(torch.isfinite(losses).all()) or nonfinite:
                    what = (f"the loss became {float(losses[~torch.isfinite(losses)][0])}"
                            if not bool(torch.isfinite(losses).all()) else f"{nonfinite} parameter values became "
                                                                           f"NaN or infinite")
                    self._restore(checkpoint)
                    status = "diverged"
                    message = (f"{what} between steps {last_log + 1} and {done}; the scene was restored to the "
                               f"checkpoint of step {checkpoint_step}")
                    done = checkpoint_step
                    break
                if candidate is not None:
                    checkpoint, checkpoint_step = candidate
                    candidate = None
                row = {"step": done, "loss": float(losses.mean()), "psnr": float(psnrs.mean()),
                       "gaussians": scene.num_gaussians, "sh_degree": scene.sh_degree,
                       "seconds": round(time.monotonic() - start, 3)}
                history.append(row)
                if progress is not None:
                    progress.update(done - last_log)
                    progress.set_postfix(loss=f"{row['loss']:.4f}", psnr=f"{row['psnr']:.2f}",
                                         gaussians=f"{row['gaussians']:,}", refresh=False)
                last_log = done
                if done % cfg.checkpoint_interval < cfg.log_interval:
                    candidate = (scene.detached(), done)
                if over_budget and done < cfg.steps:
                    status, message = "budget", f"stopped at the {budget_s:g} s budget after {done} of {cfg.steps} steps"
                    break
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM where the caller turns it into one (nurec_usd.interrupts)
            # Keep the state in memory: every finished step (`done`) is in it. A step cut short
            # applies its update per tensor or not at all, so the values stay whole; only a state
            # gone non-finite since the last check falls back to the last trusted checkpoint.
            status = "interrupted"
            if int(self._nonfinite_parameters()) == 0:
                message = f"interrupted after step {done}; kept the state of step {done}"
            else:
                self._restore(checkpoint)
                done = checkpoint_step
                message = (f"interrupted after the parameters became NaN or infinite; kept the checkpoint of "
                           f"step {checkpoint_step}")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return TrainResult(done, status, message, time.monotonic() - start, history, overflows)

    def _grow_capacities(self, factor: float) -> None:
        """The count grew at a refinement (a sync point already): make room for the latest renders'
        intersection counts scaled by the growth, so that the next steps do not overflow."""
        if self.exact:
            return
        for cap, render in ((self.cam_capacity, self._last_camera), (self.lidar_capacity, self._last_lidar)):
            if render is not None and factor > 1:
                cap.grow_to(int(int(render.intersections.item()) * factor))

    def _restore(self, checkpoint: Scene) -> None:
        """Put the checkpoint's values back (as fresh parameters; the optimizer is not used again)."""
        s = self.scene
        s.static, s.actors = checkpoint.static, checkpoint.actors
        s.actor_index, s.sky, s.exposure = checkpoint.actor_index, checkpoint.sky, checkpoint.exposure
        s.pose_corrections, s.sh_degree = checkpoint.pose_corrections, checkpoint.sh_degree
