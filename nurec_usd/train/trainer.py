"""The reconstruction loop: interpolate(t) -> render cameras and lidar -> losses -> backward -> fused Adam.

A step takes a group of frames recorded together (every camera's frame of one instant, in one
render call: ``cameras_per_step``) and ``sweeps_per_step`` lidar sweeps. Its losses are the
sum over its camera views, and the lidar and regularising terms are weighted by the number of
views, so a step of C views gives the gradient of C one-view steps.

The schedule (learning-rate decay, SH degree, refinements, the coarse-to-fine switch) follows
the run's progress: the fraction of the steps done, or with a time budget the fraction of the
budget spent, so that a run cut short by its budget still completes its schedule.

A step reads nothing back from the device: the frames and sweeps are chosen on the host, the
intersection buffers have fixed capacities sized from earlier steps' counts (copied back
without blocking), and losses stay on the device. Every ``log_interval`` steps the loss and
PSNR are read back (one sync) for the progress bar, the divergence check and the log; at each
refinement the relocation and growth are queued like a step (their counts are read with the next log).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import torch

from nurec_usd.ops.adam import FusedAdam
from nurec_usd.ops.camera import IntersectionCapacity, RenderSettings
from nurec_usd.ops.lidar import LidarRenderSettings
from nurec_usd.render.scene_renderer import SceneRenderer
from nurec_usd.scene.gaussians import GaussianParams, Scene
from nurec_usd.train.appearance import FrameAppearance
from nurec_usd.train.config import TrainConfig
from nurec_usd.train.data import CaptureData, FrameGroup
from nurec_usd.train.densify import perturb_transparent, relocate_and_grow
from nurec_usd.train.lidar_depth import LidarDepthTargets, depth_loss
from nurec_usd.train.losses import image_loss, lidar_loss, regularisers
from nurec_usd.train.metrics import psnr
from nurec_usd.util.profiling import StepProfiler


@dataclass
class TrainResult:
    """What a training run did."""

    steps: int  # steps completed
    status: str  # "completed", "budget" (stopped at the wall-clock budget), "interrupted" or "diverged"
    message: str
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)  # one row per log interval
    overflows: int = 0  # steps whose intersections exceeded the buffer (re-sized afterwards)
    # wall seconds of parts of the run (refinements, read-backs, the coarse phase: the profile's rows)
    part_seconds: dict[str, float] = field(default_factory=dict)


def _as_parameters(params: GaussianParams) -> GaussianParams:
    return params.map(lambda t: torch.nn.Parameter(t.detach().contiguous()))


def _read_counts(rows: list[dict[str, Any]]) -> None:
    """Replace the device tensors among the rows' values by ints (and empty the list)."""
    for row in rows:
        row.update({k: int(v) for k, v in row.items() if isinstance(v, torch.Tensor)})
    rows.clear()


