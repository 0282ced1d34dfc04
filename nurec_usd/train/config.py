"""Build configuration: presets ``fast`` and ``quality``, resolved and saved with every run."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

from nurec_usd.capture.ego import BOX_FORMS, BOX_PATTERN, parse_box
from nurec_usd.scene.init import InitConfig
from nurec_usd.util.options import OptionError, check_device, check_fields, check_value, option


@dataclass
class TrainConfig:
    """The training loop's options. Learning rates are Adam's, per parameter group.

    Every option declares its range beside its default (``nurec_usd.util.options.option``); a
    value outside it is refused, naming the option, before anything runs.
    """

    steps: int = option(3000, low=1)  # optimisation steps (each takes a group of frames recorded together)
    seed: int = option(0, low=0, high=2**32 - 1)
    # frames / sweeps with index % eval_every == eval_every // 2 are held out (0: none; 1 would hold out all)
    eval_every: int = option(8, low=2, special=(0,))
    downscale: int = option(1, low=1, high=64)  # train and evaluate on images shrunk by this factor
    # cap on static + actor Gaussians (MCMC-style relocation keeps under it)
    max_gaussians: int = option(1_000_000, low=1, high=1_000_000_000)
    sh_degree: int = option(3, low=0, high=3)
    sh_step_fraction: float = option(1 / 6, low=0, high=1, low_open=True)  # one more SH degree every this fraction of the run
    # what a step renders
    # frames recorded together rendered in one step: 0 every camera's, 1 one frame
    cameras_per_step: int = option(0, low=0)
    # the first this fraction of the run renders images coarse_downscale times smaller
    coarse_fraction: float = option(0.0, low=0, high=1)
    coarse_downscale: int = option(2, low=1, high=16)
    # losses
    ssim_weight: float = option(0.2, low=0, high=1)
    lidar_every: int = option(1, low=0)  # lidar sweeps every this many steps (0: never)
    # sweeps rendered in a lidar step (their loss shares the views' weight)
    sweeps_per_step: int = option(1, low=1, high=64)
    # relative range error; weighed against the image terms on drive30 (benchmarks/RESULTS.md)
    lidar_range_weight: float = option(1.0, low=0, high=1000)
    lidar_hit_weight: float = option(0.02, low=0, high=1000)
    lidar_intensity_weight: float = option(0.01, low=0, high=1000)
    # training's sweeps see actors where they are when each column fires (their motion over the sweep
    # from their tracks); False: every actor at the sweep's middle (the fixed placement, for comparison).
    # Evaluation and replay always follow the actors.
    lidar_actor_motion: bool = option(True)
    # the ego vehicle (nurec_usd.train.ego): "auto" estimates a static mask of its body for cameras
    # without masks when the rig moves, "on" also when it barely moves, "off" never
    ego_mask: str = option("auto", choices=("auto", "on", "off"))
    # a folder of <camera id>.png masks, white on the ego vehicle, for cameras without masks ("": none)
    ego_mask_dir: str = option("", forms="a folder path, or '' for none")
    # lidar returns inside this box are dropped: "auto" (estimated), "off", or x0,y0,z0,x1,y1,z1 (rig frame, m)
    ego_box: str = option("auto", pattern=BOX_PATTERN, forms=BOX_FORMS)
    # per-frame colour corrections learnt with the scene, in training only (nurec_usd.train.appearance):
    # "off", "gain_bias" (per channel) or "affine" (3x3 + bias); held-out frames use the camera's exposure
    frame_appearance: str = option("off", choices=("off", "gain_bias", "affine"))
    lr_frame_appearance: float = option(1e-3, low=0, high=10)
    frame_appearance_reg: float = option(1.0, low=0, high=1000)  # squared size of the corrections
    # depth of the camera renders against the nearest training sweep's returns (nurec_usd.train.lidar_depth):
    # relative L1 weighed like the image term per view (0: off); at most depth_points targets a frame
    depth_weight: float = option(0.0, low=0, high=1000)
    depth_points: int = option(20_000, low=1, high=10_000_000)
    # no Gaussian grows past this size (metres, each axis; 0: no cap): large splats smear thin or
    # sparsely seen geometry (foliage, poles) into the views between the training ones
    max_scale_m: float = option(0.0, low=0, high=1e6)
    opacity_reg: float = option(0.01, low=0, high=1000)
    scale_reg: float = option(0.01, low=0, high=1000)
    # learning rates
    lr_means: float = option(1.6e-3, low=0, high=10)  # metres (Adam steps are about lr long; camera-only
    # captures scale it by their rig path's spread / 10); decays 100x over the run
    lr_quats: float = option(1e-3, low=0, high=10)
    lr_scales: float = option(5e-3, low=0, high=10)
    lr_opacity: float = option(5e-2, low=0, high=10)
    lr_sh0: float = option(2.5e-3, low=0, high=10)
    lr_shN: float = option(1.25e-4, low=0, high=10)
    lr_intensity: float = option(2e-2, low=0, high=10)
    lr_sky: float = option(1e-2, low=0, high=10)
    lr_exposure: float = option(1e-3, low=0, high=10)
    lr_vignetting: float = option(1e-2, low=0, high=10)  # each camera's lens falloff (0: none learned)
    lr_track: float = option(1e-4, low=0, high=10)  # pose corrections, when refine_tracks
    # how the rates above (tuned for one camera view a step) follow the views in a step: "sqrt"
    # (rates x sqrt(views), Adam's betas ^ views), "linear" (rates x views) or "none"
    lr_batch_scale: str = option("sqrt", choices=("none", "sqrt", "linear"))
    refine_tracks: bool = option(False)
    # MCMC-style relocation and growth, at fractions of the run
    refine_start_fraction: float = option(1 / 15, low=0, high=1)
    refine_stop_fraction: float = option(0.8, low=0, high=1)  # no relocation in the last 20% of the run
    refine_every_fraction: float = option(1 / 30, low=0, high=1, low_open=True)
    # Gaussians added per refinement, as a factor of the count (up to the cap)
    grow_factor: float = option(1.05, low=1, high=10)
    # Gaussians under this opacity are relocated (MCMC's 0.005 moved under 1% of drive30's in a
    # fast build; 0.02 moves 2-3% a refinement, where the error is: benchmarks/RESULTS.md, drive30);
    # unless noise_opacity is set, it also centres the gate of the position noise (noise_scale), as in MCMC
    dead_opacity: float = option(0.02, low=0, high=1, high_open=True)
    # at most this share of a set relocated per refinement, the least opaque first (copies share their
    # source's opacity: a high dead_opacity otherwise relocates ever more, the copies of the last time)
    relocate_max_fraction: float = option(0.05, low=0, high=1)
    # where copies go: sources drawn by opacity (MCMC) or by opacity x their screen-space position
    # gradient since the last refinement, summed over the views ("gradient": where the images
    # disagree) or its mean over the views that saw each ("gradient_mean", 3DGS's statistic)
    relocate_weight: str = option("gradient", choices=("opacity", "gradient", "gradient_mean"))
    # copies' centres drawn from their source's Gaussian at this many standard deviations (0: on it,
    # where they stay together: coincident copies get nearly the same gradients)
    relocate_jitter: float = option(1.0, low=0, high=10)
    # position noise of near-transparent Gaussians, in units of their own scale
    noise_scale: float = option(0.1, low=0, high=100)
    # the opacity the noise's gate is centred on (0: dead_opacity)
    noise_opacity: float = option(0.0, low=0, high=1, high_open=True)
    # bookkeeping
    log_interval: int = option(25, low=1)  # loss / PSNR read back (one host sync) every this many steps
    checkpoint_interval: int = option(200, low=1)  # last good state kept in memory for divergence recovery


@dataclass
class BuildConfig:
    """Everything ``build`` needs besides the capture: the preset it came from, init and training options."""

    preset: str = "fast"  # one of PRESETS
    device: str = "auto"  # auto, cpu, cuda or cuda:N (nurec_usd.util.options.check_device)
    # training ends gracefully at this wall-clock budget (seconds; None: no budget)
    budget_s: float | None = option(None, "float", low=0, low_open=True, none_ok=True)
    init: InitConfig = field(default_factory=InitConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    # fast: the turnaround preset (benchmarks/RESULTS.md, drive30). It starts near the Gaussian cap,
    # half-opaque, with 4x 3DGS's scale and position learning rates: its short run has no time to
    # grow the count or to move Gaussians far at the usual rates. Three sweeps a step (sharing the
    # lidar term's weight) see more of the capture's rays: a lower held-out lidar error. 540 steps:
    # relocation's copies land where the images disagree and make a step dearer (RESULTS.md, drive30).
    "fast": {"train": {"steps": 540, "sh_degree": 1, "sh_step_fraction": 1 / 3, "max_gaussians": 1_000_000,
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


def _replaced(options: Any, values: dict[str, Any]) -> Any:
    """``options`` with ``values`` set, each checked against its field's declared type and range."""
    return dataclasses.replace(options, **{k: check_value(type(options), k, v) for k, v in values.items()})


