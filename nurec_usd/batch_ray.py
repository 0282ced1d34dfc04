"""A batch's runs on Ray: one task per run, a GPU per task where the cluster has GPUs.

Ray schedules the tasks, gives each GPU task its own ``CUDA_VISIBLE_DEVICES`` (and a fresh worker
process: Ray's default for GPU tasks) and retries a task whose worker or node is lost
(``max_retries``). A run's own failure is not an exception (``run_one`` returns it as a record), so
Ray never retries a broken capture. Every node must see the capture and output paths at the same
place (a shared file system) and have nurec_usd installed.
"""

from __future__ import annotations

import importlib.util
import os
import time
from typing import Any, Callable

from nurec_usd.batch_job import RunSpec, run_one, run_record

INSTALL_HINT = 'Ray is not installed here: pip install "nurec_usd[ray]" (or pip install "ray>=2.40,<3")'


class RayMissingError(ImportError):
    """``--ray`` without Ray installed."""


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def _task(spec: RunSpec) -> dict[str, Any]:
    return run_one(spec)


def run_ray(specs: list[RunSpec], on_done: Callable[[int, dict[str, Any]], None], address: str | None = None,
            workers: int | None = None, retries: int = 2, device: str = "auto",
            log: Callable[[str], None] | None = None) -> None:
    """Run every spec as a Ray task; ``on_done(index, record)`` for each as it ends.

    ``address``: a cluster to join (``ray://HOST:10001``, ``HOST:6379``, ``auto``); None starts a local
    Ray, unless ``RAY_ADDRESS`` names a cluster. A Ray already initialised in this process is used as
    it is. ``workers``: at most this many runs at once (default: as many as the resources allow).
    ``retries``: Ray's retries of a task whose worker died. KeyboardInterrupt cancels the tasks.
    """
    if not ray_installed():
        raise RayMissingError(INSTALL_HINT)
    import ray

    say = log or (lambda _m: None)
    started_here = not ray.is_initialized()
    if started_here:
        target = address or os.environ.get("RAY_ADDRESS") or "local"
        if target == "local":
            # The tasks return small records: a small object store, and no dashboard, start faster.
            ray.init(address="local", include_dashboard=False, log_to_driver=False,
                     object_store_memory=128 * 2**20)
        else:
            ray.init(address=target, log_to_driver=False)
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        if device == "cuda" and not gpus:
            raise RuntimeError("--device cuda: the Ray cluster has no GPU")
        per_task = {"num_gpus": 1} if gpus and device != "cpu" else {"num_cpus": 1}
        say(f"Ray: {ray.cluster_resources().get('CPU', 0):.0f} CPUs, {gpus:.0f} GPUs; each run asks for "
            + ("1 GPU" if "num_gpus" in per_task else "1 CPU"))
        task = ray.remote(max_retries=retries, **per_task)(_task)
        limit = workers or len(specs)
        queued = list(range(len(specs)))
        running: dict[Any, tuple[int, float]] = {}  # task -> (run, when it was submitted)
        try:
            while queued or running:
                while queued and len(running) < limit:
                    index = queued.pop(0)
                    running[task.remote(specs[index])] = index, time.monotonic()
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    index, submitted = running.pop(ref)
                    try:
                        record = ray.get(ref)
                    except ray.exceptions.RayError as err:  # lost more often than Ray retries, or unpicklable
                        record = run_record(specs[index], "failed", submitted,
                                            error=f"Ray: {type(err).__name__}: {str(err).splitlines()[0]}")
                    on_done(index, record)
        except BaseException:
            for ref in running:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()
