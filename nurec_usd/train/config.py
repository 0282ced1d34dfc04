"""Build configuration: presets ``fast`` and ``quality``, resolved and saved with every run."""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from dataclasses import dataclass, field
from typing import Any

from nurec_usd.scene.init import InitConfig


@dataclass
class TrainConfig:
    """The training loop's options. Learning rates are Adam's, per parameter group."""

    steps: int = 3000  # optimisation steps (each takes a group of frames recorded together)
    seed: int = 0
    eval_every: int = 8  # frames / sweeps with index % eval_every == eval_every // 2 are held out
    downscale: int = 1  # train and evaluate on images shrunk by this factor
    max_gaussians: int = 1_000_000  # cap on static + actor Gaussians (MCMC-style relocation keeps under it)
    sh_degree: int = 3
    sh_step_fraction: float = 1 / 6  # one more SH degree every this fraction of the run
    # what a step renders
    cameras_per_step: int = 0  # frames recorded together rendered in one step: 0 every camera's, 1 one frame
    coarse_fraction: float = 0.0  # the first this fraction of the run renders images coarse_downscale times smaller
    coarse_downscale: int = 2
    # losses
    ssim_weight: float = 0.2
    lidar_every: int = 1  # lidar sweeps every this many steps (0: never)
    sweeps_per_step: int = 1  # sweeps rendered in a lidar step (their loss shares the views' weight)
    # relative range error; weighed against the image terms on drive30 (benchmarks/RESULTS.md)
    lidar_range_weight: float = 1.0
    lidar_hit_weight: float = 0.02
    lidar_intensity_weight: float = 0.01
    # training's sweeps see actors where they are when each column fires (their motion over the sweep
    # from their tracks); False: every actor at the sweep's middle, as builds before 2026-12-02 did.
    # Evaluation and replay always follow the actors.
    lidar_actor_motion: bool = True
    opacity_reg: float = 0.01
    scale_reg: float = 0.01
    # learning rates
    lr_means: float = 1.6e-3  # metres (Adam steps are about lr long; camera-only captures scale it by
    # their rig path's spread / 10); decays 100x over the run
    lr_quats: float = 1e-3
    lr_scales: float = 5e-3
    lr_opacity: float = 5e-2
    lr_sh0: float = 2.5e-3
    lr_shN: float = 1.25e-4
    lr_intensity: float = 2e-2
    lr_sky: float = 1e-2
    lr_exposure: float = 1e-3
    lr_track: float = 1e-4  # pose corrections, when refine_tracks
    # how the rates above (tuned for one camera view a step) follow the views in a step: "sqrt"
    # (rates x sqrt(views), Adam's betas ^ views), "linear" (rates x views) or "none"
    lr_batch_scale: str = "sqrt"
    refine_tracks: bool = False
    # MCMC-style relocation and growth, at fractions of the run
    refine_start_fraction: float = 1 / 15
    refine_stop_fraction: float = 0.8  # no relocation in the last 20% of the run
    refine_every_fraction: float = 1 / 30
    grow_factor: float = 1.05  # Gaussians added per refinement, as a factor of the count (up to the cap)
    dead_opacity: float = 0.005
    noise_scale: float = 0.1  # position noise of near-transparent Gaussians, in units of their own scale
    # bookkeeping
    log_interval: int = 25  # loss / PSNR read back (one host sync) every this many steps
    checkpoint_interval: int = 200  # last good state kept in memory for divergence recovery


