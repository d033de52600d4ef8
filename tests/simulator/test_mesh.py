"""The rank grid agrees with ``torch.arange(world).view(pp, dp, cp, tp)``, the runtime's DeviceMesh layout."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from plancast.simulator.mesh import AXES, Axis, Coord, GroupName, RankGrid, span_tier

SHAPES = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 2, 2), (2, 3, 4), (4, 2, 1), (3, 1, 5), (1, 4, 8)]


def _torch_grid(grid: RankGrid) -> torch.Tensor:
    return torch.arange(grid.world_size).view(grid.mesh_shape)


SHAPES_4D = [(*shape, 1) for shape in SHAPES] + [
    (1, 1, 1, 2),
    (2, 2, 2, 2),
    (1, 4, 2, 1),
    (2, 3, 4, 2),
    (1, 2, 3, 4),
]
"""(pp, dp, tp, cp)."""


def _grid(shape: tuple[int, ...], ep: int = 1) -> RankGrid:
    pp, dp, tp, cp = shape
    return RankGrid(pp, dp, tp, cp=cp, ep=ep)


@pytest.mark.parametrize("shape", SHAPES_4D)
def test_coord_is_the_index_in_torch_grid(shape: tuple[int, int, int, int]) -> None:
    grid = _grid(shape)
    reference = _torch_grid(grid)
    for rank in range(grid.world_size):
        pp_i, dp_i, cp_i, tp_i = (int(i) for i in (reference == rank).nonzero()[0])
        assert grid.coord(rank) == Coord(pp=pp_i, dp=dp_i, tp=tp_i, cp=cp_i)
        assert grid.rank(Coord(pp_i, dp_i, tp_i, cp=cp_i)) == rank == int(reference[pp_i, dp_i, cp_i, tp_i])
        assert grid.stage_of(rank) == pp_i


@pytest.mark.parametrize("shape", SHAPES_4D)
@pytest.mark.parametrize("dim", range(4))
def test_groups_are_torch_rows_along_the_axis(shape: tuple[int, int, int, int], dim: int) -> None:
    grid = _grid(shape)
    axis = AXES[dim]
    rows = _torch_grid(grid).movedim(dim, -1).reshape(-1, grid.size(axis)).tolist()
    assert grid.groups(axis) == tuple(tuple(row) for row in rows)
    for row in rows:
        for rank in row:
            assert grid.group(axis, rank) == tuple(row)


def test_grid_describes_the_device_mesh() -> None:
    grid = RankGrid(pp=2, dp=3, tp=4)
    assert (grid.world_size, grid.mesh_shape, grid.mesh_dim_names) == (
        24,
        (2, 3, 1, 4),
        ("pp", "dp", "cp", "tp"),
    )
    grid = RankGrid(pp=2, dp=3, tp=4, cp=2)
    assert (grid.world_size, grid.mesh_shape) == (48, (2, 3, 2, 4))


@pytest.mark.parametrize(
    ("shape", "ep"), [((1, 4, 1, 1), 2), ((2, 4, 2, 2), 2), ((1, 8, 1, 2), 4), ((2, 6, 2, 1), 3)]
)
def test_expert_groups_are_blocks_of_the_torch_dp_axis(shape: tuple[int, int, int, int], ep: int) -> None:
    """ep: same pp/cp/tp, dp indices edp_i * ep + (0..ep-1); edp: same ep_i; dp_cp: every dp and cp."""
    grid = _grid(shape, ep)
    reference = _torch_grid(grid)  # [pp, dp, cp, tp]
    pp, dp, cp, tp = reference.shape
    blocks = reference.view(pp, dp // ep, ep, cp, tp)  # dp_i = edp_i * ep + ep_i
    ep_rows = blocks.permute(0, 1, 3, 4, 2).reshape(-1, ep).tolist()
    edp_rows = blocks.permute(0, 2, 3, 4, 1).reshape(-1, dp // ep).tolist()
    dp_cp_rows = reference.permute(0, 3, 1, 2).reshape(-1, dp * cp).tolist()
    for name, rows in (("ep", ep_rows), ("edp", edp_rows), ("dp_cp", dp_cp_rows)):
        assert sorted(grid.groups(name)) == sorted(tuple(row) for row in rows), name
        assert grid.groups(name) == tuple(sorted(grid.groups(name)))
        for row in rows:
            for rank in row:
                assert grid.group(name, rank) == tuple(row)
                assert grid.size(name) == len(row)
    for rank in range(grid.world_size):
        edp_i, ep_i = grid.ep_index(rank)
        assert grid.group("ep", rank)[ep_i] == rank and grid.group("edp", rank)[edp_i] == rank


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RankGrid(0, 1, 1), "RankGrid.pp must be an integer >= 1"),
        (lambda: RankGrid(1, -2, 1), "RankGrid.dp must be an integer >= 1"),
        (lambda: RankGrid(1, 1, 0), "RankGrid.tp must be an integer >= 1"),
        (lambda: RankGrid(2, 2, 2).coord(8), "rank 8 is out of range for a grid of world size 8"),
        (lambda: RankGrid(2, 2, 2).coord(-1), "rank -1 is out of range"),
        (lambda: RankGrid(2, 2, 2).group("tp", 9), "rank 9 is out of range"),
        (lambda: RankGrid(2, 2, 2).rank(Coord(0, 2, 0)), "Coord.dp=2 is out of range for a grid with dp=2"),
        (lambda: RankGrid(2, 2, 2).rank(Coord(0, 0, -1)), "Coord.tp=-1 is out of range"),
        (lambda: RankGrid(2, 2, 2).group("xp", 0), "axis must be one of"),  # type: ignore[arg-type]
        (lambda: RankGrid(1, 1, 1, cp=0), "RankGrid.cp must be an integer >= 1"),
        (lambda: RankGrid(1, 6, 1, ep=4), "RankGrid.ep=4 must divide RankGrid.dp=6"),
        (lambda: RankGrid(2, 2, 2, cp=2).rank(Coord(0, 0, 0, cp=2)), "Coord.cp=2 is out of range"),
        (lambda: RankGrid(2, 2, 2).groups("x"), "axis must be one of"),  # type: ignore[arg-type]
    ],
)
def test_invalid_inputs_are_rejected_with_a_clear_message(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    ("ranks", "tier_sizes", "tier"),
    [
        ([0, 7], [8, 1536], 0),  # one NVLink node
        ([5], [8, 1536], 0),  # a single rank needs no link at all; report the innermost tier
        ([7, 8], [8, 1536], 1),  # neighbours, but across a node boundary
        ([0, 8, 16, 24], [8, 1536], 1),  # a dp group with tp=8: one rank per node
        ([8, 15], [8, 64, 512], 0),
        ([0, 63], [8, 64, 512], 1),
        ([0, 64], [8, 64, 512], 2),
        ([0, 1536], [8, 1536], 1),  # beyond the last tier: still the last tier
        ([3, 9000], [8], 0),  # a single tier holds everything there is
    ],
)
def test_span_tier(ranks: list[int], tier_sizes: list[int], tier: int) -> None:
    assert span_tier(ranks, tier_sizes) == tier


def test_span_tier_of_grid_groups_on_dgx_nodes() -> None:
    grid, tiers = RankGrid(pp=2, dp=4, tp=8), [8, 64]
    assert {span_tier(g, tiers) for g in grid.groups("tp")} == {0}
    assert {span_tier(g, tiers) for g in grid.groups("dp")} == {1}
    assert {span_tier(g, tiers) for g in grid.groups("pp")} == {1}


@pytest.mark.parametrize(
    ("ranks", "tier_sizes", "message"),
    [
        ([0, 1], [], "tier_sizes must name at least one tier"),
        ([], [8], "ranks must contain at least one rank"),
        ([-1, 3], [8], "ranks must be >= 0"),
        ([0], [0, 8], r"tier_sizes\[0\] must be >= 1"),
        ([0], [8, 12], r"tier_sizes\[1\]=12 must be a multiple of tier_sizes\[0\]=8"),
    ],
)
def test_span_tier_rejects_bad_input(ranks: list[int], tier_sizes: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        span_tier(ranks, tier_sizes)


degrees = st.integers(min_value=1, max_value=6)


@given(pp=degrees, dp=degrees, tp=degrees, cp=degrees)
def test_coord_rank_round_trip(pp: int, dp: int, tp: int, cp: int) -> None:
    grid = RankGrid(pp, dp, tp, cp=cp)
    assert [grid.rank(grid.coord(r)) for r in range(grid.world_size)] == list(range(grid.world_size))


@given(pp=degrees, edp=degrees, ep=degrees, cp=degrees, name=st.sampled_from(["ep", "edp", "dp_cp"]))
def test_derived_groups_partition_the_world(pp: int, edp: int, ep: int, cp: int, name: GroupName) -> None:
    grid = RankGrid(pp, edp * ep, 2, cp=cp, ep=ep)
    groups = grid.groups(name)
    assert sorted(r for g in groups for r in g) == list(range(grid.world_size))
    assert {len(g) for g in groups} == {grid.size(name)}


@given(pp=degrees, dp=degrees, tp=degrees, cp=st.integers(1, 3), axis=st.sampled_from(AXES))
def test_groups_partition_the_world(pp: int, dp: int, tp: int, cp: int, axis: Axis) -> None:
    grid = RankGrid(pp, dp, tp, cp=cp)
    groups = grid.groups(axis)
    assert sorted(r for g in groups for r in g) == list(range(grid.world_size))
    assert len(groups) == grid.world_size // grid.size(axis)
    others = [a for a in AXES if a != axis]
    for g in groups:
        assert list(g) == sorted(g)
        assert [grid.coord(r).along(axis) for r in g] == list(range(grid.size(axis)))
        assert len({tuple(grid.coord(r).along(a) for a in others) for r in g}) == 1
