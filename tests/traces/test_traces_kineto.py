"""Kineto import: a real 2-rank DDP profile, a hand-written GPU-shaped trace, and damaged files."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pandas as pd
import pytest

from plancast.traces import schema
from plancast.traces.kineto import import_kineto
from plancast.traces.store import TraceReadError

DATA = Path(__file__).parent / "data"
PARAMETERS = 16 * 32 + 32 + 32 * 4 + 4  # nn.Sequential(Linear(16, 32), ReLU(), Linear(32, 4))


def ddp_worker(rank: int, world_size: int, out_dir: str, port: int) -> None:
    """Three profiled DDP steps over gloo, traced by tensorboard_trace_handler."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        record_shapes=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(out_dir, worker_name=f"rank{rank}"),
    ) as profiler:
        for _ in range(4):
            model(torch.randn(8, 16)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            profiler.step()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def ddp_trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mp = pytest.importorskip("torch.multiprocessing")
    out_dir = tmp_path_factory.mktemp("kineto_ddp")
    mp.spawn(ddp_worker, args=(2, str(out_dir), free_port()), nprocs=2, join=True)
    return out_dir


@pytest.mark.distributed
def test_real_ddp_profile(ddp_trace_dir: Path) -> None:
    events = import_kineto(ddp_trace_dir)
    assert set(events["source"]) == {"measured"}
    assert sorted(set(events["rank"])) == [0, 1]
    assert sorted(set(events["step"])) == [0, 1, 2]
    per_step = events.groupby(["rank", "step", "kind"]).size().unstack("kind", fill_value=0)
    main_kinds = ["all_reduce", "backward", "forward", "optimizer"]
    assert (per_step[main_kinds] == 1).all().all()  # one DDP bucket: the model is far below 25 MiB
    # DDP's first forward broadcasts a few ints (warm-up); nothing else is imported
    assert set(per_step.columns) - set(main_kinds) <= {"broadcast"}
    assert set(events.loc[events["kind"] == "broadcast", "step"]) <= {0}
    reduces = events[events["kind"] == "all_reduce"]
    assert set(reduces["bytes"]) == {PARAMETERS * 4}
    assert set(reduces["stream"]) == {"dp"} and set(reduces["microbatch"]) == {-1}
    assert set(events.loc[events["kind"] == "optimizer", "stage"]) == {-1}
    assert (events["start_us"] >= 0).all()
    order = events.pivot_table(index=["rank", "step"], columns="kind", values="start_us")
    assert (order["forward"] < order["backward"]).all()
    assert (order["backward"] < order["optimizer"]).all()


def test_annotated_gpu_trace() -> None:
    events = import_kineto(DATA / "kineto_annotated_gpu")
    got = events[["step", "kind", "microbatch", "index", "start_us", "dur_us", "bytes"]]
    expected = pd.DataFrame(
        [
            (0, "forward", 0, 0, 10.0, 90.0, 0),
            (0, "forward", 1, 0, 300.0, 100.0, 0),
            (0, "backward", 0, 0, 100.0, 200.0, 0),
            (0, "backward", 1, 0, 400.0, 300.0, 0),
            (0, "optimizer", -1, 0, 800.0, 100.0, 0),
            (0, "all_reduce", -1, 0, 550.0, 300.0, 4096),
            (0, "all_reduce", -1, 1, 650.0, 100.0, 4096),
            (1, "forward", 0, 0, 10.0, 90.0, 0),
            (1, "backward", 0, 0, 100.0, 400.0, 0),
            (1, "all_reduce", -1, 0, 950.0, 200.0, 2048),  # GPU work may end after the host step
        ],
        columns=got.columns,
    ).astype(got.dtypes.to_dict())
    pd.testing.assert_frame_equal(got, expected)
    assert set(events["rank"]) == {3}  # from distributedInfo, not the file name


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("rank0.json", '{"traceEvents": [{"ph": "X", "name": "Profi', r"rank0\.json is not valid JSON"),
        ("rank0.json", '{"events": []}', r"rank0\.json has no 'traceEvents' list"),
        (
            "rank0.json",
            '{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}]}',
            "no ProfilerStep",
        ),
        ("trace.json", '{"traceEvents": [], "distributedInfo": {"rank": -3}}', r"-3, not a rank"),
    ],
)
def test_damaged_traces_say_why(tmp_path: Path, name: str, text: str, message: str) -> None:
    write(tmp_path / name, text)
    with pytest.raises(TraceReadError, match=message):
        import_kineto(tmp_path)


def test_rank_from_file_name_and_duplicates(tmp_path: Path) -> None:
    trace = json.loads((DATA / "kineto_annotated_gpu" / "worker.json").read_text())
    del trace["distributedInfo"]
    write(tmp_path / "rank2.123.pt.trace.json", json.dumps(trace))
    assert set(import_kineto(tmp_path)["rank"]) == {2}
    write(tmp_path / "worker_rank-2.json", json.dumps(trace))
    with pytest.raises(TraceReadError, match="are both rank 2"):
        import_kineto(tmp_path)


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceReadError, match="has no"):
        import_kineto(tmp_path)


def test_output_is_schema_valid() -> None:
    events = import_kineto(DATA / "kineto_annotated_gpu")
    pd.testing.assert_frame_equal(events, schema.validate(events))


@pytest.mark.distributed
def test_real_ddp_profile_reconciles_against_its_simulated_scenario(ddp_trace_dir: Path) -> None:
    """The imported job lines up with a simulated scenario of the same shape (DP 2, one micro-batch,
    one DDP bucket): every event of the scored step is matched, none missing or extra."""
    from plancast.simulator.loader import parse_scenario
    from plancast.simulator.predict import simulate
    from plancast.traces.reconcile import reconcile

    scenario = parse_scenario({
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 16, "micro_batch_size": 1, "global_batch_size": 2, "dtype": "fp32"},
        "parallelism": {"data_parallel_degree": 2},
        "cluster": {"preset": "local-cpu"},
    }).scenario
    rec = reconcile(simulate(scenario).events, import_kineto(ddp_trace_dir))
    assert rec.step >= 1  # step 0 (DDP's warm-up broadcasts) is not scored
    assert len(rec.matched) == 2 * 4  # forward, backward, all_reduce, optimizer on each rank
    assert rec.missing.empty and rec.extra.empty
    assert rec.step_time_measured_s > 0 and rec.step_time_predicted_s > 0
