"""The `kubepool` command line. Subcommands live next to what they drive; this module only dispatches."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["local"]:
        from kubepool.local.cli import main as local_main

        return local_main(argv[1:])
    print("usage: kubepool local {up,down,status} ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
