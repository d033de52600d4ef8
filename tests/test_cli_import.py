"""`plancast import` end to end: real-shaped configs -> a scenario file -> `plancast simulate --json`.

The importer's notes go to stderr as warnings, never into the scenario (the scenario schema forbids
unknown keys, so a `warnings` entry in the file would make `simulate` reject it).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.cli_runner import cli_main, cli_subprocess

DATA = Path(__file__).parent / "data" / "importers"

# (kind, file, extra flags, what the imported scenario must hold, a warning it must print)
CASES = [
    (
        "hf",
        "llama3-8b.config.json",
        [],
        {"model": {"hidden_size": 4096, "num_key_value_heads": 8, "vocab_size": 128256}},
        None,
    ),
    (
        "hf",
        "mistral-7b.config.json",
        [],
        {"model": {"intermediate_size": 14336, "vocab_size": 32000, "sliding_window": 4096}},
        None,
    ),
    (
        "hf",
        "qwen2-7b.config.json",
        [],
        {"model": {"hidden_size": 3584, "num_key_value_heads": 4, "vocab_size": 152064}},
        "query/key/value biases",
    ),
    ("hf", "gpt2.config.json", [], {"model": {"hidden_size": 768, "tie_word_embeddings": True}}, None),
    (
        "hf",
        "mixtral-8x7b.config.json",
        [],
        {"model": {"num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02}},
        None,
    ),
    (
        "hf",
        "qwen1.5-moe-a2.7b.config.json",
        [],
        {
            "model": {
                "num_local_experts": 60,
                "num_experts_per_tok": 4,
                "moe_intermediate_size": 1408,
                "n_shared_experts": 4,
            }
        },
        "query/key/value biases",
    ),
    (
        "hf",
        "deepseek-v3.config.json",
        [],
        {
            "model": {
                "num_local_experts": 256,
                "num_experts_per_tok": 8,
                "moe_intermediate_size": 2048,
                "n_shared_experts": 1,
                "first_k_dense_replace": 3,
                "kv_lora_rank": 512,
                "q_lora_rank": 1536,
                "qk_rope_head_dim": 64,
                "num_nextn_predict_layers": 1,
                "n_group": 8,
                "topk_group": 4,
            }
        },
        None,
    ),
    (
        "hf",
        "gpt-oss-120b.config.json",
        [],
        {
            "model": {
                "head_dim": 64,
                "num_local_experts": 128,
                "sliding_window": 128,
                "attention_sinks": True,
                "moe_expert_bias": True,
            }
        },
        "attention sinks' parameters (one logit a head)",
    ),
    (
        "megatron",
        "gpt3-175b.megatron.sh",
        ["--num-nodes", "24"],
        {
            "parallelism": {"tensor_parallel_degree": 8, "pipeline_parallel_degree": 8, "zero_stage": 1},
            "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 24},
        },
        "ignored arguments plancast does not model",
    ),
    (
        "deepspeed",
        "zero3.deepspeed.json",
        ["--model", str(DATA / "llama3-8b.config.json")],
        {
            "parallelism": {"zero_stage": 3, "data_parallel_degree": 64},
            "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 8},
        },
        "ignored keys plancast does not model",
    ),
    (
        "deepspeed",
        "zero3.deepspeed.json",
        ["--model", "llama3-8b"],
        {"model": {"preset": "llama3-8b"}, "training": {"dtype": "bf16", "recompute": "full"}},
        None,
    ),
]


def _contains(table: dict[str, object], expected: dict[str, object]) -> bool:
    return all(
        _contains(table[k], v) if isinstance(v, dict) else table.get(k) == v  # type: ignore[arg-type]
        for k, v in expected.items()
    )


@pytest.mark.parametrize(
    ("kind", "name", "flags", "expected", "warning"), CASES, ids=[f"{c[0]}-{c[1]}-{len(c[2])}" for c in CASES]
)
def test_import_then_simulate(
    tmp_path: Path, kind: str, name: str, flags: list[str], expected: dict[str, object], warning: str | None
) -> None:
    scenario = tmp_path / "imported.toml"
    code, stdout, stderr = cli_main("import", kind, str(DATA / name), "-o", str(scenario), *flags)
    assert code == 0, stderr
    assert stdout == ""
    text = scenario.read_text()
    assert text.startswith(f"# imported from {name} by `plancast import {kind}`")
    data = tomllib.loads(text)
    assert "warnings" not in data
    assert _contains(data, expected), data
    if warning is not None:
        assert "warning: " in stderr and warning in stderr
    code, stdout, stderr = cli_main("simulate", str(scenario), "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["step_time_s"] > 0
    assert summary["num_parameters"] > 0


def test_imported_llama3_has_the_catalog_preset_parameter_count(tmp_path: Path) -> None:
    """The HF import and the catalog's llama3-8b are one model: 8.03B parameters (model card)."""
    imported = tmp_path / "llama.toml"
    assert cli_main("import", "hf", str(DATA / "llama3-8b.config.json"), "-o", str(imported))[0] == 0
    preset = tmp_path / "preset.toml"
    preset.write_text('[model]\npreset = "llama3-8b"\n[cluster]\npreset = "dgx-a100-80gb"\n')
    counts = [
        json.loads(cli_main("simulate", str(p), "--json")[1])["num_parameters"] for p in (imported, preset)
    ]
    assert counts[0] == counts[1]
    assert counts[0] == pytest.approx(8.03e9, rel=0.005)


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [  # model cards: Mixtral 46.7B total / 12.9B active; Qwen1.5-MoE 14.3B / 2.7B; DeepSeek-V3 671B / 37B
        ("mixtral-8x7b.config.json", 46.7e9, 12.9e9),
        ("qwen1.5-moe-a2.7b.config.json", 14.3e9, 2.7e9),
        ("deepseek-v3.config.json", 671e9, 37e9),
    ],
)
def test_imported_moe_counts_all_experts_and_mfu_counts_the_active_ones(
    tmp_path: Path, name: str, total: float, active: float
) -> None:
    """num_parameters counts every expert; model FLOPs per token are those of the active parameters
    (6 x active within -15%/+25%: the input embedding's share of "active" has no FLOPs, attention's come
    on top, MLA is modelled as MHA)."""
    imported = tmp_path / "moe.toml"
    assert cli_main("import", "hf", str(DATA / name), "-o", str(imported))[0] == 0
    code, stdout, stderr = cli_main("simulate", str(imported), "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["num_parameters"] == pytest.approx(total, rel=0.04)
    flops_per_token = summary["model_tflops_per_gpu"] * 1e12 * summary["world_size"] / summary["tokens_per_s"]
    assert 0.85 * 6 * active <= flops_per_token <= 1.25 * 6 * active  # 6 x total would be 3.6-18x more
    assert "ep" in summary["exposed_comm_s"]


def test_megatron_without_num_nodes_sizes_the_cluster_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "gpt3.toml"
    code, _, stderr = cli_main("import", "megatron", str(DATA / "gpt3-175b.megatron.sh"), "-o", str(out))
    assert code == 0, stderr
    assert tomllib.loads(out.read_text())["cluster"] == {"preset": "dgx-a100-80gb", "num_nodes": 8}
    assert "8 nodes of dgx-a100-80gb for the plan's 64 GPUs (data parallel 1); pass --num-nodes" in stderr


def test_import_to_stdout_is_only_the_scenario() -> None:
    code, stdout, stderr = cli_main("import", "hf", str(DATA / "qwen2-7b.config.json"))
    assert code == 0
    assert tomllib.loads(stdout)["model"]["vocab_size"] == 152064
    assert "warning:" in stderr and "warning" not in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["deepspeed", str(DATA / "zero3.deepspeed.json")],
            "--model: a DeepSpeed config does not describe the model; pass --model",
        ),
        (
            ["deepspeed", str(DATA / "zero3.deepspeed.json"), "--model", "llama3-8bb"],
            "model.preset: unknown model preset 'llama3-8bb'",
        ),
        (
            ["hf", str(DATA / "llama3-8b.config.json"), "--model", "llama3-8b"],
            "--model: only `import deepspeed`",
        ),
        (
            ["deepspeed", str(DATA / "malformed.deepspeed.json"), "--model", "llama3-8b"],
            "malformed JSON at line 3",
        ),
        (
            ["hf", str(DATA / "llama-with-experts.config.json")],
            "num_local_experts: a mixture-of-experts model (8 experts) of model_type 'llama'",
        ),
        (["nemo", str(DATA / "gpt2.config.json")], "unknown import kind 'nemo'"),
        (["hf", str(DATA / "missing.json")], "file not found"),
        (["hf", str(DATA / "gpt2.config.json"), "--cluster", "dgx-a100"], "did you mean"),
    ],
    ids=[
        "ds-no-model",
        "ds-unknown-preset",
        "hf-with-model",
        "ds-malformed",
        "moe",
        "kind",
        "missing",
        "cluster",
    ],
)
def test_import_bad_input_is_exit_2_with_the_reason(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "never.toml"
    code, stdout, stderr = cli_main("import", *args, "-o", str(out))
    assert code == 2
    assert stderr.startswith("error: ") and message in stderr
    assert "Traceback" not in stderr and stdout == ""
    assert not out.exists()


def test_import_in_a_real_process(tmp_path: Path) -> None:
    out = tmp_path / "qwen.toml"
    result = cli_subprocess("import", "hf", str(DATA / "qwen2-7b.config.json"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert cli_subprocess("validate", str(out)).returncode == 0


def test_import_hf_names_every_key_it_does_not_read(tmp_path: Path) -> None:
    """Nothing is dropped silently: an unknown key is a warning, a head_dim that is not hidden / heads is
    imported; the shipped real configs read without a warning."""
    config = json.loads((DATA / "llama3-8b.config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "foo_bar": 1, "learning_rate": 3e-4, "head_dim": 64}))
    code, out, err = cli_main("import", "hf", str(path))
    assert code == 0, err
    assert "not read: foo_bar, learning_rate" in err and "head_dim" not in err
    assert tomllib.loads(out)["model"]["head_dim"] == 64
    for real in sorted(DATA.glob("*.config.json")):
        code, _, err = cli_main("import", "hf", str(real))
        assert "not read" not in err, (real.name, err)


LLAMA_MEGATRON = (
    "torchrun pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 "
    "--tensor-model-parallel-size 2 --vocab-size 128256 "
)
FUSION_CASES = {
    "default": ("", "fused", ""),
    "partly": ("--no-rope-fusion --no-bias-swiglu-fusion", "fused", "RoPE, SwiGLU unfused but RMSNorm fused"),
    "all": (
        "--no-rope-fusion --no-bias-swiglu-fusion --transformer-impl local",
        "eager",
        "elementwise 'eager'",
    ),
}


def test_megatron_fusion_flags_set_elementwise_and_move_the_step(tmp_path: Path) -> None:
    """Megatron-LM's fusion flags reach training.elementwise through `plancast import megatron`, and the
    eager scenario simulates slower than the fused one."""
    steps = {}
    for name, (flags, elementwise, note) in FUSION_CASES.items():
        script, out = tmp_path / f"{name}.sh", tmp_path / f"{name}.toml"
        script.write_text(LLAMA_MEGATRON + flags + "\n")
        code, _, stderr = cli_main("import", "megatron", str(script), "--num-nodes", "1", "-o", str(out))
        assert code == 0, stderr
        assert note in stderr
        assert tomllib.loads(out.read_text())["training"].get("elementwise", "fused") == elementwise
        code, stdout, stderr = cli_main("simulate", str(out), "--json")
        assert code == 0, stderr
        steps[name] = json.loads(stdout)["step_time_s"]
    assert steps["default"] == steps["partly"] < steps["all"]


def test_megatron_distributed_optimizer_flag_sets_the_key_and_shortens_the_step(tmp_path: Path) -> None:
    """`--use-distributed-optimizer` imports as zero_stage 1 with parallelism.distributed_optimizer: the
    gradients reduce-scattered and the parameters gathered once (megatron/core/distributed/
    param_and_grad_buffer.py), shorter than ZeRO-1 as DDP's all-reduce and per-owner broadcasts."""
    args = (
        "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --vocab-size 32000 --seq-length 2048 "
        "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 "
        "--tensor-model-parallel-size 8 --overlap-grad-reduce"
    )
    steps = {}
    for flag in ("", " --use-distributed-optimizer"):
        (tmp_path / "args.sh").write_text(args + flag + "\n")
        scenario = tmp_path / f"imported{len(flag)}.toml"
        code, _, stderr = cli_main(
            "import", "megatron", str(tmp_path / "args.sh"), "-o", str(scenario), "--num-nodes", "2"
        )
        assert code == 0, stderr
        par = tomllib.loads(scenario.read_text())["parallelism"]
        assert par.get("distributed_optimizer", False) is bool(flag)
        assert par["zero_stage"] == (1 if flag else 0)
        code, stdout, stderr = cli_main("simulate", str(scenario), "--json")
        assert code == 0, stderr
        steps[flag] = json.loads(stdout)["step_time_s"]
    assert steps[" --use-distributed-optimizer"] < steps[""]
