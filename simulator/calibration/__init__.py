"""How plancast calibrates, in one place (pure: no torch, no files).

- `microbench`: a cluster profile from this machine's microbenchmarks (runtime/microbench.py measures;
  this turns the numbers into a `[cluster]`: device, link, compute model, host costs with bounds).
- `compute`: the compute model (efficiency scale + per-op overhead) fitted on (stage, pass) medians.
- `links`: a tier's latency and bandwidth fitted on collective timings (Hockney alpha-beta).
- `observations`: what a measured run gives the fits (compute seconds per pass, collective samples).
- `runs`: calibration on measured runs: which parameters the runs determine (each needs >= 2 runs that
  vary what it scales with), the fit, and in-sample vs leave-one-run-out error per run.

The edge (reading run directories, running microbenchmarks) is plancast.runtime.calibrate.
"""
