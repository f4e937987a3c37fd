"""`python -m kubepool.runtime`: the container's entrypoint."""

import sys

from kubepool.runtime.main import main

sys.exit(main())
