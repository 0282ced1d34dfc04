"""A batch's runs on this machine: worker processes, one per GPU slot (or CPU workers).

Each worker is a fresh interpreter (multiprocessing's spawn: CUDA cannot be forked) started with
its own ``CUDA_VISIBLE_DEVICES`` before torch is imported, so that a worker sees exactly one GPU
as ``cuda:0``. Workers live for the whole batch (torch, Warp and the compiled kernels are loaded
once) and take one run at a time from the parent, which always knows what each one holds: a
worker that dies (killed, out of host memory) has its run given to a fresh worker, up to
``retries`` times. A worker whose parent dies stops within a second, and its build removes what it wrote.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from nurec_usd.batch_job import RunSpec, run_record, run_one


class BatchSetupError(ValueError):
    """The machine cannot run the batch as asked (no GPU for --device cuda, a bad --workers, ...)."""


@dataclass(frozen=True)
class Slot:
    """Where one worker runs: the GPU it sees (None: the CPU), its torch threads and the CPU cores
    it may use (None: all)."""

    gpu: str | None
    threads: int | None = None
    cores: tuple[int, ...] | None = None

    @property
    def label(self) -> str:
        return f"GPU {self.gpu}" if self.gpu is not None else "CPU"


def visible_gpus() -> list[str]:
    """This machine's GPUs as ``CUDA_VISIBLE_DEVICES`` names them (its own list when it is set)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def plan_slots(workers: int | None, device: str) -> list[Slot]:
    """One slot per worker: GPUs round-robin (two workers on one GPU share it), else CPU workers.

    ``workers``: how many (default: one per GPU, or one on a machine without GPUs).
    ``device``: "auto", "cuda" (GPUs required) or "cpu"; one GPU cannot be named: batch gives each
    worker its own (choose the GPUs with ``CUDA_VISIBLE_DEVICES``).
    """
    if device not in ("auto", "cuda", "cpu"):
        raise BatchSetupError(f"--device {device}: a batch gives each worker its own GPU; use auto, cuda or cpu "
                              "(and CUDA_VISIBLE_DEVICES to choose the GPUs)")
    if workers is not None and workers < 1:
        raise BatchSetupError(f"--workers {workers}: needs at least one worker")
    gpus = [] if device == "cpu" else visible_gpus()
    if device == "cuda" and not gpus:
        raise BatchSetupError("--device cuda: no GPU is visible here (CUDA_VISIBLE_DEVICES, torch.cuda)")
    count = workers or max(1, len(gpus))
    places = [gpus[i % len(gpus)] if gpus else None for i in range(count)]
    if count == 1:
        return [Slot(places[0])]
    # Workers split the cores rather than each taking all of them: two builds that each ran a
    # thread per core (torch's, the decoders') on one GPU took 3-4x as long each, the GPU idle
    # most of the time (benchmarks/RESULTS.md, batch-throughput).
    cores = available_cores()
    if len(cores) < count:  # fewer cores than workers: share them, a thread each
        return [Slot(place, threads=1) for place in places]
    share = len(cores) // count
    return [Slot(place, threads=share, cores=tuple(cores[i * share:(i + 1) * share])) for i, place in enumerate(places)]


def available_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _watch_parent(parent: int) -> None:
    """Stop this worker (SIGTERM: the build in progress removes its staging folder) once its parent is gone."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


def _sigterm(signum, frame):
    raise SystemExit(128 + signum)


def _worker_main(slot: Slot, parent: int, conn) -> None:
    """A worker process: set up its device, then build the runs the parent sends until it sends None."""
    os.environ["CUDA_VISIBLE_DEVICES"] = slot.gpu if slot.gpu is not None else ""  # as it started (see _Worker)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, _sigterm)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if slot.cores is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, slot.cores)  # the decoding pools size themselves by it (default_workers)
    if slot.threads is not None:
        import torch

        torch.set_num_threads(slot.threads)
    while True:
        try:
            item = conn.recv()
        except EOFError:  # the parent closed its end
            return
        if item is None:
            return
        index, spec = item
        conn.send((index, run_one(spec)))


class _Worker:
    """A worker process and its own pipe: a worker killed mid-message garbles only its own channel."""

    def __init__(self, ctx, slot: Slot):
        self.slot = slot
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(slot, os.getpid(), child), name="nurec_usd-batch",
                                   daemon=True)
        # The new interpreter starts with its GPU already chosen: whatever it imports first (a script's
        # own `import torch` included) sees only that GPU.
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = slot.gpu if slot.gpu is not None else ""
        try:
            self.process.start()
        finally:
            if saved is None:
                del os.environ["CUDA_VISIBLE_DEVICES"]
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = saved
        child.close()
        self.index: int | None = None  # the run it holds


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def run_local(specs: list[RunSpec], slots: list[Slot], on_done: Callable[[int, dict[str, Any]], None],
              retries: int = 2) -> None:
    """Run every spec on worker processes, one per slot; ``on_done(index, record)`` for each as it ends.

    A run whose worker dies is given to a fresh worker up to ``retries`` more times, then recorded as
    failed. KeyboardInterrupt stops the workers (their builds leave nothing) and passes through.
    """
    ctx = mp.get_context("spawn")
    pending = list(range(len(specs)))
    attempts = [0] * len(specs)
    started = [0.0] * len(specs)
    done: set[int] = set()
    workers = [_Worker(ctx, slot) for slot in slots[:len(specs)]]

    def finish(index: int, record: dict[str, Any]) -> None:
        done.add(index)
        if index in pending:  # a run whose worker died just after reporting it
            pending.remove(index)
        record["attempts"] = attempts[index]
        on_done(index, record)

    try:
        while len(done) < len(specs):
            for w in workers:  # hand out work
                if w.index is None and pending:
                    w.index = pending.pop(0)
                    attempts[w.index] += 1
                    started[w.index] = time.monotonic()
                    try:
                        w.conn.send((w.index, specs[w.index]))
                    except OSError:  # it died: found below
                        pass
            # a result, or a worker's end (its sentinel), whichever comes first
            ready = mp_connection.wait([w.conn for w in workers] + [w.process.sentinel for w in workers], 0.5)
            replaced = []
            for w in workers:
                if w.conn in ready:
                    try:
                        index, record = w.conn.recv()
                    except (EOFError, OSError):  # it died mid-message or before any: handled as dead
                        pass
                    else:
                        w.index = None
                        if index not in done:
                            finish(index, record)
                        replaced.append(w)
                        continue
                if w.process.is_alive():
                    replaced.append(w)
                    continue
                held, w.index = w.index, None  # a worker that died: its run is retried, or failed
                if held is not None and held not in done:
                    if attempts[held] <= retries:
                        pending.insert(0, held)
                    else:
                        finish(held, run_record(specs[held], "failed", started[held],
                                                error=f"its worker process died on each of {attempts[held]} "
                                                      f"attempt(s) (last: {_death(w.process.exitcode)}); see the log"))
                w.conn.close()
                if pending:
                    replaced.append(_Worker(ctx, w.slot))
            workers = replaced
    finally:
        _stop(workers)


def _stop(workers: list[_Worker], timeout_s: float = 30.0) -> None:
    """Ask idle workers to finish, stop busy ones (SIGTERM: their builds clean up), then wait."""
    for w in workers:
        if not w.process.is_alive():
            continue
        if w.index is None:
            try:
                w.conn.send(None)
            except OSError:
                w.process.terminate()
        else:
            w.process.terminate()
    deadline = time.monotonic() + timeout_s
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()
