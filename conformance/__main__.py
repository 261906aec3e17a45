"""``python -m attention_conformance``: see `conformance.cli`."""

import sys

from attention_conformance.cli import main

sys.exit(main())
