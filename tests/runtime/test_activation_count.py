"""The trainer counts saved activations in its first step only (runtime/memory.py): later, timed steps run
without autograd's saved-tensor hooks, whose Python cost would be measured as compute, and the peak
the first step counted stands (every step has the same shapes and schedule)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from plancast.runtime.memory import ActivationAccount
from plancast.runtime.trainer import Trainer
from tests.distributed.checks import load, tiny_scenario


def test_activations_are_counted_once_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    track = ActivationAccount.track

    def counting(self: ActivationAccount, params: Any) -> Any:
        calls.append(1)
        return track(self, params)

    monkeypatch.setattr(ActivationAccount, "track", counting)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        trainer = Trainer(load(tiny_scenario(1)), 0, 1, torch.device("cpu"), instrument=False)
        trainer.step(0)
        peak = trainer.activations.peak
        trainer.step(1)
        trainer.step(2)
    finally:
        dist.destroy_process_group()
    assert len(calls) == 1
    assert peak > 0 and trainer.activations.peak == peak
    assert trainer.memory()["activations"] == peak
