"""Where a build's time goes: its stages, the parts of a training step, and the GPU's idle time.

Two instruments, both cheap enough to stay in the code paths they measure:

- :class:`StageClock` times the build's stages and their parts (``load``, ``load/decode``,
  ...): wall time and the process's CPU time (CPU / wall says how many cores a stage kept
  busy). It is always on; a boundary costs two clock reads.
- :class:`StepProfiler` times the parts of training steps in a window of steps: the host's
  time in each part (no synchronisation) and, on a GPU, the span each part takes on the
  GPU's stream (CUDA events at the part boundaries; the span includes the time the GPU waited
  for the host to queue the part's work). A second window runs under ``torch.profiler`` for the
  GPU's busy time by kernel and its idle time between kernels. Outside its windows, or when
  disabled, a part is one attribute lookup. Parts are also NVTX ranges while profiling, so
  Nsight Systems shows them.

``format_profile`` prints both as one table (``build --profile`` writes it to ``profile.txt``).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = ["StageClock", "StepProfiler", "format_profile", "process_age_s"]


def process_age_s() -> float | None:
    """Seconds since this process started (Linux, 10 ms resolution), or None where unknown."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class StageRow:
    name: str  # "load" or "load/decode"
    wall_s: float
    cpu_s: float | None  # None: measured elsewhere, without the CPU time


class StageClock:
    """Wall and CPU seconds of named, nestable stages: ``with clock("load"): ... with clock("decode")``
    records ``load`` and ``load/decode``. A stage entered again adds to its row."""

    def __init__(self) -> None:
        self.rows: dict[str, StageRow] = {}
        self._stack: list[str] = []

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        path = "/".join((*self._stack, name))
        row = self.rows.setdefault(path, StageRow(path, 0.0, 0.0))  # parents listed before their parts
        self._stack.append(name)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self._stack.pop()
            row.wall_s += time.perf_counter() - wall
            row.cpu_s += time.process_time() - cpu

    def add(self, name: str, wall_s: float, cpu_s: float | None = None) -> None:
        """Record a stage (a part of the stages entered now) measured elsewhere, e.g. in a thread
        (``cpu_s`` None: not measured; the table shows "-")."""
        name = "/".join((*self._stack, name))
        row = self.rows.setdefault(name, StageRow(name, 0.0, None if cpu_s is None else 0.0))
        row.wall_s += wall_s
        if cpu_s is not None:
            row.cpu_s = (row.cpu_s or 0.0) + cpu_s

    def seconds(self, name: str) -> float:
        row = self.rows.get(name)
        return row.wall_s if row is not None else 0.0

    def top_level(self) -> dict[str, float]:
        """Seconds of the outermost stages, in the order they first ran."""
        return {r.name: r.wall_s for r in self.rows.values() if "/" not in r.name}

    def to_list(self) -> list[dict[str, Any]]:
        """The rows in tree order (each stage followed by its parts, in the order they first ran)."""
        names = list(self.rows)

        def key(name: str) -> list[int]:  # the first-seen index of each ancestor, then of the row
            parts = name.split("/")
            return [names.index("/".join(parts[:i + 1])) if "/".join(parts[:i + 1]) in self.rows else -1
                    for i in range(len(parts))]

        return [{"stage": r.name, "wall_s": round(r.wall_s, 4), "cpu_s": None if r.cpu_s is None else round(r.cpu_s, 4)}
                for r in sorted(self.rows.values(), key=lambda r: key(r.name))]


_NULL = contextlib.nullcontext()


@dataclass
class _Part:
    host_s: list[float] = field(default_factory=list)
    gpu_ms: list[float] = field(default_factory=list)


