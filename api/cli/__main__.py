"""``python -m npuprof.api.cli``: the same as the ``npuprof`` console script."""

import sys

from npuprof.api.cli import main

sys.exit(main())
