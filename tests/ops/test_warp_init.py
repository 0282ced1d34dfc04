"""Warp starts quietly: no "could not find the CUDA driver" line where there is no driver, every
other line written to stderr meanwhile kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nurec_usd.ops.warp_init import NO_DRIVER_WARNING, cuda_driver_present, without_stderr_line


def test_only_the_driver_line_is_dropped(capfd):
    with without_stderr_line(NO_DRIVER_WARNING):
        os.write(2, f"{NO_DRIVER_WARNING}. GPU execution will not be available.\n".encode())  # as native code does
        os.write(2, b"Warp CUDA error: something real\n")
        print("a python warning", file=sys.stderr)
    err = capfd.readouterr().err  # (under capfd, sys.stderr is not descriptor 2: the order may differ)
    assert sorted(err.splitlines()) == ["Warp CUDA error: something real", "a python warning"]


def test_stderr_is_restored_after_an_error(capfd):
    with pytest.raises(RuntimeError):
        with without_stderr_line(NO_DRIVER_WARNING):
            os.write(2, b"before the error\n")
            raise RuntimeError("boom")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "before the error\nafter\n"


@pytest.mark.skipif(cuda_driver_present(), reason="a CUDA driver is present here")
def test_warp_says_nothing_on_a_machine_without_a_driver():
    plain = subprocess.run([sys.executable, "-c", "import warp; warp.config.log_level = 30; warp.init()"],
                           capture_output=True, text=True, timeout=120)
    assert NO_DRIVER_WARNING in plain.stderr  # what Warp alone says here
    ours = subprocess.run([sys.executable, "-c", "from nurec_usd.ops.warp_init import init_warp; init_warp(); "
                           "import warp; print(warp.get_cuda_device_count())"], capture_output=True, text=True,
                          timeout=120)
    assert ours.returncode == 0 and ours.stdout.strip() == "0" and ours.stderr == "", ours.stderr
