"""Cross-field checks of mixture-of-experts models and expert / context parallel plans.

Each problem names its key path and the fix, as the dense checks in validation.py do; they are
returned as ``PlanProblem`` (path, message) and validation.check_plan reports them with the rest.
"""

from __future__ import annotations

from plancast.simulator.catalog.frameworks import schedule_warnings
from plancast.simulator.scenario import Scenario
from plancast.simulator.scenario_moe import DROPLESS_IMBALANCE
from plancast.simulator.schedules import PlanProblem


def model_moe_problems(s: Scenario) -> list[PlanProblem]:
    """MoE keys that contradict each other or the model's shape."""
    m, out = s.model, list[PlanProblem]()
    if not m.is_moe:
        return out
    if m.num_experts_per_tok > m.num_experts:
        out.append(
            PlanProblem(
                "model.num_experts_per_tok",
                f"{m.num_experts_per_tok} exceeds num_local_experts ({m.num_experts}); each token "
                "visits at most every expert once: lower it or add experts",
            )
        )
    if m.first_k_dense_replace > m.num_hidden_layers:
        out.append(
            PlanProblem(
                "model.first_k_dense_replace",
                f"{m.first_k_dense_replace} exceeds num_hidden_layers ({m.num_hidden_layers}); "
                "use at most the number of layers (or unset num_local_experts for a dense model)",
            )
        )
    if m.expert_ffn_size % s.etp:
        out.append(
            PlanProblem(
                "model.moe_intermediate_size",
                f"{m.expert_ffn_size} is not divisible by the expert-tensor-parallel degree ({s.etp}); "
                "experts are split column-wise over parallelism.expert_tensor_parallel_degree (default "
                "tensor_parallel_degree, as Megatron-Core's expert_tensor_parallel_size)",
            )
        )
    return out


