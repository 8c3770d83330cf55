"""Collectives numbered per process on the stand-in driver (tests/fakecuda/progs/collectives.c:
vecAdds in module scopes, each followed by NCCL's all-reduce kernel): every launch's trace
and manifest record carries `collective`, and a NaN report says which collectives it lies
between; a program without collectives gets no such field."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from records import manifest

from cudump.launches.collectives import CollectiveLog, collective_op
from cudump.launches.scopes import Where
from cudump.rundir.index_rows import run_rows


def _trace(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]


def test_kernel_names_say_their_collective() -> None:
    assert collective_op("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage"
                         "<4096ul>)") == "all-reduce"
    assert collective_op("ncclKernel_AllGather_RING_LL_Sum_int8_t") == "all-gather"
    assert collective_op("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce-scatter"
    assert collective_op("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") \
        == "send-recv"
    assert collective_op("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)") \
        == "collective"
    assert collective_op("void nvshmemi_barrier_kernel<int>(int)") == "nvshmem"
    assert collective_op("vecAdd(float const*, float const*, float*, int)") is None
    assert collective_op("my_ncclDevKernel_AllReduce()") is None
    assert collective_op("f(ncclDevKernel_AllReduce)") is None      # only the name counts


def test_log_counts_in_launch_order_whatever_order_heard() -> None:
    log = CollectiveLog()
    log.announce()
    assert log.before(3) is None                    # none launched before it (yet)
    log.heard_of([(7, "all-reduce"), (2, None), (4, "all-gather")])
    assert log.before(4) is None
    place = log.before(5)
    assert place is not None and (place.count, place.op) == (1, "all-gather")
    place = log.before(9)
    assert place is not None and (place.count, place.op) == (2, "all-reduce")


def test_log_counts_a_graph_launchs_collective_nodes_in_node_order() -> None:
    """A replay's collective nodes count after the launches before its graph launch, in
    node order; once a replay of a graph is heard of, a later replay's nodes have their
    places before its own nodes are heard of."""
    log = CollectiveLog()
    log.announce()
    log.heard_of([(1, "all-reduce"), (2, None)])
    log.heard_of_nodes([(3, 7, 0, None), (3, 7, 1, "all-reduce"), (3, 7, 2, None),
                        (3, 7, 3, "all-gather")])
    places = [log.before(3, graph=7, node=n) for n in range(4)]
    assert [(p.count, p.op) for p in places] == [(1, "all-reduce"), (1, "all-reduce"),
                                                (2, "all-reduce"), (2, "all-reduce")]
    after = log.before(4)
    assert after is not None and (after.count, after.op) == (3, "all-gather")
    # Replay 2 (launch 5): its nodes not heard of yet, their places known all the same.
    place = log.before(5, graph=7, node=2)
    assert place is not None and (place.count, place.op) == (4, "all-reduce")
    place = log.before(5, graph=7, node=0)
    assert place is not None and (place.count, place.op) == (3, "all-gather")


def _graph_run(cudump_run, fake, *options: str, nan: bool = False):
    args = [str(fake.programs["collectives"]), "2", "2"] + (["1", "0"] if nan else [])
    ran = cudump_run(args, *options, env_extra={"COLLECTIVES_GRAPH": "1"})
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=5 allreduce=5" in ran.stdout
    return ran


def test_collectives_in_a_cuda_graph_are_numbered_per_replay(cudump_run, fake) -> None:
    """An all-reduce of its own, then two layers (vecAdd, all-reduce) captured into a graph
    and replayed twice, then a vecAdd: the replays' all-reduce nodes are collectives 2 to 5,
    in launch and node order; the captured launches, which do not run, count as none. The
    second replay's first node produces Inf."""
    ran = _graph_run(cudump_run, fake, "--trace", "--check-nan", nan=True)
    trace = _trace(ran.run_dir)
    captured = [r for r in trace if r["event"] == "launch" and r["captured"]]
    assert len(captured) == 4 and {r["collective"] for r in captured} == {1}
    nodes = [r for r in trace if r["event"] == "graph-kernel"]
    assert [(r["replay"], r["node"]) for r in nodes] == [(1, 0), (1, 1), (1, 2), (1, 3),
                                                         (2, 0), (2, 1), (2, 2), (2, 3)]
    assert [r["collective"] for r in nodes] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert {r["collective_op"] for r in nodes} == {"all-reduce"}
    assert [r["step"] for r in nodes] == [0] * 4 + [1] * 4
    last = [r for r in trace if r["event"] == "launch"][-1]
    assert last["kernel"].startswith("vecAdd") and last["collective"] == 5
    # The job's order reads them so: every all-reduce counted, each node at its place
    # after the collective before it (the captured launches, which did not run, are no
    # launches of it), from the trace in Python and with DuckDB alike.
    rows = run_rows(ran.run_dir)
    (rank,) = rows.ranks
    assert rank.collectives == 5
    places = [(r.launch, r.graph_node, r.collective, r.within) for r in rows.launches
              if r.graph_node is not None]
    assert places == [(6, 0, 1, 0), (6, 1, 1, 1), (6, 2, 2, 0), (6, 3, 2, 1),
                      (7, 0, 3, 0), (7, 1, 3, 1), (7, 2, 4, 0), (7, 3, 4, 1)]
    if importlib.util.find_spec("duckdb") is not None:
        from cudump.rundir.index import opened

        with opened(ran.run_dir) as con:
            indexed = con.execute("SELECT launch, graph_node, collective, within FROM "
                                  "launches WHERE graph_node IS NOT NULL ORDER BY launch, "
                                  "graph_node").fetchall()
        assert [tuple(r) for r in indexed] == places
    # The report of replay 2's node 0 lies where that node does.
    (report,) = rows.reports
    assert (report.launch, report.graph_node, report.collective, report.within) == \
        (7, 0, 3, 0)


