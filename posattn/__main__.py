"""`python -m posattn`: the `posattn` command from a checkout that is on the path but not
installed (a machine where nothing can be pip-installed)."""

from .cli import entry

raise SystemExit(entry())
