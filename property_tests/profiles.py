"""Hypothesis settings profiles of the property suite: ci, dev, thorough, gpu.

Selected by ``pytest --hypothesis-profile NAME`` or the environment variable ``HYPOTHESIS_PROFILE``;
the default is ``ci``. The mutant runner (`property_tests.mutants`) loads the same profiles.

- ``ci``: derandomized (fixed seed, so CI is reproducible), no example database, few examples,
  bounded time on a 2-core CPU.
- ``dev``: random seeds, the example database in ``<repo>/.hypothesis/examples`` (gitignored), so a
  failure found once is replayed first on every later run.
- ``thorough``: >= 2000 examples per property, same database; for nightly or pre-release runs.
- ``gpu``: for hardware runners (CUDA adapters): 300 examples, larger shapes are allowed by the tests.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

__all__ = ["DATABASE_DIR", "PROFILES", "EXAMPLES", "BUILD_PER_SHAPE_EXAMPLES_PER_SHARD", "build_per_shape_examples",
           "build_per_shape_shards", "shard_examples", "register", "load", "active_profile"]

#: where failing examples are stored (dev, thorough, gpu): the repo root's .hypothesis/examples
DATABASE_DIR = Path(__file__).resolve().parent.parent / ".hypothesis" / "examples"
#: max_examples per property for each profile (oracle properties use this; kernel properties too)
EXAMPLES = {"ci": 100, "dev": 200, "thorough": 2000, "gpu": 300}
#: examples per property for an adapter that builds a kernel for each new shape (``Adapter.builds_per_shape``:
#: compiled FlexAttention, flash-attn-4's DSL), where one example costs seconds: a 25th of the profile's, at least 8
BUILD_PER_SHAPE_DIVISOR, BUILD_PER_SHAPE_MIN = 25, 8


def build_per_shape_examples(profile_examples: int) -> int:
    """The example count for a property of an adapter that builds per shape, given the profile's count."""
    return min(profile_examples, max(BUILD_PER_SHAPE_MIN, profile_examples // BUILD_PER_SHAPE_DIVISOR))


#: examples per test of a property of an adapter that builds per shape: its examples run as several tests (shards,
#: `shard_examples`), which pytest-xdist's workers run side by side. One such property ran as one test for over 450 s
#: on the H100 (compiled FlexAttention's backward: a forward and a backward build per example), longer than the
#: whole run's goal
BUILD_PER_SHAPE_EXAMPLES_PER_SHARD = 2


def build_per_shape_shards(profile_examples: int) -> int:
    """How many tests (shards) a property of an adapter that builds per shape runs as, given the profile's count."""
    return -(-build_per_shape_examples(profile_examples) // BUILD_PER_SHAPE_EXAMPLES_PER_SHARD)


def shard_examples(examples: int, index: int, count: int) -> int:
    """The examples of shard `index` of `count` when `examples` are split as evenly as they go (the first shards take
    the remainder)."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} of {count}")
    return examples // count + (index < examples % count)


#: examples per property per mutant in the mutant runner (derandomized like ci)
MUTANT_EXAMPLES = 25
PROFILES = tuple(EXAMPLES)
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
            HealthCheck.differing_executors]
_registered = False


def register() -> None:
    """Register the four profiles with Hypothesis (idempotent)."""
    global _registered
    if _registered:
        return
    common = dict(deadline=None, suppress_health_check=_SLOW_OK, print_blob=True)
    settings.register_profile("ci", max_examples=EXAMPLES["ci"], derandomize=True, database=None, **common)
    db = DirectoryBasedExampleDatabase(str(DATABASE_DIR))
    settings.register_profile("dev", max_examples=EXAMPLES["dev"], database=db, **common)
    settings.register_profile("thorough", max_examples=EXAMPLES["thorough"], database=db, **common)
    settings.register_profile("gpu", max_examples=EXAMPLES["gpu"], database=db, **common)
    # the mutant runner: like ci, but stop at the first failure and shrink only briefly
    settings.register_profile(
        "mutants", max_examples=MUTANT_EXAMPLES, derandomize=True, database=None, report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink], **common,
    )
    _registered = True


def active_profile(explicit: str | None = None) -> str:
    """The profile to use: ``explicit``, else $HYPOTHESIS_PROFILE, else "ci"."""
    name = explicit or os.environ.get("HYPOTHESIS_PROFILE") or "ci"
    if name not in PROFILES and name != "mutants":
        raise ValueError(f"unknown Hypothesis profile {name!r}; expected one of {PROFILES}")
    return name


def load(explicit: str | None = None) -> str:
    """Register and load the active profile; returns its name."""
    register()
    name = active_profile(explicit)
    settings.load_profile(name)
    return name
