"""Accuracy against published measurements (../shared/reference/published_runs.md).

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
Table 5 (iteration time of 22B, 175B, 530B and 1T on A100 80GB, full recompute and sequence parallel
+ selective recompute), Table 4 (one 22B layer's forward/backward time) and Figure 1 (memory).

The compute-efficiency defaults (simulator.scenario.ComputeModel) were fitted on Table 4 only, so
Run: `python -m benchmarks.published_runs [--json]`.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

from plancast.simulator.costs.memory import GiB, model_state_bytes, rank_memory
from plancast.simulator.costs.params import stage_parameters
from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

# Table 3: model -> (preset, tp, pp, global batch, micro-batch, virtual stages)
TABLE3: dict[str, tuple[str, int, int, int, int, int]] = {
    "22B": ("megatron-22b", 8, 1, 4, 4, 1),
    "175B": ("gpt3-175b", 8, 8, 64, 1, 3),
    "530B": ("megatron-530b", 8, 35, 280, 1, 3),
    "1T": ("megatron-1t", 8, 64, 512, 1, 1),
}
# Table 5: measured iteration time (s): full recompute, SP + selective recompute.
TABLE5 = {"22B": (1.42, 1.10), "175B": (18.13, 13.75), "530B": (49.05, 37.83), "1T": (94.42, 71.49)}
# Table 4: one 22B layer, forward / backward (ms).
TABLE4 = {
    "no recompute": (False, "none", 7.7, 11.9),
    "sequence parallel only": (True, "none", 7.2, 11.8),
    "full recompute": (False, "full", 7.7, 19.5),
    "selective recompute": (False, "selective", 7.7, 13.2),
    "selective + sequence parallel": (True, "selective", 7.2, 13.1),
}
# Figure 1: GiB per GPU: parameters + optimizer, activations no recompute, activations SP + selective.
FIGURE1 = {
    "22B": (45.56, 59.25, 9.56),
    "175B": (45.56, 66.84, 12.35),
    "530B": (31.64, 114.02, 23.08),
    "1T": (32.96, 131.25, 26.56),
}


def korthikanti(model: str, *, sp: bool, recompute: str) -> Scenario:
    """The Table 3 configuration of `model` on DGX A100 nodes (Selene), fp16, DP 1, written as a user
    knows the run: shape, degrees, batch, recompute, sequence parallel, cluster and the framework."""
    preset, tp, pp, batch, micro, v = TABLE3[model]
    data: dict[str, Any] = {
        "model": {"preset": preset},
        "training": {
            "seq_len": 2048,
            "micro_batch_size": micro,
            "global_batch_size": batch,
            "dtype": "fp16",
            "recompute": recompute,
        },
        "parallelism": {
            "tensor_parallel_degree": tp,
            "pipeline_parallel_degree": pp,
            "pipeline_parallel_schedule": "Interleaved1F1B" if v > 1 else "1F1B",
            "virtual_stages_per_rank": v,
            "sequence_parallel": sp,
            "framework": "megatron-lm",
        },
        "cluster": {"preset": "dgx-a100-80gb", "num_nodes": tp * pp // 8},
    }
    return parse_scenario(data, f"korthikanti-{model}").scenario


def table5() -> list[dict[str, Any]]:
    rows = []
    for model, measured in TABLE5.items():
        for (label, sp, recompute), meas in zip(
            (("full recompute", False, "full"), ("SP + selective", True, "selective")), measured, strict=True
        ):
            pred = simulate(korthikanti(model, sp=sp, recompute=recompute), events=False).summary
            rows.append(
                {
                    "model": model,
                    "setup": label,
                    "measured_s": meas,
                    "predicted_s": pred["step_time_s"],
                    "error": pred["step_time_s"] / meas - 1,
                    "mfu": pred["mfu"],
                }
            )
    return rows


def table4() -> list[dict[str, Any]]:
    rows = []
    for label, (sp, recompute, fwd_ms, bwd_ms) in TABLE4.items():
        s = korthikanti("22B", sp=sp, recompute=recompute)
        cost = stage_costs(s, Topology.of(s).levels("tp"))[0]
        layer = next(g for g in cost.segments if g.part == "layer")
        fwd = (layer.forward_s + layer.tp_forward_s) * 1e3
        bwd = (layer.backward_input_s + layer.backward_weight_s + layer.tp_backward_s) * 1e3
        if recompute == "full":
            bwd += fwd
        rows.append(
            {
                "setup": label,
                "forward_ms": fwd_ms,
                "forward_pred_ms": fwd,
                "forward_error": fwd / fwd_ms - 1,
                "backward_ms": bwd_ms,
                "backward_pred_ms": bwd,
                "backward_error": bwd / bwd_ms - 1,
            }
        )
    return rows


def figure1() -> list[dict[str, Any]]:
    """Figure 1 plots parameters + optimizer per GPU as the model's total over the GPUs; activations of
    the first pipeline stage (the one holding the most micro-batches)."""
    rows = []
    for model, (states, acts_none, acts_sel) in FIGURE1.items():
        s = korthikanti(model, sp=False, recompute="none")
        stages = s.pp * s.vpp
        per_rank_params = [
            sum(
                stage_parameters(
                    s.model,
                    s.layer_split[c * s.pp + r],
                    first=c * s.pp + r == 0,
                    last=c * s.pp + r == stages - 1,
                    tp=s.tp,
                    pipelined=stages > 1,
                    vocab_tp=s.vocab_tp,
                )
                for c in range(s.vpp)
            )
            for r in range(s.pp)
        ]
        mean_params = statistics.fmean(per_rank_params)
        pred_states = (
            sum(model_state_bytes(mean_params, dp=1, zero_stage=0, dtype="fp16", grad_fp32=True)) / GiB
        )
        pred_none = rank_memory(s, 0).activations / GiB
        pred_sel = rank_memory(korthikanti(model, sp=True, recompute="selective"), 0).activations / GiB
        for label, meas, pred in (
            ("parameters + optimizer", states, pred_states),
            ("activations, no recompute", acts_none, pred_none),
            ("activations, SP + selective", acts_sel, pred_sel),
        ):
            rows.append(
                {
                    "model": model,
                    "quantity": label,
                    "measured_gib": meas,
                    "predicted_gib": pred,
                    "error": pred / meas - 1,
                }
            )
    return rows


def main() -> int:
    t5, t4, f1 = table5(), table4(), figure1()
    if "--json" in sys.argv:
        print(json.dumps({"table5": t5, "table4": t4, "figure1": f1}, indent=2))
        return 0
    print("Korthikanti et al. 2022, Table 5: iteration time (s)")
    print(f"{'model':6} {'setup':16} {'measured':>9} {'predicted':>10} {'error':>8} {'MFU':>6}")
    for r in t5:
        print(
            f"{r['model']:6} {r['setup']:16} {r['measured_s']:9.2f} {r['predicted_s']:10.2f} "
            f"{r['error']:+8.1%} {r['mfu']:6.1%}"
        )
    errors = [abs(r["error"]) for r in t5]
    print(
        f"MAPE {statistics.fmean(errors):.2%}, worst {max(errors):.2%} (Calculon: 3.65% mean, 8.9% worst)\n"
    )
    print("Table 4: one 22B layer (ms)")
    for r in t4:
        print(
            f"{r['setup']:30} fwd {r['forward_ms']:5.1f} pred {r['forward_pred_ms']:5.2f} "
            f"({r['forward_error']:+.1%})"
            f"  bwd {r['backward_ms']:5.1f} pred {r['backward_pred_ms']:5.2f} ({r['backward_error']:+.1%})"
        )
    print("\nFigure 1: memory per GPU (GiB)")
    for r in f1:
        print(
            f"{r['model']:6} {r['quantity']:28} {r['measured_gib']:8.2f} {r['predicted_gib']:8.2f} "
            f"{r['error']:+7.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
