"""A job's launches in one order across its ranks, and what that order answers.

Ranks share no clock; they share their collectives (launches/collectives.py). Each launch
is placed by (step, collective, within): the training step, how many collectives its
process had launched before it, and how many launches of its process came since the last
of them; ties between ranks go to the lower rank. That is the order in which distributed
flight recorders align ranks, and it answers:

- the first non-finite launch of the job: the first NaN/Inf report in that order, with its
  rank, node, step, collective interval and layer;
- the first divergence between two jobs (a run and its rerun): the first place where one
  rank's launches, or their digests, differ;
- a rank that stopped launching collectives while the others went on (a hang), with its
  last launch.

The launches come from each node's trace.jsonl (a run without a trace: the launches its
manifest records, whose `within` is unknown and counts as 0).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path

from cudump.errors import CudumpError
from cudump.launches.scopes import Where
from cudump.rundir import reading
from cudump.rundir.index_rows import NO_RANK, LaunchRow, RankRow, RecordRow, ReportRow, run_rows
from cudump.rundir.job import JobError, node_runs
from cudump.rundir.runs import short_kernel_name
from cudump.rundir.summary import plural

OrderKey = tuple[int, int, int]


def order_key(step: int | None, collective: int | None, within: int | None) -> OrderKey:
    """A launch's place in its job: before the first step is step -1, before the first
    collective is collective 0."""
    return (-1 if step is None else step, collective or 0, within or 0)


def job_runs(path: Path) -> list[tuple[str, Path]]:
    """(node, run directory) of a job's nodes, or of a run directory of its own."""
    try:
        return [(n.name, n.run) for n in node_runs(path)]
    except JobError as err:
        raise CudumpError(str(err)) from None


def _who(rank: int, node: str, pid: int) -> str:
    return f"rank {rank} (node {node})" if rank != NO_RANK else f"process {pid} (node {node})"


@dataclass(frozen=True)
class NodeReport:
    node: str
    report: ReportRow

    @property
    def key(self) -> tuple[OrderKey, int, int, int, int]:
        r = self.report
        return (order_key(r.step, r.collective, r.within), r.rank, r.pid, r.launch, r.arg)

    def where(self) -> Where:
        r = self.report
        return Where(layer=r.layer, pass_=r.pass_, step=r.step, source=r.source,
                     collective=r.collective, collective_op=r.collective_op)

    def text(self) -> str:
        """`rank 1 (node b), launch 9 of vecAdd in ...: 1 of 1024 elements of arg 2
        non-finite (produced)`; a report whose NaN/Inf a write of the host's put there names
        that write as its producer: `rank 1 (node b), a host-to-device copy of 4096 bytes
        before launch 2, read as arg 0 by launch 2 of vecAdd: ... (produced by the host
        copy)`."""
        r = self.report
        where = self.where().text()
        of = f" of {r.elements}" if r.elements is not None else ""
        how = f" ({r.origin})" if r.origin else ""
        launch = (f"launch {r.launch} of {short_kernel_name(r.kernel)}"
                  f"{' ' + where if where else ''}")
        if r.from_host is not None:
            memset = r.from_host == "memset"
            what = "a memset" if memset else "a host-to-device copy"
            size = (f" of {r.from_host_bytes} byte{'' if r.from_host_bytes == 1 else 's'}"
                    if r.from_host_bytes is not None else "")
            before = (f" before launch {r.from_host_launch}"
                      if r.from_host_launch is not None else "")
            arg = f" as arg {r.from_arg}" if r.from_arg is not None else ""
            launch = f"{what}{size}{before}, read{arg} by {launch}"
            how = f" (produced by the {'memset' if memset else 'host copy'})"
        return (f"{_who(r.rank, self.node, r.pid)}, {launch}: {r.nonfinite}{of} elements of "
                f"arg {r.arg} non-finite{how}")


@dataclass(frozen=True)
class Hang:
    """A process that launched fewer collectives than the job's most."""

    node: str
    rank: RankRow
    most: int           # the most collectives any process of the job launched

    def text(self) -> str:
        r = self.rank
        last = (f"launch {r.last_launch} of {short_kernel_name(r.last_kernel or '?')}"
                if r.last_launch is not None else "no launch")
        where = Where(step=r.last_step, collective=r.last_collective,
                      collective_op=r.last_collective_op).text()
        return (f"{_who(r.rank, self.node, r.pid)} stopped launching collectives after "
                f"{r.collectives} while others reached {self.most}; its last launch: {last}"
                + (f" {where}" if where else ""))


