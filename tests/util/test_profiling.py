"""The build's instruments: the stage clock, the step profiler (on the CPU) and bench's table."""

from __future__ import annotations

import time

from nurec_usd.bench import BenchRun, format_run, run_label
from nurec_usd.util.profiling import StageClock, StepProfiler, format_profile


def test_stage_clock_nests_adds_and_keeps_the_order():
    clock = StageClock()
    with clock("load"):
        with clock("read"):
            time.sleep(0.01)
        clock.add("in a thread", 0.5)
    with clock("train"):
        pass
    with clock("load"):  # entered again: adds to its row
        pass
    rows = clock.to_list()
    assert [r["stage"] for r in rows] == ["load", "load/read", "load/in a thread", "train"]
    assert clock.seconds("load/read") >= 0.01 and clock.seconds("load") >= clock.seconds("load/read")
    assert rows[2]["cpu_s"] is None and rows[1]["cpu_s"] is not None
    assert list(clock.top_level()) == ["load", "train"]
    table = format_profile(rows, None)
    line = next(t for t in table.splitlines() if "in a thread" in t)
    assert line.split()[-2:] == ["-", "-"]  # no CPU time measured for it


def test_step_profiler_times_only_its_window_on_the_cpu():
    prof = StepProfiler("cpu", start=2, steps=3)
    for step in range(8):
        prof.begin_step(step)
        with prof.part("forward"):
            time.sleep(0.002)
        if step % 2 == 0:
            with prof.part("refine"):
                pass
        prof.end_step(step)
    report = prof.report()
    assert report["window"] == [2, 5] and report["steps_timed"] == 3
    parts = {p["part"]: p for p in report["parts"]}
    assert parts["forward"]["per_step"] == 1.0 and abs(parts["refine"]["per_step"] - 2 / 3) < 1e-9
    assert parts["forward"]["host_ms"] >= 2.0 and parts["forward"]["gpu_ms"] is None
    assert prof.own_s == 0.0  # no GPU: no syncs, no trace
    assert "median of steps 2-4" in format_profile([], report)
    off = StepProfiler("cpu", start=0, enabled=False)
    off.begin_step(0)
    with off.part("forward"):
        pass
    off.end_step(0)
    assert off.report()["steps_timed"] == 0


def test_bench_table_adds_up_to_the_wall():
    manifest = {"stage_seconds": {"setup": 0.5, "load": 2.0, "train": 5.0}}
    metrics = {"status": "completed", "steps": 10, "gaussians": 5}
    run = BenchRun(["build"], 0, wall_s=10.0, to_usd_s=9.0, startup_s=1.0, manifest=manifest, metrics=metrics,
                   profile=None, output="")
    text = format_run(run, "x")
    other = next(t for t in text.splitlines() if t.strip().startswith("other"))
    assert other.split()[-2] == "0.50"  # 9.0 - 1.0 - (0.5 + 2.0 + 5.0)


def test_bench_label_names_a_tile_order_other_than_the_default():
    def run(manifest):
        return BenchRun(["build"], 0, wall_s=1.0, to_usd_s=1.0, startup_s=0.1, manifest=manifest, metrics={},
                        profile=None, output="")

    assert run_label(run({"render": {"tile_order": "index"}}), "drive30 fast") == "drive30 fast tile_order=index"
    assert run_label(run({"render": {"tile_order": "list"}}), "drive30 fast") == "drive30 fast"
    assert run_label(run(None), "drive30 fast") == "drive30 fast"  # a build that wrote no manifest
