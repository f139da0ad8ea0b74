"""Reading analyzed plans (EXPLAIN (ANALYZE, FORMAT JSON)): how many rows a statement read."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


def rows_read(plan: Any, tables: Collection[str]) -> int:
    """The rows of ``tables`` an analyzed plan read (kept or filtered out), over all loops."""
    total = 0
    if isinstance(plan, dict):
        if plan.get("Relation Name") in tables and "Actual Rows" in plan:
            kept = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
            total += (kept + plan.get("Rows Removed by Index Recheck", 0)) * plan["Actual Loops"]
        for value in plan.values():
            total += rows_read(value, tables)
    elif isinstance(plan, list):
        for value in plan:
            total += rows_read(value, tables)
    return total
