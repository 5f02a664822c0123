"""Hand-written test rows made whole: the columns a test does not name get a value their table's
contract allows, so the row passes the writer's contract check (stages.core.tables)."""
from __future__ import annotations

import pyarrow as pa

from stages.core.tables import table_contract, table_schema


def filled(table: str, row: dict) -> dict:
    """`row` with every other column null where nullable, else the first allowed value, the range's
    low end (or 0), an empty list, False or a text naming the column."""
    contract, out = table_contract(table), {}
    for f in table_schema(table):
        if f.name in row or f.name in contract.nullable:
            out[f.name] = row.get(f.name)
        elif f.name in contract.values:
            out[f.name] = sorted(contract.values[f.name])[0]
        elif pa.types.is_list(f.type):
            out[f.name] = []
        elif pa.types.is_boolean(f.type):
            out[f.name] = False
        elif pa.types.is_integer(f.type) or pa.types.is_floating(f.type):
            out[f.name] = (contract.ranges.get(f.name) or (None, None))[0] or 0
        else:
            out[f.name] = f"{f.name} text"
    return out
