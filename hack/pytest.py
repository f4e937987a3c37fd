"""pytest for `make test`, leaving the process without Python's teardown of native libraries.

The suite loads Ray's driver, torch, xgboost and pyarrow into this one process. Once pytest has reported and
cleaned up, the exit handlers registered in Python still run (temporary directories, Ray's own), and then the
process ends with pytest's status: the C++ libraries' destructors and the interpreter's module teardown, which
can crash while one of their threads still runs (a CI run ended in SIGSEGV after "1042 passed"), never run.
With PYTHONFAULTHANDLER=1 (hack/test.sh) a crash before that point still prints every thread's stack."""

from __future__ import annotations

import atexit
import os
import sys

if __name__ == "__main__":
    sys.path.pop(0)  # this script's folder (hack/: folders named as the tests' own) is no place to import from
    import pytest

    code = int(pytest.main(sys.argv[1:]))
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
