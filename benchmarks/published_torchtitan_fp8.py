"""Published runs with torchao Float8 under torchtitan: the float8 rows of torchtitan's H100 benchmark (Llama
3.1 8B, 70B and 405B on 8 to 512 H100s). Data only; benchmarks/published_data.py gathers them,
benchmarks/published_groups.py scores them (never fitted on).
"""

from __future__ import annotations

from benchmarks.published_fsdp import _H100_96GB as H100_96GB  # the source's bf16 rows' GPU
from benchmarks.published_record import PublishedRun, Reported, cluster_table, plan_table, training_table

CITATION = (
    "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Tables 1-5 (torch 1963fc8, torchao "
    "eab345c, torchtitan 9dec370, December 2024): 'torch.compile + Float8' rows, TPS/GPU"
)
_ASSUMPTIONS = (
    "torchao Float8 as torchtitan ran it then: tensorwise dynamic scaling with float8 FSDP all-gathers: "
    "training.fp8_recipe tensorwise_current",
    "torch.compile fuses the elementwise ops: elementwise 'fused'; SDPA attention, framework torchtitan",
    "selective = per-op selective checkpointing (torchtitan's default option): selective_recompute 'op'",
    "FSDP2 (zero_stage 3), gradients reduce-scattered in fp32 (torchtitan's default)",
    "HBM2e H100s at a 500 W limit, as the source's bf16 rows (benchmarks/published_fsdp.py)",
    "pipeline rows: as many micro-batches as pipeline ranks, 8 of 4 samples each (torchtitan 9dec370 "
    "torchtitan/parallelisms/pipelining_utils.py: pipeline_parallel_microbatches defaults to "
    "pipeline_parallel_degree), Interleaved 1F1B with 2 stages a rank",
    "pipeline rows: FSDP2 without resharding after forward (torchtitan 9dec370 parallelize_llama.py "
    "apply_fsdp: reshard_after_forward = False under PP, 'to avoid per-microbatch all-gathers'): zero_stage "
    "2, plancast's FSDP2 with reshard_after_forward False, whose memory keeps the stage gathered and its "
    "gradients unsharded in fp32 (costs/memory.py fsdp_holds_stage_unsharded: torch.distributed.pipelining "
    "syncs gradients only at the last micro-batch); the engine still reduce-scatters after every backward",
    "pipeline rows: receive buffers per micro-batch, kept for the step (torch.distributed.pipelining as of "
    "torch 1963fc8, pytorch/pytorch#136380): parallelism.pipeline_receive_buffers 'per_microbatch', as the "
    "same runs' memory rows (benchmarks/published_memory.py); and every stage keeps each micro-batch's "
    "output for the step (before pytorch/pytorch#153383): parallelism.pipeline_output_chunks 'every_stage'",
)
# name, table, model preset, seq, GPUs, local batch, recompute, TP, PP, schedule, async TP, tokens/s/GPU
_ROWS = (
    ("llama3-8b-8gpu", 1, "llama3-8b", 8192, 8, 2, "selective", 1, 1, "", False, 8532),
    ("llama3-8b-128gpu", 3, "llama3-8b", 8192, 128, 2, "selective", 1, 1, "", False, 8380),
    ("llama3-8b-8gpu-seq32k", 2, "llama3-8b", 32768, 8, 1, "full", 1, 1, "", False, 3890),
    ("llama3-70b-256gpu-tp8", 4, "llama3-70b", 8192, 256, 16, "full", 8, 1, "", False, 829),
    ("llama3-70b-256gpu-tp8-asynctp", 4, "llama3-70b", 8192, 256, 16, "full", 8, 1, "", True, 876),
    ("llama31-405b-512gpu-1f1b", 5, "llama3-405b", 8192, 512, 32, "full", 8, 8, "1F1B", True, 100),
    ("llama31-405b-512gpu-interleaved", 5, "llama3-405b", 8192, 512, 32, "full", 8, 8, "Interleaved1F1B",
     True, 128),
)


def torchtitan_fp8_runs() -> tuple[PublishedRun, ...]:
    runs = []
    for name, table, preset, seq, gpus, local, recompute, tp, pp, schedule, async_tp, tps in _ROWS:
        dp = gpus // (tp * pp)
        pipelined = pp > 1
        plan = plan_table(
            tp, pp, 2 if schedule == "Interleaved1F1B" else 1, zero_stage=2 if pipelined else 3,
            fsdp_reduce_dtype="fp32",
            sequence_parallel=tp > 1, **({"tp_comm_overlap": True} if async_tp else {}),
        )
        if pipelined:
            plan["pipeline_parallel_schedule"] = schedule
            plan["pipeline_receive_buffers"] = "per_microbatch"
            plan["pipeline_output_chunks"] = "every_stage"
        training = training_table(
            seq, local // pp, local * dp, "bf16", recompute, flash_attention=True,
            selective_recompute="op", elementwise="fused", fp8=True, fp8_recipe="tensorwise_current",
        )
        runs.append(
            PublishedRun(
                f"torchtitan-h100-fp8-{name}",
                "torchtitan-fp8",
                f"{CITATION}, Table {table}",
                {"preset": preset},
                training,
                plan,
                cluster_table("dgx-h100-80gb", gpus, gpu=H100_96GB),
                "torchtitan",
                local * dp * seq / (tps * gpus),
                Reported(tps, "tokens/s/GPU"),
                _ASSUMPTIONS,
            )
        )
    return tuple(runs)
