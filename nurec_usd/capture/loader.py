"""Loading a native capture directory into a ``Capture``, validating everything on the way.

``load_capture`` checks the manifest against the schema, then the meaning of every field
(monotonic timestamps, rigid poses, files present and of the right size, data inside the
pose time range, ...) and raises one ``CaptureError`` listing every problem found.
``validate_capture`` does the same plus the expensive checks (decode every image, read
every sweep) and returns the problems instead of raising.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from nurec_usd.capture.cloud_files import check_cloud_file
from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.images import IMAGE_SUFFIXES, image_size, read_mask, read_rgb
from nurec_usd.capture.manifest import MANIFEST_NAME, find_manifest, read_manifest, schema_problems
from nurec_usd.capture.missing import MissingFiles, is_missing
from nurec_usd.capture.model import (
    Camera,
    CameraFrame,
    Capture,
    Lidar,
    LidarSweepFile,
    RigTrajectory,
    RollingShutter,
    Track,
)
from nurec_usd.capture.paths import RealFolders, resolve_inside
from nurec_usd.capture.sweep_io import SWEEP_SUFFIXES, SweepFormatError, read_nrl_header, read_sweep, sweep_problems
from nurec_usd.util.prefetch import default_workers

# A spinning lidar's rays per sweep at most (channels x columns): 128 x 2048 is a large lidar
# today; a table past this is a mistake, and its range images would not fit in memory.
MAX_LIDAR_RAYS = 1 << 22

# Rotations written as float32 and printed to JSON are orthonormal to ~1e-7; anything
# beyond this is a wrong matrix, not rounding. Accepted ones are re-orthonormalised.
ROTATION_TOLERANCE = 1e-4


class _Problems:
    """Collects problems while the loader walks the manifest."""

    def __init__(self) -> None:
        self.items: list[Problem] = []
        self.missing = 0  # of the items: files that do not exist (the refusal mentions --skip-missing)

    def merge(self, other: "_Problems") -> None:
        self.items += other.items
        self.missing += other.missing

    def manifest(self, field: str, message: str) -> None:
        self.items.append(Problem(MANIFEST_NAME, field, message))

    def file(self, file: str, field: str, message: str) -> None:
        self.items.append(Problem(file, field, message))


def load_capture(path: str | Path, *, check_image_sizes: bool = True, skip_missing: bool = False) -> Capture:
    """Load and validate a capture directory (or its ``capture.json``).

    Images and sweeps stay on disk (decoded on demand); their existence, image sizes
    (from the file headers) and sweep headers are checked here. With ``skip_missing``,
    frames whose image and sweeps whose file does not exist are left out (one
    ``MissingFilesWarning`` gives the count) instead of being problems.

    Raises:
        CaptureError: listing every problem found, each naming its file and field.
    """
    root, manifest_path = find_manifest(Path(path))
    manifest = read_manifest(manifest_path)
    problems = schema_problems(manifest)
    if problems:  # the structure is wrong: meaning checks would only add noise
        raise CaptureError(problems, str(root))
    found = _Problems()
    missing = MissingFiles(skip_missing)
    capture = _build(root, manifest, found, check_image_sizes, missing)
    if found.items:
        missing.reported = found.missing
        raise CaptureError(found.items, str(root), hint=missing.hint())
    missing.warn()
    return capture


class ValidationProblems(list):
    """``validate_capture``'s problems (a list), with the refusal's ``hint`` (``CaptureError.hint``) when it has one."""

    hint: str | None = None


def validate_capture(path: str | Path, *, deep: bool = True, workers: int = 8,
                     progress: Callable[[Iterable, int], Iterable] | None = None,
                     skip_missing: bool = False, notes: list[Problem] | None = None) -> list[Problem]:
    """Every problem of a capture; an empty list when it is clean.

    With ``deep`` every image and mask is decoded and every sweep read (channels in range,
    finite intensities, point times inside the rig's time range): see :func:`deep_check`.
    ``progress`` wraps the iterator of deep checks (e.g. ``lambda it, n: tqdm(it, total=n)``).
    ``skip_missing``: as ``load_capture``'s (missing images and sweeps are left out, not problems).
    ``notes``: where what is not a problem but worth saying goes (points with non-finite
    coordinates, which loading drops).
    """
    try:
        capture = load_capture(path, skip_missing=skip_missing)
    except CaptureError as err:
        found = ValidationProblems(err.problems)
        found.hint = err.hint
        return found
    if not deep:
        return []
    return deep_check(capture, workers=workers, progress=progress, notes=notes)


def deep_check(capture: Capture, *, workers: int = 8, progress: Callable[[Iterable, int], Iterable] | None = None,
               notes: list[Problem] | None = None) -> list[Problem]:
    """Decode every image and mask and read every sweep of a loaded capture (of any format);
    the problems found, each naming its file. The checks are the ones loading for a build
    makes (``read_rgb``, ``Lidar.load_sweep``), so a capture that passes builds."""
    jobs: list[Callable[[], tuple[list[Problem], tuple[str, int] | None]]] = []
    for cam in capture.cameras.values():
        for frame in cam.frames:
            jobs.append(lambda cam=cam, frame=frame: (_deep_check_frame(capture, cam, frame), None))
    for lidar in capture.lidars.values():
        for i in range(len(lidar.sweeps)):
            jobs.append(lambda lidar=lidar, i=i: _deep_check_sweep(capture, lidar, i))
    problems: list[Problem] = []
    dropped: list[tuple[str, int]] = []  # sweeps with non-finite points: (file, how many)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results: Iterable[tuple[list[Problem], tuple[str, int] | None]] = pool.map(lambda job: job(), jobs)
        if progress is not None:
            results = progress(results, len(jobs))
        for found, note in results:
            problems.extend(found)
            if note is not None:
                dropped.append(note)
    if notes is not None and dropped:
        total = sum(count for _, count in dropped)
        many = len(dropped) != 1
        notes.append(Problem(dropped[0][0], "xyz", f"{total:,} point{'s' if total != 1 else ''} with non-finite "
                                                     f"coordinates "
                                                     f"(NaN or infinity) in {len(dropped)} sweep{'s' if many else ''}"
                                                     f"{' (this one first)' if many else ''}; loading drops them"))
    return problems


# --------------------------------------------------------------------------------------
# Building the dataclasses, checking each field's meaning


def _build(root: Path, m: dict[str, Any], found: _Problems, check_image_sizes: bool,
           missing: MissingFiles) -> Capture:
    # The files' checks (thousands of stats and header reads) run in threads; their problems are
    # reported in document order all the same.
    # The frames' few folders are resolved once each (``RealFolders``), not once per file.
    with ThreadPoolExecutor(max_workers=default_workers(), thread_name_prefix="check") as pool:
        return _build_checked(root, m, found, check_image_sizes, pool, missing, RealFolders())


def _left_out(root: Path, rel: str, missing: MissingFiles, folders: RealFolders) -> bool:
    """Whether a frame or sweep is skipped: its file is missing and ``skip_missing`` is on."""
    if not missing.skip:
        return False
    try:
        return is_missing(resolve_inside(root, rel, folders))
    except ValueError:
        return False  # a path outside the capture is a problem, never "missing"


def _build_checked(root: Path, m: dict[str, Any], found: _Problems, check_image_sizes: bool,
                   pool: ThreadPoolExecutor, missing: MissingFiles, folders: RealFolders) -> Capture:
    rig_ts = _timestamps(m["rig"]["timestamps_us"], "rig.timestamps_us", found)
    rig_T = _poses(m["rig"]["T_world_rig"], "rig.T_world_rig", found)
    if len(rig_T) != len(rig_ts):
        found.manifest("rig.T_world_rig", f"{len(rig_T)} poses for {len(rig_ts)} timestamps")
    t_first, t_last = int(rig_ts[0]), int(rig_ts[-1])

    def check_time(t: int, field: str, end: int | None = None) -> None:
        last = t if end is None else end
        if t < t_first or last > t_last:
            span = f"{t}" if end is None else f"{t}..{end}"
            found.manifest(field, f"time {span} us lies outside the rig poses' range {t_first}..{t_last} us")

    seen_ids: dict[str, str] = {}

    def check_id(sensor_id: str, field: str) -> None:
        if sensor_id in seen_ids:
            found.manifest(field, f"id {sensor_id!r} is used twice (also at {seen_ids[sensor_id]})")
        seen_ids.setdefault(sensor_id, field)

    cameras: dict[str, Camera] = {}
    for ci, c in enumerate(m["cameras"]):
        base = f"cameras[{ci}]"
        check_id(c["id"], f"{base}.id")
        T = _poses([c["T_rig_camera"]], f"{base}.T_rig_camera", found, single=True)
        rs = RollingShutter(c["rolling_shutter"]["direction"], int(c["rolling_shutter"]["readout_time_us"]))
        if rs.direction == "global" and rs.readout_time_us != 0:
            found.manifest(f"{base}.rolling_shutter.readout_time_us", "a global shutter has readout time 0")
        _check_intrinsics(c, base, found)
        _timestamps([f["timestamp_us"] for f in c["frames"]], f"{base}.frames[*].timestamp_us", found, allow_empty=True)
        def frame_files(fi: int, f: dict[str, Any], c: dict[str, Any] = c, base: str = base):
            # a frame's files: present, inside the capture, and (from the headers) of the camera's size
            fb, local = f"{base}.frames[{fi}]", _Problems()
            if _left_out(root, f["image"], missing, folders):
                return None, None, None
            image = _file(root, f["image"], f"{fb}.image", IMAGE_SUFFIXES, local, folders, counts_missing=True)
            mask = _file(root, f["mask"], f"{fb}.mask", (".png",), local, folders) if "mask" in f else None
            if check_image_sizes:
                for p, rel, field in ((image, f["image"], "image"), (mask, f.get("mask"), "mask")):
                    if p is not None:
                        _check_image_size(p, rel, f"{fb}.{field}", c["width"], c["height"], local)
            return image, mask, local

        frames = []
        checked = pool.map(frame_files, range(len(c["frames"])), c["frames"])
        for fi, (f, (image, mask, local)) in enumerate(zip(c["frames"], checked)):
            fb = f"{base}.frames[{fi}]"
            if local is None:  # its image is missing and skip_missing is on
                missing.drop(f["image"])
                continue
            check_time(f["timestamp_us"], f"{fb}.timestamp_us", f["timestamp_us"] + rs.readout_time_us)
            found.merge(local)
            frames.append(CameraFrame(int(f["timestamp_us"]), image or root / f["image"],
                                      mask or (root / f["mask"] if "mask" in f else None)))
        cameras[c["id"]] = Camera(c["id"], c["model"], int(c["width"]), int(c["height"]), dict(c["intrinsics"]),
                                  T[0], rs, tuple(frames))

    lidars: dict[str, Lidar] = {}
    for li, spec in enumerate(m["lidars"]):
        base = f"lidars[{li}]"
        check_id(spec["id"], f"{base}.id")
        T = _poses([spec["T_rig_lidar"]], f"{base}.T_rig_lidar", found, single=True)
        elevation = np.asarray(spec["elevation_deg"], dtype=np.float64)
        offsets = np.asarray(spec.get("azimuth_offset_deg", [0.0] * len(elevation)), dtype=np.float64)
        if offsets.shape != elevation.shape:
            found.manifest(f"{base}.azimuth_offset_deg",
                           f"{len(offsets)} offsets for {len(elevation)} channels (elevation_deg)")
        for name, values in (("elevation_deg", elevation), ("azimuth_offset_deg", offsets)):
            if not np.all(np.isfinite(values)):
                found.manifest(f"{base}.{name}", "contains non-finite values")
        rays = len(elevation) * int(spec["columns"])
        if rays > MAX_LIDAR_RAYS:
            found.manifest(f"{base}.columns", f"{len(elevation)} channels x {spec['columns']} columns = {rays:,} "
                                              f"rays per sweep, more than the {MAX_LIDAR_RAYS:,} supported")
        if not spec["min_range_m"] < spec["max_range_m"]:
            found.manifest(f"{base}.min_range_m",
                           f"min_range_m {spec['min_range_m']} must be below max_range_m {spec['max_range_m']}")
        _timestamps([s["timestamp_us"] for s in spec["sweeps"]], f"{base}.sweeps[*].timestamp_us", found, allow_empty=True)
        def sweep_file(si: int, s: dict[str, Any], base: str = base):
            if _left_out(root, s["file"], missing, folders):
                return None, None
            local = _Problems()
            p = _file(root, s["file"], f"{base}.sweeps[{si}].file", SWEEP_SUFFIXES, local, folders,
                      counts_missing=True)
            if p is not None and p.suffix.lower() == ".nrl":
                _check_nrl_header(p, s["file"], s["timestamp_us"], local)
            elif p is not None:
                _check_cloud_header(p, s["file"], local)
            return p, local

        sweeps = []
        checked = pool.map(sweep_file, range(len(spec["sweeps"])), spec["sweeps"])
        for si, (s, (p, local)) in enumerate(zip(spec["sweeps"], checked)):
            if local is None:
                missing.drop(s["file"], "sweep")
                continue
            check_time(s["timestamp_us"], f"{base}.sweeps[{si}].timestamp_us")
            found.merge(local)
            sweeps.append(LidarSweepFile(int(s["timestamp_us"]), p or root / s["file"]))
        lidars[spec["id"]] = Lidar(
            id=spec["id"], T_rig_lidar=T[0], elevation_deg=elevation,
            azimuth_offset_deg=offsets if offsets.shape == elevation.shape else np.zeros_like(elevation),
            columns=int(spec["columns"]), rotation=spec["rotation"], scan_rate_hz=float(spec["scan_rate_hz"]),
            start_azimuth_deg=float(spec.get("start_azimuth_deg", 0.0)),
            min_range_m=float(spec["min_range_m"]), max_range_m=float(spec["max_range_m"]), sweeps=tuple(sweeps),
            time_range_us=(t_first, t_last))

    tracks: dict[str, Track] = {}
    for ti, t in enumerate(m["tracks"]):
        base = f"tracks[{ti}]"
        if t["id"] in tracks:
            found.manifest(f"{base}.id", f"track id {t['id']!r} is used twice")
        size = np.asarray(t["size_m"], dtype=np.float64)
        if not (np.all(np.isfinite(size)) and np.all(size > 0)):
            found.manifest(f"{base}.size_m", f"box size must be positive and finite, got {t['size_m']}")
        ts = _timestamps(t["timestamps_us"], f"{base}.timestamps_us", found)
        poses = _poses(t["T_world_box"], f"{base}.T_world_box", found)
        if len(poses) != len(ts):
            found.manifest(f"{base}.T_world_box", f"{len(poses)} poses for {len(ts)} timestamps")
        tracks[t["id"]] = Track(t["id"], t["class"], size, ts, poses)

    # Re-centre the world on the first rig position (float32 precision downstream).
    offset = rig_T[0, :3, 3].copy() if len(rig_T) else np.zeros(3)
    rig_T[:, :3, 3] -= offset
    for track in tracks.values():
        track.T_world_box[:, :3, 3] -= offset
    return Capture(root=root, name=m.get("name", root.name), rig=RigTrajectory(rig_ts, rig_T),
                   cameras=cameras, lidars=lidars, tracks=tracks, world_offset_m=offset,
                   metadata=dict(m.get("metadata", {})))


def _timestamps(values: list[int], field: str, found: _Problems, allow_empty: bool = False) -> np.ndarray:
    ts = np.asarray(values, dtype=np.int64)
    if len(ts) == 0 and not allow_empty:
        found.manifest(field, "needs at least one timestamp")
    bad = np.nonzero(np.diff(ts) <= 0)[0]
    if len(bad):
        i = int(bad[0]) + 1
        field_i = field.replace("[*]", f"[{i}]") if "[*]" in field else f"{field}[{i}]"
        more = f" (and {len(bad) - 1} more places)" if len(bad) > 1 else ""
        found.manifest(field_i, f"timestamps must strictly increase: {ts[i]} follows {ts[i - 1]}{more}")
    return ts


def _poses(values: list, field: str, found: _Problems, single: bool = False) -> np.ndarray:
    """[K, 4, 4] float64, each checked to be a finite rigid transform and re-orthonormalised."""
    T = np.asarray(values, dtype=np.float64).reshape(-1, 4, 4).copy()
    # The tests of rigid_transform_problem on all poses at once; the few that fail one get its message.
    with np.errstate(invalid="ignore", over="ignore"):  # huge or non-finite entries are reported below
        R = T[:, :3, :3]
        ok = np.isfinite(T).all((1, 2)) & np.isclose(T[:, 3], [0.0, 0.0, 0.0, 1.0], atol=1e-9).all(-1)
        ok &= np.abs(R.transpose(0, 2, 1) @ R - np.eye(3)).max((1, 2), initial=0.0) <= ROTATION_TOLERANCE
        ok &= np.linalg.det(np.where(ok[:, None, None], R, np.eye(3))) >= 0
    for k in np.flatnonzero(~ok):
        message = rigid_transform_problem(T[k])
        if message:
            found.manifest(field if single else f"{field}[{k}]", message)
        else:  # at a tolerance's edge, where the batched arithmetic rounded the other way
            ok[k] = True
    if ok.any():
        u, _, vt = np.linalg.svd(T[ok, :3, :3])
        T[ok, :3, :3] = u @ vt
    return T


def rigid_transform_problem(T: np.ndarray) -> str | None:
    """Why a 4x4 matrix is not a finite rigid transform, or None when it is one."""
    if not np.all(np.isfinite(T)):
        return "pose has non-finite values (NaN or infinity)"
    if not np.allclose(T[3], [0.0, 0.0, 0.0, 1.0], atol=1e-9):
        return f"the last row must be [0, 0, 0, 1], got {T[3].tolist()}"
    R = T[:3, :3]
    with np.errstate(over="ignore"):
        err = float(np.abs(R.T @ R - np.eye(3)).max())
    if err > ROTATION_TOLERANCE:
        return f"rotation is not orthonormal (max |R^T R - I| = {err:.3g})"
    det = float(np.linalg.det(R))
    if det < 0:
        return f"rotation is a reflection (det = {det:.3g}); poses must be right-handed"
    return None


def _check_intrinsics(c: dict[str, Any], base: str, found: _Problems) -> None:
    for key, message in intrinsics_problems(c["model"], int(c["width"]), int(c["height"]), c["intrinsics"]):
        found.manifest(f"{base}.intrinsics.{key}", message)


def _finite(value: Any) -> bool:
    """A finite real number (an integer too large for a float is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def intrinsics_problems(model: str, width: int, height: int, intr: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for each intrinsic of a camera that cannot be right: non-finite values,
    a principal point more than an image size outside the image, focal lengths (pixels per
    radian for f-theta) outside 1/100 to 1000 times the image's larger side."""
    out = []
    for key, value in intr.items():
        values = value if isinstance(value, list) else [value]
        if not all(_finite(v) for v in values):
            out.append((key, "must be finite"))
    if out:
        return out
    for key, size in (("cx", width), ("cy", height)):
        if key in intr and not -size <= intr[key] <= 2 * size:
            out.append((key, f"principal point {intr[key]:g} px lies more than an image size outside the "
                             f"{width}x{height} image (expected -{size}..{2 * size})"))
    side = max(width, height)
    focal = {k: intr[k] for k in ("fx", "fy") if k in intr}
    if model == "ftheta" and len(intr.get("angle_to_pixel", [])) >= 2:
        focal["angle_to_pixel"] = intr["angle_to_pixel"][1]
    for key, value in focal.items():
        if key == "angle_to_pixel" and not value > 0:
            out.append((key, "the linear coefficient c1 (pixels per radian) must be positive"))
        elif not side / 100 <= value <= side * 1000:
            out.append((key, f"{value:g} px is not a focal length of a {width}x{height} camera (expected "
                             f"{side / 100:g}..{side * 1000:g})"))
    return out


def _file(root: Path, rel: str, field: str, suffixes: tuple[str, ...], found: _Problems, folders: RealFolders,
          counts_missing: bool = False) -> Path | None:
    # counts_missing: an image or sweep (what skip_missing leaves out), not a mask
    try:
        path = resolve_inside(root, rel, folders)
    except ValueError as exc:
        found.manifest(field, str(exc))
        return None
    if not path.is_file():
        found.manifest(field, f"file {rel} does not exist")
        found.missing += counts_missing and is_missing(path)
        return None
    if path.suffix.lower() not in suffixes:
        found.manifest(field, f"file {rel} has suffix {path.suffix!r}; expected one of {', '.join(suffixes)}")
        return None
    return path


def _check_image_size(path: Path, rel: str, field: str, width: int, height: int, found: _Problems) -> None:
    try:
        w, h = image_size(path)
    except ValueError as exc:
        found.file(rel, "", str(exc))
        return
    if (w, h) != (width, height):
        found.manifest(field, f"{rel} is {w}x{h} pixels; the camera's width x height is {width}x{height}")


def _check_cloud_header(path: Path, rel: str, found: _Problems) -> None:
    try:
        check_cloud_file(path)
    except SweepFormatError as exc:
        found.file(rel, exc.field, exc.message)
    except OSError as exc:
        found.file(rel, "", f"cannot read the file ({exc.strerror or exc})")


def _check_nrl_header(path: Path, rel: str, timestamp_us: int, found: _Problems) -> None:
    try:
        _, base = read_nrl_header(path)
    except SweepFormatError as exc:
        found.file(rel, exc.field, exc.message)
        return
    if base != timestamp_us:
        found.file(rel, "header.base_timestamp_us",
                   f"{base} differs from the manifest's sweep timestamp {timestamp_us}")


# --------------------------------------------------------------------------------------
# Deep checks (validate_capture)


def _rel(capture: Capture, path: Path) -> str:
    try:
        return path.relative_to(capture.root).as_posix()
    except ValueError:
        return str(path)


def _deep_check_frame(capture: Capture, cam: Camera, frame: CameraFrame) -> list[Problem]:
    problems = []
    for path, reader in ((frame.image_path, read_rgb), (frame.mask_path, read_mask)):
        if path is None:
            continue
        try:
            reader(path)
        except ValueError as exc:
            problems.append(Problem(_rel(capture, path), "", str(exc).split(": ", 1)[-1]))
    return problems


def _deep_check_sweep(capture: Capture, lidar: Lidar, index: int
                      ) -> tuple[list[Problem], tuple[str, int] | None]:
    """A sweep's problems, and (its file, how many points are non-finite) when some are."""
    file = lidar.sweeps[index]
    rel = _rel(capture, file.path)
    try:
        sweep = read_sweep(file.path, file.timestamp_us, lidar)
    except SweepFormatError as exc:
        return [Problem(rel, exc.field, exc.message)], None
    except (OSError, ValueError, RuntimeError) as exc:
        return [Problem(rel, "", f"cannot read the sweep ({exc})")], None
    # the checks Lidar.load_sweep makes, all of them reported
    time_range = lidar.time_range_us or (capture.start_us, capture.end_us)
    problems = [Problem(rel, field, message) for field, message in sweep_problems(sweep, lidar.channels, time_range)]
    nonfinite = int((~np.isfinite(sweep.points).all(axis=1)).sum())
    return problems, ((rel, nonfinite) if nonfinite else None)
