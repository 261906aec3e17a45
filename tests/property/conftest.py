"""Register the property-suite Hypothesis profiles (ci, dev, thorough, gpu) for these unit tests too,
so ``--hypothesis-profile NAME`` works when only tests/property/ is collected."""

from property_tests import profiles

profiles.register()
