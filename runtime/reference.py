"""The single-process reference: the whole model trained on the whole global batch.

A parallel run of the same scenario must reproduce its losses and parameters (fp32, deterministic):
the distributed tests compare against it. Gradients are the mean over all micro-batches of all
data-parallel ranks, exactly what DDP/FSDP averaging of 1/m-scaled micro-batch losses computes.
MoE layers route with the same capacity (per micro-batch of one data-parallel rank) and drops as
the expert-parallel run; context parallelism changes nothing here (the whole sequence is one rank's).
"""

from __future__ import annotations

import torch

from plancast.runtime.model import Decoder, ModelConfig, loss_fn, microbatch, synthetic_batch
from plancast.runtime.moe import set_aux_loss_scale
from plancast.runtime.precision import autocast_for
from plancast.runtime.trainer import LEARNING_RATE
from plancast.simulator.scenario import Scenario


class ReferenceRun:
    """Trains ``Decoder`` (all layers, embedding and head) in one process."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        cfg = ModelConfig.from_scenario(scenario)
        self.model = Decoder(
            cfg, 0, cfg.num_layers, has_embedding=True, has_head=True, seed=scenario.training.seed
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        self.autocast = autocast_for(scenario, torch.device("cpu"))  # the run's mixed precision
        # the aux loss enters each micro-batch's gradient as the cross-entropy does: / (m * dp)
        set_aux_loss_scale(self.model, 1.0 / (scenario.num_microbatches * scenario.dp))

    def step(self, step: int) -> list[float]:
        """One optimizer step; returns the mean loss of each data-parallel rank's micro-batches."""
        s = self.scenario
        inputs, targets = synthetic_batch(s, step)
        m, dp = s.num_microbatches, s.dp
        self.optimizer.zero_grad(set_to_none=True)
        losses = []
        for d in range(dp):
            total = 0.0
            for j in range(m):
                with self.autocast():
                    loss = loss_fn(self.model(microbatch(s, inputs, d, j)), microbatch(s, targets, d, j)) / m
                (loss / dp).backward()
                total += float(loss.detach())
            losses.append(total)
        self.optimizer.step()
        return losses

    def parameter(self, name: str) -> torch.Tensor:
        """The reference value of a chunk's parameter ``name`` (a tied head copy maps to the embedding)."""
        params = dict(self.model.named_parameters())
        if name not in params and name == "head.output.weight":
            name = "embed.tok.weight"
        return params[name].detach()
