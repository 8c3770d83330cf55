"""`cudump query JOB "SQL"`: SQL over a job's (or a run's) columnar index, on DuckDB."""

from __future__ import annotations

import argparse
import math
import textwrap
from pathlib import Path
from typing import Any

from cudump.commands import HelpFormatter
from cudump.console import printable
from cudump.errors import QueryError
from cudump.rundir.index import COLUMNS, duckdb_module, first_line, opened
from cudump.rundir.summary import plural

EXAMPLES = """\
examples:
  cudump query JOB "SELECT rank, node, step, collective, kernel, layer FROM reports
                    ORDER BY step, collective, within, rank LIMIT 1"
  cudump query JOB "SELECT rank, collectives, last_kernel FROM ranks ORDER BY collectives"
  cudump query RUN "SELECT kernel, count(*) AS n FROM launches GROUP BY kernel"
"""


def _table(headers: list[str], rows: list[list[str]], right: list[bool]) -> list[str]:
    """Aligned columns (numbers to the right), control characters escaped. (Not the report
    tables' module: a query on an index that is up to date imports no numpy.)"""
    rows = [[printable(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    return ["  ".join(cell.rjust(w) if r else cell.ljust(w)
                      for cell, w, r in zip(row, widths, right, strict=True)).rstrip()
            for row in rows]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return repr(value) if not math.isfinite(value) else f"{value:.6g}"
    return str(value)


class QueryCommand:
    name = "query"
    help = ("Run SQL on a job's (or a run directory's) launches, records, NaN/Inf reports and "
            "ranks: the columnar index (Parquet, one dataset per rank under JOB/index/), "
            "brought up to date from the JSONL files first. Needs DuckDB (pip install "
            "'cudump[job]').")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        views = "; ".join(f"{table}({', '.join(['job', 'node', *columns])})"
                          for table, columns in COLUMNS.items())
        about = (f"Views: {views}. A process without a rank is rank -1. A launch's "
                 "collective is how many collectives its process launched before it; within, "
                 "how many launches since then: a job's launches order across ranks by (step, "
                 "collective, within).")
        parser.formatter_class = HelpFormatter    # the examples as written
        parser.epilog = textwrap.fill(about, 79) + "\n\n" + EXAMPLES
        parser.add_argument("path", type=Path, metavar="JOB",
                            help="job directory (or a run directory)")
        parser.add_argument("sql", metavar="SQL", help="one SQL statement")
        parser.add_argument("--max-rows", type=_positive, default=1000, metavar="N",
                            help="print at most N rows (default 1000)")

    def run(self, args: argparse.Namespace) -> int:
        for line in query_lines(args.path, args.sql, args.max_rows):
            print(line)
        return 0


def query_lines(path: Path, sql: str, max_rows: int = 1000) -> list[str]:
    """The result of `sql` on PATH's index, as a table and a line of its row count."""
    with opened(path) as con:
        duckdb = duckdb_module()
        try:
            result = con.execute(sql)
            headers = [d[0] for d in result.description] if result.description else []
            rows = result.fetchmany(max_rows + 1) if headers else []
        except duckdb.Error as err:
            raise QueryError(f"query: {first_line(err)}") from None
    more = len(rows) > max_rows
    rows = rows[:max_rows]
    cells = [[_cell(v) for v in row] for row in rows]
    right = [bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows)
             for i in range(len(headers))]
    lines = _table(headers, cells, right) if headers else []
    lines.append(plural(len(rows), "row") + (f" (the first {max_rows}; --max-rows)"
                                             if more else ""))
    return lines
