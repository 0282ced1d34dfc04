"""Reading ahead in threads: results in order, a bounded number waiting, errors at their turn."""

from __future__ import annotations

import threading
import time

import pytest

from nurec_usd.util.prefetch import prefetched


def test_results_come_in_order_with_at_most_depth_ahead():
    started, lock = [], threading.Lock()

    def slow_square(i: int) -> int:
        with lock:
            started.append(i)
        time.sleep(0.01 * (i % 3))  # finish out of order
        return i * i

    seen = []
    for i, value in enumerate(prefetched(slow_square, range(20), workers=4, depth=3)):
        seen.append(value)
        with lock:
            assert len(started) <= i + 3  # never more than depth submitted past the one consumed
    assert seen == [i * i for i in range(20)]


def test_an_error_surfaces_at_its_item():
    def fail_at_five(i: int) -> int:
        if i == 5:
            raise ValueError("sweep 5 is broken")
        return i

    got = []
    with pytest.raises(ValueError, match="sweep 5 is broken"):
        for value in prefetched(fail_at_five, range(10), workers=2, depth=2):
            got.append(value)
    assert got == [0, 1, 2, 3, 4]
