"""Convert a trace file to Parquet, one file per event kind, for DuckDB, Polars or pandas.

The ``.vztrace`` format is built for recording (append-only, crash-safe, cheap per
event) and for loading into Python objects; query engines read columnar files. This
converts in batches (``read_batches``), so memory stays bounded whatever the trace's
size, and the Parquet files can then be queried out of core::

    from vizalloc.trace.arrow_export import to_parquet
    to_parquet("run.vztrace", "run.parquet.d")      # run.parquet.d/TensorPlaced.parquet, ...
    # duckdb: SELECT buffer_id, max("offset" + nbytes) FROM 'run.parquet.d/TensorPlaced.parquet' GROUP BY 1

Columns: ``seq``, ``t_ns``, ``loc_file``, ``loc_line``, ``loc_function``, then the kind's
fields: integers as int64, bools, strings and enum values as strings, ``tuple[int, ...]``
as ``list<int64>``, bytes as binary, anything else (op params, chunk sizes) as JSON text.
Needs ``pyarrow`` (imported only here).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from vizalloc.errors import UsageError
from vizalloc.trace import events as ev
from vizalloc.trace.api import read_batches
from vizalloc.trace.schema import SCHEMA


def _arrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise UsageError("converting to Parquet needs pyarrow: pip install pyarrow") from exc
    return pa, pq


def _column(pa: Any, codec: str) -> tuple[Any, Callable[[Any], Any]]:
    """The Arrow type of a codec and how to convert one value to it."""
    if codec == "int":
        return pa.int64(), lambda v: v
    if codec == "bool":
        return pa.bool_(), lambda v: v
    if codec == "str":
        return pa.string(), lambda v: v
    if codec.startswith("enum:"):
        return pa.string(), lambda v: v.value if hasattr(v, "value") else v
    if codec == "tuple<int>":
        return pa.list_(pa.int64()), list
    if codec == "bytes":
        return pa.binary(), lambda v: v
    return pa.string(), lambda v: json.dumps(v)


def to_parquet(trace_path: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
               batch_events: int = 1 << 18) -> dict[str, int]:
    """Write ``out_dir/<Kind>.parquet`` for every kind in the trace; returns rows per kind."""
    pa, pq = _arrow()
    os.makedirs(out_dir, exist_ok=True)
    writers: dict[type[ev.Event], Any] = {}
    schemas: dict[type[ev.Event], tuple[Any, list[Callable[[Any], Any]]]] = {}
    rows: dict[str, int] = {}
    try:
        for batch in read_batches(trace_path, batch_events):
            groups: dict[type[ev.Event], list[ev.Event]] = {}
            for e in batch:
                groups.setdefault(e.__class__, []).append(e)
            for cls, group in groups.items():
                kind = SCHEMA[cls]
                if cls not in schemas:
                    cols = [_column(pa, c) for c in kind.codecs]
                    schema = pa.schema(
                        [("seq", pa.int64()), ("t_ns", pa.int64()), ("loc_file", pa.string()),
                         ("loc_line", pa.int64()), ("loc_function", pa.string())]
                        + [(name, t) for name, (t, _) in zip(kind.fields, cols)]
                    )
                    schemas[cls] = (schema, [conv for _, conv in cols])
                    writers[cls] = pq.ParquetWriter(os.path.join(out_dir, f"{kind.name}.parquet"), schema)
                schema, convs = schemas[cls]
                data = [
                    [e.seq for e in group], [e.t_ns for e in group],
                    [e.loc.file if e.loc else None for e in group],
                    [e.loc.line if e.loc else None for e in group],
                    [e.loc.function if e.loc else None for e in group],
                ] + [[conv(getattr(e, name)) for e in group] for name, conv in zip(kind.fields, convs)]
                writers[cls].write_table(pa.Table.from_arrays(
                    [pa.array(col, type=f.type) for col, f in zip(data, schema)], schema=schema))
                rows[kind.name] = rows.get(kind.name, 0) + len(group)
    finally:
        for w in writers.values():
            w.close()
    return rows
