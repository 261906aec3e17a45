"""NumPy tile-level reference kernels: executable specifications of FA1, FA2, FA3 (+FP8) and split-KV.

Every kernel takes the oracle's keyword signature (oracles/SEMANTICS.md) plus kernel knobs
(``block_q``, ``block_k``, ``dtype``; ``num_splits`` for split-KV) and emulates the precision of a real
kernel (kernels/emulate.py). ``dtype="float64"`` turns the emulation off: the kernels then match the
FP64 oracle to ~1e-12. Modules: `fa1`, `fa2`, `fa3` (incl. `fa3.forward_fp8`), `splitkv`, `standard`.
"""

from __future__ import annotations

from attention_conformance.kernels.reference import fa1, fa2, fa3, splitkv, standard

__all__ = ["fa1", "fa2", "fa3", "splitkv", "standard"]
