"""`plancast sweep` needs the batch it plans for, and says which constraint emptied its space."""

from __future__ import annotations

from pathlib import Path

from tests.cli_runner import cli_main

LLAMA3_CONFIG = str(Path(__file__).parent / "data" / "importers" / "llama3-8b.config.json")


def _imported(tmp_path: Path) -> Path:
    """The getting-started path: a Hugging Face config imported as it is (no [training] table)."""
    path = tmp_path / "llama3.toml"
    code, _, err = cli_main("import", "hf", LLAMA3_CONFIG, "-o", str(path))
    assert code == 0, err
    assert "[training]" not in path.read_text()
    return path


def test_sweep_refuses_an_imported_model_whose_batch_was_never_set(tmp_path: Path) -> None:
    """Before: `no plan of 0 fits in 80 GiB per GPU` (exit 1) at 1,024 GPUs, a batch-8 plan at 64."""
    path = _imported(tmp_path)
    for gpus in ("1024", "64", "64,128"):
        code, out, err = cli_main("sweep", str(path), "--gpus", gpus)
        assert code == 2, (gpus, out, err)
        assert "training.global_batch_size" in err and "training.seq_len" in err, err
        assert "Traceback" not in out + err and "fits" not in err


def test_sweep_names_only_the_batch_key_left_unset(tmp_path: Path) -> None:
    path = _imported(tmp_path)
    path.write_text(path.read_text() + "\n[training]\nseq_len = 4096\n")
    code, _, err = cli_main("sweep", str(path), "--gpus", "64")
    assert code == 2
    assert "training.global_batch_size" in err and "training.seq_len not set" not in err, err


def test_an_empty_space_names_the_batch_not_memory(tmp_path: Path) -> None:
    """8 sequences of 2,048 tokens cannot be split over 4,096 GPUs by any tp x pp x cp the model
    allows (tp <= 8 heads' divisors, pp <= 32 layers, cp needs 4,096 tokens per rank: dp >= 16): the
    message says it is the batch."""
    path = _imported(tmp_path)
    path.write_text(path.read_text() + "\n[training]\nglobal_batch_size = 8\nseq_len = 2048\n")
    code, _, err = cli_main("sweep", str(path), "--gpus", "4096")
    assert code == 1, err
    assert "training.global_batch_size = 8 is not a multiple" in err and "GiB" not in err, err


def test_an_empty_space_from_memory_still_names_memory(tmp_path: Path) -> None:
    path = _imported(tmp_path)
    path.write_text(path.read_text() + "\n[training]\nglobal_batch_size = 64\nseq_len = 2048\n")
    code, _, err = cli_main("sweep", str(path), "--gpus", "8", "--max-memory-gib", "1")
    assert code == 1, err
    assert "fits in 1 GiB per GPU (memory): shard over more GPUs (--gpus 16 or more)" in err, err
