"""The rank grid: rank <-> (pp, dp, cp, tp) coordinates and process-group membership.

This module is the single source of truth for how global ranks are laid out; the simulator
uses it directly and the runtime builds its torch ``DeviceMesh`` from ``mesh_shape`` and
``mesh_dim_names`` so both agree on which ranks share a group.

Layout: tp innermost, then cp, then dp, then pp, i.e. ``torch.arange(world).view(pp, dp, cp, tp)``:
the order of torchtitan's mesh (``ParallelDims``: pp, dp_replicate, dp_shard, cp, tp, outermost
first) and of Megatron-LM's default ``tp-cp-ep-dp-pp`` (innermost first). picotron differs: its grid
puts dp outermost (``view(dp, pp, cp, tp)``, picotron/process_group_manager.py). Keeping tp innermost
puts each tensor-parallel group on consecutive ranks, hence inside one NVLink node whenever ``tp``
divides ``gpus_per_node`` (Megatron-LM, arXiv 2104.04473 section 3.3); pp outermost keeps each
pipeline stage's data-parallel group on neighbouring ranks. The mesh is always 4-D (cp = 1 when
context parallelism is unused).

Expert parallelism is carved out of data parallelism, as in Megatron-Core and torchtitan: the ``ep``
group of a rank holds the ranks with the same pp/cp/tp whose dp index lies in the same block of
``ep`` consecutive dp indices (``dp_i = edp_i * ep + ep_i``); the expert-data-parallel group ``edp``
holds those with the same ``ep_i``, and ``dp_cp`` (the dense-gradient group, Megatron-LM's
``get_data_parallel_group(with_context_parallel=True)``) the ranks differing only in dp or cp.

MoE parallel folding (``etp`` set; Liu et al. 2025, arXiv 2504.14960; Megatron-Core
``parallel_state.initialize_model_parallel``, whose expert grid is ordered tp-ep-dp-pp with the expert
tensor parallel size as its tp): the expert layers get their own grid over each pipeline stage's
``tp * cp * dp`` consecutive ranks, ``local = (edp_i * ep + ep_i) * etp + etp_i``, independent of the
attention's tp/cp/dp, so ep may span tensor-parallel ranks (DeepSeek-V3's EP64 over TP2 x DP32).
With ``etp = tp`` and ``cp = 1`` it is the carved-out-of-dp layout above.

HSDP (``replicate`` > 1, torchtitan's ``dp_replicate`` x ``dp_shard``, outermost first) splits dp the
same way: ``dp_i = replicate_i * shard + shard_i`` with ``shard = dp / replicate``. FSDP shards over
``dp_shard_cp`` (the ranks with the same replica index differing in shard index or cp: torchtitan's
``dp_shard_cp`` mesh) and all-reduces the sharded gradients over ``dp_replicate`` (same shard index).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, get_args

Axis = Literal["pp", "dp", "cp", "tp"]
"""The grid's dimensions, outermost first."""
AXES: tuple[Axis, ...] = get_args(Axis)
GroupName = Literal["pp", "dp", "cp", "tp", "ep", "edp", "dp_cp", "dp_shard_cp", "dp_replicate"]
"""Process groups: one per grid axis, plus the expert-parallel (ep), expert-data-parallel (edp) and
dense-gradient (dp_cp) groups derived from them."""
GROUPS: tuple[GroupName, ...] = get_args(GroupName)


@dataclass(frozen=True, slots=True)
class Coord:
    """Position of one rank on the grid."""

    pp: int
    """Pipeline stage (pipeline-parallel rank)."""
    dp: int
    """Data-parallel replica index."""
    tp: int
    """Tensor-parallel shard index."""
    cp: int = field(default=0, kw_only=True)
    """Context-parallel shard index (which sequence chunks the rank holds)."""

    def along(self, axis: Axis) -> int:
        """This coordinate's component on ``axis``."""
        return {"pp": self.pp, "dp": self.dp, "cp": self.cp, "tp": self.tp}[axis]


