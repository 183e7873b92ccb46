"""`posattn data pack` / `unpack`: carry a prepared data directory to a machine that cannot
fetch packages (a GPU node without network). The archive holds the manifest and every file it
lists as written by a build step, not the downloaded sources: runs read only the built files,
and the manifest's sha256 of each is checked when packing and again when unpacking."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from ..errors import PosAttnConfigError
from .layout import paths
from .manifest import damaged_files, read_manifest, written_beside


def built_files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every file record ({path, bytes, sha256}) of the build steps; `sources` (the downloaded
    packages, keyed `file`) are left out."""
    records: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if {"path", "sha256", "bytes"} <= node.keys():
                records.append(node)
                return
            for key, value in node.items():
                if key != "sources":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(manifest)
    return sorted({r["path"]: r for r in records}.values(), key=lambda r: r["path"])


def pack(data_dir: str | os.PathLike | None, output: str | os.PathLike) -> dict[str, Any]:
    """Write output (.tar.xz) from the prepared data directory; returns {files, bytes}."""
    layout = paths(data_dir)
    root = layout.root
    records = built_files(read_manifest(layout.manifest))
    if not records:
        raise PosAttnConfigError(
            f"--data-dir={str(root)!r} holds no prepared data (no manifest.json with built "
            "files): run `posattn data prepare` first"
        )
    bad = list(damaged_files(records, root))
    if bad:
        raise PosAttnConfigError(
            f"--data-dir={str(root)!r}: {len(bad)} built file(s) are missing or differ from the "
            f"manifest ({', '.join(bad[:5])}): run `posattn data prepare` again before packing"
        )
    output = Path(output)
    with written_beside(output) as partial, tarfile.open(partial, "w:xz") as archive:
        archive.add(layout.manifest, arcname=layout.manifest.name)
        for record in records:
            archive.add(root / record["path"], arcname=record["path"])
    return {"files": len(records) + 1, "bytes": output.stat().st_size}


def unpack(archive: str | os.PathLike, data_dir: str | os.PathLike | None) -> dict[str, Any]:
    """Extract an archive of `pack` into the data directory, checking every file against the
    archive's manifest first; a directory that already holds prepared data is refused."""
    archive = Path(archive)
    layout = paths(data_dir)
    root = layout.root
    if not archive.is_file():
        raise PosAttnConfigError(f"ARCHIVE={str(archive)!r} is not a file")
    if layout.manifest.exists():
        raise PosAttnConfigError(
            f"--data-dir={str(root)!r} already holds prepared data (manifest.json): unpack "
            "into an empty or new directory"
        )
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".unpack-") as scratch:
        staging = paths(scratch)
        try:
            with tarfile.open(archive, "r:*") as opened:
                # "data" refuses absolute paths, links out of the tree and device files.
                opened.extractall(staging.root, filter="data")
        except (tarfile.TarError, OSError) as error:
            raise PosAttnConfigError(
                f"ARCHIVE={str(archive)!r} is not a readable `posattn data pack` archive: {error}"
            ) from error
        records = built_files(read_manifest(staging.manifest))
        if not records:
            raise PosAttnConfigError(
                f"ARCHIVE={str(archive)!r} holds no manifest.json with built files: make it "
                "with `posattn data pack`"
            )
        bad = list(damaged_files(records, staging.root))
        if bad:
            raise PosAttnConfigError(
                f"ARCHIVE={str(archive)!r}: {len(bad)} file(s) missing or differing from its "
                f"manifest ({', '.join(bad[:5])}); nothing was written"
            )
        for record in records:  # the manifest last: a half-moved directory has none
            target = root / record["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(staging.root / record["path"], target)
        shutil.move(staging.manifest, layout.manifest)
    return {"files": len(records) + 1, "root": str(root)}
