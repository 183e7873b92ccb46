"""Imports transformers' common test files from the cache `sdist.py` fills, or says why not."""

from __future__ import annotations

import importlib
import sys

from . import standins
from .sdist import PACKAGE, cache_root, installed_version, is_fetched


def load():
    """(test_modeling_common, test_configuration_common), or raise LookupError with the reason
    they are not available."""
    version = installed_version()
    root = cache_root(version)
    if not is_fetched(root):
        raise LookupError(
            f"transformers {version}'s common model tests are not at {root}: run `make test`, or "
            "`python tests/transformers_common/sdist.py`, which downloads them from its sdist"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    standins.install(PACKAGE, root / PACKAGE)
    return (
        importlib.import_module(f"{PACKAGE}.test_modeling_common"),
        importlib.import_module(f"{PACKAGE}.test_configuration_common"),
    )
