"""SimPy engine: replays one training step of a plan on per-rank compute and communication streams.

Each simulated rank runs its pipeline schedule (simulator/schedules.py) as a SimPy process on its
compute stream. Activations and gradients travel between stages as point-to-point transfers; data-
parallel collectives run on a per-rank `dp` stream that overlaps the backward pass; when pipeline and
data-parallel traffic can meet on the same tier, a rank's link on that tier is a SimPy resource they
share. Tensor-parallel collectives sit inside the compute spans (they block the GEMMs that follow).

Ranks that differ only in their data- or tensor-parallel coordinate do identical work, so by default
one representative per pipeline position is simulated and its events copied to its peers;
`full_fidelity=True` simulates every rank.

- plan.py: `StepPlan`, the frozen numbers of one step (no SimPy), and `Topology`;
- core.py: `Engine`, the event state (environment, spans, transfers in flight, resources);
- processes.py: the SimPy processes (a rank's schedule, its passes, transfers, dp stream, optimizer);
- spans.py: `Span`, one recorded span.
"""

from plancast.simulator.costs.optimizer import optimizer_bytes_per_param, optimizer_memory_s
from plancast.simulator.engine.core import Engine, RankState
from plancast.simulator.engine.plan import StepPlan, Topology
from plancast.simulator.engine.spans import Span

__all__ = [
    "Engine",
    "RankState",
    "Span",
    "StepPlan",
    "Topology",
    "optimizer_bytes_per_param",
    "optimizer_memory_s",
]
