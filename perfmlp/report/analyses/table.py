"""The analyses' result: a table with named columns (None: a missing value)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]

    def __post_init__(self):
        bad = [i for i, row in enumerate(self.rows) if len(row) != len(self.columns)]
        if bad:
            raise ValueError(f"table {self.name}: row {bad[0]} has {len(self.rows[bad[0]])} values for "
                             f"{len(self.columns)} columns")

    @classmethod
    def from_records(cls, name: str, records: Iterable[dict], columns: tuple[str, ...] | None = None) -> "Table":
        """A table from dicts; `columns` default to the keys in first-seen order."""
        records = list(records)
        if columns is None:
            columns = tuple(dict.fromkeys(k for r in records for k in r))
        return cls(name, tuple(columns), tuple(tuple(r.get(c) for c in columns) for r in records))

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]

    def column(self, name: str) -> list:
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    def where(self, **equal) -> "Table":
        """The rows whose columns equal the values given (a column's spaces as underscores)."""
        idx = {k: self.columns.index(k.replace("_", " ") if k not in self.columns else k) for k in equal}
        rows = tuple(r for r in self.rows if all(r[i] == equal[k] for k, i in idx.items()))
        return Table(self.name, self.columns, rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.records())

    def __repr__(self) -> str:
        return f"Table({self.name!r}, {len(self.rows)} rows: {', '.join(self.columns)})"
