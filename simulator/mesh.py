"""The rank grid: rank <-> (pp, dp, tp) coordinates and process-group membership.

This module is the single source of truth for how global ranks are laid out; the simulator
uses it directly and the runtime builds its torch ``DeviceMesh`` from ``mesh_shape`` and
``mesh_dim_names`` so both agree on which ranks share a group.

Layout: tp innermost, then dp, then pp, i.e. ``torch.arange(world).view(pp, dp, tp)``: the order of
torchtitan's mesh (``ParallelDims``: pp, dp_replicate, dp_shard, cp, tp, outermost first) and of
Megatron-LM's default ``tp-cp-ep-dp-pp`` (innermost first). picotron differs: its grid puts dp
outermost (``view(dp, pp, cp, tp)``, picotron/process_group_manager.py). Keeping tp innermost puts
each tensor-parallel group on consecutive ranks, hence inside one NVLink node whenever ``tp`` divides
``gpus_per_node`` (Megatron-LM, arXiv 2104.04473 section 3.3); pp outermost keeps each pipeline
stage's data-parallel group on neighbouring ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, get_args

Axis = Literal["pp", "dp", "tp"]
AXES: tuple[Axis, ...] = get_args(Axis)


@dataclass(frozen=True, slots=True)
class Coord:
    """Position of one rank on the grid."""

    pp: int
    """Pipeline stage (pipeline-parallel rank)."""
    dp: int
    """Data-parallel replica index."""
    tp: int
    """Tensor-parallel shard index."""

    def along(self, axis: Axis) -> int:
        """This coordinate's component on ``axis``."""
        return {"pp": self.pp, "dp": self.dp, "tp": self.tp}[axis]


def _check_axis(axis: str) -> Axis:
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    return axis


@dataclass(frozen=True, slots=True)
class RankGrid:
    """A 3D grid of ``pp * dp * tp`` ranks, tp innermost (see the module docstring)."""

    pp: int
    """Pipeline-parallel degree (number of pipeline stages)."""
    dp: int
    """Data-parallel degree (number of model replicas)."""
    tp: int
    """Tensor-parallel degree (shards per layer)."""

    def __post_init__(self) -> None:
        for axis in AXES:
            degree = self.size(axis)
            if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
                raise ValueError(f"RankGrid.{axis} must be an integer >= 1, got {degree!r}")

    @property
    def world_size(self) -> int:
        """Total number of ranks, ``pp * dp * tp``."""
        return self.pp * self.dp * self.tp

    @property
    def mesh_shape(self) -> tuple[int, int, int]:
        """Shape for ``torch.distributed.device_mesh.init_device_mesh``, outermost first."""
        return (self.pp, self.dp, self.tp)

    @property
    def mesh_dim_names(self) -> tuple[str, str, str]:
        """Dimension names matching ``mesh_shape``."""
        return ("pp", "dp", "tp")

    def size(self, axis: Axis) -> int:
        """Degree of ``axis``."""
        return {"pp": self.pp, "dp": self.dp, "tp": self.tp}[_check_axis(axis)]

    def coord(self, rank: int) -> Coord:
        """Grid coordinate of ``rank``: the inverse of ``rank = (pp_i * dp + dp_i) * tp + tp_i``."""
        self._check_rank(rank)
        outer, tp_i = divmod(rank, self.tp)
        pp_i, dp_i = divmod(outer, self.dp)
        return Coord(pp=pp_i, dp=dp_i, tp=tp_i)

    def rank(self, coord: Coord) -> int:
        """Global rank at ``coord`` (C order over ``(pp, dp, tp)``)."""
        for axis in AXES:
            value, degree = coord.along(axis), self.size(axis)
            if not 0 <= value < degree:
                raise ValueError(f"Coord.{axis}={value} is out of range for a grid with {axis}={degree}")
        return (coord.pp * self.dp + coord.dp) * self.tp + coord.tp

    def stage_of(self, rank: int) -> int:
        """Pipeline stage (pp coordinate) that ``rank`` belongs to."""
        return self.coord(rank).pp

    def group(self, axis: Axis, rank: int) -> tuple[int, ...]:
        """Sorted members of ``rank``'s process group on ``axis`` (ranks differing only on ``axis``)."""
        axis = _check_axis(axis)
        here = self.coord(rank)
        return tuple(self.rank(replace(here, **{axis: i})) for i in range(self.size(axis)))

    def groups(self, axis: Axis) -> tuple[tuple[int, ...], ...]:
        """Every process group on ``axis``, ordered by first member; together they partition the world."""
        axis = _check_axis(axis)
        leaders = (r for r in range(self.world_size) if self.coord(r).along(axis) == 0)
        return tuple(self.group(axis, r) for r in leaders)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(
                f"rank {rank} is out of range for a grid of world size {self.world_size} "
                f"(pp={self.pp}, dp={self.dp}, tp={self.tp}); valid ranks are 0..{self.world_size - 1}"
            )


def span_tier(ranks: Sequence[int], tier_sizes: Sequence[int]) -> int:
    """Index of the innermost cluster tier one of whose units holds every rank in ``ranks``.

    ``tier_sizes`` lists the tiers innermost first, as ranks per unit (``[8, 1536]``: NVLink nodes
    of 8 ranks, then one InfiniBand fabric of 1536 ranks). Units are consecutive rank blocks, so
    rank ``r`` sits in unit ``r // tier_sizes[i]`` of tier ``i``. A group that no tier contains
    (ranks beyond the last tier's size) is reported as the last tier, the slowest link there is.
    A collective over ``ranks`` is therefore limited by tier ``span_tier(ranks, tier_sizes)``.
    """
    if not tier_sizes:
        raise ValueError("tier_sizes must name at least one tier, e.g. [8, 1536]")
    if not ranks:
        raise ValueError("ranks must contain at least one rank")
    if any(r < 0 for r in ranks):
        raise ValueError(f"ranks must be >= 0, got {sorted(ranks)}")
    for i, size in enumerate(tier_sizes):
        if size < 1:
            raise ValueError(f"tier_sizes[{i}] must be >= 1, got {size}")
        if i > 0 and size % tier_sizes[i - 1] != 0:
            raise ValueError(
                f"tier_sizes[{i}]={size} must be a multiple of tier_sizes[{i - 1}]={tier_sizes[i - 1]} "
                "(each tier's unit is made of whole units of the tier inside it)"
            )
    for i, size in enumerate(tier_sizes):
        if len({r // size for r in ranks}) == 1:
            return i
    return len(tier_sizes) - 1
