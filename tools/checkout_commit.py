"""The commit a measurement was made from, for the header of its table.

``git describe --always --dirty --abbrev=40`` in the checkout; in a copy without git metadata (the device runner's
snapshot of a checkout) the commit the checkout wrote to ``build/carry/commit`` before the copy was made
(tools/device/prepare_local.sh, by running this script), which travels with the carried library. Used by the
benchmark tables' environment (`cuda_fwd_check_bench.env_info`) and by pytest-benchmark's commit hook
(tests/conftest.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["CARRIED", "checkout_commit"]

ROOT = Path(__file__).resolve().parents[1]
#: where a checkout leaves its commit for a copy without git metadata
CARRIED = Path("build", "carry", "commit")


def checkout_commit(root: Path = ROOT) -> str | None:
    """The checkout's commit as ``git describe`` gives it (``-dirty`` appended for a modified tree), or the carried
    one where ``root`` has no git metadata; None where neither is known."""
    if (root / ".git").exists():
        try:
            out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40"], cwd=root,
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            out = None
        if out is not None and out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    carried = root / CARRIED
    if not carried.is_file():
        return None
    return carried.read_text().strip() or None


if __name__ == "__main__":  # what tools/device/prepare_local.sh writes to build/carry/commit
    print(checkout_commit() or "")
