"""training.attention_backend (simulator/scenario_attention.py): the attention kernel where the framework
alone does not name it. 'te' prices Transformer Engine's causal cuDNN kernel on any stack (NeMo AutoModel's
`backend.attn: te`), 'sdpa' the full count at attention_efficiency on any stack; unset keeps the
framework's choice (costs/attention.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.runtime.plan import PlanError, check_framework_behaviour
from plancast.simulator.costs.attention import CAUSAL_FRACTION
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.importers.megatron import from_megatron_args
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main


def _scenario(framework: str, backend: str | None, cluster: str = "dgx-h100-80gb") -> Scenario:
    training: dict[str, Any] = {
        "seq_len": 8192,
        "micro_batch_size": 1,
        "global_batch_size": 8,
        "flash_attention": True,
    }
    if backend is not None:
        training["attention_backend"] = backend
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "training": training,
        "parallelism": {"framework": framework},
        "cluster": {"preset": cluster},
    }
    return parse_scenario(data, framework).scenario


def _attention(s: Scenario) -> tuple[float, float | None]:
    (op,) = (op for op in layer_forward(Shape.of(s)) if op.name == "attention")
    return op.flops, op.rate


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def test_te_on_a_torchtitan_stack_is_the_causal_half_at_the_cudnn_rate_and_faster() -> None:
    """AutoModel's `backend.attn: te`: the kernel Megatron-LM runs, so the same op and a shorter step than
    the full count at FlashAttention-2's rate (0.35 of peak over s x s against 0.447 over half of it)."""
    titan, te = _scenario("torchtitan", None), _scenario("torchtitan", "te")
    (titan_flops, titan_rate), (te_flops, te_rate) = _attention(titan), _attention(te)
    assert te_flops == pytest.approx(CAUSAL_FRACTION * titan_flops)
    assert titan_rate is None and te_rate == pytest.approx(0.447, rel=2e-3)
    assert _attention(te) == _attention(_scenario("megatron-lm", None))
    assert _step_s(te) < _step_s(titan)


def test_sdpa_on_megatron_keeps_the_full_count_and_is_slower() -> None:
    megatron, sdpa = _scenario("megatron-lm", None), _scenario("megatron-lm", "sdpa")
    assert _attention(sdpa) == _attention(_scenario("torchtitan", None))
    assert _attention(sdpa)[1] is None
    assert _step_s(sdpa) > _step_s(megatron)


@pytest.mark.parametrize(("framework", "backend"), [("megatron-lm", "te"), ("torchtitan", "sdpa")])
def test_naming_the_frameworks_own_kernel_changes_nothing(framework: str, backend: str) -> None:
    assert _step_s(_scenario(framework, backend)) == _step_s(_scenario(framework, None))


def test_te_without_a_measured_fused_rate_keeps_the_full_count() -> None:
    """The A100 fit has no measured cuDNN rate (ComputeModel.fused_attention_efficiency None)."""
    assert _attention(_scenario("torchtitan", "te", "dgx-a100-80gb"))[1] is None


def test_an_unknown_backend_is_refused_naming_the_key() -> None:
    with pytest.raises(ScenarioError, match=r"training\.attention_backend"):
        _scenario("torchtitan", "flash3")


def test_the_runtime_refuses_te_attention_naming_the_key() -> None:
    s = _scenario("torchtitan", "te")
    with pytest.raises(PlanError, match=r"training\.attention_backend = 'te'.*'sdpa'"):
        check_framework_behaviour(s)


SMALL = (
    "--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --vocab-size 32000 --seq-length 8192 "
    "--micro-batch-size 1 --bf16"
)


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("fused", {"flash_attention": True, "attention_backend": "te"}),
        ("flash", {"flash_attention": True, "attention_backend": "sdpa"}),
        ("unfused", {"flash_attention": False}),
        ("local", {"flash_attention": False}),
        ("auto", {}),
    ],
)
def test_megatron_attention_backend_flag_is_read(flag: str, expected: dict[str, Any]) -> None:
    """Megatron-Core's --attention-backend (AttnBackend: flash, fused, unfused, local, auto)."""
    training = from_megatron_args(f"{SMALL} --attention-backend {flag}")["training"]
    assert {k: training[k] for k in ("flash_attention", "attention_backend") if k in training} == expected


def test_megatron_fused_backend_predicts_a_shorter_step_than_flash() -> None:
    """The imported flags price the kernel they name: cuDNN's causal half beats FlashAttention-2's count."""
    steps = []
    for flag in ("fused", "flash"):
        parts = from_megatron_args(f"{SMALL} --global-batch-size 8 --attention-backend {flag}")
        data = {k: parts[k] for k in ("model", "training", "parallelism")}
        data["parallelism"] = {**data["parallelism"], "framework": "megatron-lm"}
        data["cluster"] = {"preset": "dgx-h100-80gb"}
        steps.append(_step_s(parse_scenario(data, flag).scenario))
    assert steps[0] < steps[1]


def test_a_backend_without_flash_attention_is_refused_naming_both_keys(tmp_path: Path) -> None:
    """Without flash_attention the core is priced unfused: a backend there would change nothing, silently."""
    path = tmp_path / "s.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\n[training]\nseq_len = 8192\nmicro_batch_size = 1\n'
        'global_batch_size = 8\nflash_attention = false\nattention_backend = "te"\n'
        '[cluster]\npreset = "dgx-h100-80gb"\n'
    )
    code, _, err = cli_main("validate", str(path))
    assert code == 2, err
    assert "training.attention_backend" in err and "flash_attention = true" in err
    path.write_text(path.read_text().replace("flash_attention = false", "flash_attention = true"))
    assert cli_main("validate", str(path))[0] == 0
