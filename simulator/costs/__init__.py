"""Pure cost formulas (no SimPy): FLOPs and bytes per op, memory per rank, collective times."""
