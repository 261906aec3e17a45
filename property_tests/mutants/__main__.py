"""``python -m property_tests.mutants``: same as ``python -m conformance mutants``."""

import sys

from property_tests.mutants.cli import main

sys.exit(main())
