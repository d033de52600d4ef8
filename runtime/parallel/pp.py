"""Pipeline parallelism: execute this rank's action list from ``simulator.schedules``, in order.

The simulator's schedule is the single source of truth, so the runtime walks it directly instead of
asking a torch schedule class to re-derive it: each F/B/W of the list is one timed span, and every
activation or gradient crossing ranks is one timed send/recv (index 0 forward, 1 backward), which
gives the one-to-one correspondence with predicted events. The split backward of ZeroBubble uses
torch.distributed.pipelining's own ``stage_backward_input`` / ``stage_backward_weight``, which save
the gradients at the weights' consumers so the W pass is weight-gradient GEMMs only.

Sends are posted asynchronously (``isend``) and completed at the end of the step; receives block,
so a rank runs each action as soon as its inputs arrive, exactly the rule simulator/schedule_replay.py
replays. Gradient accumulation: each micro-batch's loss is divided by the number of micro-batches.

On gloo (CPU) the rank keeps its next receive posted ahead: the first before the first action, each
next one as soon as the previous has arrived, in schedule order (the order each peer sends in, so
gloo's in-order matching per peer and tag is kept). Gloo moves a message only once its receive is
posted (gloo/transport/tcp/pair.cc, NOTIFY_RECV_READY); a receive posted late, while the sender
computes, waits for the sender's event-loop thread to get a core, ~1 ms on average with a 4 ms tail
on a 2-core machine, on the critical path. Posted ahead, the sender's own isend writes the message.
Megatron-LM posts its next receive with its current send for the same reason (p2p_communication.py,
``send_forward_recv_forward``). On NCCL receives stay posted when needed: its point-to-point kernels
run in order on one stream, where a receive posted ahead would hold back the sends behind it.
The simulator replays both (simulator/engine/pipeline.py, ``cluster.compute.p2p_rendezvous``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from plancast.runtime.instrument import SpanKey, StepRecorder
from plancast.runtime.plan import RankPlan
from plancast.simulator.schedules import Action, Receive, cross_rank_receives

BackwardFn = Callable[[torch.Tensor, torch.Tensor | None], None]


@dataclass
class StageRunner:
    """One model chunk as the executor sees it."""

    stage: int
    chunk: int
    forward: Callable[[torch.Tensor], torch.Tensor]
    """Runs the chunk (the bare module; DDP's reducer is driven by ``last_backward``)."""
    parameters: list[nn.Parameter]
    last_backward: BackwardFn | None = None
    """Backward for the chunk's last micro-batch (DDP: announce it to the reducer); None = plain."""


@dataclass
class _Saved:
    inp: torch.Tensor
    out: torch.Tensor | None = None
    param_groups: list[dict[str, Any]] | None = None
    grad_out: torch.Tensor | None = None


@dataclass
class PipelineExecutor:
    """Runs one rank's schedule for one step; returns the (1/m-scaled) loss sum of the last stage."""

    plan: RankPlan
    stages: dict[int, StageRunner]
    recorder: StepRecorder
    activation_shape: tuple[int, ...]
    dtype: torch.dtype
    """The compute dtype: activations and gradients cross ranks in it (runtime/precision.py)."""
    device: torch.device
    full_recompute: bool = False
    autocast: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext
    """The context each forward and recompute runs under (bf16: torch.autocast)."""
    _saved: dict[tuple[int, int], _Saved] = field(default_factory=dict)
    _handoff: dict[tuple[str, int, int], torch.Tensor] = field(default_factory=dict)
    _pending: list[Any] = field(default_factory=list)
    _ahead: dict[tuple[str, int, int], tuple[Any, torch.Tensor]] = field(default_factory=dict)
    """Receives posted ahead (gloo), by (F or B, stage, micro-batch): their work and buffer."""
    _to_post: list[Receive] = field(default_factory=list)
    """Receives of the step not posted yet, in schedule order: (F or B, stage, micro-batch, peer)."""

    @property
    def posts_ahead(self) -> bool:
        """Whether receives are posted ahead (gloo; see the module docstring)."""
        return self.device.type == "cpu"

    def run(self, inputs: list[torch.Tensor], targets: list[torch.Tensor]) -> float:
        """Execute every action; ``inputs``/``targets`` hold this rank's micro-batches (by index)."""
        last_b = {a.stage: i for i, a in enumerate(self.plan.actions) if a.kind == "B"}
        loss_total = 0.0
        self._ahead.clear()
        if self.posts_ahead:
            self._to_post = self._receives()
            self._post_next()
        for i, action in enumerate(self.plan.actions):
            if action.kind == "F":
                loss_total += self._forward(action, inputs, targets)
            elif action.kind == "B":
                self._backward(action, targets, is_last=last_b[action.stage] == i)
            else:
                self._weight(action)
        self.wait_pending()
        self._saved.clear()
        return loss_total

    # ------------------------------------------------------------------------------------ actions
    def _key(self, kind: str, a: Action) -> SpanKey:
        return SpanKey(kind, a.stage, a.chunk, a.microbatch)

    def _forward(self, a: Action, inputs: list[torch.Tensor], targets: list[torch.Tensor]) -> float:
        runner = self.stages[a.stage]
        if a.stage == 0:
            inp = inputs[a.microbatch]
        else:
            inp = self._receive(a, a.stage - 1, backward=False).requires_grad_(True)
        with self.recorder.span(self._key("forward", a)), torch.set_grad_enabled(not self.full_recompute):
            out = self._run_stage(runner, a, inp, targets)
        self._saved[(a.stage, a.microbatch)] = _Saved(inp, out)
        if a.stage < self.plan.num_stages - 1:
            self._send(a, out.detach(), a.stage + 1, backward=False)
            return 0.0
        return float(out.detach())

    def _run_stage(
        self, runner: StageRunner, a: Action, inp: torch.Tensor, targets: list[torch.Tensor]
    ) -> torch.Tensor:
        from plancast.runtime.model import loss_fn

        with self.autocast():
            out = runner.forward(inp)
            if a.stage == self.plan.num_stages - 1:
                return loss_fn(out, targets[a.microbatch]) / len(targets)
        return out

    def _backward(self, a: Action, targets: list[torch.Tensor], *, is_last: bool) -> None:
        runner, saved = self.stages[a.stage], self._saved[(a.stage, a.microbatch)]
        grad = None if a.stage == self.plan.num_stages - 1 else self._receive(a, a.stage + 1, backward=True)
        if self.full_recompute:
            with self.recorder.span(self._key("recompute", a)):
                saved.out = self._run_stage(runner, a, saved.inp, targets)
        assert saved.out is not None
        if grad is not None:  # sent in the compute dtype; autograd wants the output's (bf16: fp32 residual)
            grad = grad.to(saved.out.dtype)
        if self.plan.split_backward:
            input_grad = None
            with self.recorder.span(self._key("backward_input", a)):
                if saved.inp.requires_grad:
                    grads, saved.param_groups = stage_backward_input(
                        [saved.out],
                        [grad] if grad is not None else None,
                        [saved.inp],
                        iter(runner.parameters),
                    )
                    input_grad = grads[0]
                else:  # the first stage has no input gradient: its whole backward is the W pass
                    saved.grad_out = grad
        else:
            with self.recorder.span(self._key("backward", a)):
                if is_last and runner.last_backward is not None:
                    runner.last_backward(saved.out, grad)
                else:
                    torch.autograd.backward(saved.out, grad)
            input_grad = saved.inp.grad if saved.inp.requires_grad else None
            del self._saved[(a.stage, a.microbatch)]
        if a.stage > 0:
            if input_grad is None:
                raise RuntimeError(
                    f"stage {a.stage} produced no input gradient for micro-batch {a.microbatch}"
                )
            self._send(a, input_grad, a.stage - 1, backward=True)

    def _weight(self, a: Action) -> None:
        runner, saved = self.stages[a.stage], self._saved.pop((a.stage, a.microbatch))
        with self.recorder.span(self._key("backward_weight", a)):
            if saved.param_groups is not None:
                stage_backward_weight(iter(runner.parameters), saved.param_groups)
            else:
                assert saved.out is not None
                torch.autograd.backward(saved.out, saved.grad_out)

    # ---------------------------------------------------------------------------------- transfers
    def _receive(self, a: Action, src_stage: int, *, backward: bool) -> torch.Tensor:
        peer = self.plan.holder(src_stage)
        if peer == self.plan.rank:  # both stages on this rank: a local hand-off, no transfer
            return self._handoff.pop(("B" if backward else "F", src_stage, a.microbatch))
        ahead = self._ahead.pop(("B" if backward else "F", a.stage, a.microbatch), None)
        if ahead is None:
            buf = torch.empty(self.activation_shape, dtype=self.dtype, device=self.device)
        else:
            work, buf = ahead
        with self.recorder.span(_p2p_key("recv", a, peer, buf, backward)):
            if ahead is None:
                work = dist.irecv(buf, src=peer, tag=transfer_tag(backward, a.stage))
                assert work is not None
            work.wait()
        if self.posts_ahead:
            self._post_next()
        return buf

    def _receives(self) -> list[Receive]:
        """This rank's receives from other ranks, last first (popped from the end)."""
        plan = self.plan
        return list(reversed(cross_rank_receives(plan.actions, plan.num_stages, plan.holder, plan.rank)))

    def _post_next(self) -> None:
        """Post the next receive of the step ahead, if any is left."""
        if not self._to_post:
            return
        kind, stage, microbatch, peer = self._to_post.pop()
        buf = torch.empty(self.activation_shape, dtype=self.dtype, device=self.device)
        work = dist.irecv(buf, src=peer, tag=transfer_tag(kind == "B", stage))
        assert work is not None
        self._ahead[(kind, stage, microbatch)] = (work, buf)

    def _send(self, a: Action, tensor: torch.Tensor, dst_stage: int, *, backward: bool) -> None:
        peer = self.plan.holder(dst_stage)
        tensor = tensor.to(self.dtype).contiguous()
        if peer == self.plan.rank:
            self._handoff[("B" if backward else "F", a.stage, a.microbatch)] = tensor.detach()
            return
        span = self.recorder.open_async(_p2p_key("send", a, peer, tensor, backward))
        work = dist.isend(tensor, dst=peer, tag=transfer_tag(backward, dst_stage))
        assert work is not None
        self.recorder.watch(span, work)
        self._pending.append((work, tensor))

    def wait_pending(self) -> None:
        """Complete outstanding sends (called by ``run``; exposed for error paths)."""
        for work, _tensor in self._pending:
            work.wait()
        self._pending.clear()


def transfer_tag(backward: bool, to_stage: int) -> int:
    """The message tag of a transfer to `to_stage`: one stream per (receiving stage, direction), in which
    both sides move micro-batches in order. Gloo matches untagged messages between two ranks in posting
    order, and where a pair of ranks carries two streams (the V's first and last stage on rank 0 both
    talk to rank 1 at pp 2; ZB-V's rank 0 sends its third forward before its first gradient, which rank
    1 waits for first) an untagged gradient would land in an activation's buffer of the same shape."""
    return 2 * to_stage + int(backward)


def _p2p_key(kind: str, a: Action, peer: int, tensor: torch.Tensor, backward: bool) -> SpanKey:
    """The span of one pipeline send or recv of action `a` (index 0: activations, 1: gradients)."""
    return SpanKey(
        kind,
        a.stage,
        a.chunk,
        a.microbatch,
        stream="pp",
        peer=peer,
        bytes=tensor.numel() * tensor.element_size(),
        index=int(backward),
    )
