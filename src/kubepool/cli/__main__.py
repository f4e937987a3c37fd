import sys

from kubepool.cli import main

sys.exit(main())
