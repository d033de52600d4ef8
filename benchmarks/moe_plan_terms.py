"""Published MoE plans of one model on one cluster side by side (issue 31): what each plan does per rank
and step (micro-batches, MoE layers, local experts, rows per expert GEMM, per-expert GEMMs issued), the
terms the simulator predicts for it, and the measured-minus-predicted gap per MoE layer and micro-batch
and per expert GEMM issued. A diagnosis aid, not a model: nothing here feeds a prediction.

    python -m benchmarks.moe_plan_terms                    # the Megatron Qwen3-235B-A22B rows (256 H100)
    python -m benchmarks.moe_plan_terms --match deepseek   # any rows whose name contains the text
    python -m benchmarks.moe_plan_terms --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.published_data import MOE_RUNS, PublishedRun
from plancast.simulator.costs.host import rank_stages
from plancast.simulator.costs.moe import load_factor, rank_tokens
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

DEFAULT_MATCH = "qwen3-235b"
EXPERT_GEMMS_PER_LAYER = 6
"""GEMMs one local expert issues per MoE layer and micro-batch: forward gate/up and down, backward each
one's input gradient and weight gradient (Transformer Engine's GroupedLinear issues one cuBLAS GEMM per
expert and pass: common/gemm/cublaslt_gemm.cu, nvte_multi_stream_cublas_gemm)."""


@dataclass(frozen=True)
class PlanTerms:
    """One published row: its plan per rank and step, the predicted terms, and the gap."""

    run: str
    measured_s: float
    predicted_s: float
    microbatches: int  # per rank and step
    moe_layers: int  # on the pipeline rank holding the most
    local_experts: int
    routed_tokens: int  # tokens one rank routes per micro-batch
    expert_rows: float  # rows one local expert computes per micro-batch, load factor included
    layer_microbatches: int  # moe_layers x microbatches
    expert_gemms: int  # per-expert GEMMs issued per step on that rank
    compute_s: float
    exposed_s: dict[str, float]
    bubble_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1

    @property
    def gap_per_layer_ms(self) -> float:
        """Measured minus predicted step, per MoE layer and micro-batch, in ms."""
        return (self.measured_s - self.predicted_s) / self.layer_microbatches * 1e3

    @property
    def gap_per_expert_gemm_us(self) -> float:
        """Measured minus predicted step, per expert GEMM issued, in microseconds."""
        return (self.measured_s - self.predicted_s) / self.expert_gemms * 1e6


def moe_layers_per_rank(s: Scenario) -> int:
    """MoE layers on the pipeline rank that holds the most (its virtual stages' layers, as placed)."""
    split = s.layer_split
    starts = [sum(split[:v]) for v in range(len(split))]
    counts = []
    for rank in range(s.pp):
        layers = (i for v in rank_stages(s, rank) for i in range(starts[v], starts[v] + split[v]))
        counts.append(sum(1 for i in layers if s.model.is_moe_layer(i)))
    return max(counts)


def plan_terms(run: PublishedRun) -> PlanTerms:
    from benchmarks.fit_published import run_scenario  # scipy: dev extra

    s = run_scenario(run)
    summary = simulate(s, events=False).summary
    m, t = s.model, s.training
    dp = s.world_size // (s.tp * s.pp * s.cp)
    microbatches = t.global_batch_size // (t.micro_batch_size * dp)
    layers = moe_layers_per_rank(s)
    local = m.num_experts // s.ep
    routed = rank_tokens(s)
    rows = s.ep * routed * m.num_experts_per_tok / m.num_experts * load_factor(m, t.moe_routing_imbalance)
    return PlanTerms(
        run.name,
        run.measured_step_time_s,
        summary["step_time_s"],
        microbatches,
        layers,
        local,
        routed,
        rows,
        layers * microbatches,
        layers * microbatches * local * EXPERT_GEMMS_PER_LAYER,
        summary["compute_time_s"],
        {k: round(v, 3) for k, v in summary["exposed_comm_s"].items()},
        summary["bubble_time_s"],
    )


def table(terms: list[PlanTerms]) -> str:
    head = (
        f"{'run':48} {'meas s':>7} {'pred s':>7} {'err':>7} {'mb':>4} {'lay':>4} {'E/ep':>4} {'rows':>6} "
        f"{'gemms':>7} {'gap/lay ms':>10} {'gap/gemm us':>11}  predicted terms (s)"
    )
    lines = [head]
    for p in terms:
        comm = " ".join(f"{k} {v:.2f}" for k, v in p.exposed_s.items())
        lines.append(
            f"{p.run:48} {p.measured_s:7.2f} {p.predicted_s:7.2f} {p.error:+7.1%} {p.microbatches:4d} "
            f"{p.moe_layers:4d} {p.local_experts:4d} {p.expert_rows:6.0f} {p.expert_gemms:7d} "
            f"{p.gap_per_layer_ms:10.2f} {p.gap_per_expert_gemm_us:11.1f}  compute {p.compute_s:.2f} "
            f"bubble {p.bubble_s:.2f} exposed {comm}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.moe_plan_terms", description=__doc__)
    parser.add_argument("--match", default=DEFAULT_MATCH, help="rows whose name contains this text")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    runs = [r for r in MOE_RUNS if args.match in r.name]
    if not runs:
        print(f"no MoE row's name contains {args.match!r}: --match takes part of a name in MOE_RUNS")
        return 2
    terms = [plan_terms(r) for r in runs]
    print(table(terms))
    if args.json:
        rows = [{**asdict(p), "error": p.error, "gap_per_layer_ms": p.gap_per_layer_ms} for p in terms]
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
