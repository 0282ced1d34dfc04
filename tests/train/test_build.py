"""``build`` end to end on the bundled sample, plus its failure modes.

The ``tiny_run`` fixture (tests/conftest.py) builds ``samples/tiny`` once per session (a few
minutes on two CPU cores) and the tests read its run directory: files, manifest, held-out quality, and actors that move.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from conftest import QUICK, REPO, TINY_STEPS

SAMPLE = REPO / "samples" / "tiny"


def test_run_directory_holds_everything(tiny_run):
    for name in ("scene.pt", "config.json", "manifest.json", "metrics.json", "train_log.jsonl", "eval_sheet.png",
                 "usd/root.usda", "usd/rig.usdc", "usd/actors.usdc", "usd/background.usdc"):
        assert (tiny_run / name).is_file(), name
    assert len(list((tiny_run / "usd" / "actors").glob("*.usdc"))) == 2
    assert len(list((tiny_run / "eval").glob("*.jpg"))) == 4  # the 4 held-out frames beside their renders
    assert len(list((tiny_run / "eval").glob("*.png"))) == 1  # the held-out sweep's range images
    assert not list(tiny_run.parent.glob(".*partial*")), "the staging folder was left behind"
    manifest = json.loads((tiny_run / "manifest.json").read_text())
    assert set(manifest["stage_seconds"]) == {"setup", "load", "init", "train", "eval", "export"}
    stages = {row["stage"] for row in manifest["stages"]}
    assert {"train/trainer setup", "train/steps", "train/steps/refinements", "train/steps/read-backs (sync)",
            "eval/sweeps"} <= stages
    assert manifest["usd_export"] == "written"
    assert manifest["render"] == {"tile_order": "list"}
    digest = hashlib.sha256((SAMPLE / "capture.json").read_bytes()).hexdigest()
    row = next(r for r in manifest["inputs"]["files"] if r["path"] == "capture.json")
    assert row["sha256"] == digest
    assert len(manifest["inputs"]["files"]) == 1 + 40 + 10  # manifest, images, sweeps
    assert {"torch", "warp-lang", "numpy"} <= set(manifest["versions"])
    config = json.loads((tiny_run / "config.json").read_text())
    assert config["train"]["steps"] == TINY_STEPS and config["preset"] == "fast"
    log = [json.loads(line) for line in (tiny_run / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == TINY_STEPS and any(r.get("event") == "refine" for r in log)


def test_held_out_quality(tiny_run):
    m = json.loads((tiny_run / "metrics.json").read_text())
    assert m["held_out_frames"] == 4 and m["held_out_sweeps"] == 1
    assert m["psnr"] >= 20.0, m["psnr"]
    assert m["psnr"] >= m["baseline_psnr"] + 6.0, (m["psnr"], m["baseline_psnr"])
    assert m["ssim"] > 0.5
    assert m["lidar_median_range_error_m"] < 0.5
    assert m["lidar_hit_accuracy"] > 0.8


def test_held_out_pictures_pair_each_render_with_its_image(tiny_run):
    """Each eval picture holds the render its metrics row scored (left) beside that frame's image (right).

    The picture is a JPEG: its own error adds to the render's. By the triangle inequality the RMS
    error of the JPEG'd render lies within the JPEG's error of the scored RMS error; the JPEG's
    error on the render half is taken as at most twice its error on the image half, measured
    (renders are smoother than photographs: their JPEG error is smaller). A bound in dB would not
    do: the better the render, the more the JPEG's error dominates the figure."""
    import numpy as np
    from PIL import Image

    from nurec_usd.capture import load_capture
    from nurec_usd.train.data import CaptureData

    frames = json.loads((tiny_run / "metrics.json").read_text())["frames"]
    data = CaptureData(load_capture(SAMPLE), "cpu", eval_every=8, downscale=QUICK["downscale"])
    truths = {(r["camera"], r["frame"]): data.image_of(r["camera"], r["frame"]).numpy().astype(np.float64) / 255
              for r in frames}
    for row in frames:
        pair = np.asarray(Image.open(tiny_run / "eval" / f"{row['camera']}_{row['frame']:05d}.jpg"), np.float64)
        truth = truths[row["camera"], row["frame"]]
        h, w, _ = truth.shape
        assert pair.shape == (h, 2 * w, 3)
        render, image = pair[:, :w] / 255, pair[:, w:] / 255
        jpeg_rms = np.sqrt(((image - truth) ** 2).mean())  # the right half: the held-out image
        assert jpeg_rms < 6.0 / 255, (row, jpeg_rms)  # (a 4:2:0 JPEG of 160x90)
        rms = np.sqrt(((render - truth) ** 2).mean())
        scored_rms = 10 ** (-row["psnr"] / 20)
        assert abs(rms - scored_rms) <= 2 * jpeg_rms, (row, rms, scored_rms, jpeg_rms)  # the left half
        # and the render is nearer its own frame's image than any other held-out frame's
        others = [np.sqrt(((render - t) ** 2).mean()) for key, t in truths.items()
                  if key != (row["camera"], row["frame"]) and t.shape == truth.shape]
        assert all(rms < other for other in others), (row, rms, others)
    sheet = Image.open(tiny_run / "eval_sheet.png")
    h = data.cameras[0].height
    assert sheet.height == len(frames) * (h + 16)  # 4 held-out frames: all of them on the sheet


