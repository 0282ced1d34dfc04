"""``batch``: many captures into one output folder, on local worker processes and on a real local Ray.

Three tiny captures (the bundled sample with its front camera only, each with its own name, so
their inputs differ) and one broken capture (a camera without ``fx``), built with a few steps at
a quarter of the resolution: a build takes a few seconds on a CPU. The module's tests share the
captures and, in order, one local output folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, assert_gaussian_splats_valid, assert_openusd_valid

from nurec_usd.batch_runs import BatchError, batch, find_captures, run_names

QUICK = {"steps": 3, "downscale": 4, "voxel_m": 0.4}  # a few seconds per build on a CPU
CLI_QUICK = ["--steps", "3", "--downscale", "4", "--voxel", "0.4", "--no-progress"]
GOOD = ("a", "b", "c")


def _tiny_capture(dst: Path, name: str) -> Path:
    """samples/tiny with only its front camera (its frames decode and colour the points fastest)."""
    src = REPO / "samples" / "tiny"
    (dst / "images").mkdir(parents=True)
    shutil.copytree(src / "lidar", dst / "lidar")
    shutil.copytree(src / "images" / "front", dst / "images" / "front")
    manifest = json.loads((src / "capture.json").read_text())
    manifest["cameras"] = [c for c in manifest["cameras"] if c["id"] == "front"]
    manifest["name"] = name
    (dst / "capture.json").write_text(json.dumps(manifest, indent=1))
    return dst


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> Path:
    """A folder holding captures a, b, c and broken. Do not modify it."""
    root = tmp_path_factory.mktemp("captures")
    for name in GOOD:
        _tiny_capture(root / name, f"batch_{name}")
    broken = _tiny_capture(root / "broken", "batch_broken")
    manifest = json.loads((broken / "capture.json").read_text())
    del manifest["cameras"][0]["intrinsics"]["fx"]
    (broken / "capture.json").write_text(json.dumps(manifest))
    return root


def _quiet(_message: str) -> None:
    pass


def _by_name(runs: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in runs}


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if ".partial" in p.name)


def _assert_valid_run(run: Path) -> None:
    """A complete run directory whose USD passes pxr's validators and NVIDIA's Gaussian splat checker."""
    from nurec_usd.export.usd_schema import register_schema

    register_schema()
    from pxr import Usd

    for name in ("scene.pt", "config.json", "manifest.json", "metrics.json", "usd/root.usda", "usd/background.usdc"):
        assert (run / name).is_file(), run / name
    assert json.loads((run / "manifest.json").read_text())["usd_export"] == "written"
    stage = Usd.Stage.Open(str(run / "usd" / "root.usda"))
    assert_openusd_valid(stage)
    assert_gaussian_splats_valid(stage)


def _assert_first_batch(result, out: Path) -> None:
    """Three runs built and valid, the broken one failed naming its file and field, batch.json says so."""
    runs = _by_name(result.runs)
    assert set(runs) == {*GOOD, "broken"}
    assert not result.ok and [r["name"] for r in result.failed] == ["broken"]
    assert "capture.json" in runs["broken"]["error"] and "fx" in runs["broken"]["error"], runs["broken"]["error"]
    assert not (out / "broken").exists()
    for name in GOOD:
        assert runs[name]["status"] == "built", runs[name]
        assert runs[name]["metrics"]["psnr"] > runs[name]["metrics"]["baseline_psnr"]
        assert runs[name]["bytes"] > 0 and len(runs[name]["key"]) == 64
        _assert_valid_run(out / name)
        assert (out / "logs" / f"{name}.log").is_file()
    saved = json.loads((out / "batch.json").read_text())
    assert saved["format"] == "nurec_usd.batch" and saved["state"] == "finished"
    assert saved["counts"] == {"built": 3, "skipped": 0, "failed": 1, "pending": 0}
    assert {r["name"]: r["status"] for r in saved["runs"]} == {r["name"]: r["status"] for r in result.runs}
    assert _leftovers(out) == []


# ---------------------------------------------------------------------------------------------
# Inputs


def test_captures_from_folders_and_lists(captures, tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text(f"# drives\n{captures / 'b'}\n\n../{tmp_path.name}/missing   # gone\n")
    (tmp_path / "notes").mkdir()  # not a capture: left out of a folder with a note
    shutil.copytree(captures / "a", tmp_path / "a")
    notes = []
    found = find_captures([captures, listing, tmp_path], log=notes.append)
    assert [p.name for p in found] == ["a", "b", "broken", "c", "missing", "a"]  # b listed twice: once
    assert any("notes" in n for n in notes)
    names = run_names(found)
    assert names[1:5] == ["b", "broken", "c", "missing"]
    assert names[0] != names[5] and names[0].startswith("a-") and names[5].startswith("a-")  # two captures "a"
    with pytest.raises(BatchError, match="neither a capture nor a folder holding captures"):
        find_captures([tmp_path / "notes"])


def test_out_written_by_another_batch_is_refused(captures, tmp_path):
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".batch.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(BatchError, match="another batch"):
            batch([captures / "a"], out, progress=False, log=_quiet, **QUICK)


def test_ray_option_without_ray_says_how_to_install_it(captures, tmp_path, monkeypatch, capsys):
    from nurec_usd.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    # `--ray CAPTURE`: the word after --ray is a capture, not an address
    assert main(["batch", "--ray", str(captures / "a"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert 'pip install "nurec_usd[ray]"' in err and "no captures" not in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# Local worker processes


@pytest.fixture(scope="module")
def local_out(captures, tmp_path_factory):
    """The output folder of a local batch (2 CPU workers) over the captures folder, and its result."""
    out = tmp_path_factory.mktemp("local") / "out"
    result = batch([captures], out, workers=2, device="cpu", progress=False, log=_quiet, **QUICK)
    return out, result


def test_local_batch_builds_valid_runs_and_reports_the_broken_one(local_out):
    out, result = local_out
    _assert_first_batch(result, out)
    assert "capture.json: cameras[0].intrinsics: 'fx'" in result.table()


def test_second_invocation_skips_what_is_up_to_date(local_out, captures):
    out, _ = local_out
    before = {name: (out / name / "manifest.json").stat().st_mtime_ns for name in GOOD}
    result = batch([captures], out, workers=2, device="cpu", progress=False, log=_quiet, **QUICK)
    runs = _by_name(result.runs)
    assert [runs[name]["status"] for name in GOOD] == ["skipped"] * 3
    assert runs["broken"]["status"] == "failed"  # a failed run is tried again, and fails again
    assert {name: (out / name / "manifest.json").stat().st_mtime_ns for name in GOOD} == before
    assert runs["a"]["metrics"]["psnr"] is not None  # a skipped run still reports its figures


def test_changed_inputs_options_or_force_rebuild(local_out, captures, tmp_path):
    out, _ = local_out
    mtime = lambda name: (out / name / "manifest.json").stat().st_mtime_ns  # noqa: E731
    before = {name: mtime(name) for name in GOOD}

    def run(items, **kw):
        return batch(items, out, progress=False, log=_quiet, device="cpu", **{**QUICK, **kw})

    # a copy of c elsewhere has the same inputs: up to date; once its manifest changes, it is not
    moved = tmp_path / "moved" / "c"
    shutil.copytree(captures / "c", moved)
    assert [r["status"] for r in run([captures / "a", moved]).runs] == ["skipped", "skipped"]
    manifest = json.loads((moved / "capture.json").read_text())
    manifest["metadata"]["note"] = "edited"
    (moved / "capture.json").write_text(json.dumps(manifest))
    assert [r["status"] for r in run([captures / "a", moved]).runs] == ["skipped", "built"]
    assert mtime("a") == before["a"] and mtime("c") != before["c"]
    _assert_valid_run(out / "c")
    # --force rebuilds an up-to-date run
    assert [r["status"] for r in run([captures / "b"], force=True).runs] == ["built"]
    assert mtime("b") != before["b"]
    # another configuration is another run
    assert [r["status"] for r in run([captures / "a"], steps=4).runs] == ["built"]
    assert json.loads((out / "a" / "config.json").read_text())["train"]["steps"] == 4
    assert _leftovers(out) == []


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "nurec_usd", "batch", *args]


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _header_pids(log: Path) -> list[int]:
    """The worker pid of each attempt that a run's log records (its '== ... run NAME' lines)."""
    if not log.is_file():
        return []
    return [int(line.split("(pid ")[1].split()[0]) for line in log.read_text().splitlines()
            if line.startswith("== ") and "(pid " in line]


