"""The rank grid agrees with ``torch.arange(world).view(pp, dp, tp)``, the runtime's DeviceMesh layout."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from plancast.simulator.mesh import AXES, Axis, Coord, RankGrid, span_tier

SHAPES = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 2, 2), (2, 3, 4), (4, 2, 1), (3, 1, 5), (1, 4, 8)]


def _torch_grid(grid: RankGrid) -> torch.Tensor:
    return torch.arange(grid.world_size).view(grid.mesh_shape)


@pytest.mark.parametrize("shape", SHAPES)
def test_coord_is_the_index_in_torch_grid(shape: tuple[int, int, int]) -> None:
    grid = RankGrid(*shape)
    reference = _torch_grid(grid)
    for rank in range(grid.world_size):
        pp_i, dp_i, tp_i = (int(i) for i in (reference == rank).nonzero()[0])
        assert grid.coord(rank) == Coord(pp=pp_i, dp=dp_i, tp=tp_i)
        assert grid.rank(Coord(pp_i, dp_i, tp_i)) == rank == int(reference[pp_i, dp_i, tp_i])
        assert grid.stage_of(rank) == pp_i


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dim", range(3))
def test_groups_are_torch_rows_along_the_axis(shape: tuple[int, int, int], dim: int) -> None:
    grid = RankGrid(*shape)
    axis = AXES[dim]
    rows = _torch_grid(grid).movedim(dim, -1).reshape(-1, grid.size(axis)).tolist()
    assert grid.groups(axis) == tuple(tuple(row) for row in rows)
    for row in rows:
        for rank in row:
            assert grid.group(axis, rank) == tuple(row)


def test_grid_describes_the_device_mesh() -> None:
    grid = RankGrid(pp=2, dp=3, tp=4)
    assert (grid.world_size, grid.mesh_shape, grid.mesh_dim_names) == (24, (2, 3, 4), ("pp", "dp", "tp"))


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
        (lambda: RankGrid(2, 2, 2).group("ep", 0), "axis must be one of"),  # type: ignore[arg-type]
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


@given(pp=degrees, dp=degrees, tp=degrees)
def test_coord_rank_round_trip(pp: int, dp: int, tp: int) -> None:
    grid = RankGrid(pp, dp, tp)
    assert [grid.rank(grid.coord(r)) for r in range(grid.world_size)] == list(range(grid.world_size))


@given(pp=degrees, dp=degrees, tp=degrees, axis=st.sampled_from(AXES))
def test_groups_partition_the_world(pp: int, dp: int, tp: int, axis: Axis) -> None:
    grid = RankGrid(pp, dp, tp)
    groups = grid.groups(axis)
    assert sorted(r for g in groups for r in g) == list(range(grid.world_size))
    assert len(groups) == grid.world_size // grid.size(axis)
    others = [a for a in AXES if a != axis]
    for g in groups:
        assert list(g) == sorted(g)
        assert [grid.coord(r).along(axis) for r in g] == list(range(grid.size(axis)))
        assert len({tuple(grid.coord(r).along(a) for a in others) for r in g}) == 1
