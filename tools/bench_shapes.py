"""Head dims of a benchmark's rows, as the scripts' ``--head-dims`` spells them (d, or d x dv)."""

from __future__ import annotations

__all__ = ["dims_label", "parse_head_dims", "row_key"]


def parse_head_dims(text: str) -> list[tuple[int, int]]:
    """``--head-dims``: comma-separated d (dv = d) or d x dv, e.g. "64,128,192x128" -> [(64, 64), (128, 128),
    (192, 128)]."""
    out = []
    for item in text.split(","):
        d, _, dv = item.strip().lower().partition("x")
        out.append((int(d), int(dv) if dv else int(d)))
    return out


def dims_label(row: dict) -> str:
    """A row's head dims as written in the tables: "128", or "192x128" where dv differs from d."""
    dv = row.get("dv", row["d"])
    return f"{row['d']}" if dv == row["d"] else f"{row['d']}x{dv}"


def row_key(row: dict) -> tuple:
    """A table row's shape (B, H, N, d, dv, causal): what matches a row of one benchmark set to the same row of
    another."""
    return row["B"], row["H"], row["N"], row["d"], row.get("dv", row["d"]), bool(row["causal"])
