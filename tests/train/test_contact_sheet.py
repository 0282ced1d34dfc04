"""The held-out contact sheet: one row per picked pair, wide rows shrunk to a preview."""

from __future__ import annotations

import numpy as np
from PIL import Image

from nurec_usd.evaluation import contact_sheet


def test_narrow_rows_keep_their_size_and_wide_rows_shrink(tmp_path):
    narrow = np.full((30, 200, 3), 40, np.uint8)
    wide = np.zeros((90, 3300, 3), np.uint8)
    wide[:, :1650] = 200  # left half bright: the render side
    contact_sheet([("a", narrow), ("b", wide)], tmp_path / "sheet.png", max_width=1600)
    sheet = np.asarray(Image.open(tmp_path / "sheet.png"))
    # 3300 px wide -> shrunk 3x to 1100 x 30; the narrow row as it is
    assert sheet.shape == (30 + 16 + 30 + 16, 1100, 3)
    assert (sheet[16:46, :200] == 40).all()
    row = sheet[46 + 16:]
    assert (row[:, :540] == 200).all() and (row[:, 560:] == 0).all()
    assert not list(tmp_path.glob(".*")), "the temporary file was left behind"
