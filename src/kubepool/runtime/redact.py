"""Secret values kept out of what the runtime publishes: its termination message becomes the job's status message
and Events, which more people may read than the Secrets. The operator names where the pod's Secret values are
(contract.ENV_SECRET_ENV, contract.ENV_SECRET_DIRS); only this process sees the values."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from kubepool.contract import ENV_SECRET_DIRS, ENV_SECRET_ENV

REDACTED = "[redacted]"
# Shorter values would blank ordinary words and numbers of a message; a Secret that short protects nothing anyway.
MIN_LENGTH = 4


def _file_values(root: Path) -> list[str]:
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file() and not p.name.startswith("..")]
    out = []
    for f in files:
        try:
            out.append(f.read_text(errors="replace"))
        except OSError:
            continue
    return out


def secret_values(env: Mapping[str, str] = os.environ) -> list[str]:
    """The values to keep out, longest first (a value containing another is replaced whole). A multi-line value
    (a key file) is kept out line by line too: a message may quote one line of it."""
    raw = [env[n] for n in env.get(ENV_SECRET_ENV, "").split(",") if env.get(n)]
    for d in filter(None, env.get(ENV_SECRET_DIRS, "").split(":")):
        raw += _file_values(Path(d))
    values = set()
    for v in raw:
        values.update([v, v.strip(), *(line.strip() for line in v.splitlines())])
    return sorted((v for v in values if len(v) >= MIN_LENGTH), key=len, reverse=True)


def redact(text: str, values: list[str]) -> str:
    """`text` with every value (as written, and as a JSON string escapes it) replaced."""
    for v in values:
        for form in dict.fromkeys((v, json.dumps(v)[1:-1])):
            text = text.replace(form, REDACTED)
    return text
