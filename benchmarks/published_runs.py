"""Accuracy against published measurements (../shared/reference/published_runs.md).

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
Table 5 (iteration time of 22B, 175B, 530B and 1T on A100 80GB, full recompute and sequence parallel
+ selective recompute), Table 4 (one 22B layer's forward/backward time) and Figure 1 (memory).

The compute-efficiency defaults (simulator.cluster.ComputeModel) were fitted on Table 4 only, so
Run: `python -m benchmarks.published_runs [--json]`.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

from benchmarks.published_data import FP8_RUNS, MOE_AND_LONG_CONTEXT_RUNS, MOE_RUNS, RUNS, PublishedRun
from benchmarks.published_groups import print_groups, score_groups
from benchmarks.results_io import error_figures, write_result
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


# Sources whose numbers the default constants (ComputeModel, the NVLink efficiency) were fitted on:
# Korthikanti et al. Tables 4 and 5 (benchmarks/fit_published.py). Every other source is held out
# of that fit already; Korthikanti's rows are scored held out by refitting on another source.
FITTED_ON = frozenset({"korthikanti2022"})
# The refit that scores Korthikanti held out: Narayanan et al. 2021 Table 1 up to 145B (A100, Megatron-LM).
REFIT_SOURCE, REFIT_MAX_S = "narayanan2021", 25.0


def _diagnosis(run: PublishedRun, s: Scenario, error: float) -> str:
    """One sentence on why a row is off by more than 10%."""
    direction = "slower" if error > 0 else "faster"
    gpu = s.cluster.gpu
    if run.framework == "other" and s.pp > 1 and error > 0:
        return (
            f"{run.framework} stack's own pipeline schedule (tuned micro-batch rounds, balanced end stages) "
            f"leaves less bubble than interleaved 1F1B with the v assumed here; predicted {direction}."
        )
    if gpu.name.startswith("H100") and error < 0:
        capped = (
            f", and these ran at a {gpu.board_power_W:g} W limit (clock modelled at {gpu.clock_fraction:.2f})"
            if gpu.clock_fraction < 1
            else ""
        )
        return (
            "H100: GEMMs at the burst rate of a short check (0.73 of peak; the kept H100 runs held "
            "1635-1898 MHz), while a long job at the power limit settles lower (a soaked H200 keeps 0.848 "
            f"of its burst GEMM rate, docs/calibration.md){capped}; predicted faster than measured."
        )
    if s.parallelism.zero_stage >= 2 and s.dp > s.cluster.gpus_per_node:
        if s.parallelism.zero_collective_algorithm == "ring":
            return (
                "DeepSpeed ZeRO-3 over nodes: per-weight gathers at one NIC's rate, one weight ahead; the "
                "largest gap is at the fewest GPUs, where compute and gathers are of one size and the "
                f"measured step lies between their maximum and their sum; predicted {direction}."
            )
        return (
            "FSDP over nodes: gathers and reduce-scatters at NCCL's per-NIC rate on a network the source "
            f"does not state (DGX assumed), prefetched one unit ahead; predicted {direction}."
        )
    if run.framework == "fsdp":
        return (
            "Composer's FSDP1 (flat parameters, rate-limited all-gathers), modelled as torchtitan's "
            f"FSDP2; predicted {direction} than measured."
        )
    if run.framework not in ("megatron-lm", "torchtitan", "deepspeed"):
        return f"{run.framework} stack, modelled as torchtitan; predicted {direction} than measured."
    return f"per-GPU work is small, so fixed per-op and host costs dominate; predicted {direction}."


def score_runs() -> list[dict[str, Any]]:
    """Every dense published run: in-sample (default constants) and held-out (refit without its source)."""
    from benchmarks.fit_published import fit_on_runs, run_scenario, with_params  # scipy: dev extra

    refit = [r for r in RUNS if r.source == REFIT_SOURCE and r.measured_step_time_s <= REFIT_MAX_S]
    refit = [r for r in refit if r.parallelism.get("zero_stage", 0) == 0]
    held_params = fit_on_runs(refit)
    rows = []
    for run in RUNS:
        s = run_scenario(run)
        pred = simulate(s, events=False).summary["step_time_s"]
        held = pred
        if run.source in FITTED_ON:
            held = simulate(with_params(s, held_params), events=False).summary["step_time_s"]
        error, held_error = pred / run.measured_step_time_s - 1, held / run.measured_step_time_s - 1
        rows.append(
            {
                "source": run.source,
                "run": run.name,
                "framework": run.framework,
                "gpus": run.num_gpus,
                "measured_s": run.measured_step_time_s,
                "predicted_s": pred,
                "error": error,
                "held_out_s": held,
                "held_out_error": held_error,
                "diagnosis": _diagnosis(run, s, held_error) if abs(held_error) > 0.10 else "",
            }
        )
    return rows


def score_memory() -> list[dict[str, Any]]:
    """Peak memory of every run whose source reports it (benchmarks/published_memory.py), predicted as the
    statistic the source reports, allocated or reserved (never fitted: no constant of the memory model
    comes from these rows)."""
    from benchmarks.published_memory import score_memory_rows

    return score_memory_rows()


def print_memory(rows: list[dict[str, Any]]) -> None:
    print("Peak memory per GPU where the source reports it (GiB; each row's own statistic), held out")
    print(f"{'source':18} {'run':46} {'stat':5} {'measured':>9} {'pred':>7} {'error':>7}  fits")
    for r in rows:
        print(
            f"{r['source'][:18]:18} {r['run'][:46]:46} {r['metric'][:5]:5} {r['measured_gib']:9.1f} "
            f"{r['predicted_gib']:7.1f} {r['error']:+7.1%}  {'yes' if r['fits_in_memory'] else 'NO'}"
        )
    mape, worst = _mape([r["error"] for r in rows])
    sources = len({r["source"] for r in rows})
    print(f"{len(rows)} rows, {sources} sources: MAPE {mape:.1%} (worst {worst:.1%})\n")


def score_moe_runs() -> list[dict[str, Any]]:
    """The expert- and context-parallel rows (MOE_AND_LONG_CONTEXT_RUNS) and the FP8 ones (FP8_RUNS),
    scored as the dense ones. None of their sources was fitted on, so the default constants score them
    held out."""
    from benchmarks.fit_published import run_scenario  # scipy: dev extra

    rows = []
    moe = {r.name for r in MOE_RUNS}
    for run in (*MOE_RUNS, *(r for r in (*MOE_AND_LONG_CONTEXT_RUNS, *FP8_RUNS) if r.name not in moe)):
        s = run_scenario(run)
        summary = simulate(s, events=False).summary
        pred = summary["step_time_s"]
        rows.append(
            {
                "source": run.source,
                "run": run.name,
                "gpus": run.num_gpus,
                "ep": s.ep,
                "cp": s.cp,
                "measured_s": run.measured_step_time_s,
                "predicted_s": pred,
                "error": pred / run.measured_step_time_s - 1,
                "exposed_ep_s": summary["exposed_comm_s"].get("ep", 0.0),
                "exposed_cp_s": summary["exposed_comm_s"].get("cp", 0.0),
                "fits_in_memory": summary["fits_in_memory"],
                "moe": run.name in moe,
                "assumptions": list(run.assumptions),
            }
        )
    return rows


def print_moe_scores(rows: list[dict[str, Any]]) -> None:
    print("Mixture-of-experts, long-context and FP8 runs (expert / context parallel, training.fp8), held out")
    print(
        f"{'source':22} {'run':34} {'ep':>3} {'cp':>3} {'meas s':>8} {'pred s':>8} {'error':>8} {'ep s':>7}"
    )
    for r in rows:
        print(
            f"{r['source'][:22]:22} {r['run'][:34]:34} {r['ep']:3d} {r['cp']:3d} {r['measured_s']:8.2f} "
            f"{r['predicted_s']:8.2f} {r['error']:+8.1%} {r['exposed_ep_s']:7.2f}"
        )
    mape, worst = _mape([r["error"] for r in rows])
    print(f"{len(rows)} rows: MAPE {mape:.1%} (worst {worst:.1%})")
    moe = [r for r in rows if r["moe"]]
    # no constant was fitted on any MoE row, so each source is held out as it stands
    mape, worst = _mape([r["error"] for r in moe])
    sources = len({r["source"] for r in moe})
    print(
        f"MoE rows: {len(moe)}, {sources} sources: leave-one-source-out MAPE {mape:.1%} (worst {worst:.1%})\n"
    )


def _mape(errors: list[float]) -> tuple[float, float]:
    return statistics.fmean(abs(e) for e in errors), max(abs(e) for e in errors)


def print_scores(rows: list[dict[str, Any]]) -> None:
    print(
        "Published runs: in-sample (default constants) and held out (constants refitted without the source)"
    )
    print(
        "The default constants were fitted on korthikanti2022 (Tables 4 and 5) only, so every other\n"
        "source is held out as it stands; korthikanti2022 is scored with the constants refitted on "
        f"{REFIT_SOURCE} Table 1 (runs <= {REFIT_MAX_S:g} s)."
    )
    print(f"{'source':18} {'run':44} {'meas s':>8} {'pred s':>8} {'in':>7} {'held':>7}")
    for r in rows:
        print(
            f"{r['source'][:18]:18} {r['run'][:44]:44} {r['measured_s']:8.2f} {r['predicted_s']:8.2f} "
            f"{r['error']:+7.1%} {r['held_out_error']:+7.1%}"
        )
        if r["diagnosis"]:
            print(f"{'':19}-> {r['diagnosis']}")
    print(f"\n{'source':20} {'rows':>4} {'in-sample MAPE':>15} {'held-out MAPE':>14} {'held-out worst':>15}")
    for source in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == source]
        in_m, _ = _mape([r["error"] for r in mine])
        held_m, held_w = _mape([r["held_out_error"] for r in mine])
        print(f"{source:20} {len(mine):4d} {in_m:15.1%} {held_m:14.1%} {held_w:15.1%}")
    in_m, in_w = _mape([r["error"] for r in rows])
    held_m, held_w = _mape([r["held_out_error"] for r in rows])
    sources = len({r["source"] for r in rows})
    print(
        f"\n{len(rows)} rows, {sources} sources: in-sample MAPE {in_m:.1%} (worst {in_w:.1%}); "
        f"leave-one-source-out MAPE {held_m:.1%} (worst {held_w:.1%})\n"
    )


def save_figures(
    scores: list[dict[str, Any]],
    moe: list[dict[str, Any]],
    hardware: dict[str, list[dict[str, Any]]],
    memory: list[dict[str, Any]],
) -> None:
    """The held-out figures the README's table quotes (benchmarks/results/published_runs.json): the dense
    rows left out one source at a time, the MoE validation rows (no constant fitted on any), the FP8 rows
    (per-tensor, MXFP8, NVFP4), the Blackwell + AMD rows (benchmarks/published_groups.py) and the peak
    memory of the rows that report it (benchmarks/published_memory.py)."""
    write_result(
        "published_runs",
        "python -m benchmarks.published_runs",
        {
            "dense": error_figures([r["held_out_error"] for r in scores]),
            "moe": error_figures([r["error"] for r in moe if r["moe"]]),
            "fp8": error_figures([r["error"] for r in hardware["fp8"]]),
            "blackwell_amd": error_figures([r["error"] for r in hardware["blackwell_amd"]]),
            "memory": error_figures([r["error"] for r in memory]),
        },
    )


def main() -> int:
    t5, t4, f1 = table5(), table4(), figure1()
    scores, moe, memory = score_runs(), score_moe_runs(), score_memory()
    hardware = score_groups()  # issue 32: Blackwell + AMD, FP8 (benchmarks/published_groups.py)
    if "--json" in sys.argv:
        tables = {
            "runs": scores,
            "moe_runs": moe,
            **hardware,
            "memory": memory,
            "table5": t5,
            "table4": t4,
            "figure1": f1,
        }
        print(json.dumps(tables, indent=2))
        return 0
    print_scores(scores)
    print_moe_scores(moe)
    print_groups(hardware)
    save_figures(scores, moe, hardware, memory)
    print_memory(memory)
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