def make_config(preset: str = "fast", **overrides: Any) -> BuildConfig:
    """A preset with overrides; ``train.*`` / ``init.*`` keys may be given as ``steps=...`` (searched in
    train, then init) or as nested dicts ``train={...}``. Unknown keys raise ValueError naming
    them; values of the wrong type or outside their declared range, ``OptionError`` (a ValueError)
    naming the option and its range."""
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
        elif key == "device":
            cfg.device = check_device(value)
        elif key == "budget_s":
            cfg.budget_s = check_value(BuildConfig, key, value)
        elif key in train_keys:
            cfg.train = _replaced(cfg.train, {key: value})
        elif key in init_keys:
            cfg.init = _replaced(cfg.init, {key: value})
        else:
            raise ValueError(unknown_option(key))
    # the Gaussian cap bounds the start too (static points; actors are few)
    cfg.init = dataclasses.replace(cfg.init, max_points=min(cfg.init.max_points, cfg.train.max_gaussians))
    for part in (cfg, cfg.train, cfg.init):  # the presets' own values too
        check_fields(part)
    if cfg.train.ego_box not in ("auto", "off"):  # six numbers: also each lower corner below the upper

        try:
            parse_box(cfg.train.ego_box)
        except ValueError as err:
            raise OptionError("ego_box", cfg.train.ego_box, None, str(err).split(": ", 1)[-1]) from err
    return cfg
