"""HSDP on the rank grid (simulator/mesh.py): dp split into replicate x shard, replicate outermost, as
torchtitan's mesh (dp_replicate, dp_shard, cp, tp)."""

from __future__ import annotations

import pytest
import torch

from plancast.simulator.mesh import RankGrid


@pytest.mark.parametrize(
    ("pp", "dp", "cp", "tp", "replicate"), [(1, 4, 1, 1, 2), (2, 4, 2, 2, 2), (1, 6, 1, 2, 3)]
)
def test_shard_and_replicate_groups_are_torchtitans_mesh_slices(
    pp: int, dp: int, cp: int, tp: int, replicate: int
) -> None:
    grid = RankGrid(pp, dp, tp, cp=cp, replicate=replicate)
    mesh = torch.arange(grid.world_size).view(grid.hsdp_mesh_shape)  # the runtime's HSDP DeviceMesh
    assert grid.hsdp_mesh_shape == (pp, replicate, dp // replicate, cp, tp)
    for rank in range(grid.world_size):
        p, r, d, c, t = (int(i) for i in (mesh == rank).nonzero()[0])
        shard_cp = sorted(int(x) for x in mesh[p, r, :, :, t].flatten())
        assert grid.group("dp_shard_cp", rank) == tuple(shard_cp)
        assert grid.group("dp_replicate", rank) == tuple(int(x) for x in mesh[p, :, d, c, t])
    for name in ("dp_shard_cp", "dp_replicate"):
        groups = grid.groups(name)
        assert sorted(r for g in groups for r in g) == list(range(grid.world_size))
        assert {len(g) for g in groups} == {grid.size(name)}


def test_without_replicas_the_shard_group_is_the_dense_gradient_group() -> None:
    grid = RankGrid(2, 4, 2, cp=2)
    for rank in range(grid.world_size):
        assert grid.group("dp_shard_cp", rank) == grid.group("dp_cp", rank)
        assert grid.group("dp_replicate", rank) == (rank,)


def test_replicas_must_divide_dp() -> None:
    with pytest.raises(ValueError, match=r"replicate=3 must divide RankGrid\.dp=4"):
        RankGrid(1, 4, 1, replicate=3)
