"""``python -m nurec_usd``."""

import sys
import warnings

from nurec_usd.cli import main

_default_format = warnings.formatwarning


def _format(message, category, filename, lineno, line=None):
    # nurec_usd's own warnings (an importer's approximations, frames left out) are for the user:
    # one line, without the source location; others keep Python's format.
    if category.__module__.startswith("nurec_usd"):
        return f"warning: {message}\n"
    return _default_format(message, category, filename, lineno, line)


warnings.formatwarning = _format
sys.exit(main())
