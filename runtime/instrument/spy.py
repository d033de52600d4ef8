"""The dispatch capture path (CPU): a dispatch mode that sees every collective as it is issued.

Collectives issued deep inside library code (DTensor for tensor parallelism, FSDP2) are invisible
to plancast's own code. ``CollectiveSpy`` sees every ``c10d::`` and functional-collective op of the
step, attributes it to the innermost open span or ``comm_scope`` (``keys.owner_of``) and times it
from its issue to its completion: about 15% of a tiny TP or FSDP2 step on CPU, against ~65% with
the profiler (benchmarks/instrument_overhead.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from plancast.runtime.instrument.keys import C10D_KINDS, Completion, Owner, Scope, owner_of
from plancast.traces.schema import Event

# functional collective (as the dispatcher names it) -> trace kind, for the ones DTensor issues
FUNCOL_KINDS: dict[str, str] = {
    "_c10d_functional::all_reduce": "all_reduce",
    "_c10d_functional::all_reduce_coalesced": "all_reduce",
    "_c10d_functional::all_gather_into_tensor": "all_gather",
    "_c10d_functional::all_gather_into_tensor_coalesced": "all_gather",
    "_c10d_functional::reduce_scatter_tensor": "reduce_scatter",
    "_c10d_functional::reduce_scatter_tensor_coalesced": "reduce_scatter",
    "_c10d_functional::all_to_all_single": "all_to_all",
    "_c10d_functional::broadcast": "broadcast",
}

Opener = Callable[[str, str, int, int, int, int, int], Completion]
"""``StepRecorder.open_collective``: (stream, kind, stage, chunk, microbatch, peer, bytes) -> its end."""


class SpyCapture:
    """``capture = "dispatch"``: the spy's mode is on from ``start`` to ``finish``."""

    captures_collectives = True

    def __init__(self, spy: CollectiveSpy) -> None:
        self._spy = spy

    @classmethod
    def start(cls, open_collective: Opener) -> SpyCapture:
        spy = CollectiveSpy(open_collective)
        spy.__enter__()
        return cls(spy)

    def enter(self, scope: Scope) -> None:
        self._spy.scopes.append(scope)

    def exit(self) -> None:
        if self._spy.scopes:
            self._spy.scopes.pop()

    def finish(self, rank: int, step: int) -> list[Event]:
        """Leave the mode and end what is still pending; the rows hold every captured collective."""
        self._spy.__exit__(None, None, None)
        self._spy.flush()
        return []


class CollectiveSpy(TorchDispatchMode):
    """Lets every op pass and records the collectives among them into the step's rows.

    - ``c10d::`` ops (FSDP2's gathers and scatters, plancast's own labelled collectives) return a
      ``Work``: issue mark, then a mark in its future's completion callback, as DDP buckets are timed.
    - ``_c10d_functional::`` ops (DTensor's redistributes) return a tensor still being filled; the spy
      waits for it at once and marks the end. DTensor's eager path waits at the next op that reads the
      tensor anyway, so timing stays that of the collective (waiting for the peer included, as a gloo
      event shows it).

    Without a ``comm_scope`` the op gives the stream: functional collectives come from DTensor
    (``tp``), ``c10d::`` ones from FSDP2 (``dp``).
    """

    def __init__(self, open_collective: Opener) -> None:
        super().__init__()
        self._open = open_collective
        self.scopes: list[Scope] = []
        """Open spans and ``comm_scope``s, innermost last."""
        self._pending: list[tuple[Any, Completion]] = []  # works without a future, polled

    def owner(self, stream: str) -> Owner | None:
        """The owner of a collective issued now, None for one a send/recv span owns."""
        return owner_of(self.scopes[-1], stream) if self.scopes else Owner(stream, -1, -1, -1)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self._pending:
            self._poll()
        name = func._schema.name
        functional = name in FUNCOL_KINDS
        if not functional and name not in C10D_KINDS:
            return func(*args, **kwargs)
        owner = self.owner("tp" if functional else "dp")
        if owner is None:
            return func(*args, **kwargs)
        kind = owner.kind or (FUNCOL_KINDS[name] if functional else C10D_KINDS[name])
        done = self._open(
            owner.stream, kind, owner.stage, owner.chunk, owner.microbatch, owner.peer, owner.bytes
        )
        out = func(*args, **kwargs)
        if functional:
            for tensor in out if isinstance(out, (list, tuple)) else [out]:
                torch.ops._c10d_functional.wait_tensor(tensor)
            done.done(None)
        else:
            work = _unboxed(out[-1] if isinstance(out, (list, tuple)) else out)
            self._watch(work, done, func, args, kwargs)
        return out

    def _watch(self, work: Any, done: Completion, func: Any, args: Any, kwargs: Any) -> None:
        """End ``done`` when ``work`` completes: its future's callback, else polling or waiting."""
        try:
            work.get_future().add_done_callback(done.done)
        except RuntimeError:  # no future (gloo's reduce-scatter, an all-reduce underneath)
            if _async_op(func, args, kwargs):
                self._pending.append((work, done))  # polled; at worst ended when the step ends
            else:  # the caller waits for it as soon as this returns: waiting here changes nothing
                work.wait()
                done.done(None)

    def _poll(self) -> None:
        """End the pending collectives that have completed (checked at every op the step issues)."""
        still = []
        for work, done in self._pending:
            if work.is_completed():
                done.done(None)
            else:
                still.append((work, done))
        self._pending = still

    def flush(self) -> None:
        """At the end of the step: wait for what is still pending (the step has waited for it already)."""
        for work, done in self._pending:
            work.wait()
            done.done(None)
        self._pending = []


def _async_op(func: Any, args: Any, kwargs: Any) -> bool:
    """The ``async_op`` argument of a ``c10d::`` op (True when the op has none)."""
    for i, argument in enumerate(func._schema.arguments):
        if argument.name == "async_op":
            return bool(kwargs["async_op"] if "async_op" in kwargs else args[i] if i < len(args) else True)
    return True


def _unboxed(work: Any) -> Any:
    """A ``Work`` as the dispatcher returns it (a TorchScript object) as the Python ``Work``."""
    if isinstance(work, torch._C._distributed_c10d.Work):
        return work
    return torch._C._distributed_c10d.Work.unbox(work)
