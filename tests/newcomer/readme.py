"""The README's command blocks, for the tests that run or check them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def block(heading: str) -> str:
    """The first ```bash block under the `## ` heading that starts with `heading`."""
    text = README.read_text()
    section = text[text.index(f"\n## {heading}"):]
    m = re.search(r"```bash\n(.*?)```", section, re.S)
    assert m, f"no bash block under {heading!r}"
    return m.group(1)


def commands(heading: str) -> list[list[str]]:
    """Each line of the block as words, its comment dropped."""
    return [shlex.split(line, comments=True) for line in block(heading).splitlines() if line.strip()]
