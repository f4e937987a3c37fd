"""Shell completion, generated from the parser so it never drifts from the options: subcommands, each one's
options, the values of `-o` and `completion`, and job and pool names from the cluster (through `kubepool list
-o name` / `kubepool pools -o name`, with the namespace and context typed so far)."""

from __future__ import annotations

import argparse
import shlex

# Subcommands whose positional argument is a job, and options whose value is a pool.
JOB_COMMANDS = ("status", "logs", "wait", "cancel", "suspend", "resume", "delete")
POOL_OPTIONS = ("--pool",)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings]


def _choices(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {o: [str(c) for c in a.choices] for a in parser._actions if a.choices and a.option_strings
            for o in a.option_strings}


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
    if shell == "zsh":  # zsh runs bash completions through its bashcompinit layer
        return "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser)
    return bash(parser)
