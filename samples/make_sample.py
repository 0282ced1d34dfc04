"""Regenerate the bundled sample capture and its contact sheet.

    python samples/make_sample.py [OUT_DIR]      (default: samples/tiny)

The sample is the synthetic generator's ``tiny`` preset with the default seed, rendered on the CPU
(``python -m nurec_usd synth --preset tiny --seed 0 --device cpu``). Its ground truth is written to a
temporary folder and only used for the contact sheet (``contact_sheet.png`` beside OUT_DIR); it is not
committed, to keep ``samples/`` small.
"""

import sys
import tempfile
from pathlib import Path

from nurec_usd.synth import generate
from nurec_usd.synth.contact_sheet import write_contact_sheet

if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "samples/tiny")
    with tempfile.TemporaryDirectory() as tmp:
        result = generate("tiny", out, seed=0, device="cpu", overwrite=True, groundtruth_dir=Path(tmp) / "gt")
        sheet = write_contact_sheet(out, out.parent / "contact_sheet.png", groundtruth_dir=result.groundtruth_dir,
                                    tile_width=240, max_colors=256)
    print(result.capture_dir)
    print(sheet)
