"""Cross-field checks of the data-parallel and optimizer keys: ZeRO stages, Megatron's distributed optimizer
and its overlaps, gradient buckets and accumulation.

Errors are ``PlanProblem`` (path, message with the fix), warnings plain strings; validation.check_plan
reports them with the rest.
"""

from __future__ import annotations

from plancast.simulator.catalog.frameworks import framework_defaults
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import PlanProblem


def data_parallel_problems(s: Scenario) -> list[PlanProblem]:
    """Megatron's overlapped parameter gather without its overlapped gradient reduce: Megatron-LM refuses it
    (megatron/training/arguments.py asserts `--overlap-grad-reduce` with `--overlap-param-gather`; `plancast
    import megatron` refuses it too), and the distributed optimizer's forward pre-hooks that gather the next
    bucket are the ones its overlapped reduce installs (distributed_data_parallel.py)."""
    par = s.parallelism
    distopt = par.zero_stage == 1 and par.distributed_optimizer
    if distopt and par.overlap_param_gather and not par.overlap_grad_reduce:
        return [
            PlanProblem(
                "parallelism.overlap_param_gather",
                "true under the distributed optimizer needs overlap_grad_reduce = true (Megatron-LM asserts "
                "--overlap-grad-reduce with --overlap-param-gather); set overlap_grad_reduce = true, or "
                "overlap_param_gather = false",
            )
        ]
    return []


def data_parallel_warnings(s: Scenario) -> list[str]:
    """ZeRO where it shards nothing or re-reduces every micro-batch, and keys set away from their default
    that cannot change this plan's prediction (a flag that changes nothing must say so)."""
    par, t, out = s.parallelism, s.training, list[str]()
    if par.zero_stage and s.dp * s.cp == 1:  # ZeRO shards over dp x cp (costs/memory.py)
        out.append(f"zero_stage {par.zero_stage} with one data-parallel rank shards nothing")
    if par.zero_stage >= 2 and s.pp > 1:
        out.append(
            "ZeRO-2/3 with pipeline parallelism re-reduces gradients every micro-batch "
            "(as DeepSpeed warns); ZeRO-1 is the usual pairing"
        )
    one_bucket = par.bucket_cap_MiB is None and s.dp * s.cp > 1 and par.zero_stage < 2
    if one_bucket and par.overlap_grad_reduce is False:
        out.append(
            "parallelism.overlap_grad_reduce = false changes nothing here: under framework torchtitan a "
            "chunk's gradients form one DDP bucket (torch DDP as plancast's runtime drives it), reduced "
            "after the backward either way; megatron-lm and deepspeed model bucketed reductions"
        )
    default = framework_defaults(par.framework, dtype=t.dtype, dp=max(s.dp, 1))["grad_accumulation_fp32"]
    if s.amp_master_params and t.grad_accumulation_fp32 != default:
        out.append(
            f"training.grad_accumulation_fp32 = {str(t.grad_accumulation_fp32).lower()} changes nothing "
            "under framework torchtitan: its gradients are fp32 like its parameters (autocast and FSDP2 "
            "keep fp32 master weights)"
        )
    return out