def test_collectives_in_a_cuda_graph_are_numbered_without_trace(cudump_run, fake) -> None:
    """Without --trace the shim reports a replay's collective nodes (and only them): the
    NaN report of the second replay's first node says it lies after the third all-reduce
    (the first replay's two nodes after the program's own)."""
    ran = _graph_run(cudump_run, fake, "--check-nan", nan=True)
    nan = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf:")]
    assert len(nan) == 1, ran.stderr
    assert "launch 7 of vecAdd(float const*, float const*, float*, int) in layers.0 " \
        "(forward, step 1, between all-reduce 3 and 4) (graph 1, replay 2, node 0, " in \
        nan[0], nan[0]
    assert not (ran.run_dir / "trace.jsonl").exists()


def test_graph_node_records_of_later_replays_know_their_replays_collectives(
        cudump_run, fake) -> None:
    """Digests of the vecAdd nodes: from the second replay on, node 2 (layer 1) lies after
    its own replay's first all-reduce node, though that replay's nodes are reported after
    it ran. (The first replay of a graph is known only as its nodes are heard of.)"""
    ran = _graph_run(cudump_run, fake, "--digest", "-k", "vecAdd")
    places = {(r["replay"], r["node"]): r.get("collective") for r in manifest(ran.run_dir)
              if "replay" in r}
    assert places[(1, 0)] == 1
    assert (places[(2, 0)], places[(2, 2)]) == (3, 4), places


def test_where_text_names_the_interval() -> None:
    where = Where(layer="layers.7", pass_="forward", step=3, collective=41,
                  collective_op="all-reduce")
    assert where.text(rank=11) == ("in layers.7 (forward, step 3, between all-reduce 41 and "
                                   "42), rank 11")
    assert Where.from_fields(where.fields()) == where
    assert Where(step=3).text() == "in step 3"      # no collective: the wording as before


