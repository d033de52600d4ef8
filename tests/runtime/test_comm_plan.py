"""Pure comm-plan functions: table-driven expectations and DDP's real bucketing."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from plancast.simulator.costs.tp_comm import TPCollective, ddp_bucket_bytes, tp_collectives

KW = {"micro_batch_size": 2, "seq_len": 16, "hidden_size": 32, "vocab_size": 64, "dtype_bytes": 4}
FULL = 2 * 16 * 32 * 4


@pytest.mark.parametrize(
    ("part", "phase", "sp", "expected"),
    [
        ("layer", "forward", False, [("all_reduce", FULL)] * 2),
        ("layer", "backward", False, [("all_reduce", FULL)] * 2),
        ("layer", "forward", True, [("all_gather", FULL // 2), ("reduce_scatter", FULL)] * 2),
        ("embedding", "forward", True, []),
        ("embedding", "backward", True, [("all_gather", FULL // 2)]),
        ("head", "forward", True, [("all_gather", FULL // 2)]),
        ("head", "forward", False, []),
    ],
)
def test_tp_collectives_table(part: str, phase: str, sp: bool, expected: list[tuple[str, int]]) -> None:
    got = tp_collectives(part, phase, sequence_parallel=sp, tp=2, **KW)  # type: ignore[arg-type]
    assert list(got) == [TPCollective(k, b) for k, b in expected]


LOSS = [("all_reduce", 2 * 16 * 4)] * 3  # max, target logit, sum of exponentials: one fp32 per token


@pytest.mark.parametrize(
    ("part", "phase", "sp", "learned", "expected"),
    [
        ("embedding", "forward", False, True, [("all_reduce", FULL)]),
        ("embedding", "backward", False, True, []),
        ("embedding", "forward", True, False, [("reduce_scatter", FULL)]),
        ("embedding", "forward", True, True, [("all_reduce", FULL)]),
        ("embedding", "backward", True, False, [("all_gather", FULL // 2)]),
        ("head", "forward", False, False, LOSS),
        ("head", "backward", False, False, [("all_reduce", FULL)]),
        ("head", "forward", True, False, [("all_gather", FULL // 2), *LOSS]),
        ("head", "backward", True, False, [("reduce_scatter", FULL)]),
        ("layer", "forward", False, False, [("all_reduce", FULL)] * 2),
    ],
)
def test_vocab_parallel_collectives_table(
    part: str, phase: str, sp: bool, learned: bool, expected: list[tuple[str, int]]
) -> None:
    """Megatron-LM's / torchtitan's vocab-parallel embedding, output layer and loss (issue 9)."""
    got = tp_collectives(
        part,  # type: ignore[arg-type]
        phase,  # type: ignore[arg-type]
        sequence_parallel=sp,
        tp=2,
        vocab_parallel=True,
        learned_positions=learned,
        **KW,
    )
    assert list(got) == [TPCollective(k, b) for k, b in expected]


def test_no_collectives_without_tensor_parallel() -> None:
    assert tp_collectives("layer", "forward", sequence_parallel=False, tp=1, **KW) == ()


def test_bad_part_is_an_error() -> None:
    with pytest.raises(ValueError, match="part must be"):
        tp_collectives("mlp", "forward", sequence_parallel=False, tp=2, **KW)  # type: ignore[arg-type]


def test_ddp_bucket_bytes_first_bucket_then_cap() -> None:
    mib = 1024 * 1024
    # Reverse order: 0.6 + 0.6 MiB close the 1 MiB first bucket; then 2 MiB buckets.
    sizes = [int(1.5 * mib), int(1.5 * mib), int(0.6 * mib), int(0.6 * mib)]
    assert ddp_bucket_bytes(sizes, bucket_cap_mb=2.0) == [sizes[3] + sizes[2], sizes[1] + sizes[0]]


@pytest.mark.parametrize("cap_mb", [0.01, 0.05, 25.0])
def test_ddp_bucket_count_matches_torch_reducer(cap_mb: float) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)])
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap_mb)
        seen: list[int] = []

        def hook(state, bucket):  # type: ignore[no-untyped-def]
            seen.append(bucket.index())
            fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        ddp.register_comm_hook(None, hook)
        ddp(torch.randn(4, 64)).sum().backward()
    finally:
        dist.destroy_process_group()
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    assert len(ddp_bucket_bytes(sizes, cap_mb)) == len(seen)