@dataclass
class JobOrder:
    """What a job's ranks did, read from its nodes' files."""

    reports: list[NodeReport]
    ranks: list[tuple[str, RankRow]]
    launches: dict[tuple[str, int, int], list[LaunchRow]]   # (node, rank, pid) -> in order
    records: dict[tuple[str, int, int], list[RecordRow]]

    def first_nonfinite(self) -> NodeReport | None:
        """The first NaN/Inf report in the job's order (a producer before a report that
        only carried it on, at the same place; a report of what a host's write put there
        is that write's, its producer, at the place of the launch that read it)."""
        if not self.reports:
            return None
        return min(self.reports, key=lambda r: (r.key[0], not r.report.produced, r.key[1:]))

    def hangs(self) -> list[Hang]:
        """Processes that launched fewer collectives than the job's most (none where no
        process launched any). A process without a rank that launched none is no rank of
        the job's (a launcher, a data loader), not a hang."""
        most = max((r.collectives for _, r in self.ranks), default=0)
        if not most:
            return []
        return [Hang(node, r, most) for node, r in sorted(self.ranks, key=lambda x: x[1].rank)
                if r.collectives < most and (r.rank != NO_RANK or r.collectives)]


def read_job(path: Path, with_launches: bool = False) -> JobOrder:
    """The job's (or run's) reports and ranks; with `with_launches`, every launch and
    record too, each process's in the job's order."""
    order = JobOrder([], [], defaultdict(list), defaultdict(list))
    for node, run in job_runs(path):
        rows = run_rows(run)
        order.reports += [NodeReport(node, r) for r in rows.reports]
        order.ranks += [(node, r) for r in rows.ranks]
        if with_launches:
            for launch in rows.launches:
                order.launches[(node, launch.rank, launch.pid)].append(launch)
            for record in rows.records:
                order.records[(node, record.rank, record.pid)].append(record)
    for launches in order.launches.values():
        launches.sort(key=lambda x: (order_key(x.step, x.collective, x.within), x.launch))
    return order


@dataclass(frozen=True)
class Divergence:
    who: str
    where: Where
    text: str

    def line(self) -> str:
        place = self.where.text()
        return f"first divergence: {self.who}{' ' + place if place else ''}: {self.text}"


def _processes(order: JobOrder) -> dict[tuple[object, ...], tuple[str, int, int]]:
    """Each process by what matches it in another job: its rank, or for a process without
    one, its node and place among that node's processes."""
    out: dict[tuple[object, ...], tuple[str, int, int]] = {}
    unranked: dict[str, int] = defaultdict(int)
    for node, rank, pid in sorted(order.launches):
        if rank != NO_RANK:
            out.setdefault(("rank", rank), (node, rank, pid))
        else:
            out[("pid", node, unranked[node])] = (node, rank, pid)
            unranked[node] += 1
    return out


Digests = dict[int, dict[tuple[int, str], str]]     # launch -> (arg, phase) -> digest


def _digests(records: list[RecordRow]) -> Digests:
    out: Digests = defaultdict(dict)
    for r in records:
        if r.digest is not None:
            out[r.launch][(r.arg, r.phase)] = r.digest
    return out


def _where_of(row: LaunchRow) -> Where:
    return Where(layer=row.layer, pass_=row.pass_, step=row.step, collective=row.collective,
                 collective_op=row.collective_op)


def _diverges(a: list[LaunchRow], b: list[LaunchRow], da: Digests, db: Digests
              ) -> tuple[OrderKey, Where, str] | None:
    """The first place two processes' launches (in the job's order) or digests differ."""
    for x, y in zip(a, b, strict=False):
        kx = order_key(x.step, x.collective, x.within)
        ky = order_key(y.step, y.collective, y.within)
        if kx != ky or x.kernel != y.kernel:
            first = x if kx <= ky else y
            return (min(kx, ky), _where_of(first),
                    f"launch {x.launch} of {short_kernel_name(x.kernel)} in the first, launch "
                    f"{y.launch} of {short_kernel_name(y.kernel)} in the second")
        theirs = db.get(y.launch, {})
        # Before the launch first (its inputs), then after (what it made).
        for (arg, phase), value in sorted(da.get(x.launch, {}).items(),
                                          key=lambda item: (item[0][1] != "before", item[0])):
            other = theirs.get((arg, phase))
            if other is not None and other != value:
                return (kx, _where_of(x), f"launch {x.launch} of {short_kernel_name(x.kernel)}"
                        f": arg {arg} {phase} differs ({value} vs {other})")
    if len(a) != len(b):
        longer, which = (a, "first") if len(a) > len(b) else (b, "second")
        extra = longer[min(len(a), len(b))]
        return (order_key(extra.step, extra.collective, extra.within), _where_of(extra),
                f"only the {which} goes on, with launch {extra.launch} of "
                f"{short_kernel_name(extra.kernel)}")
    return None


