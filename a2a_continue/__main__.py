"""``python -m a2a_continue``."""

from a2a_continue.cli import main

raise SystemExit(main())
