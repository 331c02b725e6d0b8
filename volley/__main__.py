"""``python -m volley`` is the ``volley`` command."""

from volley.cli import main

raise SystemExit(main())