def first_divergent(first: Path, second: Path) -> Divergence | None:
    """The first place, in the job's order, where a rank's launches or digests in `first`
    differ from the same rank's in `second` (None where they agree)."""
    a, b = read_job(first, with_launches=True), read_job(second, with_launches=True)
    pa, pb = _processes(a), _processes(b)
    found: list[tuple[OrderKey, int, Divergence]] = []
    for match, ka in pa.items():
        kb = pb.get(match)
        if kb is None:
            continue
        digests_a = _digests(a.records.get(ka, []))
        digests_b = _digests(b.records.get(kb, []))
        differ = _diverges(a.launches[ka], b.launches[kb], digests_a, digests_b)
        if differ is not None:
            key, where, text = differ
            found.append((key, ka[1], Divergence(_who(ka[1], ka[0], ka[2]), where, text)))
    return min(found, key=lambda f: (f[0], f[1]))[2] if found else None


_REPORT_COLUMNS = [f.name for f in fields(ReportRow)]
_RANK_COLUMNS = [f.name for f in fields(RankRow)]


def _sql_columns(names: list[str]) -> str:
    return ", ".join('"pass"' if n == "pass_" else f'"{n}"' for n in names)


def read_job_indexed(path: Path) -> JobOrder:
    """The job's first NaN/Inf report (in the job's order) and its ranks, from its columnar
    index (DuckDB; brought up to date first): what `stats` needs, without reading every
    launch of every rank."""
    from cudump.rundir.index import opened

    order = JobOrder([], [], defaultdict(list), defaultdict(list))
    with opened(path) as con:
        first = con.execute(
            f"SELECT node, {_sql_columns(_REPORT_COLUMNS)} FROM reports ORDER BY "
            "coalesce(step, -1), coalesce(collective, 0), coalesce(within, 0), "
            "origin IS DISTINCT FROM 'produced' AND from_host IS NULL, rank, pid, launch, arg "
            "LIMIT 1").fetchall()
        order.reports = [NodeReport(row[0], ReportRow(*row[1:])) for row in first]
        ranks = con.execute(f"SELECT node, {_sql_columns(_RANK_COLUMNS)} FROM ranks "
                            "ORDER BY node, rank, pid").fetchall()
        order.ranks = [(row[0], RankRow(*row[1:])) for row in ranks]
    return order


def job_order_lines(path: Path, against: Path | None = None) -> list[str]:
    """What `cudump stats JOB` says of the job as a whole: its first non-finite launch, the
    ranks that stopped launching collectives, and (with another job) the first
    divergence. From the columnar index where DuckDB is installed (a job of 1,024 ranks in
    a fraction of a second); else from the JSONL files."""
    from cudump.rundir.index import has_duckdb

    order = read_job_indexed(path) if has_duckdb() else read_job(path)
    lines = []
    first = order.first_nonfinite()
    ranks = {r.rank for _, r in order.ranks if r.rank != NO_RANK}
    unranked = sum(1 for _, r in order.ranks if r.rank == NO_RANK)
    head = f"job: {plural(len(job_runs(path)), 'node')}, {plural(len(ranks), 'rank')}"
    if unranked:
        head += f", {plural(unranked, 'process', 'processes')} without a rank"
    lines.append(head)
    if first is not None:
        lines.append(f"first non-finite: {first.text()}")
    else:
        lines.append("first non-finite: none (no NaN/Inf report in the job)")
    for hang in order.hangs():
        lines.append(f"stopped: {hang.text()}")
    if against is not None:
        divergence = first_divergent(path, against)
        lines.append(divergence.line() if divergence is not None else
                     f"first divergence: none (every rank's launches agree with "
                     f"{reading.shown(against)})")
    return lines