def test_every_launch_carries_its_collective(cudump_run, fake) -> None:
    ran = cudump_run([str(fake.programs["collectives"]), "2", "3", "1", "2"],
                     "--check-nan", "--trace")
    assert ran.returncode == 0, ran.stderr
    assert "launches vecAdd=6 allreduce=6" in ran.stdout
    trace = [r for r in _trace(ran.run_dir) if r["event"] == "launch"]
    kinds = [("nccl" if "ncclDevKernel" in r["kernel"] else "add") for r in trace]
    assert kinds == ["add", "nccl"] * 6
    # The first vecAdd comes before any collective: nothing to say of it.
    assert "collective" not in trace[0] and "collective" not in trace[1]
    assert [r.get("collective") for r in trace[2:]] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert {r["collective_op"] for r in trace[2:]} == {"all-reduce"}
    assert [r.get("step") for r in trace] == [0] * 6 + [1] * 6
    # The stderr lines say it too.
    lines = [ln for ln in ran.stderr.splitlines() if re.match(r"cudump: #\d+ pid=", ln)]
    assert "between all-reduce 5 and 6" in lines[-2], lines[-2]
    # The NaN report: step 1's third layer, after the fifth all-reduce.
    nan = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf:")]
    assert len(nan) == 1, ran.stderr
    assert "in layers.2 (forward, step 1, between all-reduce 5 and 6)" in nan[0], nan[0]
    producers = [r for r in manifest(ran.run_dir) if r.get("nan_producer")]
    assert {(r["step"], r["collective"], r["collective_op"], r["layer"])
            for r in producers} == {(1, 5, "all-reduce", "layers.2")}


def test_collectives_numbered_without_trace(cudump_run, fake) -> None:
    """Without --trace the controller still hears of each collective (and only of them):
    the report's interval is the same."""
    ran = cudump_run([str(fake.programs["collectives"]), "2", "3", "0", "1"], "--check-nan")
    assert ran.returncode == 0, ran.stderr
    nan = [ln for ln in ran.stderr.splitlines() if ln.startswith("cudump: NaN/Inf:")]
    assert len(nan) == 1, ran.stderr
    assert "(forward, step 0, between all-reduce 1 and 2)" in nan[0], nan[0]
    assert not (ran.run_dir / "trace.jsonl").exists()


def test_no_collective_no_field(cudump_run, fake) -> None:
    ran = cudump_run([str(fake.programs["layers"]), "2", "2"], "--trace")
    assert ran.returncode == 0, ran.stderr
    assert not any("collective" in r for r in _trace(ran.run_dir))
    assert "between" not in ran.stderr
    assert not (ran.run_dir / "index").exists()      # a run of its own: indexed when queried


def test_flight_records_carry_their_collective(cudump_run, fake) -> None:
    ran = cudump_run([str(fake.programs["collectives"]), "1", "3"], "--flight")
    assert ran.returncode == 0, ran.stderr
    launches = [json.loads(line) for line in
                (ran.run_dir / "flight.jsonl").read_text().splitlines()]
    launches = [r for r in launches if r.get("record") == "launch"]
    assert [r.get("collective") for r in launches] == [None, None, 1, 1, 2, 2]
    assert {r["collective_op"] for r in launches[2:]} == {"all-reduce"}


def test_digest_records_carry_their_collective(cudump_run, fake) -> None:
    """A program without steps or scopes: its repeated launches' digests are kept as
    records, not batched, so that each says where it lies among the collectives."""
    ran = cudump_run([str(fake.programs["collectives"]), "3", "2"], "--digest",
                     env_extra={"COLLECTIVES_PLAIN": "1"})
    assert ran.returncode == 0, ran.stderr
    records = [r for r in manifest(ran.run_dir) if r["kernel"].startswith("vecAdd")]
    assert len(records) == 6 * 3 * 2       # 6 launches, 3 buffers, before and after
    assert all("step" not in r and "layer" not in r for r in records)
    by_launch = {r["launch"]: r.get("collective") for r in records}
    assert by_launch == {1: None, 3: 1, 5: 2, 7: 3, 9: 4, 11: 5}
