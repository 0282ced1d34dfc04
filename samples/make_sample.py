"""Regenerate the bundled sample capture: ``python samples/make_sample.py samples/tiny``."""

import sys

from nurec_usd.capture.handmade import write_handmade_capture

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "samples/tiny"
    print(write_handmade_capture(out, overwrite=True))
