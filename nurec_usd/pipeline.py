"""``build``: a capture in, a run directory with the optimised scene, its metrics and pictures out.

Stages (each timed in the run manifest): load (read and hash the inputs, decode images,
range images of the sweeps), init (initial Gaussians), train, eval (held-out frames and
sweeps), export (the scene file). The run directory appears only when complete: it is
written as a hidden sibling and moved into place.

Run directory::

    OUT/scene.pt          the optimised scene (``nurec_usd.scene.gaussians.Scene.load``)
    OUT/config.json       the resolved configuration
    OUT/manifest.json     inputs and their SHA-256, versions, git commit, device, wall time per stage, status
    OUT/metrics.json      held-out PSNR / SSIM (+ mean-colour baseline), lidar range error and hit accuracy
    OUT/train_log.jsonl   loss, PSNR and Gaussian count every few steps; refinement events
    OUT/eval_sheet.png    held-out renders next to the held-out images
    OUT/eval/             every held-out render | image pair, and held-out lidar range images
    OUT/usd/              the scene as OpenUSD layers (root.usda, ...; when usd-core is installed)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import math
import platform
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from nurec_usd import __version__
from nurec_usd.export.usd_layers import export_usd, register_schema
from nurec_usd.util import interrupts
from nurec_usd.util.options import check_device, check_downscale
from nurec_usd.util.profiling import StageClock, StepProfiler, format_profile
from nurec_usd.util.progress import progress_bar
from nurec_usd.util.staging import StagedDirectory

if TYPE_CHECKING:
    from nurec_usd.capture.model import Capture
    from nurec_usd.scene.gaussians import Scene
    from nurec_usd.scene.init import InitConfig
    from nurec_usd.train.data import CaptureData


class BuildError(RuntimeError):
    """A build that could not finish; the message says why and what to try."""


@dataclass
class BuildResult:
    """What ``build`` produced."""

    out_dir: Path
    status: str  # "completed", "budget", "interrupted" or "diverged"
    message: str
    metrics: dict[str, Any]
    stage_seconds: dict[str, float] = field(default_factory=dict)


# Files of an imported capture's own format that carry poses, calibration, tracks and SfM points.
_DESCRIPTION_SUFFIXES = {".json", ".txt", ".bin", ".yaml", ".yml", ".ply"}


def _input_files(capture) -> list[Path]:
    """Every file the capture's content comes from: its description (the manifest, or an imported
    format's pose / calibration / track files) and every image, mask and sweep."""
    root = Path(capture.root)
    manifest = root / "capture.json"
    if manifest.is_file():
        files = [manifest]
    else:
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in _DESCRIPTION_SUFFIXES)
    for cam in capture.cameras.values():
        for frame in cam.frames:
            files.append(Path(frame.image_path))
            if frame.mask_path is not None:
                files.append(Path(frame.mask_path))
    for lidar in capture.lidars.values():
        files.extend(Path(s.path) for s in lidar.sweeps)
    # inputs an importer read from outside the capture's root (e.g. KITTI's calibration)
    files.extend(Path(p) for p in (capture.metadata or {}).get("source_files", []))
    return list(dict.fromkeys(files))  # each once, in order


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def hash_inputs(capture, workers: int = 8) -> dict[str, Any]:
    """SHA-256 of every input file (in parallel threads: hashlib releases the GIL), and one over all of them."""
    files = _input_files(capture)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = list(pool.map(_sha256, files))
    root = Path(capture.root)
    rows = []
    for path, digest in zip(files, digests):
        try:
            name = str(path.relative_to(root))
        except ValueError:
            name = str(path)
        rows.append({"path": name, "bytes": path.stat().st_size, "sha256": digest})
    total = hashlib.sha256("".join(f"{r['path']}:{r['sha256']}\n" for r in rows).encode()).hexdigest()
    return {"root": str(root), "files": rows, "combined_sha256": total,
            "bytes": sum(r["bytes"] for r in rows)}