@dataclass
class BuildConfig:
    """Everything ``build`` needs besides the capture: the preset it came from, init and training options."""

    preset: str = "fast"
    device: str = "auto"
    budget_s: float | None = None  # training ends gracefully at this wall-clock budget
    init: InitConfig = field(default_factory=InitConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    # fast: the turnaround preset (benchmarks/RESULTS.md, drive30). It starts near the Gaussian cap,
    # half-opaque, with 4x 3DGS's scale and position learning rates: its short run has no time to
    # grow the count or to move Gaussians far at the usual rates. Three sweeps a step (sharing the
    # lidar term's weight) see more of the capture's rays: a lower held-out lidar error.
    "fast": {"train": {"steps": 600, "sh_degree": 1, "sh_step_fraction": 1 / 3, "max_gaussians": 1_000_000,
                       "lr_scales": 0.02, "lr_means": 6.4e-3, "coarse_fraction": 0.5, "sweeps_per_step": 3},
             "init": {"voxel_m": 0.05, "max_points": 1_000_000, "opacity": 0.5}},
    # quality: about as many camera views as 3DGS's 30,000 one-view steps
    "quality": {"train": {"steps": 5000, "sh_degree": 3, "sh_step_fraction": 1 / 30, "max_gaussians": 3_000_000,
                          "refine_every_fraction": 1 / 300},
                "init": {"voxel_m": 0.05, "max_points": 1_500_000}},
}


def option_names() -> list[str]:
    """The training and init options a build takes as overrides (``make_config``), sorted."""
    return sorted({f.name for f in dataclasses.fields(TrainConfig)} | {f.name for f in dataclasses.fields(InitConfig)})


def unknown_option(key: str) -> str:
    """The message for an option that does not exist, with the nearest name when one is close."""
    near = difflib.get_close_matches(key, option_names(), n=1)
    return f"unknown build option {key!r}" + (f"; did you mean {near[0]!r}?" if near else "")


def _typed(options: type, key: str, value: Any) -> Any:
    """``value`` as option ``key`` of the dataclass ``options`` takes it, by the type of its
    default (a float option also takes an integer); ValueError naming the option otherwise."""
    default = next(f.default for f in dataclasses.fields(options) if f.name == key)
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        kind = "True or False"
    elif isinstance(default, int):
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        kind = "an integer"
    elif isinstance(default, float):
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        kind = "a number"
    else:
        return value
    raise ValueError(f"build option {key!r} takes {kind}, got {value!r}")


def _replaced(options: Any, values: dict[str, Any]) -> Any:
    return dataclasses.replace(options, **{k: _typed(type(options), k, v) for k, v in values.items()})


def make_config(preset: str = "fast", **overrides: Any) -> BuildConfig:
    """A preset with overrides; ``train.*`` / ``init.*`` keys may be given as ``steps=...`` (searched in
    train, then init) or as nested dicts ``train={...}``. Unknown keys, and values of the wrong
    type, raise ValueError naming them."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    cfg = BuildConfig(preset=preset)
    values = PRESETS[preset]
    cfg.train = dataclasses.replace(cfg.train, **values.get("train", {}))
    cfg.init = dataclasses.replace(cfg.init, **values.get("init", {}))
    train_keys = {f.name for f in dataclasses.fields(TrainConfig)}
    init_keys = {f.name for f in dataclasses.fields(InitConfig)}
    for key, value in overrides.items():
        if value is None and key not in ("budget_s",):
            continue
        if key in ("train", "init"):
            target = cfg.train if key == "train" else cfg.init
            allowed = train_keys if key == "train" else init_keys
            unknown = set(value) - allowed
            if unknown:
                raise ValueError(f"unknown {key} options: {', '.join(sorted(unknown))}")
            setattr(cfg, key, _replaced(target, value))
        elif key in ("device", "budget_s"):
            setattr(cfg, key, value)
        elif key in train_keys:
            cfg.train = _replaced(cfg.train, {key: value})
        elif key in init_keys:
            cfg.init = _replaced(cfg.init, {key: value})
        else:
            raise ValueError(unknown_option(key))
    # the Gaussian cap bounds the start too (static points; actors are few)
    cfg.init = dataclasses.replace(cfg.init, max_points=min(cfg.init.max_points, cfg.train.max_gaussians))
    return cfg
