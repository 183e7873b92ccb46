"""Fingerprints of run settings: a stable hash of the settings that fix a result (config
sections as canonical JSON, plus the posattn version), and the keys where two settings differ.
Used by the stages of compare (stages.py) and the cells of the probe grid."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from ... import __version__

VERSION_KEY = "posattn"
ABSENT = "(absent)"


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        plain = dataclasses.asdict(value)
        # A field added to a section after results existed (its ADDED_DEFAULTS) joins the
        # settings only when set otherwise: earlier stages keep their fingerprints.
        for name, default in getattr(value, "ADDED_DEFAULTS", {}).items():
            if plain.get(name) == default:
                del plain[name]
        return plain
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} in run settings: {value!r}")


def canonical(value: Any) -> Any:
    """`value` (dataclasses, dicts, lists, numbers, strings) as plain JSON data, keys sorted."""
    return json.loads(json.dumps(value, sort_keys=True, default=_plain))


def run_settings(**sections: Any) -> dict:
    """The settings that fix a stage's result: its config sections and the posattn version."""
    return canonical({VERSION_KEY: __version__, **sections})


def trainer_settings(trainer: Any) -> dict:
    """{"trainer": the knobs of a trainer section that change results} when any differs from
    its default, else {}: a run at the defaults keeps the fingerprint it had before the
    section existed."""
    changed = trainer.result_settings()
    return {"trainer": changed} if changed else {}


def fingerprint(settings: Any) -> str:
    """A stable hash (sha256 hex) of JSON-able settings: equal settings, equal fingerprints,
    whatever the order of their keys."""
    text = json.dumps(canonical(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """'key.path: old -> new' for every leaf where two settings differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            found += differences(old.get(key, ABSENT), new.get(key, ABSENT), path)
        return found
    if old == new:
        return []
    show = lambda v: v if v == ABSENT else json.dumps(v)  # noqa: E731
    return [f"{prefix or '(settings)'}: {show(old)} -> {show(new)}"]
