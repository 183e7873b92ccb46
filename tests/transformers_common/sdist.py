"""transformers' common model tests, from the source distribution of the installed version.

The wheel ships no tests; the sdist on PyPI ships `tests/test_modeling_common.py` and
`tests/test_configuration_common.py`. `python tests/transformers_common/sdist.py` (run by
`make test`) downloads the sdist of exactly the installed transformers with pip and extracts
those files as the package `transformers_tests` under the cache directory; the harness imports
them from there. Nothing comes from a model hub.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# The files the harness runs; their siblings that the sdist lacks are stood in for (standins.py).
FILES = ("test_modeling_common.py", "test_configuration_common.py")
PACKAGE = "transformers_tests"


def installed_version() -> str:
    from importlib.metadata import version

    return version("transformers")


def cache_root(version: str | None = None) -> Path:
    """The directory that holds the `transformers_tests` package for one transformers version
    ($POSATTN_TRANSFORMERS_TESTS, else ~/.cache/posattn/transformers-tests/VERSION)."""
    base = os.environ.get("POSATTN_TRANSFORMERS_TESTS")
    root = Path(base) if base else Path.home() / ".cache" / "posattn" / "transformers-tests"
    return root / (version or installed_version())


def is_fetched(root: Path) -> bool:
    return all((root / PACKAGE / name).is_file() for name in FILES)


def fetch(version: str) -> Path:
    """Download transformers==VERSION's sdist with pip and extract FILES; a no-op when done."""
    root = cache_root(version)
    if is_fetched(root):
        return root
    with tempfile.TemporaryDirectory() as download:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        pip += ["--no-binary", ":all:", "-d", download, f"transformers=={version}"]
        subprocess.run(pip, check=True)
        (archive,) = Path(download).glob("transformers-*.tar.gz")
        package = root / PACKAGE
        package.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as sdist:
            for name in FILES:
                member = sdist.extractfile(f"transformers-{version}/tests/{name}")
                if member is None:
                    raise SystemExit(f"transformers {version}'s sdist has no tests/{name}")
                (package / name).write_bytes(member.read())
        (package / "__init__.py").write_text("")
    return root


if __name__ == "__main__":
    print(fetch(sys.argv[1] if len(sys.argv) > 1 else installed_version()))
