"""Shell completion, generated from the parser so it never drifts from the options: subcommands, each one's
options, the values of `-o` and `completion`, and job and pool names from the cluster (through `kubepool list
-o name` / `kubepool pools -o name`, with the namespace and context typed so far)."""

from __future__ import annotations

import argparse
import shlex

from kubepool.cli.output import OBJECT_OUTPUTS, TABLE_OUTPUTS, output_format

# Subcommands whose positional argument is a job, and options whose value is a pool.
JOB_COMMANDS = ("status", "logs", "wait", "cancel", "suspend", "resume", "delete", "dashboard")
POOL_OPTIONS = ("--pool",)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings]


def _values(action: argparse.Action) -> list[str]:
    """The values to offer after an option: its choices, or -o's formats (checked by a type, not by choices)."""
    if action.type is output_format:
        return [*TABLE_OUTPUTS, *OBJECT_OUTPUTS]
    return [str(c) for c in action.choices or ()]


def _choices(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {o: _values(a) for a in parser._actions if _values(a) and a.option_strings for o in a.option_strings}


def bash(parser: argparse.ArgumentParser) -> str:
    subs = {name: p for name, p in _subparsers(parser).items()}
    cases = []
    for name, p in subs.items():
        choices = "".join(f"      {shlex.quote(o)}) COMPREPLY=($(compgen -W {shlex.quote(' '.join(v))} -- \"$cur\")); return;;\n"
                          for o, v in _choices(p).items())
        positional = [a for a in p._actions if not a.option_strings and a.choices]
        words = " ".join(str(c) for a in positional for c in a.choices or ())
        cases.append(f"    {name})\n      opts={shlex.quote(' '.join(_options(p)))}; words={shlex.quote(words)}\n"
                     f"      case \"$prev\" in\n{choices}      esac;;\n")
    jobs = "|".join(JOB_COMMANDS)
    pools = "|".join(POOL_OPTIONS)
    return f"""# kubepool completion for bash: source <(kubepool completion bash)
_kubepool_cluster_args() {{
  local i
  for ((i = 2; i < COMP_CWORD; i++)); do
    case "${{COMP_WORDS[i]}}" in
      -n|--namespace|--context|--kubeconfig) printf '%s %s ' "${{COMP_WORDS[i]}}" "${{COMP_WORDS[i+1]}}";;
    esac
  done
}}
_kubepool() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" cmd="${{COMP_WORDS[1]}}" opts words
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W {shlex.quote(' '.join(subs))} -- "$cur")); return
  fi
  case "$cmd" in
{''.join(cases)}    *) return;;
  esac
  if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$opts" -- "$cur")); return; fi
  case "$prev" in
    {pools}) COMPREPLY=($(compgen -W "$(kubepool pools -o name $(_kubepool_cluster_args) 2>/dev/null | sed 's|.*/||')" -- "$cur")); return;;
    -n|--namespace|--context|--kubeconfig|--instance|--tail|--timeout|--limit|--name|--env|--pip|--image|--entrypoint|--min-instances|--instances|--instances-timeout) return;;
  esac
  case "$cmd" in
    {jobs}) COMPREPLY=($(compgen -W "$(kubepool list -o name $(_kubepool_cluster_args) 2>/dev/null | sed 's|.*/||')" -- "$cur"));;
    *) [[ -n "$words" ]] && COMPREPLY=($(compgen -W "$words" -- "$cur"));;
  esac
}}
complete -o default -F _kubepool kubepool
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    if shell == "fish":
        return fish(parser)
    if shell == "zsh":  # zsh runs bash completions through its bashcompinit layer
        return "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser)
    return bash(parser)


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(parser: argparse.ArgumentParser) -> str:
    """fish's `complete` lines: the subcommands with their help, each one's options (with their choices), job
    names after a job command and pool names after --pool, read from the cluster with the flags typed so far."""
    lines = ["# kubepool completion for fish: kubepool completion fish | source", "complete -c kubepool -f",
             "function __kubepool_cluster_args",
             "    set -l words (commandline -opc)",
             "    for i in (seq (count $words))",
             "        if contains -- $words[$i] -n --namespace --context --kubeconfig",
             "            and test $i -lt (count $words)",
             "            printf '%s\\n' $words[$i] $words[(math $i + 1)]",
             "        end",
             "    end",
             "end"]
    subs = _subparsers(parser)
    for name, p in subs.items():
        help_text = next((c.help for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                          for c in a._choices_actions if c.dest == name), "") or ""
        lines.append(f"complete -c kubepool -n __fish_use_subcommand -a {name} -d {_fish_quote(help_text)}")
        for action in p._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            flags = " ".join(f"-s {o[1:]}" if len(o) == 2 else f"-l {o[2:]}" for o in action.option_strings)
            extra = " -r" if action.nargs != 0 else ""
            if _values(action):
                extra += f" -a {_fish_quote(' '.join(_values(action)))}"
            elif action.option_strings[-1] in POOL_OPTIONS:
                extra += " -a '(kubepool pools -o name (__kubepool_cluster_args) 2>/dev/null | string replace -r \".*/\" \"\")'"
            lines.append(f"complete -c kubepool -n '__fish_seen_subcommand_from {name}' {flags}{extra}"
                         f" -d {_fish_quote((action.help or '').split(' (')[0])}")
        positional = [a for a in p._actions if not a.option_strings and a.choices]
        for action in positional:
            words = " ".join(str(c) for c in action.choices or ())
            lines.append(f"complete -c kubepool -n '__fish_seen_subcommand_from {name}' -a {_fish_quote(words)}")
    jobs = " ".join(JOB_COMMANDS)
    lines.append(f"complete -c kubepool -n '__fish_seen_subcommand_from {jobs}' -a '(kubepool list -o name "
                 "(__kubepool_cluster_args) 2>/dev/null | string replace -r \".*/\" \"\")'")
    return "\n".join(lines) + "\n"
