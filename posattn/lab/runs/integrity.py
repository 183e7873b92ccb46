"""Checkpoints that can be trusted on resume: a sha256 manifest of every file, written into the
checkpoint before it is renamed into place, and verified before a run resumes from it.

A checkpoint written before manifests existed is accepted when the header of each of its
safetensors files parses and the file is as long as the header says."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from ...data.manifest import write_atomic

CHECKSUMS = "checksums.json"
CHUNK = 1 << 20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_checksums(checkpoint: Path) -> None:
    """Record the sha256 and size of every file under `checkpoint` in its checksums.json."""
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file() and p.name != CHECKSUMS)
    entries = {
        p.relative_to(checkpoint).as_posix(): {"sha256": sha256(p), "bytes": p.stat().st_size}
        for p in files
    }
    write_atomic(checkpoint / CHECKSUMS, json.dumps({"files": entries}, indent=1) + "\n")


def safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file cannot be loaded (a bad header or a size other than the one
    its header gives), or None."""
    size = path.stat().st_size
    try:
        with path.open("rb") as file:
            (header_len,) = struct.unpack("<Q", file.read(8))
            if 8 + header_len > size:
                return f"{size} bytes, cut inside its header of {header_len} bytes"
            header = json.loads(file.read(header_len))
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    except (struct.error, ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
        return f"unreadable safetensors header ({error.__class__.__name__})"
    expected = 8 + header_len + max(ends, default=0)
    if size != expected:
        return f"{size} bytes where its header needs {expected}"
    return None


def checkpoint_problems(checkpoint: Path) -> list[tuple[Path, str]]:
    """(file, what is wrong) for each damaged file of a checkpoint; empty when intact."""
    manifest = checkpoint / CHECKSUMS
    if not manifest.is_file():  # written before checksums: the safetensors headers must parse
        return [
            (p, problem)
            for p in sorted(checkpoint.rglob("*.safetensors"))
            if (problem := safetensors_problem(p))
        ]
    try:
        files = json.loads(manifest.read_text())["files"]
        expected = {name: (entry["sha256"], entry["bytes"]) for name, entry in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return [(manifest, "unreadable checksum manifest")]
    problems = []
    for name, (digest, size) in expected.items():
        path = checkpoint / name
        if not path.is_file():
            problems.append((path, "missing"))
        elif path.stat().st_size != size:
            problems.append((path, f"{path.stat().st_size} bytes where {size} were written"))
        elif sha256(path) != digest:
            problems.append((path, "sha256 does not match the one written with the checkpoint"))
    return problems
