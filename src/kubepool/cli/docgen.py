"""docs/cli.md, generated from the parser so it never drifts from it: `python -m kubepool.cli.docgen > docs/cli.md`
(`make docs`; a test compares the file with this output)."""

from __future__ import annotations

import argparse

import kubepool.cli
from kubepool.cli import completion, parser

HEADER = """# The `kubepool` command line

Generated from the parser by `python -m kubepool.cli.docgen > docs/cli.md` (`make docs`); do not edit by hand.
The same commands run as `kubectl kubepool ...` (a kubectl plugin). kubectl's habits: `--kubeconfig`, `--context`
and `-n/--namespace` before or after the command; a `KUBECONFIG` of several files merged as kubectl merges them;
`-o json|yaml|wide|name|jsonpath=...|custom-columns=...`; `-w` on `list` and `status`. Shell completion:
`source <(kubepool completion bash)` (or `zsh`), `kubepool completion fish | source`.
"""


GLOBAL = ("kubeconfig", "context", "namespace")  # listed once, under Global options


def _flags(action: argparse.Action) -> str:
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.option_strings and action.nargs != 0:
        value = "|".join(str(c) for c in action.choices) if action.choices else str(action.metavar or action.dest.upper())
        names += f" {value}"
    return names.replace("|", "\\|")


def _help(action: argparse.Action) -> str:
    text = (action.help or "").replace("%(default)s", str(action.default)).replace("|", "\\|")
    return text


def _section(name: str, p: argparse.ArgumentParser, summary: str) -> list[str]:
    positional = " ".join(str(a.metavar or a.dest) for a in p._actions if not a.option_strings)
    out = [f"## `kubepool {name}`", "", summary[:1].upper() + summary[1:] + ".", ""]
    connection = [o for a in p._actions if a.dest in GLOBAL for o in a.option_strings if o.startswith("--")]
    if connection:
        out += [f"Takes the global options {', '.join(f'`{o}`' for o in connection)}.", ""]
    if p.description and p.description != summary:
        out += [p.description, ""]
    out += ["```", f"kubepool {name} [OPTIONS]{' ' + positional if positional else ''}", "```", ""]
    rows = [a for a in p._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
            and a.dest not in GLOBAL]
    if rows:
        out += ["| option | what it does |", "|---|---|"]
        out += [f"| {_flags(a)} | {_help(a)} |" for a in rows]
        out.append("")
    return out


def markdown() -> str:
    root = parser.build()
    helps = {c.dest: c.help or "" for a in root._actions if isinstance(a, argparse._SubParsersAction)
             for c in a._choices_actions}
    lines = [HEADER, "## Global options", "", "| option | what it does |", "|---|---|"]
    lines += [f"| {_flags(a)} | {_help(a)} |" for a in root._actions
              if a.option_strings and not isinstance(a, argparse._HelpAction)]
    lines.append("")
    for name, p in completion._subparsers(root).items():
        if name == "local":
            lines += ["## `kubepool local`", "", helps[name][:1].upper() + helps[name][1:] + ": `up`, `down`, "
                      "`status` (see `docs/local-nodes.md`).", ""]
            continue
        lines += _section(name, p, helps[name])
    doc = kubepool.cli.__doc__ or ""
    codes = doc[doc.index("Exit codes"):].strip().splitlines()
    lines += ["## Exit codes", "", codes[0], "", "```", *(c.strip() for c in codes[1:]), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
