"""The table `python -m benchmarks.gpu_ops` prints: per op, measured and predicted forward and backward,
and what the measurement implies for the compute model's constants."""

from __future__ import annotations

from typing import Any


def _show(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _err(measured: float, pred: float) -> str:
    return f"{(pred - measured) / measured * 100:+6.1f}%" if measured > 0 else "    n/a"


def report(result: dict[str, Any]) -> None:
    r0, imp, cm = result, result["implied"], result["compute_model"]
    print(
        f"{r0['device']} (modelled as {r0['gpu']} of {r0['cluster']}), torch {r0['torch']}, {r0['shape']}, "
    )
    print(f"peak at the modelled clock {r0['peak_tflops_at_clock']:.0f} TFLOP/s")
    print(f"{'op':22} {'fwd ms':>9} {'pred':>9} {'err':>7} {'bwd ms':>9} {'pred':>9} {'err':>7}  note")
    for r in result["rows"]:
        note = ""
        if "efficiency_fwd" in r:
            note = f"{_show(r['efficiency_fwd'])} / {_show(r['efficiency_bwd'])} of peak"
        elif "bandwidth_fraction_fwd" in r:
            note = f"{_show(r['bandwidth_fraction_fwd'])} of HBM bandwidth (fwd)"
        fwd, bwd = (r["fwd_s"], r["pred_fwd_s"]), (r["bwd_s"], r["pred_bwd_s"])
        print(
            f"{r['op']:22} {fwd[0] * 1e3:9.3f} {fwd[1] * 1e3:9.3f} {_err(*fwd)} "
            f"{bwd[0] * 1e3:9.3f} {bwd[1] * 1e3:9.3f} {_err(*bwd)}  {note}"
        )
    print("GEMM sweep: " + ", ".join(f"{r['m']}^3 {r['efficiency']:.2f}" for r in result["gemm_sweep"]))
    attention = ", ".join(f"{b} {v:.3f}" for b, v in imp["attention_efficiency"].items())
    print(
        f"implied: isolated GEMM e_max {imp['matmul_efficiency_isolated']:.3f}, "
        f"F_half {imp['matmul_half_gflop']:.3f} GFLOP (model: {cm['matmul_efficiency']}, "
        f"{cm['matmul_half_gflop']}); attention fwd+bwd {attention} (model: {cm['attention_efficiency']}); "
        f"per tiny op {imp['op_overhead_us']:.1f} us (model: {cm['op_overhead_us']})"
    )