def _gone(pid: int) -> bool:
    """Whether a process has exited (a zombie that nobody reaped yet has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: ask the process itself
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return state in ("Z", "X")


def test_killed_worker_is_retried_and_killed_batch_resumes(captures, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(_cli(*(str(captures / n) for n in GOOD), "-o", str(out), "--workers", "1",
                                 "--device", "cpu", *CLI_QUICK),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # a worker killed while it builds a: its run goes to a fresh worker
        _wait_for(lambda: _header_pids(out / "logs" / "a.log"), 120, "run a to start")
        first = _header_pids(out / "logs" / "a.log")[0]
        os.kill(first, signal.SIGKILL)
        _wait_for(lambda: len(_header_pids(out / "logs" / "a.log")) == 2, 120, "run a to be tried again")
        # the batch itself killed while it builds b
        _wait_for(lambda: (out / "a").is_dir() and _header_pids(out / "logs" / "b.log"), 120, "a done, b started")
        worker = _header_pids(out / "logs" / "b.log")[0]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _wait_for(lambda: _gone(worker), 30, "the orphaned worker to stop")
    assert not (out / "b").exists() and not (out / "c").exists()  # nothing half-written in view
    _assert_valid_run(out / "a")
    assert json.loads((out / "batch.json").read_text())["state"] == "running"  # it never got to say otherwise

    r = subprocess.run(_cli(*(str(captures / n) for n in GOOD), "-o", str(out), "--workers", "1",
                            "--device", "cpu", *CLI_QUICK), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    runs = _by_name(json.loads((out / "batch.json").read_text())["runs"])
    assert [runs[n]["status"] for n in GOOD] == ["skipped", "built", "built"]
    for name in GOOD:
        _assert_valid_run(out / name)
    assert _leftovers(out) == []
    assert "1 skipped (up to date)" in r.stdout and "2 built" in r.stdout


def test_run_whose_worker_keeps_dying_is_reported_failed(captures, tmp_path):
    import threading

    out = tmp_path / "out"
    log = out / "logs" / "a.log"

    def kill_its_worker() -> None:
        _wait_for(lambda: _header_pids(log), 120, "run a to start")
        os.kill(_header_pids(log)[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_its_worker)
    killer.start()
    result = batch([captures / "a"], out, retries=0, device="cpu", progress=False, log=_quiet, **QUICK)
    killer.join()
    (run,) = result.runs
    assert run["status"] == "failed" and "killed by SIGKILL" in run["error"], run
    assert not (out / "a").exists() and _leftovers(out) == []


# ---------------------------------------------------------------------------------------------
# Ray (a real local Ray: one task per run)


def test_ray_batch_retries_a_lost_worker_then_skips_everything(captures, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "out"
    proc = subprocess.Popen(_cli("--ray", str(captures), "-o", str(out), "--device", "cpu", *CLI_QUICK),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _header_pids(out / "logs" / "a.log"), 180, "run a to start on Ray")
        os.kill(_header_pids(out / "logs" / "a.log")[0], signal.SIGKILL)  # a lost worker: Ray retries the task
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr  # the broken capture
    assert "Ray:" in stderr and "each run asks for 1 CPU" in stderr
    result = json.loads((out / "batch.json").read_text())
    assert result["mode"] == "ray"
    assert len(_header_pids(out / "logs" / "a.log")) == 2
    runs = _by_name(result["runs"])
    assert {n: r["status"] for n, r in runs.items()} == {"a": "built", "b": "built", "c": "built", "broken": "failed"}
    assert "fx" in runs["broken"]["error"] and "fx" in stdout
    for name in GOOD:
        _assert_valid_run(out / name)
    assert _leftovers(out) == []

    again = batch([captures], out, ray=True, device="cpu", progress=False, log=_quiet, **QUICK)
    assert {r["name"]: r["status"] for r in again.runs} == {"a": "skipped", "b": "skipped", "c": "skipped",
                                                             "broken": "failed"}


def test_workers_split_the_cores_between_them(monkeypatch):
    """Two builds that each take every core slow each other several times over: workers get
    disjoint cores (and as many torch threads), on a shared GPU as on the CPU."""
    import os

    from nurec_usd import batch_local

    monkeypatch.setattr(batch_local, "available_cores", lambda: list(range(16)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    one = batch_local.plan_slots(None, "cuda")
    assert one == [batch_local.Slot("0")]  # one worker keeps the whole machine
    two = batch_local.plan_slots(2, "cuda")
    assert [s.gpu for s in two] == ["0", "0"] and [s.threads for s in two] == [8, 8]
    assert set(two[0].cores) | set(two[1].cores) == set(range(16)) and not set(two[0].cores) & set(two[1].cores)
    cpu = batch_local.plan_slots(3, "cpu")
    assert [s.gpu for s in cpu] == [None] * 3 and [len(s.cores) for s in cpu] == [5, 5, 5]
    monkeypatch.setattr(batch_local, "available_cores", lambda: [0, 1])
    assert [s.threads for s in batch_local.plan_slots(4, "cpu")] == [1] * 4
    assert all(s.cores is None for s in batch_local.plan_slots(4, "cpu"))
    if hasattr(os, "sched_getaffinity"):
        monkeypatch.undo()
        assert batch_local.available_cores() == sorted(os.sched_getaffinity(0))
