"""``python -m nurec_usd``: the command line.

Commands print what a user needs and exit with:

- 0 on success;
- 1 when the input has problems (each listed, naming its file and field), a build diverged,
  or a file could not be written (a full disk, a read-only folder: one line naming the file);
- 2 on a usage error: an unknown or malformed option, or an option value outside its
  declared range (the message names the option and the range), checked before any work;
- 130 when stopped by Ctrl-C (SIGINT), 143 by SIGTERM (128 + the signal's number).

Nothing half-written is left behind: outputs are staged and moved into place when complete.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from nurec_usd import __version__
from nurec_usd.batch_ray import RayMissingError
from nurec_usd.batch_runs import BatchError, batch
from nurec_usd.bench import (
    BUDGET_STEPS,
    RESULTS_HEADER,
    bench_capture,
    default_cache,
    format_run,
    results_row,
    run_build,
    run_label,
)
from nurec_usd.export.usd_check import FAILING, StageOpenError, check_stage, is_usd_path
from nurec_usd.pipeline import BuildError, build, export_run, resolve_device
from nurec_usd.replay.trajectory import read_trajectory
from nurec_usd.synth import generate, get_preset
from nurec_usd.synth.presets import PRESETS
from nurec_usd.util import interrupts
from nurec_usd.util.io_errors import describe_os_error
from nurec_usd.util.options import OptionError, check_downscale, device_type, field_type, flag_type
from nurec_usd.util.progress import progress_bar
from nurec_usd.util.staging import OutputExistsError


def exists_message(command: str, err: FileExistsError) -> str:
    """The one message of every command for an output that exists: ``COMMAND: OUT exists; pass
    --overwrite to replace it`` (or the error's own text when it names no path)."""
    path = getattr(err, "path", None) or err.filename
    if path is None:
        return f"{command}: {err}"
    return f"{command}: {path} exists; pass --overwrite to replace it"


def _cmd_inspect(args: argparse.Namespace) -> int:
    from nurec_usd.capture import CaptureError, capture_summary, format_summary
    from nurec_usd.capture.importers import load_any

    try:
        capture = load_any(args.capture, format=args.format, **_load_options(args))
    except CaptureError as err:
        print(err, file=sys.stderr)
        return 1
    except ValueError as err:  # an unknown --format, or --scene on a format without scenes
        print(f"inspect: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(capture_summary(capture), indent=2))
    else:
        print(format_summary(capture))
    return 0


def _cmd_validate_usd(args: argparse.Namespace) -> int:
    try:
        issues, ran = check_stage(args.capture)
    except StageOpenError as err:
        print(f"validate: {err}", file=sys.stderr)
        return 1
    failing = [i for i in issues if i.severity in FAILING]
    for issue in issues:
        if issue.severity not in FAILING:
            print(f"  - {issue}", file=sys.stderr)
    if failing:
        count = len(failing)
        print(f"{args.capture}: {count} USD problem{'s' if count != 1 else ''}", file=sys.stderr)
        for issue in failing:
            print(f"  - {issue}", file=sys.stderr)
        return 1
    print(f"{args.capture}: valid USD (checked by {'; '.join(ran)})")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    if args.format is None and is_usd_path(args.capture):
        return _cmd_validate_usd(args)

    from nurec_usd.capture import CaptureError, validate_capture
    from nurec_usd.capture.importers import detect_format, load_any
    from nurec_usd.capture.loader import deep_check

    def progress(it, total):
        with progress_bar(total, "decoding images and sweeps", "file", enabled=not args.no_progress,
                          leave=False) as bar:
            for item in it:
                yield item
                bar.update()

    try:
        fmt = args.format or detect_format(args.capture)
    except CaptureError as err:
        print(err, file=sys.stderr)
        return 1
    notes: list = []
    if fmt != "native":  # an importer checks every file and field it reads while loading
        try:
            capture = load_any(args.capture, format=fmt, **_load_options(args))
        except CaptureError as err:
            print(err, file=sys.stderr)
            return 1
        except ValueError as err:
            print(f"validate: {err}", file=sys.stderr)
            return 2
        # then, as for a native capture, every image decoded and every sweep read (what build does)
        problems = [] if args.quick else deep_check(capture, workers=args.workers, progress=progress, notes=notes)
    else:
        if args.scene is not None:
            print(f"validate: --scene applies to nuscenes captures only ({args.capture} is a native capture)",
                  file=sys.stderr)
            return 2
        problems = validate_capture(args.capture, deep=not args.quick, workers=args.workers, progress=progress,
                                    skip_missing=args.skip_missing, notes=notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if problems:
        count = len(problems)
        print(f"{args.capture}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        if getattr(problems, "hint", None):
            print(problems.hint, file=sys.stderr)
        return 1
    depth = "manifest, files and headers" if args.quick else "manifest, files, every image and every sweep"
    if fmt != "native":
        depth = "" if args.quick else "; every image and every sweep checked"
        print(f"{args.capture}: valid {fmt} capture (loaded through the {fmt} importer{depth})")
        return 0
    print(f"{args.capture}: valid ({depth} checked)")
    return 0


def _load_options(args: argparse.Namespace) -> dict:
    """The loading options of inspect / validate / build (``load_any``'s keywords)."""
    return {"skip_missing": args.skip_missing, "scene": args.scene}


def _load_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--skip-missing", action="store_true",
                   help="leave out frames (and sweeps) whose file is missing, with one warning giving the count, "
                        "instead of refusing the capture (trimmed copies of datasets often lack some images)")
    p.add_argument("--scene", default=None, metavar="NAME",
                   help="nuScenes: the scene to load, e.g. scene-0061 (default: the first; the others are listed)")


def _cmd_synth(args: argparse.Namespace) -> int:
    from nurec_usd.capture import CaptureError

    preset = get_preset(args.preset)
    gt = None if args.no_groundtruth else (args.gt_out if args.gt_out is not None else "auto")
    total = preset.frames * (len(preset.cameras) + 1)
    try:
        with progress_bar(total, f"synth {preset.name}", "frame", enabled=not args.no_progress, leave=False) as bar:
            result = generate(preset, args.out, seed=args.seed, groundtruth_dir=gt, device=args.device,
                              overwrite=args.overwrite, spp=args.spp, progress=bar.update)
    except FileExistsError as err:
        print(exists_message("synth", err), file=sys.stderr)
        return 2
    except ValueError as err:  # unknown device, bad spp
        print(f"synth: {err}", file=sys.stderr)
        return 2
    except CaptureError as err:  # the written capture did not validate: a generator bug
        print(f"synth: the generated capture does not validate:\n{err}", file=sys.stderr)
        return 1
    print(f"capture      {result.capture_dir}")
    if result.groundtruth_dir is not None:
        print(f"ground truth {result.groundtruth_dir}")
    print("seconds      " + ", ".join(f"{k} {v:.2f}" for k, v in result.timings.items()))
    if args.contact_sheet is not None:
        from nurec_usd.synth.contact_sheet import write_contact_sheet

        sheet = write_contact_sheet(result.capture_dir, args.contact_sheet, groundtruth_dir=result.groundtruth_dir)
        print(f"contact sheet {sheet}")
    return 0


def parse_option(text: str) -> tuple[str, object]:
    """A command line's ``KEY=VALUE`` (``--set``) as (key, value): the value read as a Python
    literal where it is one (``2``, ``0.5``, ``True``), else kept as text.

    Raises:
        argparse.ArgumentTypeError: no key or no ``=`` (argparse reports it as a usage error).
    """
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


# build flags that set a training or init option: the option each sets (its range is the option's)
_BUILD_FLAGS = {"steps": "--steps", "max_gaussians": "--max-gaussians", "seed": "--seed", "voxel_m": "--voxel",
                "downscale": "--downscale", "eval_every": "--eval-every", "budget_s": "--budget-s"}


def _non_negative_int(text: str) -> int:
    """A whole number >= 0 (argparse reports anything else as a usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value


def _option_flag(err: OptionError, given: set[str]) -> str:
    """An option error as the command line gave the option (its flag, or ``--set KEY=VALUE``)."""
    if err.option in given:
        return f"--set {err.option}={err.value!r}: {err.detail}"
    return err.for_flag(_BUILD_FLAGS.get(err.option, f"--{err.option.replace('_', '-')}"))


def _build_option_values(args: argparse.Namespace, command: str) -> tuple[dict[str, object], set[str]] | None:
    """The training and init options given by the build options (``_build_options``) and ``--set``,
    and the keys ``--set`` gave, each checked against its declared range; None, after printing
    why, when one is unknown, given twice or out of its range."""
    from nurec_usd.train.config import make_config, option_names, unknown_option

    options = {"steps": args.steps, "max_gaussians": args.max_gaussians, "seed": args.seed,
               "voxel_m": args.voxel, "refine_tracks": args.refine_tracks or None, "downscale": args.downscale,
               "eval_every": args.eval_every}
    known = option_names()
    given = set()
    for key, value in args.set:
        if key not in known:
            print(f"{command}: --set {key}: {unknown_option(key)} (options: {', '.join(known)})", file=sys.stderr)
            return None
        if options.get(key) is not None:
            print(f"{command}: --set {key} repeats an option its own flag gave", file=sys.stderr)
            return None
        options[key] = value
        given.add(key)
    try:  # every value against its declared range, before any work
        make_config(args.preset, device=args.device, budget_s=args.budget_s, **options)
    except OptionError as err:
        print(f"{command}: {_option_flag(err, given)}", file=sys.stderr)
        return None
    return options, given


def _cmd_build(args: argparse.Namespace) -> int:
    from nurec_usd.capture import CaptureError

    checked = _build_option_values(args, "build")
    if checked is None:
        return 2
    options, given = checked
    try:
        result = build(args.capture, args.out, preset=args.preset, budget_s=args.budget_s, device=args.device,
                       format=args.format, overwrite=args.overwrite, progress=not args.no_progress,
                       collision=args.collision, usdz=args.usdz, profile=args.profile,
                       profile_start=args.profile_start, load_options=_load_options(args), **options)
    except CaptureError as err:
        print(err, file=sys.stderr)
        return 1
    except FileExistsError as err:
        print(exists_message("build", err), file=sys.stderr)
        return 2
    except OptionError as err:  # a value that does not fit this capture (--downscale for its cameras)
        print(f"build: {_option_flag(err, given)}", file=sys.stderr)
        return 2
    except (BuildError, ValueError) as err:
        print(f"build: {err}", file=sys.stderr)
        return 1
    m = result.metrics
    print(f"run          {result.out_dir}")
    print(f"status       {result.status}: {result.message}")
    print(f"held-out     PSNR {m['psnr']:.2f} dB (mean-colour baseline {m['baseline_psnr']:.2f} dB), "
          f"SSIM {m['ssim']:.3f} over {m['held_out_frames']} frames")
    if "lidar_median_range_error_m" in m:
        print(f"lidar        median range error {m['lidar_median_range_error_m']:.3f} m, "
              f"hit accuracy {m['lidar_hit_accuracy']:.3f} over {m['held_out_sweeps']} sweeps")
    degree = m.get("sh_degree")
    sh = "" if degree is None else f", SH degree {degree}" + (" (view-independent colour)" if degree == 0 else "")
    print(f"gaussians    {m['gaussians']:,} ({m['static_gaussians']:,} static, {m['actor_gaussians']:,} actor){sh}")
    print("seconds      " + ", ".join(f"{k} {v:.1f}" for k, v in result.stage_seconds.items()))
    usd = result.out_dir / "usd" / "root.usda"
    agreement = [f"{kind} {m[key]:.1f} dB" for kind, key in (("frame", "usd_replay_camera_psnr"),
                                                            ("sweep", "usd_replay_lidar_psnr"))
                 if m.get(key) is not None]
    replayed = f" (replay vs model on a held-out {', '.join(agreement)})" if agreement else ""
    print(f"usd          {str(usd) + replayed if usd.is_file() else 'not written (see manifest.json: usd_export)'}")
    if result.status == "interrupted":  # the run is written; the exit code still says it was stopped
        sig = interrupts.received()
        name = "SIGTERM" if sig == interrupts.signal.SIGTERM else "Ctrl-C (SIGINT)"
        print(f"build: training was stopped by {name}; {result.out_dir} holds the state of its last finished "
              f"step ({m.get('steps')} steps)", file=sys.stderr)
        return 128 + int(sig or interrupts.signal.SIGINT)
    return 0 if result.status != "diverged" else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    from nurec_usd.train.config import make_config

    try:  # the options are checked here, before a capture is generated
        overrides = dict(args.set)
        make_config(args.build_preset, **overrides, **({"steps": args.steps} if args.steps else {}))
    except ValueError as err:
        print(f"bench: --set: {err}", file=sys.stderr)
        return 2
    capture = args.capture
    if capture is None:
        device = None if args.device == "auto" else args.device
        capture = bench_capture(args.preset, args.cache or default_cache(), device)
    budgets = args.budget_s or [None]
    work = Path(tempfile.mkdtemp(prefix="nurec_bench_")) if args.out is None else args.out
    rows, failed = [], 0
    try:
        for budget in budgets:
            options = ["--preset", args.build_preset, "--device", args.device]
            if budget is not None:
                options += ["--budget-s", str(budget), "--steps", str(args.steps or BUDGET_STEPS)]
            elif args.steps:
                options += ["--steps", str(args.steps)]
            if args.profile:
                options.append("--profile")
            if args.profile_start is not None:
                options += ["--profile-start", str(args.profile_start)]
            for key, value in args.set:
                options += ["--set", f"{key}={value}"]
            label = f"{capture.name} {args.build_preset}" + (f" budget {budget:g} s" if budget is not None else "") + \
                (" " + " ".join(f"{k}={v}" for k, v in args.set) if args.set else "")
            run = run_build(capture, work / (f"run_budget_{budget:g}" if budget is not None else "run"), options)
            label = run_label(run, label)
            print(format_run(run, label), flush=True)
            if run.profile:
                print(run.profile, flush=True)
            failed += run.returncode != 0
            rows.append(results_row(run, label))
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n" + RESULTS_HEADER + "\n" + "|---" * (RESULTS_HEADER.count("|") - 1) + "|\n" + "\n".join(rows))
    return 1 if failed else 0


# what a word after --ray must look like to be taken as a Ray address rather than as a capture
_RAY_ADDRESS = re.compile(r"(auto|local|[A-Za-z][A-Za-z0-9+.-]*://\S+|[\w.-]+:\d+)")


def _cmd_batch(args: argparse.Namespace) -> int:
    captures = list(args.captures)
    ray = args.ray
    if ray and (Path(ray).exists() or not _RAY_ADDRESS.fullmatch(ray)):
        captures.insert(0, Path(ray))  # `--ray CAPTURE ...`: argparse gave --ray the first capture
        ray = ""
    if not captures:
        print("batch: no captures given (CAPTURE: a capture, a folder of captures or a list file)", file=sys.stderr)
        return 2
    checked = _build_option_values(args, "batch")
    if checked is None:
        return 2
    options, _ = checked
    try:
        result = batch(captures, args.out, workers=args.workers, ray=None if ray is None else (ray or True),
                       force=args.force, retries=args.retries, preset=args.preset, budget_s=args.budget_s,
                       device=args.device, format=args.format, collision=args.collision, usdz=args.usdz,
                       progress=not args.no_progress, **options)
    except RayMissingError as err:
        print(f"batch: --ray: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # a bad option or value; no GPU for --device cuda
        print(f"batch: {err}", file=sys.stderr)
        return 2
    except (BatchError, ConnectionError, RuntimeError) as err:
        print(f"batch: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"batch: interrupted; the same command continues where it stopped ({args.out}/batch.json)",
              file=sys.stderr)
        return 130
    print(result.table())
    c = result.counts
    print(f"{c['built']} built, {c['skipped']} skipped (up to date), {c['failed']} failed in {result.seconds:.1f} s; "
          f"{result.batch_json}; logs in {result.out / 'logs'}")
    return 0 if result.ok else 1


def _cmd_export(args: argparse.Namespace) -> int:
    try:
        written = export_run(args.run, args.out, ply=args.ply or args.ply_pad_sh, usdz=args.usdz,
                             collision=args.collision, overwrite=args.overwrite, device=args.device,
                             progress=not args.no_progress, ply_actors=args.ply_actors, ply_pad_sh=args.ply_pad_sh)
    except FileExistsError as err:
        print(exists_message("export", err), file=sys.stderr)
        return 2
    except (BuildError, ValueError, FileNotFoundError) as err:
        print(f"export: {err}", file=sys.stderr)
        return 1
    for name, path in written.items():
        print(f"{name:<12} {path}")
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    from nurec_usd.replay.files import render_one, render_sequence, sequence_times
    from nurec_usd.replay.stage import Replay, StageCamera

    sequence = args.start is not None or args.end is not None
    trajectory = args.trajectory is not None
    if sum([args.time is not None, args.frame is not None, sequence, trajectory]) != 1:
        print("render: give exactly one of --time T, --frame N, --start S --end E [--fps F], or --trajectory FILE",
              file=sys.stderr)
        return 2
    if sequence and (args.start is None or args.end is None):
        print("render: a sequence needs both --start and --end", file=sys.stderr)
        return 2
    if sequence and args.end < args.start:
        print(f"render: --end {args.end:g} is before --start {args.start:g}", file=sys.stderr)
        return 2
    sensors = [name.strip() for given in args.sensor for name in given.split(",") if name.strip()]
    if not sensors:
        print("render: --sensor: give a camera or lidar id", file=sys.stderr)
        return 2
    edits = bool(args.remove_actor or args.shift_actor or args.duplicate_actor or args.actor_track)
    offsets = any(v != 0.0 for v in (args.lateral_offset, args.height_offset, args.yaw_offset))
    if trajectory or edits or offsets or len(sensors) > 1 or sensors == ["all"]:
        return _render_novel(args, sensors, sequence)

    def work() -> list:
        replay = Replay(args.scene, device=resolve_device(args.device))
        sensor = replay.sensor(sensors[0])
        if isinstance(sensor, StageCamera):  # the factor must leave the camera an image
            check_downscale({sensor.id: (sensor.width, sensor.height)}, args.downscale)
        if sequence:
            times = sequence_times(args.start, args.end, args.fps)
            with _bar(len(times), f"render {sensor.id}", args.no_progress) as bar:
                written = render_sequence(replay, sensor.id, times, args.out, args.downscale, args.fps,
                                          args.overwrite, bar.update)
            print(f"{len(times)} frames of {sensor.id} from {args.start:.3f} s to {times[-1]:.3f} s")
        else:
            t = args.time if args.time is not None else _recorded_time(replay, sensor, args.frame)
            if Path(args.out).exists() and not args.overwrite:
                raise OutputExistsError(args.out)
            written = render_one(replay, sensor.id, t, args.out, args.downscale)
            print(f"{sensor.id} at {t:.6f} s")
        return written

    return _run_render(work)


def _run_render(work: Callable[[], list]) -> int:
    """Run a render command's work: what it wrote, or its error as one line and an exit code."""
    from nurec_usd.replay.stage import ReplayError

    try:
        written = work()
    except FileExistsError as err:
        print(exists_message("render", err), file=sys.stderr)
        return 2
    except OptionError as err:
        print(f"render: {err.for_flag('--' + err.option)}", file=sys.stderr)
        return 2
    except (ReplayError, BuildError, ValueError) as err:
        print(f"render: {err}", file=sys.stderr)
        return 1
    _print_written(written)
    return 0


def _print_written(written: list) -> None:
    shown = written if len(written) <= 4 else [written[0], "...", written[-1]]
    for path in shown:
        print(f"wrote        {path}")


def _actor_value(flag: str, kind: str):
    """An argparse type for ``ID=X,Y,Z`` (kind "offset": three finite numbers, metres) or ``ID=FILE``."""
    def parse(text: str):
        actor, sep, value = text.partition("=")
        if not sep or not actor.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"expected {'ID=X,Y,Z' if kind == 'offset' else 'ID=FILE'}, got {text!r}")
        if kind == "file":
            return actor.strip(), Path(value.strip())
        try:
            xyz = [float(v) for v in value.split(",")]
        except ValueError:
            xyz = []
        if len(xyz) != 3 or not all(math.isfinite(v) for v in xyz):
            raise argparse.ArgumentTypeError(f"expected ID=X,Y,Z with three finite numbers (metres, world frame), "
                                             f"got {text!r}")
        return actor.strip(), tuple(xyz)

    parse.__name__ = f"{flag}_value"
    return parse


def _render_novel(args: argparse.Namespace, sensors: list[str], sequence: bool) -> int:
    """``render`` through the Renderer: a novel trajectory, rig offsets, edited actors, several sensors."""
    import numpy as np

    from nurec_usd.replay.files import render_frames, sequence_times
    from nurec_usd.replay.renderer import Renderer, rig_offset_transform

    def work() -> list:
        renderer = Renderer(args.scene, device=resolve_device(args.device))
        names = [*renderer.cameras, *renderer.lidars] if sensors == ["all"] else sensors
        ids = [renderer.replay.sensor(name).id for name in names]
        cameras = [i for i in ids if i in renderer.cameras]
        lidars = [i for i in ids if i in renderer.lidars]
        check_downscale({c: (renderer.cameras[c].width, renderer.cameras[c].height) for c in cameras},
                        args.downscale)
        rig = None
        if args.trajectory is not None:
            traj = read_trajectory(args.trajectory, (renderer.start_s, renderer.end_s))
            rig = renderer.path(traj.times_s, traj.T_world)
            times = traj.times_s
        elif sequence:
            times = sequence_times(args.start, args.end, args.fps)
        else:
            sensor = renderer.replay.sensor(ids[0])
            times = np.array([args.time if args.time is not None else _recorded_time(renderer.replay, sensor,
                                                                                     args.frame)])
        for t in times:
            renderer.replay.check_time(float(t))
        for actor in args.remove_actor or []:
            renderer.remove_actor(actor)
        for actor, offset in args.shift_actor or []:
            renderer.shift_actor(actor, offset)
        for actor, path in args.actor_track or []:
            track = read_trajectory(path)
            renderer.set_actor_track(actor, track.times_s, track.T_world)
        copies = [renderer.duplicate_actor(actor, offset) for actor, offset in args.duplicate_actor or []]
        offset = None
        if any(v != 0.0 for v in (args.lateral_offset, args.height_offset, args.yaw_offset)):
            offset = rig_offset_transform(args.lateral_offset, args.height_offset, args.yaw_offset)
        with _bar(len(times), f"render {', '.join(ids)}", args.no_progress) as bar:
            written = render_frames(renderer, times, args.out, cameras, lidars, rig=rig, rig_offset=offset,
                                    depth=not args.no_depth, downscale=args.downscale, fps=args.fps,
                                    overwrite=args.overwrite, actor_time=args.actor_time, progress=bar.update)
        what = f"{len(times)} time{'s' * (len(times) > 1)} from {times[0]:.3f} s to {times[-1]:.3f} s"
        print(f"{', '.join(ids)}: {what}" + (f"; copies {', '.join(copies)}" if copies else ""))
        return written

    return _run_render(work)


def _recorded_time(replay, sensor, index: int) -> float:
    """Start time of a sensor's index-th recorded frame or sweep."""
    from nurec_usd.replay.stage import StageCamera

    camera = isinstance(sensor, StageCamera)
    times = sensor.frame_times_s if camera else sensor.sweep_times_s
    if not 0 <= index < len(times):
        raise ValueError(f"--frame {index}: {sensor.id} recorded {len(times)} {'frames' if camera else 'sweeps'} "
                         f"(0 to {len(times) - 1})")
    return float(times[index])


def _bar(total: int, desc: str, disable: bool):
    return progress_bar(total, desc, "frame", enabled=not disable)


def preset_summary() -> str:
    """What each build preset is, from its values: steps and the SH degree it ends at."""
    from nurec_usd.train.config import make_config

    parts = []
    for name in ("fast", "quality"):
        t = make_config(name).train
        parts.append(f"{name}: {t.steps:,} steps (each renders every camera's frame of one instant), SH degree "
                     f"{t.sh_degree} (it starts at 0 and rises by one every {t.sh_step_fraction:.0%} of the run)")
    return "; ".join(parts)


class _PresetHelpFormatter(argparse.HelpFormatter):
    """Help whose --preset entry is read from the presets' values when it is shown (reading them
    imports torch, which the parser itself does not)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.dest == "preset":
            return f"{preset_summary()} (default: fast)".replace("%", "%%")  # argparse expands %
        return super()._get_help_string(action)


def _export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--usdz", action="store_true",
                   help="also package the USD as scene.usdz (refused past the 4 GiB zip limit)")
    p.add_argument("--collision", action="store_true",
                   help="also write collision.usdc: a triangle mesh of the static scene (TSDF fusion of rendered "
                        "depth) with UsdPhysics collision APIs, referenced from root.usda")


def _build_options(p: argparse.ArgumentParser, batch: bool = False) -> None:
    """The options of a build, shared by build and batch (each numeric flag has its option's range)."""
    from nurec_usd.scene.init import InitConfig
    from nurec_usd.train.config import BuildConfig, TrainConfig

    p.add_argument("--preset", choices=("fast", "quality"), default="fast",
                   help="the preset: its steps and SH degree (see build --help)")
    p.add_argument("--budget-s", type=field_type(BuildConfig, "budget_s"), default=None, metavar="N",
                   help="end training gracefully after N seconds of wall time, N > 0 (evaluation and export "
                        "still run)")
    p.add_argument("--steps", type=field_type(TrainConfig, "steps"), default=None,
                   help="training steps, at least 1 (default: the preset's)")
    p.add_argument("--max-gaussians", type=field_type(TrainConfig, "max_gaussians"), default=None,
                   help="cap on the Gaussian count, at least 1 (default: the preset's)")
    p.add_argument("--voxel", type=field_type(InitConfig, "voxel_m"), default=None, metavar="M",
                   help="initial voxel size in metres, 0.001 to 100 (default: the preset's)")
    p.add_argument("--downscale", type=field_type(TrainConfig, "downscale"), default=None, metavar="K",
                   help="train and evaluate on images shrunk K times, 1 to 64, leaving every camera at least "
                        "16 pixels on a side (default: 1, full resolution)")
    p.add_argument("--refine-tracks", action="store_true", help="also optimise the actors' track poses")
    p.add_argument("--eval-every", type=field_type(TrainConfig, "eval_every"), default=None, metavar="N",
                   help="hold out the frames and sweeps whose index is N/2 mod N, N >= 2 (default: 8; 0: none)")
    p.add_argument("--seed", type=field_type(TrainConfig, "seed"), default=None,
                   help="random seed, 0 to 2^32-1 (default: 0)")
    p.add_argument("--device", default="auto", type=device_type,
                   help="auto (default: the GPUs when torch sees one, else the CPU), cuda, cpu; each worker gets "
                        "a GPU of its own" if batch else "auto (default: a CUDA GPU when torch sees one), cpu, cuda:N")
    p.add_argument("--format", default=None, help="capture format, instead of detecting it")
    p.add_argument("--set", action="append", default=[], type=parse_option, metavar="KEY=VALUE",
                   help="any other training or init option, e.g. --set lidar_range_weight=0.5 (repeatable; a "
                        "run's config.json lists them all with the values it used); for real drives: ego_box "
                        "(auto, off or x0,y0,z0,x1,y1,z1), ego_mask (auto, on, off), ego_mask_dir (a folder of "
                        "<camera id>.png), frame_appearance (off, gain_bias, affine)")
    _export_options(p)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m nurec_usd``. Every numeric flag's type checks the
    value against a declared range while parsing (a usage error, exit 2, naming the flag)."""
    from nurec_usd.train.config import BuildConfig, TrainConfig

    parser = argparse.ArgumentParser(
        prog="python -m nurec_usd",
        description="Turn multi-sensor driving captures into simulation-ready OpenUSD scenes of time-varying "
                    "3D Gaussians.",
        epilog="Exit codes: 0 success; 1 bad input, a diverged build or a file that cannot be written; 2 usage "
               "error (an option value outside its range is one); 130 Ctrl-C; 143 SIGTERM. Outputs appear "
               "complete or not at all.",
    )
    parser.add_argument("--version", action="version", version=f"nurec_usd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("inspect", help="summarise a capture: sensors, time span, frames, sweeps, tracks",
                       description="Load a capture (checking it) and print a readable summary.")
    p.add_argument("capture", type=Path, help="capture directory (native or an importable format)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--format", default=None, help="capture format, instead of detecting it "
                   "(native, nerfstudio, colmap, dgp, kitti, ncore, nuscenes)")
    _load_arguments(p)
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("validate", help="check a capture or a USD stage; exit 0 when clean, 1 with every problem "
                                        "listed",
                       description="Check a capture against the format (docs/capture-format.md): the manifest's "
                                   "schema and meaning, every file, and (unless --quick) every image and sweep. "
                                   "Given a USD stage instead (a .usd/.usda/.usdc/.usdz file, an export folder "
                                   "holding root.usda or a run folder holding usd/root.usda), run OpenUSD's "
                                   "validators (pxr.UsdValidation, every registered one) and, where the "
                                   "usd-validation-nvidia package is installed, NVIDIA's asset validator with its "
                                   "GaussianSplatSchemaChecker, payloads loaded; exit 1 on any error or warning "
                                   "(each listed: severity, prim, validator, message), or when USD cannot open "
                                   "the file.")
    p.add_argument("capture", type=Path, metavar="PATH",
                   help="capture directory (or its capture.json), or a USD stage / export folder")
    p.add_argument("--quick", action="store_true",
                   help="skip decoding images and reading sweeps (headers and sizes are still checked)")
    p.add_argument("--workers", type=flag_type("int", 1, 256), default=8,
                   help="threads for decoding (1 to 256; default: 8)")
    p.add_argument("--format", default=None, help="capture format, instead of detecting it")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    _load_arguments(p)
    p.set_defaults(func=_cmd_validate)

    presets = "; ".join(f"{name}: {pr.description}" for name, pr in PRESETS.items())
    p = sub.add_parser(
        "synth", help="generate a synthetic driving capture with ground truth (procedural street, Warp ray casting)",
        description="Render a procedural street (buildings, trees, parked and moving cars, pedestrians) with Warp "
                    "ray casting into a capture in the native format, plus ground truth beside it: "
                    "OUT_groundtruth/cameras/<camera>/<t_us>.npz (depth = float32 ray distance in metres from the "
                    "camera centre through the pixel centre, 0 = sky or outside the lens; actor = int16 index into "
                    "groundtruth.json 'actors', -1 = static) and OUT_groundtruth/lidar/<lidar>/<t_us>.npz "
                    "(range_clean, points_clean, actor, column per returned point, in the sweep file's order; "
                    "range_grid / actor_grid per ray). The same seed gives byte-identical files on one device. "
                    f"Presets: {presets}.")
    p.add_argument("--preset", required=True, choices=list(PRESETS), help="what to generate (see above)")
    p.add_argument("--out", required=True, type=Path, help="capture directory to create")
    p.add_argument("--seed", type=flag_type("int", 0, 2**32 - 1), default=0,
                   help="random seed, 0 to 2^32-1 (default: 0)")
    p.add_argument("--gt-out", type=Path, default=None,
                   help="ground-truth folder (default: OUT_groundtruth beside the capture)")
    p.add_argument("--no-groundtruth", action="store_true", help="write the capture only")
    p.add_argument("--device", default=None, type=device_type,
                   help="Warp device, e.g. cpu or cuda:0 (default: cuda:0 when available, else cpu)")
    p.add_argument("--spp", type=int, choices=(1, 5), default=None,
                   help="samples per pixel: 1 = pixel centre, 5 = centre + rotated grid (default: the preset's)")
    p.add_argument("--overwrite", action="store_true", help="replace existing output folders")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--contact-sheet", type=Path, default=None, metavar="PNG",
                   help="also write a contact sheet of a few frames (and depth, actors, lidar) to this PNG")
    p.set_defaults(func=_cmd_synth)

    p = sub.add_parser(
        "build", formatter_class=_PresetHelpFormatter,
        help="reconstruct a capture into an optimised time-varying Gaussian scene (a run directory)",
        description="Initialise Gaussians from the capture's lidar (or SfM points, or the camera frusta), optimise "
                    "them against the training frames and sweeps, evaluate on held-out ones (every 8th timestamp, "
                    "the middle one of 3 or 4, or the dataset's own test split), "
                    "and write OUT: scene.pt, config.json, manifest.json (inputs + hashes, versions, time per "
                    "stage), metrics.json, train_log.jsonl, eval_sheet.png and eval/. OUT appears only when "
                    "complete. Exit 0 on success, 1 on bad input, a file that cannot be written or a diverged "
                    "run (its last good checkpoint is kept), 2 on a usage error, 130 / 143 when stopped by Ctrl-C / "
                    "SIGTERM (during training the run is still written, with the state of its last finished "
                    "step).")
    p.add_argument("capture", type=Path, help="capture directory (native, or a format --format names)")
    p.add_argument("-o", "--out", required=True, type=Path, help="run directory to create")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (on a terminal) or progress lines (elsewhere)")
    _build_options(p)
    _load_arguments(p)
    p.add_argument("--profile", action="store_true",
                   help="time every stage and the parts of a window of training steps (host and GPU time, the "
                        "GPU's idle time, the largest kernels): printed at the end and written to "
                        "profile.txt / profile.json in the run directory")
    p.add_argument("--profile-start", type=_non_negative_int, default=None, metavar="STEP",
                   help="--profile with its window of steps starting at STEP (default: mid-run)")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser(
        "bench", help="time a whole build of a synthetic capture, from the process's start to its USD",
        description="Build a synthetic capture (generated once into a cache folder) with `build` in a child "
                    "process and print the time from the process's start to usd/root.usda, the stage table, the "
                    "held-out quality and a row for benchmarks/RESULTS.md. Several --budget-s give one build "
                    "each: the time-quality curve.")
    p.add_argument("preset", nargs="?", default="drive30", choices=list(PRESETS),
                   help="synth preset to build (default: drive30)")
    p.add_argument("--capture", type=Path, default=None, help="an existing capture instead of a synthetic one")
    p.add_argument("--cache", type=Path, default=None,
                   help="where generated captures are kept (default: $XDG_CACHE_HOME/nurec_usd/bench)")
    p.add_argument("--build-preset", choices=("fast", "quality"), default="fast", help="build preset (default: fast)")
    p.add_argument("--budget-s", type=field_type(BuildConfig, "budget_s"), action="append", default=None, metavar="N",
                   help="training budget in seconds (repeatable: one build per budget)")
    p.add_argument("--steps", type=field_type(TrainConfig, "steps"), default=None,
                   help="training steps (default: the preset's)")
    p.add_argument("--profile", action="store_true", help="build with --profile and print its tables")
    p.add_argument("--profile-start", type=_non_negative_int, default=None, metavar="STEP",
                   help="profile the window of steps starting at STEP (implies --profile)")
    p.add_argument("--set", action="append", default=[], type=parse_option, metavar="KEY=VALUE",
                   help="a training or init option for every build (repeatable)")
    p.add_argument("--device", default="auto", type=device_type, help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--out", type=Path, default=None, help="keep the run directories here (default: removed)")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser(
        "batch", help="build and export many captures, each into OUT/<name> (local worker processes or Ray)",
        description="Build and export every capture into its own run directory OUT/<name>, as build does. A run "
                    "that fails is reported and the others go on. A run whose inputs (their SHA-256) and "
                    "resolved configuration match a finished run in OUT is skipped (--force rebuilds it), so a "
                    "batch that was interrupted continues where it stopped when run again; run directories "
                    "appear only when complete. Writes OUT/logs/<name>.log per run and OUT/batch.json (status, "
                    "wall time, held-out metrics, size, error per run) and prints a summary table. Locally, runs "
                    "go to worker processes, one per visible GPU (each sees only its own GPU; choose them with "
                    "CUDA_VISIBLE_DEVICES), or CPU workers. With --ray, each run is a Ray task asking for one "
                    "GPU where the cluster has GPUs. Exit 0 when every run succeeded (built or up to date), 1 "
                    "when one failed, 2 on a usage error.")
    p.add_argument("captures", nargs="*", type=Path, metavar="CAPTURE",
                   help="a capture (any format build reads), a folder of captures, or a .txt file listing "
                        "captures one a line")
    p.add_argument("-o", "--out", required=True, type=Path, help="output folder: one run directory per capture")
    p.add_argument("--workers", type=flag_type("int", low=1, high=1024), default=None, metavar="N",
                   help="runs at once (default: one per visible GPU, else 1; more workers than GPUs share them; "
                        "with --ray: as many as the cluster's resources allow)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run each capture as a Ray task: without ADDRESS on a local Ray (or the cluster "
                        "RAY_ADDRESS names), with it on that cluster (ray://HOST:10001, HOST:6379, auto); OUT and "
                        "the captures must be on a file system every node sees. Needs the ray extra: pip install "
                        "\"nurec_usd[ray]\"")
    p.add_argument("--force", action="store_true", help="rebuild runs that are up to date")
    p.add_argument("--retries", type=flag_type("int", low=0, high=100), default=2, metavar="N",
                   help="how many more times a run whose worker process died is tried (default: 2)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _build_options(p, batch=True)
    p.set_defaults(func=_cmd_batch)

    p = sub.add_parser("export", help="write a finished run's scene as OpenUSD layers (and a 3DGS .ply)",
                       description="Read RUN/scene.pt (written by build) and write the USD layers of the time-varying "
                                   "scene and its sensor rig into OUT (root.usda, rig.usdc, actors.usdc, "
                                   "background.usdc, actors/<track>.usdc, sky.png), all or nothing. --ply also "
                                   "writes the static Gaussians as OUT/scene.ply in the common 3DGS layout.")
    p.add_argument("run", type=Path, help="run directory written by build (or its scene.pt)")
    p.add_argument("-o", "--out", required=True, type=Path, help="folder to write the USD layers into")
    p.add_argument("--ply", action="store_true", help="also write OUT/scene.ply (static Gaussians, 3DGS layout)")
    p.add_argument("--ply-actors", action="store_true",
                   help="also write OUT/actors/<track>.ply (each actor's Gaussians in its box frame, 3DGS layout) "
                        "and OUT/actors/<track>.track.json (its timed poses in the world: t_s, translation, "
                        "quaternion w x y z)")
    p.add_argument("--ply-pad-sh", action="store_true",
                   help="write the PLYs with SH degree 3 (45 f_rest, zero past the scene's degree), as the INRIA "
                        "loader and many viewers expect; implies --ply")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    p.add_argument("--device", default="auto", type=device_type, help="where the collision mesh's depth "
                   "renders run: auto (a CUDA GPU when torch sees one), cpu, cuda or cuda:N")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    _export_options(p)
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser(
        "render", help="replay: render cameras and lidars of an exported scene from its USD alone, on the recorded "
                       "path or a novel one, with actors removed, moved or duplicated",
        description="Open SCENE's USD (root.usda, a .usdz, an export folder or a run folder), evaluate the rig and "
                    "the actors at the requested time with USD, and render the sensor: a camera to a PNG; a lidar "
                    "to a .ply of its returns (lidar frame, capture intensity units) plus <stem>_range.png. "
                    "Times are seconds since the capture start. A sequence (--start/--end/--fps) goes to a folder "
                    "of numbered frames, or to a video when OUT ends in .mp4 or .avi (needs OpenCV). "
                    "With --trajectory, a rig offset, an actor edit or several sensors, the scene is drawn by "
                    "nurec_usd.replay.Renderer, and each camera frame gets a depth PNG beside it "
                    "(<frame>_depth.png: 16-bit, millimetres along the camera's z axis, 0 where there is no "
                    "surface or it is beyond 65.535 m). Exit 1 with one line naming the file when SCENE is not a "
                    "USD stage USD can read or not a nurec_usd export, or when a trajectory file has a bad value "
                    "(naming its row and field); 2 on a usage error.")
    p.add_argument("scene", type=Path, help="root.usda / .usdz, an export folder, or a run folder (RUN/usd)")
    p.add_argument("--sensor", required=True, action="append",
                   help="camera or lidar id (or its prim name under /World/Rig); repeat it or separate ids with "
                        "commas for several sensors, or 'all'")
    p.add_argument("--time", type=flag_type("float"), default=None, metavar="T", help="render at T seconds")
    p.add_argument("--frame", type=flag_type("int", 0), default=None, metavar="N",
                   help="render at the time of the sensor's N-th recorded frame or sweep (from 0)")
    p.add_argument("--start", type=flag_type("float"), default=None, metavar="S", help="sequence start, seconds")
    p.add_argument("--end", type=flag_type("float"), default=None, metavar="E",
                   help="sequence end, seconds (inclusive; not before --start)")
    p.add_argument("--fps", type=flag_type("float", 0, 1000, low_open=True), default=10.0,
                   help="sequence rate (and a video's), > 0 and up to 1000 (default: 10)")
    p.add_argument("--trajectory", type=Path, default=None, metavar="FILE",
                   help="render along timed rig poses, one frame per pose: a .csv with the header "
                        "t_s,tx,ty,tz,qw,qx,qy,qz or a .json {\"poses\": [{\"t_s\": ..., \"tx\": ..., ...}]} "
                        "(rig -> world in the scene's world frame, seconds since the capture start; see the README)")
    p.add_argument("--lateral-offset", type=flag_type("float", -1000, 1000), default=0.0, metavar="M",
                   help="move the rig M metres along its own +y axis (left, for a rig with x forward, y left, "
                        "z up), on the recorded path or the --trajectory")
    p.add_argument("--height-offset", type=flag_type("float", -1000, 1000), default=0.0, metavar="M",
                   help="move the rig M metres along its own +z axis (up)")
    p.add_argument("--yaw-offset", type=flag_type("float", -360, 360), default=0.0, metavar="DEG",
                   help="turn the rig DEG degrees about its own z axis (counter-clockwise seen from above)")
    p.add_argument("--remove-actor", action="append", metavar="ID",
                   help="leave actor ID (its track id, or its prim name under /World/Actors) out of every sensor; "
                        "repeat for several")
    p.add_argument("--shift-actor", action="append", type=_actor_value("shift_actor", "offset"), metavar="ID=X,Y,Z",
                   help="move actor ID's whole track by X,Y,Z metres in the world frame; repeatable")
    p.add_argument("--actor-track", action="append", type=_actor_value("actor_track", "file"), metavar="ID=FILE",
                   help="give actor ID a new track: box -> world poses in the --trajectory layout (it is drawn "
                        "over the new track's time span); repeatable")
    p.add_argument("--duplicate-actor", action="append", type=_actor_value("duplicate_actor", "offset"),
                   metavar="ID=X,Y,Z",
                   help="draw a copy of actor ID on its (possibly shifted or new) track moved by X,Y,Z metres "
                        "in the world frame, named ID_copy1, ID_copy2, ...; repeatable")
    p.add_argument("--actor-time", choices=["readout", "batch"], default="readout",
                   help="readout (default): each camera sees the actors at the middle of its own readout, as "
                        "replay does; batch: cameras of one resolution are drawn in one render with the actors "
                        "placed once, at the mean of their mid-readouts, as in training (faster)")
    p.add_argument("--no-depth", action="store_true", help="no depth PNGs beside the camera frames")
    p.add_argument("-o", "--out", required=True, type=Path,
                   help="camera: FILE.png; lidar: FILE.ply; sequence, trajectory or several sensors: a folder, or "
                        "FILE.mp4 / FILE.avi for one sensor")
    p.add_argument("--downscale", type=flag_type("int", 1, 64), default=1, metavar="K",
                   help="camera images K times smaller, 1 to 64, leaving at least 16 pixels on a side")
    p.add_argument("--device", default="auto", type=device_type,
                   help="auto (default: a CUDA GPU when torch sees one), cpu, cuda or cuda:N")
    p.add_argument("--overwrite", action="store_true", help="replace existing output")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.set_defaults(func=_cmd_render)
    return parser


def _identity(path: Path | None) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None when it does not exist: tells a folder moved into place
    from the one that was there before."""
    try:
        st = Path(path).stat() if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_dev, st.st_ino)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring).

    Ctrl-C and SIGTERM stop any command the same way: one line saying so, nothing half-written
    left behind (a build interrupted during training still writes its run), exit code 130 / 143.
    A file that cannot be written (a full disk, a read-only folder) ends it with one line naming
    the file, exit code 1.
    """
    args = build_parser().parse_args(argv)
    out = getattr(args, "out", None)
    out_before = _identity(out)
    with interrupts.handled():
        try:
            return int(args.func(args))
        except KeyboardInterrupt as err:
            # a signal can land after the output was moved into place, before the command returned
            if out is None:
                left = ""
            elif _identity(out) not in (None, out_before):
                left = f"; {out} had already been written"
            else:
                left = f"; nothing was written to {out}"
            print(f"{args.command}: stopped by {interrupts.describe(err)}{left}", file=sys.stderr)
            return interrupts.exit_code(err)
        except OSError as err:
            print(f"{args.command}: {describe_os_error(err, getattr(args, 'out', None))}", file=sys.stderr)
            return 1
