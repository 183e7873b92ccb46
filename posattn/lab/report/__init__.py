"""`posattn report RUN_DIR`: one static page (HTML and markdown) of any run directory."""

from .collect import RunContents, collect
from .render import write_report

__all__ = ["RunContents", "collect", "write_report"]
