"""Reading a capture's files ahead of their use, in threads (file reads and decoders release the GIL)."""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Threads for reading and decoding: one per CPU core this process may use, at most 32."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 4)
    return max(1, min(32, cores))


def prefetched(fn: Callable[[T], R], items: Iterable[T], workers: int = 4, depth: int = 8) -> Iterator[R]:
    """``fn(item)`` for each item, in order, computed in ``workers`` threads up to ``depth`` items ahead.

    At most ``depth`` results wait in memory (sweeps are megabytes each). An exception raised by
    ``fn`` surfaces when its item's turn comes; the items queued after it are cancelled. The
    threads end with the iteration (or when the iterator is closed).
    """
    queue: deque = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="read-ahead") as pool:
        try:
            for item in items:
                queue.append(pool.submit(fn, item))
                if len(queue) >= depth:
                    yield queue.popleft().result()
            while queue:
                yield queue.popleft().result()
        finally:
            for future in queue:
                future.cancel()
