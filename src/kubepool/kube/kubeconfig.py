"""A `KUBECONFIG` of several files, merged as kubectl (client-go's loader) merges them: the files in order,
missing ones skipped; for clusters, users and contexts the first file to name an entry wins it whole; the first
file that sets `current-context` sets it; a relative path in a file is relative to that file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

# The fields that hold file paths, per section (client-go's ResolveLocalPaths).
_PATHS = {"clusters": ("certificate-authority",), "users": ("client-certificate", "client-key", "tokenFile")}


def files_of(kubeconfig_env: str) -> list[Path]:
    """The files KUBECONFIG names, in order, empty entries and repeats dropped."""
    return list(dict.fromkeys(Path(p) for p in kubeconfig_env.split(os.pathsep) if p))


def _absolute(section: str, entry: dict[str, Any], base: Path) -> dict[str, Any]:
    key = section[:-1]  # clusters -> cluster, users -> user
    inner = dict(entry.get(key) or {})
    for field in _PATHS.get(section, ()):
        if inner.get(field) and not os.path.isabs(inner[field]):
            inner[field] = str(base / inner[field])
    return {**entry, key: inner}


def merge(docs: Sequence[tuple[Path, dict[str, Any]]], resolve: bool = True) -> dict[str, Any]:
    """One kubeconfig from (file, its parsed content) pairs, in KUBECONFIG's order; with `resolve` its relative
    paths made absolute (what a client uses), without it as `kubectl config view --merge` shows them."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for path, doc in docs:
        for section in ("clusters", "users", "contexts"):
            taken = {e["name"] for e in merged[section]}
            for entry in doc.get(section) or ():
                if entry.get("name") not in taken:
                    merged[section].append(_absolute(section, entry, path.resolve().parent) if resolve else entry)
                    taken.add(entry.get("name"))
        if doc.get("current-context") and "current-context" not in merged:
            merged["current-context"] = doc["current-context"]
    return merged


def load(paths: Sequence[Path], resolve: bool = True) -> dict[str, Any] | None:
    """The merged kubeconfig of the files that exist; None when none does."""
    docs = [(p, yaml.safe_load(p.read_text()) or {}) for p in paths if p.is_file()]
    return merge(docs, resolve) if docs else None