class StepProfiler:
    """Host and GPU time of the parts of training steps (see the module docstring).

    Steps ``[start, start + steps)`` are timed part by part; steps ``[start + steps, start + 2 steps)``
    run under ``torch.profiler`` (CUDA only). ``enabled=False`` makes every call a no-op.
    """

    def __init__(self, device: Any, start: int, steps: int = 30, enabled: bool = True):
        import torch

        self.enabled = bool(enabled)
        self.cuda = torch.device(device).type == "cuda"
        self.start, self.steps = int(start), max(1, int(steps))
        self.parts: dict[str, _Part] = {}
        self.step_host_s: list[float] = []
        self.step_gpu_ms: list[float] = []
        self.kernels: list[tuple[str, float, float]] = []  # (name, GPU ms per step, launches per step)
        self.gpu_busy_ms = self.gpu_span_ms = None  # per step, from the torch.profiler window
        self._timing = False
        self._events: list[tuple[str, Any, Any]] = []  # (part, start event, end event) of the current step
        self._step_events: tuple[Any, Any] | None = None
        self._step_t0 = 0.0
        self._torch_profile: Any = None
        self.own_s = 0.0  # wall seconds the profiler itself took inside the steps (its syncs, the trace)

    # -- the step ------------------------------------------------------------------------

    def begin_step(self, step: int) -> None:
        if not self.enabled:
            return
        self._timing = self.start <= step < self.start + self.steps
        if self.cuda and step == self.start + self.steps:
            import torch

            t0 = time.perf_counter()
            torch.cuda.synchronize()
            self._torch_profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            self._torch_profile.__enter__()
            self.own_s += time.perf_counter() - t0
        if self._timing:
            self._step_t0 = time.perf_counter()
            if self.cuda:
                self._step_events = (self._event(), None)

    def end_step(self, step: int) -> None:
        if not self.enabled:
            return
        if self._timing:
            self.step_host_s.append(time.perf_counter() - self._step_t0)
            if self.cuda:
                self._step_events = (self._step_events[0], self._event())
                t0 = time.perf_counter()
                self._collect_events()  # a sync per timed step
                self.own_s += time.perf_counter() - t0
            self._timing = False
        if self._torch_profile is not None and step == self.start + 2 * self.steps - 1:
            t0 = time.perf_counter()
            self._finish_torch_profile()  # seconds on a GPU: the trace is read back and parsed
            self.own_s += time.perf_counter() - t0

    def part(self, name: str):
        """A context timing one part of the current step (a no-op outside the timed window)."""
        if not self._timing:
            return _NULL
        return self._timed_part(name)

    @contextlib.contextmanager
    def _timed_part(self, name: str) -> Iterator[None]:
        if self.cuda:
            import torch

            torch.cuda.nvtx.range_push(name)
            begin = self._event()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.parts.setdefault(name, _Part()).host_s.append(time.perf_counter() - t0)
            if self.cuda:
                self._events.append((name, begin, self._event()))
                torch.cuda.nvtx.range_pop()

    @staticmethod
    def _event():
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _collect_events(self) -> None:
        """Read the events of the finished step (one synchronisation, inside the timed window only)."""
        import torch

        torch.cuda.synchronize()
        for name, begin, end in self._events:
            self.parts[name].gpu_ms.append(begin.elapsed_time(end))
        begin, end = self._step_events
        self.step_gpu_ms.append(begin.elapsed_time(end))
        self._events.clear()

    def _finish_torch_profile(self) -> None:
        import torch

        torch.cuda.synchronize()
        prof, self._torch_profile = self._torch_profile, None
        prof.__exit__(None, None, None)
        n = self.steps
        intervals = []
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA and event.time_range.elapsed_us() > 0:
                intervals.append((event.time_range.start, event.time_range.end))
        if intervals:
            self.gpu_busy_ms = _union_us(intervals) / 1e3 / n
            self.gpu_span_ms = (max(e for _, e in intervals) - min(s for s, _ in intervals)) / 1e3 / n
        rows = [(e.key, e.self_device_time_total / 1e3 / n, e.count / n) for e in prof.key_averages()
                if e.self_device_time_total > 0]
        self.kernels = sorted(rows, key=lambda r: -r[1])

    # -- results -------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """Medians per step: each part's host seconds and GPU milliseconds, the step's, and the kernels'."""
        def med(values: list[float]) -> float | None:
            return statistics.median(values) if values else None

        parts = [{"part": name, "host_ms": 1e3 * med(p.host_s), "gpu_ms": med(p.gpu_ms),
                  "per_step": len(p.host_s) / max(1, len(self.step_host_s))}
                 for name, p in self.parts.items()]
        return {"window": [self.start, self.start + self.steps], "steps_timed": len(self.step_host_s),
                "step_host_ms": 1e3 * med(self.step_host_s) if self.step_host_s else None,
                "step_gpu_ms": med(self.step_gpu_ms), "parts": parts,
                "gpu_busy_ms": self.gpu_busy_ms, "gpu_span_ms": self.gpu_span_ms,
                "kernels": [{"kernel": k, "gpu_ms": ms, "launches": c} for k, ms, c in self.kernels]}


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def format_profile(stages: list[dict[str, Any]], step: dict[str, Any] | None, kernels: int = 15) -> str:
    """The stage table, and the step table when there is one, as plain text."""
    lines = ["stage                              wall s    CPU s   cores"]
    for row in stages:
        depth = row["stage"].count("/")
        name = "  " * depth + row["stage"].rsplit("/", 1)[-1]
        if row["cpu_s"] is None:  # measured elsewhere (a thread, the trainer)
            lines.append(f"{name:<32} {row['wall_s']:8.2f} {'-':>8} {'-':>7}")
            continue
        cores = row["cpu_s"] / row["wall_s"] if row["wall_s"] > 0 else 0.0
        lines.append(f"{name:<32} {row['wall_s']:8.2f} {row['cpu_s']:8.2f} {cores:7.1f}")
    if not step or not step.get("steps_timed"):
        return "\n".join(lines)
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    lines += ["", f"training step, median of steps {step['window'][0]}-{step['window'][1] - 1} "
                  f"(host: Python time in the part, no sync; GPU: the part's span on the stream)",
              "part                      host ms   GPU ms  per step"]
    for p in step["parts"]:
        lines.append(f"{p['part']:<24} {fmt(p['host_ms'], '8.3f')} {fmt(p['gpu_ms'], '8.3f')} {p['per_step']:9.2f}")
    lines.append(f"{'whole step':<24} {fmt(step['step_host_ms'], '8.3f')} {fmt(step['step_gpu_ms'], '8.3f')}")
    if step.get("gpu_busy_ms") is not None:
        idle = step["gpu_span_ms"] - step["gpu_busy_ms"]
        lines += ["", f"GPU per step over the next {step['window'][1] - step['window'][0]} steps (torch.profiler): "
                      f"busy {step['gpu_busy_ms']:.3f} ms of {step['gpu_span_ms']:.3f} ms, idle {idle:.3f} ms "
                      f"({100 * idle / max(step['gpu_span_ms'], 1e-9):.0f}%)",
                  "kernel                                                        GPU ms  launches"]
        for k in step["kernels"][:kernels]:
            lines.append(f"{k['kernel'][:60]:<60} {k['gpu_ms']:8.3f} {k['launches']:8.1f}")
    return "\n".join(lines)