def _check_group(name: str) -> GroupName:
    if name not in GROUPS:
        raise ValueError(f"axis must be one of {GROUPS}, got {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class RankGrid:
    """A 4D grid of ``pp * dp * cp * tp`` ranks, tp innermost (see the module docstring)."""

    pp: int
    """Pipeline-parallel degree (number of pipeline stages)."""
    dp: int
    """Data-parallel degree (number of model replicas)."""
    tp: int
    """Tensor-parallel degree (shards per layer)."""
    cp: int = field(default=1, kw_only=True)
    """Context-parallel degree (shards of each sequence)."""
    ep: int = field(default=1, kw_only=True)
    """Expert-parallel degree, carved out of dp (divides it) unless etp is set."""
    etp: int | None = field(default=None, kw_only=True)
    """Expert-tensor-parallel degree of a folded expert grid (module docstring); None: experts use the
    attention's tp and ep is carved out of dp."""
    replicate: int = field(default=1, kw_only=True)
    """HSDP replicas, carved out of dp (divides it): FSDP shards over dp / replicate (x cp)."""

    def __post_init__(self) -> None:
        for axis in (*AXES, "ep", "etp", "replicate"):
            degree = getattr(self, axis)
            if axis == "etp" and degree is None:
                continue
            if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
                raise ValueError(f"RankGrid.{axis} must be an integer >= 1, got {degree!r}")
        if self.dp % self.replicate:
            raise ValueError(f"RankGrid.replicate={self.replicate} must divide RankGrid.dp={self.dp}")
        if self.etp is not None:
            if self.stage_size % (self.ep * self.etp):
                raise ValueError(
                    f"RankGrid.ep={self.ep} x etp={self.etp} must divide tp x cp x dp = {self.stage_size} "
                    "(the folded expert grid covers one pipeline stage's ranks)"
                )
        elif self.dp % self.ep:
            raise ValueError(
                f"RankGrid.ep={self.ep} must divide RankGrid.dp={self.dp} (ep is carved out of dp)"
            )

    @property
    def world_size(self) -> int:
        """Total number of ranks, ``pp * dp * cp * tp``."""
        return self.pp * self.dp * self.cp * self.tp

    @property
    def stage_size(self) -> int:
        """Ranks of one pipeline stage, ``dp * cp * tp``."""
        return self.dp * self.cp * self.tp

    @property
    def mesh_shape(self) -> tuple[int, int, int, int]:
        """Shape for ``torch.distributed.device_mesh.init_device_mesh``, outermost first."""
        return (self.pp, self.dp, self.cp, self.tp)

    @property
    def mesh_dim_names(self) -> tuple[str, str, str, str]:
        """Dimension names matching ``mesh_shape``."""
        return ("pp", "dp", "cp", "tp")

    @property
    def hsdp_mesh_shape(self) -> tuple[int, int, int, int, int]:
        """``mesh_shape`` with dp split into (replicate, dp / replicate), outermost first: torchtitan's
        HSDP mesh (pp, dp_replicate, dp_shard, cp, tp), ``dp_i = replicate_i * shard + shard_i``."""
        return (self.pp, self.replicate, self.dp // self.replicate, self.cp, self.tp)

    @property
    def hsdp_mesh_dim_names(self) -> tuple[str, str, str, str, str]:
        """Dimension names matching ``hsdp_mesh_shape`` (torchtitan's names)."""
        return ("pp", "dp_replicate", "dp_shard", "cp", "tp")

    def size(self, axis: GroupName) -> int:
        """Ranks in one group named ``axis``."""
        name = _check_group(axis)
        sizes = {"pp": self.pp, "dp": self.dp, "cp": self.cp, "tp": self.tp, "ep": self.ep}
        edp = self.dp // self.ep if self.etp is None else self.stage_size // (self.ep * self.etp)
        sizes.update(edp=edp, dp_cp=self.dp * self.cp)
        sizes.update(dp_shard_cp=self.dp // self.replicate * self.cp, dp_replicate=self.replicate)
        return sizes[name]

    def coord(self, rank: int) -> Coord:
        """Grid coordinate of ``rank``; inverse of ``((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i``."""
        self._check_rank(rank)
        outer, tp_i = divmod(rank, self.tp)
        outer, cp_i = divmod(outer, self.cp)
        pp_i, dp_i = divmod(outer, self.dp)
        return Coord(pp=pp_i, dp=dp_i, tp=tp_i, cp=cp_i)

    def rank(self, coord: Coord) -> int:
        """Global rank at ``coord`` (C order over ``(pp, dp, cp, tp)``)."""
        for axis in AXES:
            value, degree = coord.along(axis), getattr(self, axis)
            if not 0 <= value < degree:
                raise ValueError(f"Coord.{axis}={value} is out of range for a grid with {axis}={degree}")
        return ((coord.pp * self.dp + coord.dp) * self.cp + coord.cp) * self.tp + coord.tp

    def stage_of(self, rank: int) -> int:
        """Pipeline stage (pp coordinate) that ``rank`` belongs to."""
        return self.coord(rank).pp

    def ep_index(self, rank: int) -> tuple[int, int]:
        """``(edp_i, ep_i)`` of ``rank``: its dp index is ``edp_i * ep + ep_i`` (folded: its index in
        the stage is ``(edp_i * ep + ep_i) * etp + etp_i``)."""
        if self.etp is None:
            return divmod(self.coord(rank).dp, self.ep)
        self._check_rank(rank)
        return divmod(rank % self.stage_size // self.etp, self.ep)

    def group(self, axis: GroupName, rank: int) -> tuple[int, ...]:
        """Sorted members of ``rank``'s process group named ``axis``."""
        return _group(self, axis, rank)

    def _group(self, axis: GroupName, rank: int) -> tuple[int, ...]:
        name, here = _check_group(axis), self.coord(rank)
        tp, cp = self.tp, self.cp
        # `rank`'s formula with `here`'s pp and tp: every member below is in range by construction (the
        # sweep asks for thousands of groups of 2,048-rank grids, where Coord copies cost seconds)
        stage = here.pp * self.dp
        if name in AXES:  # ranks differing only on that axis
            degree = getattr(self, name)
            stride = {"tp": 1, "cp": tp, "dp": cp * tp, "pp": self.dp * cp * tp}[name]
            first = rank - here.along(name) * stride
            return tuple(first + i * stride for i in range(degree))

        def at(dp_i: int, cp_i: int) -> int:
            return ((stage + dp_i) * cp + cp_i) * tp + here.tp

        if name == "dp_cp":
            return tuple(at(d, c) for d in range(self.dp) for c in range(cp))
        shard = self.dp // self.replicate
        rep_i, shard_i = divmod(here.dp, shard)
        if name == "dp_shard_cp":
            shards = range(rep_i * shard, (rep_i + 1) * shard)
            return tuple(sorted(at(d, c) for d in shards for c in range(cp)))
        if name == "dp_replicate":
            return tuple(at(r * shard + shard_i, here.cp) for r in range(self.replicate))
        if self.etp is not None:
            return self._folded_group(name, rank)
        edp_i, ep_i = divmod(here.dp, self.ep)
        dps = (
            [edp_i * self.ep + j for j in range(self.ep)]
            if name == "ep"
            else [k * self.ep + ep_i for k in range(self.dp // self.ep)]
        )
        return tuple(at(d, here.cp) for d in dps)

    def _folded_group(self, name: GroupName, rank: int) -> tuple[int, ...]:
        """Members of ``rank``'s ep or edp group on the folded expert grid."""
        etp = self.etp or 1
        base, local = divmod(rank, self.stage_size)
        etp_i, (edp_i, ep_i) = local % etp, self.ep_index(rank)
        if name == "ep":
            return tuple(base * self.stage_size + (edp_i * self.ep + j) * etp + etp_i for j in range(self.ep))
        edp = self.size("edp")
        return tuple(base * self.stage_size + (k * self.ep + ep_i) * etp + etp_i for k in range(edp))

    def groups(self, axis: GroupName) -> tuple[tuple[int, ...], ...]:
        """Every process group named ``axis``, ordered by first member; together they partition the world."""
        name = _check_group(axis)
        leaders = (r for r in range(self.world_size) if self._leads(name, self.coord(r)))
        return tuple(self.group(name, r) for r in leaders)

    def _leads(self, name: GroupName, c: Coord) -> bool:
        """Whether ``c`` is the first (lowest) member of its group ``name``."""
        if name in AXES:
            return c.along(name) == 0
        if name == "dp_cp":
            return c.dp == 0 and c.cp == 0
        shard = self.dp // self.replicate
        if name == "dp_shard_cp":
            return c.dp % shard == 0 and c.cp == 0
        if name == "dp_replicate":
            return c.dp < shard
        if self.etp is not None:
            edp_i, ep_i = self.ep_index(self.rank(c))
            return ep_i == 0 if name == "ep" else edp_i == 0
        return c.dp % self.ep == 0 if name == "ep" else c.dp < self.ep

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(
                f"rank {rank} is out of range for a grid of world size {self.world_size} "
                f"(pp={self.pp}, dp={self.dp}, cp={self.cp}, tp={self.tp}); "
                f"valid ranks are 0..{self.world_size - 1}"
            )


@lru_cache(maxsize=4096)
def _group(grid: RankGrid, axis: GroupName, rank: int) -> tuple[int, ...]:
    """`RankGrid.group`, memoised: pure in the grid's fields (frozen, hashed by value), the axis and the
    rank, and the answer is an immutable tuple. The plan search prices the ep and cp groups of rank 0
    of a few hundred grids hundreds of thousands of times (a scenario builds its grid anew each time)."""
    return grid._group(axis, rank)


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
