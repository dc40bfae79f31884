"""``python -m vizalloc``: the same as the ``vizalloc`` command."""

from vizalloc.cli import main

raise SystemExit(main())
