"""``python -m hasten``: the same as the ``hasten`` command."""

from __future__ import annotations

import sys

from hasten.cli import main

sys.exit(main())