def plan_moe_cp_problems(s: Scenario) -> list[PlanProblem]:
    """Expert- and context-parallel degrees that the model, batch or data-parallel degree cannot take
    (called once the degrees multiply to the world size)."""
    m, ep, cp, out = s.model, s.ep, s.cp, list[PlanProblem]()
    if ep > 1 and not m.is_moe:
        out.append(
            PlanProblem(
                "parallelism.expert_parallel_degree",
                f"{ep} needs a mixture-of-experts model (model.num_local_experts > 0); set it to 1",
            )
        )
    folded = s.parallelism.expert_tensor_parallel_degree is not None
    if folded:
        out += _folding_problems(s)
    if ep > 1 and not folded and s.dp % ep:
        out.append(
            PlanProblem(
                "parallelism.expert_parallel_degree",
                f"{ep} does not divide the data-parallel degree ({s.dp}); expert parallelism is carved "
                "out of data parallelism (Megatron-Core, torchtitan): pick a divisor of dp, or fold it over "
                "tp x cp x dp with parallelism.expert_tensor_parallel_degree (e.g. 1)",
            )
        )
    if ep > 1 and m.is_moe and m.num_experts % ep:
        out.append(
            PlanProblem(
                "parallelism.expert_parallel_degree",
                f"{ep} does not divide model.num_local_experts ({m.num_experts}); every expert-parallel "
                "rank holds the same number of experts: pick a divisor of the expert count",
            )
        )
    seq = s.training.seq_len
    if cp > 1 and seq % (2 * cp):
        out.append(
            PlanProblem(
                "training.seq_len",
                f"{seq} is not divisible by 2 * context_parallel_degree = {2 * cp}; the sequence is cut "
                "into 2 * cp chunks (causal load balance): use a multiple of it",
            )
        )
    elif cp > 1 and s.parallelism.sequence_parallel and (seq // cp) % s.tp:
        out.append(
            PlanProblem(
                "training.seq_len",
                f"{seq} / cp = {seq // cp} tokens per context-parallel rank is not divisible by "
                f"tensor_parallel_degree ({s.tp}) for sequence parallel; use a multiple of {cp * s.tp}",
            )
        )
    return out


def _folding_problems(s: Scenario) -> list[PlanProblem]:
    """MoE parallel folding's rule (Megatron-Core parallel_state.initialize_model_parallel: the expert
    grid etp x ep x edp fills each pipeline stage's tp x cp x dp ranks)."""
    etp, ep, stage = s.etp, s.ep, s.tp * s.cp * s.dp
    if not s.model.is_moe:
        return [
            PlanProblem(
                "parallelism.expert_tensor_parallel_degree",
                f"{etp} needs a mixture-of-experts model (model.num_local_experts > 0); unset it",
            )
        ]
    if stage % (ep * etp):
        return [
            PlanProblem(
                "parallelism.expert_tensor_parallel_degree",
                f"expert_parallel_degree x expert_tensor_parallel_degree = {ep} x {etp} does not divide "
                f"tp x cp x dp = {stage}: the folded expert grid fills each pipeline stage's "
                "ranks; pick degrees whose product divides it",
            )
        ]
    return []


def _ep_comm_warnings(s: Scenario) -> list[str]:
    """Expert-parallel communication keys that have nothing to act on."""
    par, out = s.parallelism, list[str]()
    ep_keys = [
        ("moe_token_dispatcher", par.moe_token_dispatcher != "alltoall"),
        ("moe_overlap_ep_comm", par.moe_overlap_ep_comm),
    ]
    for key, set_away in ep_keys:
        if set_away and s.ep == 1:
            out.append(
                f"parallelism.{key} is ignored: expert_parallel_degree is 1, so no token leaves its rank"
            )
    if s.model.moe_capacity_factor is not None and s.training.moe_routing_imbalance != DROPLESS_IMBALANCE:
        out.append(
            "training.moe_routing_imbalance is ignored: model.moe_capacity_factor pads every expert to its "
            "capacity, which the experts compute whatever the routing"
        )
    return out


def _megatron_overlap_warnings(s: Scenario) -> list[str]:
    """EP overlap under framework megatron-lm where Megatron-Core refuses it (`megatron_overlap_refusals`)."""
    par = s.parallelism
    return megatron_overlap_refusals(
        par.framework, s.pp, par.pipeline_parallel_schedule, s.ep, par.moe_overlap_ep_comm,
        par.moe_token_dispatcher, s.training.recompute,
    )  # fmt: skip


def megatron_overlap_refusals(
    framework: str, pp: int, schedule: str, ep: int, overlap: bool, dispatcher: str, recompute: str
) -> list[str]:
    """EP overlap under framework megatron-lm where Megatron-Core refuses it (TransformerConfig's checks
    for overlap_moe_expert_parallel_comm, megatron/core/transformer/transformer_config.py): a pipeline
    without virtual stages, the allgather dispatcher, full recompute. Only under the schedules Megatron-Core
    runs it with (its combined 1F1B); a DualPipeV or zero-bubble plan is another framework's pairing.
    plancast still prices the overlap. The sweep reads it with a plan's fields (sweep_space.moe_choices)."""
    combined_1f1b = schedule in ("1F1B", "Interleaved1F1B")
    if not (overlap and framework == "megatron-lm" and ep > 1 and combined_1f1b):
        return []
    head = "parallelism.moe_overlap_ep_comm under framework megatron-lm: Megatron-Core refuses "
    out = []
    if pp > 1 and schedule != "Interleaved1F1B":
        out.append(
            f"{head}it with a pipeline unless it is interleaved (virtual_pipeline_model_parallel_size set); "
            'set pipeline_parallel_schedule = "Interleaved1F1B"'
        )
    if dispatcher == "allgather":
        out.append(f'{head}the allgather dispatcher; set moe_token_dispatcher = "alltoall" or "deepep"')
    if recompute == "full":
        out.append(f'{head}full recompute; set training.recompute = "selective" or "none"')
    return out


def framework_refusals(s: Scenario) -> list[str]:
    """What `s`'s framework does not run as given, among `plancast validate`'s warnings: a pipeline
    schedule it does not ship (catalog/frameworks.py), EP overlap where Megatron-Core refuses it
    (`_megatron_overlap_warnings`). plancast prices such a plan as it would run; `sweep --runnable` leaves
    it out."""
    par = s.parallelism
    schedule = schedule_warnings(par.framework, par.pipeline_parallel_schedule, s.pp)
    return schedule + _megatron_overlap_warnings(s)


def moe_cp_warnings(s: Scenario) -> list[str]:
    """Legal but probably unintended MoE / CP settings."""
    m, out = s.model, list[str]()
    moe_only = ("num_experts_per_tok", "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace")
    # set away from its default: a resolved scenario (`validate`, RUN/scenario.toml) writes every default
    defaults = {k: type(m).model_fields[k].default for k in moe_only}
    set_keys = [k for k in moe_only if k in m.model_fields_set and getattr(m, k) != defaults[k]]
    if not m.is_moe and set_keys:
        out.append(f"model.{set_keys[0]} is ignored: num_local_experts is unset, so the model is dense")
    if m.is_moe and m.first_k_dense_replace >= m.num_hidden_layers:
        out.append("model.first_k_dense_replace covers every layer: the model has no MoE layer")
    out += _ep_comm_warnings(s) + _megatron_overlap_warnings(s)
    if s.training.moe_expert_gemm is not None and not m.is_moe:
        out.append(
            "training.moe_expert_gemm is ignored: the model has no routed experts (num_local_experts is "
            "unset); remove the key"
        )
    if s.training.moe_fp8_quantize is not None and not (m.is_moe and s.training.fp8):
        out.append(
            "training.moe_fp8_quantize is ignored: it says how routed experts' GEMM inputs are quantized "
            "under training.fp8, and this plan has no FP8 expert GEMM (set training.fp8 on an MoE model, or "
            "remove the key)"
        )
    if s.cp > 1 and s.training.seq_len // s.cp < 1024:
        out.append(
            f"context_parallel_degree {s.cp} leaves {s.training.seq_len // s.cp} tokens per rank: the K/V "
            "exchange will outweigh the attention it splits (context parallelism pays off on long sequences)"
        )
    return out
