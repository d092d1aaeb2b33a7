from __future__ import annotations

from hasten.loadgen.cli import main

raise SystemExit(main())