def _box_pixels(capture, cam_id: str, track, t: float, T_world_camera: torch.Tensor) -> tuple[int, ...] | None:
    """Pixel rectangle (u0, v0, u1, v1) around a track's box at time t, or None when not in view."""
    from nurec_usd.sensors.cameras import camera_model
    from nurec_usd.sensors.se3 import PoseTrajectory, invert_transform, transform_points
    from nurec_usd.render.views import downscaled_intrinsics

    if not float(track.times[0]) <= t <= float(track.times[-1]):
        return None
    T_wb = PoseTrajectory(track.times, track.T_world_box).at(torch.tensor([t], dtype=torch.float64))[0]
    signs = torch.tensor([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=torch.float64)
    corners = signs * torch.tensor(track.size_m, dtype=torch.float64) / 2
    pc = transform_points(invert_transform(T_world_camera) @ T_wb, corners)
    if bool((pc[:, 2] <= 0.5).any()):
        return None
    cam = capture.cameras[cam_id]
    k = QUICK["downscale"]  # the renders are that much smaller than the capture's images
    width, height = cam.width // k, cam.height // k
    model = camera_model(cam.model, width, height, downscaled_intrinsics(cam.model, cam.intrinsics, k),
                         dtype=torch.float64)
    uv, _ = model.project(pc)
    u0, v0 = uv.min(0).values.tolist()
    u1, v1 = uv.max(0).values.tolist()
    if u1 < 0 or v1 < 0 or u0 >= width or v0 >= height or (u1 - u0) * (v1 - v0) < 25:
        return None
    return (max(0, int(u0) - 4), max(0, int(v0) - 4), min(width, int(u1) + 5), min(height, int(v1) + 5))


@torch.no_grad()
def test_actors_are_their_own_gaussians_and_move_with_their_tracks(tiny_run):
    from nurec_usd.capture import load_capture
    from nurec_usd.scene.gaussians import Scene
    from nurec_usd.render.scene_renderer import SceneRenderer
    from nurec_usd.sensors.se3 import PoseTrajectory
    from nurec_usd.train.data import CaptureData

    scene = Scene.load(tiny_run / "scene.pt")
    assert len(scene.actors) > 0 and sorted(set(scene.actor_index.tolist())) == [0, 1]
    rig = scene.metadata["rig"]  # the sensors travel with the scene, for export and replay
    assert [c["id"] for c in rig["cameras"]] == ["front", "front_left", "rear_fisheye", "right_ftheta"]
    assert rig["lidars"][0]["id"] == "top" and len(rig["trajectory"]["timestamps_us"]) == 21
    renderer = SceneRenderer(scene)
    # world positions of each actor's Gaussians follow the track between two times
    t1, t2 = 0.35, 0.55  # both tracks cover this span
    p1 = renderer.place(torch.tensor(t1)).means[len(scene.static):]
    p2 = renderer.place(torch.tensor(t2)).means[len(scene.static):]
    for a, track in enumerate(scene.tracks):
        sel = scene.actor_index == a
        traj = PoseTrajectory(track.times, track.T_world_box)
        T = traj.at(torch.tensor([t1, t2], dtype=torch.float64))
        expected = (T[1, :3, 3] - T[0, :3, 3]).float()
        moved = (p2[sel] - p1[sel]).mean(0)
        assert float(expected.norm()) > 1.0
        torch.testing.assert_close(moved, expected, atol=0.3, rtol=0.05)
    # rendering one camera frame with the actors placed at two times: only the actors' pixels change
    capture = load_capture(SAMPLE)
    data = CaptureData(capture, "cpu", eval_every=8, downscale=QUICK["downscale"])
    rig = PoseTrajectory(torch.as_tensor(capture.seconds(capture.rig.timestamps_us)),
                         torch.as_tensor(capture.rig.T_world_rig, dtype=torch.float64))
    checked = 0
    for ref in data.frames:
        cam = data.cameras[ref.camera]
        t = ref.time_s
        T_wc = rig.at(torch.tensor([t], dtype=torch.float64))[0] @ torch.as_tensor(
            capture.cameras[cam.id].T_rig_camera, dtype=torch.float64)
        boxes = [_box_pixels(capture, cam.id, tr, tt, T_wc) for tr in scene.tracks for tt in (t, t + 0.15)]
        if any(b is None for b in boxes):
            continue
        view = data.camera_view(ref)
        a = renderer.camera(view, placed=renderer.place(torch.tensor(t))).image
        b = renderer.camera(view, placed=renderer.place(torch.tensor(t + 0.15))).image
        diff = (a - b).abs().sum(-1)
        inside = torch.zeros_like(diff, dtype=torch.bool)
        for u0, v0, u1, v1 in boxes:
            inside[v0:v1, u0:u1] = True
        assert float(diff.sum()) > 5.0, "moving the actors changed nothing"
        assert float(diff[inside].sum()) >= 0.9 * float(diff.sum()), "pixels outside the actors changed"
        checked += 1
        if checked == 2:
            break
    assert checked >= 1, "no frame sees both actors at both times"


def test_no_usable_frames_is_a_clear_error(tmp_path):
    from nurec_usd.pipeline import BuildError, build

    # the sample with every camera's frames removed (its sweeps kept)
    import os
    import shutil

    capture = tmp_path / "capture"
    shutil.copytree(SAMPLE, capture, copy_function=os.link)
    manifest = json.loads((capture / "capture.json").read_text())
    for cam in manifest["cameras"]:
        cam["frames"] = []
    (capture / "capture.json").unlink()
    (capture / "capture.json").write_text(json.dumps(manifest))
    with pytest.raises(BuildError, match="no usable camera frames"):
        build(capture, tmp_path / "run", progress=False, log=lambda _m: None)
    assert not (tmp_path / "run").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capture"], "a partial run directory was left behind"


def test_existing_output_is_refused_and_kept(tmp_path, capsys):
    from nurec_usd.cli import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("previous run")
    assert main(["build", str(SAMPLE), "-o", str(out), "--no-progress"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "previous run"


def test_cli_set_passes_any_option_to_the_build(handmade_capture, tmp_path, capsys):
    from nurec_usd.cli import main

    out = tmp_path / "run"
    assert main(["build", str(handmade_capture), "-o", str(out), "--steps", "2", "--no-progress",
                 "--set", "lidar_range_weight=0.5", "--set", "opacity=0.2"]) == 0, capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["train"]["lidar_range_weight"] == 0.5 and config["init"]["opacity"] == 0.2
    assert config["train"]["steps"] == 2


def test_diverging_run_stops_cleanly_with_the_last_good_checkpoint(handmade_capture, tmp_path, monkeypatch):
    from nurec_usd.pipeline import build
    from nurec_usd.scene.gaussians import Scene
    from nurec_usd.train.trainer import Trainer

    # A blow-up made to order: after step 5 one Gaussian's position is NaN (the real step runs
    # first). Learning rates high enough to diverge do so in a direction that depends on the
    # data's rounding (a version of a JPEG library can flip it); this does not.
    real_step = Trainer.step

    def step_then_blow_up(self, step):
        out = real_step(self, step)
        if step == 4:  # the fifth step
            with torch.no_grad():
                self.scene.static.means[0, 0] = float("nan")
        return out

    monkeypatch.setattr(Trainer, "step", step_then_blow_up)
    out = tmp_path / "run"
    # no refinement: it would move the NaN row onto a finite one
    result = build(handmade_capture, out, steps=8, log_interval=2, checkpoint_interval=2, refine_stop_fraction=0.0,
                   progress=False, log=lambda _m: None)
    assert result.status == "diverged"
    # logs at steps 2, 4, 6: the state of step 2 was trusted at step 4's clean log, and step 6's
    # log found the NaN. NaN means are culled by the renderer (the loss can stay finite): the
    # parameter check catches them
    assert "between steps 5 and 6" in result.message and "NaN" in result.message, result.message
    assert "restored to the checkpoint of step 2" in result.message, result.message
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "diverged"
    scene = Scene.load(out / "scene.pt")
    assert bool(torch.isfinite(scene.static.means).all())


def test_track_refinement_learns_pose_corrections(handmade_capture, tmp_path):
    from nurec_usd.pipeline import build
    from nurec_usd.scene.gaussians import Scene
    from nurec_usd.render.scene_renderer import SceneRenderer

    out = tmp_path / "run"
    result = build(handmade_capture, out, steps=4, refine_tracks=True, progress=False, log=lambda _m: None)
    assert result.status == "completed"
    scene = Scene.load(out / "scene.pt")
    assert scene.pose_corrections is not None
    dt, dw = scene.pose_corrections
    keys = sum(len(t.times) for t in scene.tracks)
    assert dt.shape == (keys, 3) and dw.shape == (keys, 3)
    assert float(dt.abs().max()) > 0  # the tracks' keys moved
    # the corrections are applied when the scene is placed: without them the actors sit elsewhere
    t = torch.tensor(float(scene.tracks[0].times[len(scene.tracks[0].times) // 2]))
    with_corr = SceneRenderer(scene).place(t).means[len(scene.static):]
    scene.pose_corrections = None
    without = SceneRenderer(scene).place(t).means[len(scene.static):]
    assert float((with_corr - without).abs().max()) > 0


def test_export_command_writes_usd_and_ply_from_a_run(tiny_run, tmp_path, capsys):
    from nurec_usd.cli import main
    from nurec_usd.export.ply import read_gaussian_ply
    from nurec_usd.scene.gaussians import Scene

    out = tmp_path / "usd"
    assert main(["export", str(tiny_run), "-o", str(out), "--ply"]) == 0
    assert (out / "root.usda").is_file() and (out / "scene.ply").is_file()
    params, degree = read_gaussian_ply(out / "scene.ply")
    scene = Scene.load(tiny_run / "scene.pt")
    assert degree == scene.sh_degree and len(params) == len(scene.static)
    assert torch.equal(params.means, scene.static.means)
    assert main(["export", str(tiny_run), "-o", str(out)]) == 2  # exists: refused, kept
    assert (out / "scene.ply").is_file()
    assert main(["export", str(tmp_path / "nothing"), "-o", str(tmp_path / "x")]) == 1
    assert "no such scene file" in capsys.readouterr().err