class Trainer:
    """Optimises a ``Scene`` (in place) against a ``CaptureData``."""

    GROUPS = {"means": "lr_means", "quats": "lr_quats", "log_scales": "lr_scales", "opacity_logits": "lr_opacity",
              "sh0": "lr_sh0", "shN": "lr_shN", "intensity_logits": "lr_intensity"}

    def __init__(self, scene: Scene, data: CaptureData, config: TrainConfig,
                 log: Callable[[str], None] | None = None, profiler: StepProfiler | None = None,
                 depth_targets: LidarDepthTargets | None = None):
        """``profiler``: times the parts of a window of steps (``nurec_usd.util.profiling``); None: off.
        ``depth_targets``: the lidar's depths of the training frames, for the ``depth_weight`` term
        (None: the term is off)."""
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
        scene.vignetting = torch.nn.Parameter(scene.vignetting.detach().contiguous(),
                                              requires_grad=config.lr_vignetting > 0)
        self.groups = data.groups(data.train_frames, config.cameras_per_step)
        self.lr_scale, betas = self._batch_rule(sum(len(g.frames) for g in self.groups) / len(self.groups))
        groups = []
        for set_name in ("static", "actors"):
            for name, lr_key in self.GROUPS.items():
                groups.append({"params": [getattr(getattr(scene, set_name), name)],
                               "lr": getattr(config, lr_key) * self.lr_scale, "name": f"{set_name}.{name}"})
        groups.append({"params": [scene.sky], "lr": config.lr_sky * self.lr_scale, "name": "sky"})
        groups.append({"params": [scene.exposure], "lr": config.lr_exposure * self.lr_scale, "name": "exposure"})
        if config.lr_vignetting > 0:
            groups.append({"params": [scene.vignetting], "lr": config.lr_vignetting * self.lr_scale,
                           "name": "vignetting"})
        self.appearance = None  # per-frame colour corrections, training only (nurec_usd.train.appearance)
        if config.frame_appearance != "off":
            self.appearance = FrameAppearance(data, config.frame_appearance)
            groups.append({"params": [self.appearance.delta], "lr": config.lr_frame_appearance * self.lr_scale,
                           "name": "frame_appearance"})
        if config.refine_tracks and scene.tracks:
            k = sum(len(t.times) for t in scene.tracks)
            scene.pose_corrections = tuple(torch.nn.Parameter(torch.zeros(k, 3, device=self.device)) for _ in range(2))
            groups.append({"params": list(scene.pose_corrections), "lr": config.lr_track * self.lr_scale,
                           "name": "tracks"})
        self.optimizer = FusedAdam(groups, betas=betas)
        self.renderer = SceneRenderer(scene, actor_motion=config.lidar_actor_motion)
        self.depth_targets = depth_targets if config.depth_weight > 0 else None
        self.exact = self.device.type != "cuda"  # on the CPU a host read costs nothing: size buffers exactly
        # one capacity per kind of render (camera set and level, or lidar): their counts differ
        self.capacities: dict[tuple, IntersectionCapacity] = {}
        self._last: dict[tuple, Any] = {}  # the latest render of each kind (its exact count sizes the buffer)
        self._fresh: list[tuple] = []  # kinds first rendered in this step: sized exactly, then synced once
        self._group_order: list[int] = []
        self._sweep_order: list[int] = []
        self.prof = profiler or StepProfiler(self.device, 0, enabled=False)
        self.progress = 0.0  # fraction of the run done (steps, or the time budget)
        self.max_gaussians = config.max_gaussians
        # [N] screen-space position gradient sums since the last refinement, and with
        # relocate_weight="gradient_mean" the views that gave each one (relocation's sources);
        # made by the first step that needs them
        self.grad2d_sums: torch.Tensor | None = None
        self.grad2d_counts: torch.Tensor | None = None
        self.position_scale = float(scene.metadata.get("position_scale", 1.0))  # see initialize_scene

    def _batch_rule(self, views: float) -> tuple[float, tuple[float, float]]:
        """Adam's learning-rate factor and betas for steps of ``views`` camera views each.

        The learning rates are tuned for one view a step. A step of C views holds the gradients of
        C such steps, and most Gaussians are seen by one camera of an instant, so a batch must
        move them as C one-view steps would: with ``lr_batch_scale`` "sqrt" (the rule for Adam when
        the views' gradients are independent) the rates grow by sqrt(C) and the betas become
        beta^C, so that the moments forget at the same rate per view; "linear" grows the rates by
        C (the same betas); "none" leaves both.
        """
        rule = self.cfg.lr_batch_scale
        if rule == "none" or views <= 1:
            return 1.0, (0.9, 0.999)
        if rule == "sqrt":
            return math.sqrt(views), (0.9 ** views, 0.999 ** views)
        return views, (0.9, 0.999)  # "linear" (the option's declared choices)

    # -- sampling (host only) --------------------------------------------------------------

    def _next(self, order: list[int], count: int) -> int:
        if not order:
            order.extend(self.rng.permutation(count).tolist())
        return order.pop()

    # -- one step --------------------------------------------------------------------------

    def _settings(self, kind: tuple, make: Callable[[int], Any]) -> Any:
        """Render settings for a kind of render: None (exact size, one sync) the first time or on
        the CPU; else a fixed capacity grown from earlier counts."""
        if self.exact:
            return None
        cap = self.capacities.get(kind)
        if cap is None:
            self.capacities[kind] = IntersectionCapacity(initial=1 << 22)
            self._fresh.append(kind)
            return None
        return make(cap.settings().capacity)

    def _observe(self, kind: tuple, render: Any) -> None:
        self._last[kind] = render
        if not self.exact:
            self.capacities[kind].observe(render)

    def level(self) -> int:
        """How many times smaller than stored the images are rendered now (the coarse-to-fine schedule)."""
        cfg = self.cfg
        return cfg.coarse_downscale if self.progress < cfg.coarse_fraction and cfg.coarse_downscale > 1 else 1

    def step(self, step: int) -> dict[str, torch.Tensor]:
        """One optimisation step; returns device tensors (loss, psnr, overflow)."""
        cfg, data, scene, prof = self.cfg, self.data, self.scene, self.prof
        with prof.part("frames"):
            group: FrameGroup = self.groups[self._next(self._group_order, len(self.groups))]
            level = self.level()
            views = data.camera_views(group, level)
            target, mask = data.target_images(group, level)
            kind = ("camera", level, tuple(ref.camera for ref in group.frames))
            use_depth = self.depth_targets is not None
            settings = self._settings(kind, lambda c: RenderSettings(capacity=c, depth=use_depth))
            # the sums are read by refinements only: none after the last one
            sums = (self._grad2d_sums() if cfg.relocate_weight != "opacity"
                    and self.progress < cfg.refine_stop_fraction else None)
            if settings is None and (use_depth or sums is not None):  # exact size
                settings = RenderSettings(depth=use_depth)  # (the renderer's default renders no depth)
            if sums is not None:
                settings = replace(settings, grad2d_sums=sums, grad2d_counts=self.grad2d_counts)
        with prof.part("camera forward"):
            out = self.renderer.cameras(views, settings)
        with prof.part("camera loss"):
            n_views = len(group.frames)
            image = out.image
            if self.appearance is not None:
                image, corrections = self.appearance.apply(image, group, views.lens)
            loss = image_loss(image, target, mask, cfg.ssim_weight)
            if self.appearance is not None:
                loss = loss + cfg.frame_appearance_reg * self.appearance.penalty(corrections)
            if use_depth:
                flat, depths = self.depth_targets.gathered(group, level)
                loss = loss + cfg.depth_weight * n_views * depth_loss(out.raw.depth, flat, depths)
            overflow = out.raw.overflow.int()
            self._observe(kind, out.raw)
        if cfg.lidar_every and data.train_sweeps and step % cfg.lidar_every == 0:
            weight = n_views / cfg.sweeps_per_step  # as many views' worth of lidar as the step has camera views
            for _ in range(cfg.sweeps_per_step):
                with prof.part("lidar forward"):
                    sref = data.train_sweeps[self._next(self._sweep_order, len(data.train_sweeps))]
                    batch, t = data.lidar_batch(sref)
                    true_range, true_int = data.lidar_target(sref)
                    lkind = ("lidar", sref.lidar)
                    lset = self._settings(lkind, lambda c: LidarRenderSettings(capacity=c))
                    lid = self.renderer.lidar(batch, t, lset)
                with prof.part("lidar loss"):
                    loss = loss + weight * lidar_loss(lid.range, lid.hit_prob, lid.intensity, true_range, true_int,
                                                      cfg.lidar_range_weight, cfg.lidar_hit_weight,
                                                      cfg.lidar_intensity_weight)
                    overflow = overflow + lid.overflow.int()
                    self._observe(lkind, lid)
        with prof.part("regularisers"):
            s, a = scene.static, scene.actors
            loss = loss + n_views * regularisers(torch.cat((s.opacity_logits, a.opacity_logits)),
                                                 torch.cat((s.log_scales, a.log_scales)), cfg.opacity_reg,
                                                 cfg.scale_reg)
            # A render that overflowed its intersection buffer lost Gaussians (the last ones: actors
            # and new ones first): such a step contributes no gradient (decided on the device).
            applied = loss * (overflow.sum() == 0).to(loss.dtype)
        with prof.part("backward"):
            self.optimizer.zero_grad(set_to_none=True)
            applied.backward()
        with prof.part("adam"):
            self.optimizer.step()
        with prof.part("perturb"):
            decay = self._lr_factor()
            for p in (scene.static, scene.actors):
                perturb_transparent(p, cfg.noise_scale * decay, cfg.noise_opacity or cfg.dead_opacity, self.gen)
                if cfg.max_scale_m > 0:
                    with torch.no_grad():
                        p.log_scales.clamp_(max=math.log(cfg.max_scale_m))
            with torch.no_grad():
                quality = psnr(image.detach().clamp(0, 1), target, mask)
        return {"loss": loss.detach(), "psnr": quality, "overflow": overflow.sum()}

    def _lr_factor(self) -> float:
        """Exponential decay of the position learning rate: 1 at the start, 0.01 at the end."""
        return 0.01 ** min(1.0, self.progress)

    def _schedule(self) -> None:
        cfg = self.cfg
        factor = self._lr_factor()
        for group in self.optimizer.param_groups:
            if group["name"].endswith(".means"):
                group["lr"] = cfg.lr_means * self.position_scale * factor * self.lr_scale
        self.scene.sh_degree = min(cfg.sh_degree, int(self.progress / max(cfg.sh_step_fraction, 1e-9)))

    def _grad2d_sums(self) -> torch.Tensor:  # [N] static then actor Gaussians, as the renderer places them
        """The screen-space gradient sums since the last refinement (zeros for the current count
        after one); with relocate_weight="gradient_mean", ``grad2d_counts`` alongside."""
        n = self.scene.num_gaussians
        if self.grad2d_sums is None or self.grad2d_sums.numel() != n:
            self.grad2d_sums = torch.zeros(n, dtype=torch.float32, device=self.device)
            self.grad2d_counts = (torch.zeros_like(self.grad2d_sums) if self.cfg.relocate_weight == "gradient_mean"
                                  else None)
        return self.grad2d_sums

    def _refine(self) -> dict[str, Any]:  # counts: ints, or 0-dim device tensors (read at the next log)
        cfg, scene = self.cfg, self.scene
        total = scene.num_gaussians
        room = max(0, self.max_gaussians - total)
        add = min(room, int(len(scene.static) * (cfg.grow_factor - 1)))
        s_weights = a_weights = None
        if cfg.relocate_weight != "opacity":
            weights = self._grad2d_sums()
            if self.grad2d_counts is not None:  # the mean over the views that saw each
                weights = weights / self.grad2d_counts.clamp_min(1)
            s_weights, a_weights = weights.split([len(scene.static), len(scene.actors)])
        options = {"dead_opacity": cfg.dead_opacity, "max_fraction": cfg.relocate_max_fraction,
                   "jitter": cfg.relocate_jitter, "generator": self.gen}
        with self.prof.part("refine: static set"):
            scene.static, _, s_stats = relocate_and_grow(scene.static, self.optimizer, add=add,
                                                         source_weights=s_weights, **options)
        with self.prof.part("refine: actor set"):
            scene.actors, index, a_stats = relocate_and_grow(scene.actors, self.optimizer, add=0,
                                                             actor_index=scene.actor_index,
                                                             source_weights=a_weights, **options)
        if index is not None:
            scene.actor_index = index
        self.grad2d_sums = self.grad2d_counts = None  # the next interval's start afresh
        return {"relocated": s_stats["relocated"] + a_stats["relocated"], "added": s_stats["added"],
                "dead": s_stats["dead"] + a_stats["dead"]}

    # -- the loop --------------------------------------------------------------------------

    def _read_back(self, pending: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        """The pending steps' losses and PSNRs on the host, their overflow count, and how many
        parameter values are not finite (one synchronisation)."""
        losses = torch.stack([p["loss"] for p in pending]).cpu()
        psnrs = torch.stack([p["psnr"] for p in pending]).cpu()
        overflowed = int(torch.stack([p["overflow"] for p in pending]).sum())
        return losses, psnrs, overflowed, int(self._nonfinite_parameters())

    def _nonfinite_parameters(self) -> torch.Tensor:  # [] on the device
        """How many parameter values are NaN or infinite (NaN means can hide behind a finite loss:
        the renderer culls such Gaussians)."""
        tensors = [*self.scene.static.tensors().values(), *self.scene.actors.tensors().values(),
                   self.scene.sky, self.scene.exposure, self.scene.vignetting]
        if self.appearance is not None:  # not exported, but a NaN correction poisons the scene's gradients
            tensors.append(self.appearance.delta)
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
        next_refine = cfg.refine_start_fraction
        last_log = 0
        prof = self.prof
        parts = {"refinements": 0.0, "read-backs (sync)": 0.0}
        unread: list[dict[str, Any]] = []  # refinement rows whose counts are still on the device
        level = None
        try:
            for step in range(cfg.steps):
                elapsed = time.monotonic() - start
                self.progress = step / cfg.steps if budget_s is None else max(step / cfg.steps, elapsed / budget_s)
                if level is not None and self.level() != level:  # the coarse phase ends (one sync, once)
                    self._synchronize()
                    parts["coarse phase"] = time.monotonic() - start
                level = self.level()
                prof.begin_step(step)
                self._schedule()
                pending.append(self.step(step))
                for kind in self._fresh:  # size new buffers from their first exact counts (one sync)
                    self.capacities[kind].sync_grow(self._last[kind])
                self._fresh.clear()
                done = step + 1
                if self.progress >= next_refine:
                    if self.progress < cfg.refine_stop_fraction and step > 0:
                        t0 = time.monotonic()
                        with prof.part("refine"):
                            before = scene.num_gaussians
                            stats = self._refine()
                            with prof.part("refine: capacities"):
                                self._grow_capacities(scene.num_gaussians / max(1, before))
                        parts["refinements"] += time.monotonic() - t0  # host time (queued, not waited for)
                        # its counts are device tensors: read with the next log's (one sync for both)
                        event = {"step": done, "event": "refine", **stats, "gaussians": scene.num_gaussians,
                                 "seconds": round(time.monotonic() - start, 3)}
                        unread.append(event)  # (first: a Ctrl-C between the two leaves no tensor in the log)
                        history.append(event)
                    while next_refine <= self.progress:  # one refinement however far progress jumped
                        next_refine += max(cfg.refine_every_fraction, 1e-9)
                at_log = done % cfg.log_interval == 0 or done == cfg.steps
                over_budget = budget_s is not None and time.monotonic() - start >= budget_s
                read = None
                if at_log or over_budget:
                    t0 = time.monotonic()
                    with prof.part("log (sync)"):
                        read = self._read_back(pending)
                    parts["read-backs (sync)"] += time.monotonic() - t0  # mostly waiting for the GPU
                    pending.clear()
                prof.end_step(step)
                if read is None:
                    continue
                _read_counts(unread)
                losses, psnrs, overflowed, nonfinite = read
                overflows += overflowed
                if not bool(torch.isfinite(losses).all()) or nonfinite:
                    bad = losses[~torch.isfinite(losses)]
                    what = (f"the loss became {'NaN' if bool(bad[0].isnan()) else float(bad[0])}" if bad.numel()
                            else f"{nonfinite} parameter values became NaN or infinite")
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
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM where the caller turns it into one (nurec_usd.util.interrupts)
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
        self._synchronize()
        _read_counts(unread)
        return TrainResult(done, status, message, time.monotonic() - start, history, overflows, parts)

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _grow_capacities(self, factor: float) -> None:
        """The count grew at a refinement: make room for the latest intersection counts that have
        reached the host scaled by the growth, so that the next steps do not overflow (without
        waiting for the device)."""
        if self.exact or factor <= 1:
            return
        for cap in self.capacities.values():
            cap.grow_by(factor)

    def _restore(self, checkpoint: Scene) -> None:
        """Put the checkpoint's values back (as fresh parameters; the optimizer is not used again)."""
        s = self.scene
        s.static, s.actors = checkpoint.static, checkpoint.actors
        s.actor_index, s.sky, s.exposure = checkpoint.actor_index, checkpoint.sky, checkpoint.exposure
        s.vignetting = checkpoint.vignetting
        s.pose_corrections, s.sh_degree = checkpoint.pose_corrections, checkpoint.sh_degree
