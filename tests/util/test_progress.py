"""Progress reports: plain lines off a terminal, a tqdm bar on one, nothing when disabled."""

from __future__ import annotations

import io
import re

import pytest

from nurec_usd.util.progress import INTERVAL_ENV, PlainProgress, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_as_a_training_loop_reports_them():
    """update, then set_postfix (as the trainer does): each line shows the values of its own step."""
    out = io.StringIO()
    with PlainProgress(100, "train", "step", file=out, interval_s=0, postfix_follows=True) as bar:
        for step, loss in ((25, 0.5), (50, 0.25), (75, 0.125)):
            bar.update(25)
            bar.set_postfix(loss=f"{loss:.4f}", psnr=f"{20 + step / 25:.2f}", refresh=False)
        bar.update(25)
        bar.set_postfix(loss="0.0625", psnr="24.00", refresh=False)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    for line, (n, loss, psnr) in zip(lines, ((25, "0.5000", "21.00"), (50, "0.2500", "22.00"),
                                             (75, "0.1250", "23.00"), (100, "0.0625", "24.00"))):
        assert line.startswith(f"train: {n}/100 steps ({n}%), loss {loss}, psnr {psnr}; "), line
        assert re.search(r"; [\d.]+ steps/s; ", line), line
    assert lines[0].endswith(" left") and lines[-1].endswith(" in all")


def test_lines_at_most_every_interval():
    out = io.StringIO()
    with PlainProgress(1000, "eval", "view", file=out, interval_s=3600) as bar:
        for _ in range(1000):
            bar.update()
    assert out.getvalue().splitlines() == [out.getvalue().splitlines()[-1]]  # only the closing line
    assert out.getvalue().startswith("eval: 1,000/1,000 views (100%); ")


def test_unknown_total_set_later_and_nothing_done():
    out = io.StringIO()
    bar = PlainProgress(None, "collision mesh", "view", file=out, interval_s=0)
    bar.total, bar.n = 8, 3
    bar.refresh()
    bar.close()
    bar.close()
    assert out.getvalue().splitlines()[0].startswith("collision mesh: 3/8 views (38%)")
    assert len(out.getvalue().splitlines()) == 2
    idle = io.StringIO()
    PlainProgress(5, "x", file=idle).close()
    assert idle.getvalue() == ""


def test_interval_from_the_environment(monkeypatch):
    monkeypatch.setenv(INTERVAL_ENV, "2.5")
    assert PlainProgress(1).interval_s == 2.5
    monkeypatch.setenv(INTERVAL_ENV, "soon")
    with pytest.raises(ValueError, match=INTERVAL_ENV):
        PlainProgress(1)


def test_bar_on_a_terminal_lines_elsewhere_nothing_when_disabled():
    from tqdm import tqdm

    assert isinstance(progress_bar(3, "a", file=io.StringIO()), PlainProgress)
    bar = progress_bar(3, "a", file=_Terminal())
    assert isinstance(bar, tqdm) and not bar.disable
    bar.close()
    off = progress_bar(3, "a", enabled=False, file=io.StringIO())
    off.update(3)
    off.set_postfix(loss=1)
    off.close()
    assert isinstance(off, tqdm) and off.disable
