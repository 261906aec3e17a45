"""``python -m attention_conformance.property_tests.mutants``: same as ``python -m attention_conformance mutants``."""

import sys

from attention_conformance.property_tests.mutants.cli import main

sys.exit(main())
