"""``python -m nurec_usd``."""

import sys

from nurec_usd.cli import main

sys.exit(main())