def _versions() -> dict[str, Any]:
    out = {"nurec_usd": __version__, "python": platform.python_version()}
    for dist in ("torch", "warp-lang", "numpy", "usd-core", "open3d-cpu", "open3d"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _git_commit() -> dict[str, Any] | None:
    """The commit of the nurec_usd source tree when it is a git checkout (None otherwise)."""
    src = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def _have_usd() -> bool:
    return importlib.util.find_spec("pxr") is not None


def export_run(run: str | Path, out: str | Path, *, ply: bool = False, usdz: bool = False, collision: bool = False,
               overwrite: bool = False, device: str = "auto", progress: bool = False, ply_actors: bool = False,
               ply_pad_sh: bool = False) -> dict[str, Path]:
    """Export a finished run (its ``scene.pt``) as USD layers into ``out`` (all or nothing), with
    optionally ``out/scene.ply``, ``out/scene.usdz``, ``out/collision.usdc`` and per-actor PLYs
    with their tracks (see ``export_usd``).

    Returns what was written, by name.
    """
    from nurec_usd.scene.gaussians import Scene

    run = Path(run)
    scene_file = run / "scene.pt" if run.is_dir() else run
    if not scene_file.is_file():
        raise FileNotFoundError(f"{scene_file}: no such scene file (a run directory written by build holds one)")
    if not _have_usd():
        raise BuildError("usd-core is not installed: pip install usd-core")
    scene = Scene.load(scene_file)
    if "rig" not in scene.metadata:
        raise BuildError(f"{scene_file}: metadata.rig: the scene has no sensor rig (written by an older version?)")

    with _views_bar(collision and progress) as bar:
        out = export_usd(scene, out, overwrite=overwrite, ply=ply, usdz=usdz, collision=collision,
                         device=resolve_device(device) if collision else "cpu", progress=bar,
                         ply_actors=ply_actors, ply_pad_sh=ply_pad_sh)
    written = {"usd": out / "root.usda"}
    for name, file in (("collision", "collision.usdc"), ("ply", "scene.ply"), ("usdz", "scene.usdz")):
        if (out / file).is_file():
            written[name] = out / file
    if ply_actors:
        written["actor plys"] = out / "actors"
    return written


@contextlib.contextmanager
def _views_bar(show: bool):
    """A (done, total) callback drawing a tqdm bar of the collision mesh's views, or None."""
    if not show:
        yield None
        return

    with progress_bar(None, "collision mesh", "view") as bar:
        def update(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        yield update


def resolve_device(device: str) -> "torch.device":  # noqa: F821
    import torch

    if check_device(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BuildError(f"device {device!r} was asked for, but torch sees no CUDA GPU (torch {torch.__version__})")
    return dev


def _json_safe(value: Any) -> Any:
    """NaN and infinities as null: strict JSON has no NaN (e.g. a range error with no held-out sweep)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(_json_safe(value), indent=2, default=_json_default, allow_nan=False) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def sh_degree_note(reached: int, target: int, step_fraction: float) -> str:
    """The note of a build whose scene ends below its configured SH degree (the degree rises by
    one every ``step_fraction`` of the run: degree d is in use from d * step_fraction of it on)."""
    what = " (view-independent colour)" if reached == 0 else ""
    return (f"note: the scene ends at SH degree {reached}{what}, below the configured {target}: the degree rises "
            f"by one every {step_fraction:.0%} of the run (sh_step_fraction), so degree {reached + 1} starts at "
            f"{(reached + 1) * step_fraction:.0%} of it")


def initial_scene(capture: Capture, data: CaptureData, init: InitConfig,
                  log: Callable[[str], None] | None = None, clock: Callable[[str], Any] | None = None) -> Scene:
    """The initial scene of a loaded capture (``nurec_usd.scene.init.initialize_scene`` on its
    training sweeps and frames only, on ``data``'s device, with the images and masks ``data`` has decoded).

    The training sweeps' range images tell it which of the points drawn above the lidar lie in
    space a sweep saw through. ``log``: where one-line messages go; ``clock``: times the parts
    (``StageClock``). ValueError from the initialisation passes through.
    """
    from nurec_usd.scene.init import full_size_images, initialize_scene

    sweeps = [(data.lidars[s.lidar].id, s.sweep) for s in data.train_sweeps]
    frames = [(data.cameras[f.camera].id, f.frame) for f in data.train_frames]
    # the colouring reads full-size frames and masks (the ego's pixels colour nothing): shrunk ones
    # are stretched back rather than decoded again
    images, masks = data.image_of, data.mask_of
    if data.downscale != 1:
        sizes = {c.id: (c.height, c.width) for c in capture.cameras.values()}
        images, masks = full_size_images(images, sizes), full_size_images(masks, sizes)
    return initialize_scene(capture, sweeps, frames, init, data.device, log=log, intensity_scale=data.intensity_scale,
                            images=images, masks=masks, clock=clock, sweep_points=data.sweep_points,
                            free_space=data.training_ranges())


def build(capture: str | Path, out: str | Path, *, preset: str = "fast", budget_s: float | None = None,
          device: str = "auto", format: str | None = None, overwrite: bool = False, progress: bool = True,
          log: Callable[[str], None] | None = None, collision: bool = False, usdz: bool = False,
          profile: bool = False, profile_start: int | None = None,
          load_options: dict[str, Any] | None = None, **options: Any) -> BuildResult:
    """Reconstruct a capture into a run directory ``out`` (see the module docstring).

    Args:
        capture: capture directory (native or any importable format).
        out: run directory to create (refused if it exists, unless ``overwrite``).
        preset: "fast" or "quality" (``nurec_usd.train.config.PRESETS``).
        budget_s: end training gracefully after this many seconds (the schedule follows the budget).
        device: "auto", "cpu", "cuda", "cuda:1", ...
        format: force the capture format instead of detecting it.
        progress: show tqdm progress bars (on stderr).
        log: where one-line messages go (default: stderr, above the progress bars).
        collision: also export a collision mesh of the static scene (``usd/collision.usdc``).
        usdz: also package the USD export as ``usd/scene.usdz``.
        profile: also time the parts of a window of training steps on the host and the GPU and
            write the stage and step tables to ``profile.txt`` / ``profile.json`` (``nurec_usd.util.profiling``).
        profile_start: the first step of the profiled window (default: mid-run, or step 200 of a
            budget-bound run); implies ``profile``.
        load_options: keywords of ``load_any`` (``skip_missing``, ``scene``).
        **options: overrides of any training or init option (``steps=500``, ``max_gaussians=...``).

    Returns:
        The result; ``status`` is "completed", "budget", "interrupted" (Ctrl-C during training)
        or "diverged" (a diverged run still writes its last good checkpoint).

    Raises:
        CaptureError: the capture has problems (each names its file and field).
        BuildError: the build cannot proceed (no usable frames, no GPU memory, ...).
        FileExistsError: ``out`` exists and ``overwrite`` is False.
    """
    import torch
    from tqdm import tqdm

    from nurec_usd.capture.importers import load_any
    from nurec_usd.ops import camera as camera_ops
    from nurec_usd.ops.warp_torch import init_warp
    from nurec_usd.train.config import make_config

    started_at = time.time()
    clock = StageClock()
    say = log or (lambda msg: tqdm.write(msg, file=sys.stderr))
    profile = profile or profile_start is not None
    with clock("setup"):  # the configuration, the GPU's context, Warp, the kernel warm-up's start
        config = make_config(preset, device=device, budget_s=budget_s, **options)
        dev = resolve_device(config.device)
        if dev.type == "cuda":
            torch.cuda.init()
        init_warp()
        from nurec_usd.ops.warmup import KernelWarmup

        warmup = KernelWarmup(dev)  # GPU kernels compile while the capture loads (no-op on the CPU)
        torch.manual_seed(config.train.seed)
        staged = StagedDirectory(out, overwrite=overwrite)
    signals = interrupts.handled(only_if_default=True)  # SIGTERM stops a build like Ctrl-C
    signals.__enter__()
    stage = "load"
    num_gaussians = 0
    export: _UsdExport | None = None
    try:
        with clock("load"):
            with clock("read capture"):
                cap = load_any(capture, format=format, **(load_options or {}))
            check_downscale({c.id: (c.width, c.height) for c in cap.cameras.values()}, config.train.downscale)
            from nurec_usd.train import ego
            from nurec_usd.train.data import CaptureData

            try:  # the ego vehicle's own returns and pixels are not trained on (nurec_usd.train.ego)
                ego_given = ego.given_masks(cap, config.train.ego_mask_dir)
            except ValueError as err:
                raise BuildError(f"ego_mask_dir: {err}") from err
            with clock("ego box"):
                lidar_keep, ego_summary = ego.lidar_filter(cap, config.train.ego_box, config.train.eval_every, log=say)

            # The inputs are hashed while the images decode (hashlib and the decoders release the GIL).
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hash") as hasher:
                hashed = hasher.submit(hash_inputs, cap)
                with clock("decode"):
                    data = CaptureData(cap, dev, eval_every=config.train.eval_every, progress=say,
                                       downscale=config.train.downscale, clock=clock, lidar_keep=lidar_keep)
                with clock("hash (after decoding)"):
                    inputs = hashed.result()
            with clock("ego masks"):
                ego_summary["cameras"] = ego.mask_cameras(cap, data, config.train.ego_mask, ego_given, log=say)
            ego_summary["dropped_lidar_points"] = data.dropped_points
        if data.nonfinite_points:  # dropped while reading, as validate says
            say(f"note: dropped {data.nonfinite_points:,} lidar points with non-finite coordinates (NaN or "
                f"infinity) from {data.nonfinite_sweeps} sweep{'s' if data.nonfinite_sweeps != 1 else ''}")
        if not data.train_frames:
            raise BuildError(f"{capture}: no usable camera frames to train on ({len(data.frames)} frames in all, "
                             f"{len(data.eval_frames)} held out)")
        if not data.eval_frames:
            say(f"note: no held-out frames (frame index {config.train.eval_every // 2} mod "
                f"{config.train.eval_every} does not occur): held-out metrics will be empty; "
                f"a smaller --eval-every holds some out")
        waited = warmup.wait()
        if warmup.error is not None:
            say(f"note: compiling the GPU kernels ahead failed ({type(warmup.error).__name__}: {warmup.error}); "
                "they compile at their first launch instead")
        elif warmup.seconds:
            say(f"GPU kernels compiled in {warmup.seconds:.1f} s, {waited:.1f} s of it after loading")
        if waited > 0.05:
            clock.add("compile", waited)
        say(f"loaded {cap.name}: {len(data.train_frames)} training / {len(data.eval_frames)} held-out frames, "
            f"{len(data.train_sweeps)} / {len(data.eval_sweeps)} sweeps, {len(cap.tracks)} tracks "
            f"({clock.seconds('load'):.1f} s)")

        stage = "init"
        with clock("init"):
            try:
                scene = initial_scene(cap, data, config.init, log=say, clock=clock)
            except ValueError as err:
                raise BuildError(f"{capture}: initialisation failed: {err}") from err
            from nurec_usd.scene.rig import describe_rig

            scene.metadata["rig"] = describe_rig(cap)  # export and replay read the sensors from the scene
            num_gaussians = scene.num_gaussians
            depth_targets = None
            if config.train.depth_weight > 0 and data.train_sweeps:
                with clock("depth targets"):
                    from nurec_usd.train.lidar_depth import LidarDepthTargets

                    depth_targets = LidarDepthTargets(
                        data, data.groups(data.train_frames, config.train.cameras_per_step),
                        points_per_frame=config.train.depth_points, seed=config.train.seed,
                        box_margin=config.init.box_margin)
                say(f"lidar depth targets: {depth_targets.count:,} over {len(depth_targets.frames)} frames")
            data.release_sweep_points()
        say(f"initial scene: {len(scene.static):,} static + {len(scene.actors):,} actor Gaussians "
            f"({clock.seconds('init'):.1f} s)")

        stage = "train"
        steps = config.train.steps
        with clock("train"), clock("trainer setup"):
            from nurec_usd.train.trainer import Trainer

            # the window: mid-run; with a budget the step count is only a bound, so a fixed early window
            window_start = steps // 2 if config.budget_s is None else min(steps // 2, 200)
            if profile_start is not None:
                window_start = profile_start
            profiler = StepProfiler(dev, start=window_start, steps=max(1, min(30, steps // 10)), enabled=profile)
            trainer = Trainer(scene, data, config.train, log=say, profiler=profiler, depth_targets=depth_targets)
        with clock("train"), progress_bar(steps, "train", "step", enabled=progress, postfix_follows=True) as bar:
            with clock("steps"):
                result = trainer.run(config.budget_s, progress=bar)
            for part, seconds in result.part_seconds.items():  # inside the steps' time
                clock.add(f"steps/{part}", seconds)
            if profile:  # what --profile itself added to the steps' time
                clock.add("steps/the profiler's own time", profiler.own_s)
        num_gaussians = scene.num_gaussians
        say(f"training {result.status}: {result.message} ({result.seconds:.1f} s, "
            f"{result.steps / max(result.seconds, 1e-9):.1f} steps/s)")
        if scene.sh_degree < config.train.sh_degree:
            say(sh_degree_note(scene.sh_degree, config.train.sh_degree, config.train.sh_step_fraction))

        stage = "export"  # the scene is written first: whatever happens in eval, training is not lost
        # The USD export is host work (numpy, pxr) and the evaluation GPU work: the export runs in
        # a thread beside the evaluation, except with a collision mesh, whose depth renders would
        # share the GPU and Warp's stream with it.
        with clock("export"):
            from nurec_usd.evaluation import evaluate  # before the export thread: see _UsdExport.start

            export = _UsdExport(scene, staged.path / "usd", usdz=usdz, collision=collision, device=dev,
                                progress=progress)
            with clock("save scene"):
                scene.save(staged.path / "scene.pt")
            if collision:
                with clock("usd layers"):
                    export.run()
                export.join()
            else:
                export.start()

        stage = "eval"
        with clock("eval"):
            n_eval = len(data.eval_frames) + len(data.eval_sweeps)
            with progress_bar(n_eval, "eval", "view", enabled=progress, leave=False) as bar:
                metrics = evaluate(scene, data, staged.path, progress=bar.update, clock=clock)
        stage = "export"
        with clock("export"):
            if not collision:
                with clock("usd layers (waited for after eval)"):
                    export.join()
                clock.add("usd layers (beside eval)", export.seconds)
        if export.note:
            say(f"{export.note} (python -m nurec_usd export RUN -o DIR writes them from scene.pt later)")
        if export.note is None:  # the export must replay the scene: checked on a held-out frame and sweep
            from nurec_usd.evaluation import replay_agreement

            with clock("eval"), clock("replay check"):
                try:
                    metrics.update(replay_agreement(staged.path / "usd" / "root.usda", scene, data))
                except Exception as err:  # noqa: BLE001 - reported, the run itself is fine
                    say(f"note: replaying the USD export failed: {type(err).__name__}: {err}")
                    metrics["usd_replay_error"] = f"{type(err).__name__}: {err}"
        metrics["ego"] = ego_summary
        if trainer.appearance is not None:  # training only: the figures above are the exported scene's
            metrics["frame_appearance"] = trainer.appearance.summary()
        metrics.update({"status": result.status, "steps": result.steps, "sh_degree": scene.sh_degree,
                        "gaussians": scene.num_gaussians,
                        "static_gaussians": len(scene.static), "actor_gaussians": len(scene.actors),
                        "steps_per_second": result.steps / max(result.seconds, 1e-9)})
        if dev.type == "cuda":
            metrics["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2 ** 30
        with clock("export"), clock("write run"):
            stages = clock.top_level()
            _write_json(staged.path / "metrics.json", metrics)
            _write_json(staged.path / "config.json", config.to_dict())
            with open(staged.path / "train_log.jsonl", "w") as f:
                for row in result.history:
                    f.write(json.dumps(row) + "\n")
            if profile:
                step_report = profiler.report()
                (staged.path / "profile.txt").write_text(format_profile(clock.to_list(), step_report) + "\n")
                _write_json(staged.path / "profile.json", {"stages": clock.to_list(), "step": step_report})
            _write_json(staged.path / "manifest.json", {
                "format": "nurec_usd.run", "version": 1, "capture": str(capture), "capture_name": cap.name,
                "status": result.status, "message": result.message, "inputs": inputs, "versions": _versions(),
                "git": _git_commit(), "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                "started_at": started_at, "stage_seconds": {k: round(v, 3) for k, v in stages.items()},
                "stages": clock.to_list(), "command": sys.argv, "overflowing_steps": result.overflows,
                "usd_export": export.note or "written",
                "render": {"tile_order": camera_ops.TILE_ORDER},  # kernel options set by the environment
                # with config.json, what a batch compares to decide that a run is up to date
                "build_options": {"format": format, "usdz": usdz, "collision": collision},
            })
            out_dir = staged.commit()
    except torch.cuda.OutOfMemoryError as err:
        _abort(staged, export)
        raise BuildError(f"the GPU ran out of memory during {stage} with {num_gaussians:,} Gaussians: lower "
                         f"--max-gaussians (it also caps the initial points), train on smaller images "
                         f"(--downscale 2), or free the GPU ({str(err).splitlines()[0]})") from err
    except BaseException:
        _abort(staged, export)
        raise
    finally:
        signals.__exit__(None, None, None)
    if profile:
        say(format_profile(clock.to_list(), step_report))
    return BuildResult(out_dir, result.status, result.message, metrics, clock.top_level())


# Every pxr module the USD export uses (imported before its thread starts)
USD_MODULES = ("Gf", "Plug", "Sdf", "Tf", "Usd", "UsdGeom", "UsdLux", "UsdPhysics", "UsdUtils", "UsdVol", "Vt")


def _abort(staged, export: "_UsdExport | None") -> None:
    """Remove the unfinished run directory, once the export thread writing into it has stopped."""
    if export is not None:
        export.wait()
    staged.abort()


class _UsdExport:
    """The build's USD export (``export_usd``), run here or in a thread beside the evaluation.

    A failure does not fail the build (``scene.pt`` is written): ``note`` says what happened,
    None once the layers are written. A failure to write (the disk full or read-only) does:
    the run cannot be written either, and ``join`` raises it.
    """

    def __init__(self, scene: Scene, out: Path, *, usdz: bool, collision: bool, device: Any, progress: bool):
        self.scene, self.out, self.usdz, self.collision, self.device = scene, out, usdz, collision, device
        self.show_progress = progress
        self.note: str | None = "usd-core is not installed here: the USD layers were not written"
        self.seconds = 0.0
        self._thread: threading.Thread | None = None
        self._raise: BaseException | None = None  # what join() re-raises

    def run(self) -> None:
        if not _have_usd():
            return

        t0 = time.perf_counter()
        try:  # a failed USD export must not throw the trained scene away: scene.pt is written
            with _views_bar(self.collision and self.show_progress) as bar:
                export_usd(self.scene, self.out, usdz=self.usdz, collision=self.collision, device=self.device,
                           progress=bar)
            self.note = None
        except OSError as err:  # the disk: re-raised by join()
            self._raise = err
        except Exception as err:  # noqa: BLE001 - reported in the manifest and the log
            self.note = f"the USD export failed: {type(err).__name__}: {err}"
        except BaseException as err:  # Ctrl-C in the thread: re-raised by join()
            self._raise = err
        finally:
            self.seconds = time.perf_counter() - t0

    def start(self) -> None:
        """Run the export in a thread. What it imports is imported here first: two threads that
        import extension modules at once (pxr's, PIL's) can deadlock in the import machinery."""
        if _have_usd():
            for name in USD_MODULES:
                importlib.import_module(f"pxr.{name}")
            if self.usdz:
                importlib.import_module("nurec_usd.export.usdz")
            register_schema()
        self._thread = threading.Thread(target=self.run, name="usd-export", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the thread (if any) has finished."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def join(self) -> None:
        """``wait``, then re-raise a failed write or a Ctrl-C that reached the export."""
        self.wait()
        if self._raise is not None:
            raise self._raise
