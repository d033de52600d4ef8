"""The [cluster] table: GPUs, link tiers (innermost first) and the compute model, with presets.

A cluster preset (catalog name or a calibrated profile file) fills what the table leaves out; a
[cluster.gpu] table over a preset keeps the preset GPU's other numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from plancast.simulator import catalog
from plancast.simulator.catalog.clusters import A100_FIT_MATMUL_EFFICIENCY
from plancast.simulator.fields import Strict
from plancast.simulator.presets import lookup_preset, merge_preset


class GPU(Strict):
    """One accelerator (or CPU core used as a rank)."""

    name: str = "custom"
    """Catalog name of the GPU this table describes (or `custom`)."""
    peak_tflops: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]]
    """Dense peak TFLOP/s per dtype (fp32, tf32, fp16, bf16, ...)."""
    hbm_GBps: float = Field(gt=0)
    """Memory bandwidth, GB/s."""
    memory_GiB: float = Field(gt=0)
    """Device memory, GiB."""
    price_usd_per_hour: float | None = Field(default=None, gt=0)
    """Rental price per GPU-hour, USD (catalog: cited on-demand list prices); unset: no cost reported."""
    power_W: float | None = Field(default=None, gt=0)
    """Board power at full load, W (catalog: datasheet TDP); unset: no energy reported."""
    fp8_gemm_ratio: float | None = Field(default=None, gt=0, le=2)
    """FP8 GEMM efficiency over BF16's on this GPU (`training.fp8`): the best measured FP8 GEMM's fraction
    of the FP8 peak over the best BF16 GEMM's of the BF16 peak (MAMF, catalog); unset: the H100 SXM's
    0.883 (simulator/costs/fp8.py)."""
    compute_capability: float | None = Field(default=None, gt=0, lt=100)
    """CUDA compute capability (10.0 B200/GB200, 10.3 B300/GB300; catalog); unset: Hopper's rules. Decides
    whether Transformer Engine keeps a per-tensor FP8 tensor's transpose (costs/memory.py)."""
    power_limit_W: float | None = Field(default=None, gt=0)
    """Board power limit the GPUs are set to (`nvidia-smi -pl`), W, when below power_W; unset: power_W.
    A lower limit lowers the sustained clock (clock_fraction) and the energy drawn."""
    mtbf_hours: float = Field(default=50677.0, gt=0)
    """Mean time between job-interrupting failures per GPU, hours. Default: Llama 3 (Dubey et al. 2024,
    sec. 3.3.4): 419 unexpected interruptions in 54 days on 16,384 H100 = 16,384 x 54 x 24 / 419 h."""

    reserved_GiB: float = Field(default=0.0, ge=0)
    """Memory no tensor can use: the CUDA context and the communication library's buffers (catalog)."""
    fragmentation: float = Field(default=0.0, ge=0, lt=1)
    """Fraction of the rest lost to the caching allocator's fragmentation (catalog)."""

    @property
    def usable_memory_GiB(self) -> float:
        """What a training job's tensors can fill: (memory - reserved) x (1 - fragmentation)."""
        return (self.memory_GiB - self.reserved_GiB) * (1 - self.fragmentation)

    @property
    def board_power_W(self) -> float | None:
        """What a saturated GPU draws: its limit when one below the datasheet's is set."""
        if self.power_limit_W is not None and (self.power_W is None or self.power_limit_W < self.power_W):
            return self.power_limit_W
        return self.power_W

    @property
    def clock_fraction(self) -> float:
        """Sustained tensor-core clock under power_limit_W, relative to the datasheet limit. A GPU busy
        with GEMMs already runs at its power limit (an H100-class chip settles at 755 of its 834 TFLOP/s
        burst: stas00/ml-engineering, compute/accelerator, MAMF), and dynamic power goes as C V^2 f with
        V about proportional to f over the DVFS range, so P ~ f^3 (Hennessy and Patterson, Computer
        Architecture, 6th ed., sec. 1.5): f = (limit / TDP)^(1/3). 1 without a lower limit."""
        board = self.board_power_W
        if board is None or self.power_W is None or board >= self.power_W:
            return 1.0
        return float((board / self.power_W) ** (1.0 / 3.0))

    @field_validator("peak_tflops", mode="before")
    @classmethod
    def _peak(cls, value: Any) -> Any:
        if isinstance(value, int | float):  # one number: the same peak for every dtype
            return {d: float(value) for d in ("fp32", "tf32", "fp16", "bf16")}
        return value

    def peak_dtype(self, dtype: str) -> str:
        """The ``peak_tflops`` entry that training in ``dtype`` runs at: the one rule for a dtype's peak
        (fp32 training uses TF32 tensor cores where the GPU has them)."""
        return "tf32" if dtype == "fp32" and "tf32" in self.peak_tflops else dtype

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for dtype (``peak_dtype``)."""
        key = self.peak_dtype(dtype)
        if key not in self.peak_tflops:
            raise KeyError(f"cluster.gpu.peak_tflops has no entry for {dtype}")
        return self.peak_tflops[key] * 1e12


class Tier(Strict):
    """A level of the network: ranks inside one unit of it talk over its links."""

    name: str
    """Label of the tier in traces and tables (`nvlink`, `infiniband`, `gloo`, ...)."""
    size: int | None = Field(default=None, gt=0)
    """Ranks inside one unit of this tier; the outermost tier always spans the whole cluster."""
    bandwidth_GBps: float = Field(gt=0)
    """Per rank, one direction, GB/s."""
    latency_us: float = Field(default=0.0, ge=0)
    """Per message (alpha), microseconds."""
    efficiency: float = Field(default=1.0, gt=0, le=1)
    """Achieved fraction of bandwidth_GBps for large collectives (nccl-tests busbw / peak)."""


class ComputeModel(Strict):
    """Achieved compute as a function of op shape (see simulator/costs/efficiency.py).

    Defaults: bounded least-squares fit (benchmarks/fit_published.py) on Korthikanti et al. 2022
    Table 4 (ten per-layer times of the 22B model) and Table 5 (eight iteration times, 22B to 1T) on
    A100, together with the NVLink tier's in-training efficiency. Leave-one-model-out
    cross-validation of that fit is reported by the same script. `plancast calibrate` refits them.
    Over a cluster preset the table may set only some keys and keeps the preset's others (Hopper,
    Blackwell and AMD presets set their attention rates).
    """

    matmul_efficiency: float = Field(default=A100_FIT_MATMUL_EFFICIENCY, gt=0, le=1)
    """Fraction of peak reached by very large GEMMs (A100 fit; Hopper presets scale it, see
    simulator/catalog/clusters.py)."""
    matmul_half_gflop: float = Field(default=0.35, ge=0)
    """GEMM size (GFLOP) at which achieved efficiency is half of matmul_efficiency's headroom."""
    attention_efficiency: float = Field(default=0.54, gt=0, le=1)
    """Fraction of peak reached by the attention core (QK^T, softmax-V)."""
    fused_attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Causal fused attention as Transformer Engine runs it (cuDNN's kernel; parallelism.framework =
    "megatron-lm" with flash_attention): fraction of peak over the causal half of the s x s scores, at
    long sequences; None: such runs take attention_efficiency over the full count, as other kernels do
    (simulator/costs/attention.py)."""
    fused_attention_half_seq: float = Field(default=0.0, ge=0)
    """Sequence length at which the fused kernel reaches half of fused_attention_efficiency."""
    # PyTorch blog 'FlexAttention: The Flexibility of PyTorch with the Performance of FlashAttention'
    # (2024, A100): 90% of FlashAttention-2 forward, 85% backward; fwd+bwd with the backward at 2.5x the
    # forward's FLOPs: 3.5 / (1 / 0.90 + 2.5 / 0.85)
    flex_attention_relative: float = Field(default=0.864, gt=0, le=4)
    """PyTorch FlexAttention's fwd+bwd rate over FlashAttention-2's (training.attention_backend 'flex'),
    on the A100 the defaults describe; Hopper presets set theirs (simulator/catalog/clusters.py)."""
    memory_efficiency: float = Field(default=0.95, gt=0, le=1)
    """Fraction of HBM bandwidth reached by memory-bound ops (norms, activations, optimizer)."""
    op_overhead_us: float = Field(default=26.0, ge=0)
    """Fixed time per operator (kernel launch, framework dispatch)."""
    overlap_slowdown: float = Field(default=0.189, ge=0, le=1)
    """How much slower compute runs while a data-parallel collective runs beside it (its kernels hold
    SMs and HBM bandwidth), as a fraction of the overlapped time: ZeRO-2/3 (FSDP) passes beside their
    gathers and reduce-scatters, a backward beside the DDP buckets it overlaps (overlap_grad_reduce),
    GEMMs beside the tensor-parallel collectives they hide (tp_comm_overlap).
    Default: the mean measured over GPT and Llama training on A100 and H100, 18.9% (max 40%), Lee et
    al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep
    Learning", arXiv 2507.03114, abstract. Not fitted on any run plancast scores."""
    tp_collective_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per tensor-parallel collective beyond the link's alpha-beta (framework dispatch, e.g.
    DTensor redistributes on CPU); ~0 on GPUs, whose host runs ahead. Measured on the local machine: a
    1-element DTensor all-reduce minus a plain one (runtime/microbench_host.py)."""
    sp_collective_overhead_us: float = Field(default=0.0, ge=0)
    """The same for the all-gathers and reduce-scatters of sequence parallelism (DTensor redistributes
    between sequence shards and replicas); measured as a 1-element DTensor all-gather minus a plain one."""
    tp_collective_wait_us: float = Field(default=0.0, ge=0)
    """Mean time a blocking tensor-parallel collective spends beyond its link time and host overhead
    inside a run: its peer arriving late (ranks on shared cores drift apart between two collectives)
    and its transport thread waiting for a time slice. 0 on GPUs and in an isolated microbenchmark;
    fitted by `plancast calibrate` from the collectives of >= 2 tensor-parallel runs at different
    micro-batch sizes (their measured mean minus the model's), bounded by a scheduler period
    (simulator/calibration/runs.py)."""
    ddp_collective_wait_us: float = Field(default=0.0, ge=0)
    """The same for a DDP gradient all-reduce: mean time beyond its link time inside a run, where it
    runs beside the last backward and its transport threads (gloo's) wait for the cores the ranks
    compute on. 0 on GPUs (NCCL's kernels move the data) and in an
    isolated microbenchmark; fitted by `plancast calibrate` from >= 2 such runs at different
    micro-batch sizes (simulator/calibration/runs.py)."""
    dp_collective_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per ZeRO-2/3 (FSDP2) collective; the local-cpu measurement counts it in
    fsdp_unit_overhead_us (the hooks issue the collectives) and leaves this 0."""
    tp_layer_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per tensor-parallel transformer block and micro-batch, forward + backward, beyond its
    collectives (DTensor dispatch and sharding propagation; simulator/costs/host.py), simulated inside
    the block's forward and backward passes, half in each; ~0 on GPUs. Measured on this machine by the
    microbenchmarks (one block, tensor-parallel vs plain)."""
    sp_layer_overhead_us: float = Field(default=0.0, ge=0)
    """The same for a sequence-parallel block (in place of tp_layer_overhead_us)."""
    fsdp_unit_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per FSDP2 unit (each block and the root) and micro-batch beyond its collectives and
    unshards (its pre/post forward and backward hooks run in Python); measured by the microbenchmarks
    (with the unshards in it), refitted by `plancast calibrate` (simulator/calibration/runs.py)."""
    fsdp_gather_overhead_us: float = Field(default=0.0, ge=0)
    """Host time of one FSDP2 unshard beyond its all-gather (the hook that allocates the unsharded
    parameters, issues the gather and copies the shards out). ZeRO-3 unshards each unit twice per
    micro-batch (before forward and again before backward: reshard_after_forward=True), ZeRO-2 once
    (FSDP2 docs, fully_shard). 0 (counted in fsdp_unit_overhead_us) unless `plancast calibrate` has
    ZeRO-2 and ZeRO-3 runs, whose difference separates it; ~0 on GPUs."""
    p2p_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per pipeline transfer on each side (the pipelining runtime's per-action bookkeeping,
    posting the send or receive); ~0 on GPUs, whose host runs ahead. Measured: the executor's
    main-thread CPU time in a 2-stage GPipe step of near-empty stages, minus the same stages run as one
    on one rank, per transfer side (runtime/microbench_pipeline.py); refitted by `plancast calibrate`
    from the time >= 2 pipeline runs' steps hold no span, over their transfer counts (in a run it also
    holds the wait to be scheduled back: ~260 us a side on two shared cores)."""
    p2p_busy_delay_us: float = Field(default=0.0, ge=0)
    """Mean extra time of a pipeline transfer whose sender computes while it should move the message, on
    CPU ranks that keep the cores busy: gloo moves messages on background threads, which can wait for a
    time slice. 0 on GPUs (NCCL's kernels move the data). Measured on the local machine
    (runtime/microbench_host.py: a send followed by 5 ms of compute vs one followed by a wait, receives
    posted at once, mean of 300 each). With `p2p_rendezvous` it applies only to a transfer whose
    receive is posted while its sender computes; without, to every transfer. Where ranks share the
    cores (compute_slots_per_node below the ranks per node), a thread woken while every core runs a
    job waits as long: a transfer lands that much later, and a receiver blocked on it resumes that
    much later (engine/pipeline.py)."""
    p2p_thread_us: float = Field(default=0.0, ge=0)
    """CPU time the transport's own threads spend per pipeline transfer on each side (gloo's TCP event
    loops: polling, moving the message), beside the rank's; it takes a core only where ranks share the
    cores (compute_slots_per_node below the ranks per node), and 0 on GPUs. Measured on the local
    machine (runtime/microbench_pipeline.py: the gloo threads' CPU time per transfer in the executor's
    2-stage step, from Linux's per-thread schedstat)."""
    p2p_rendezvous: bool = False
    """Pipeline transfers start only once both the send and the receive are posted, not when the send is
    posted: gloo's unbound-buffer protocol (gloo/transport/tcp/pair.cc: a posted receive sends
    NOTIFY_RECV_READY, and the sender's event-loop thread writes the message only when that arrives; a
    send posted after it is written by the posting thread at once). True for local-cpu (gloo); False
    on GPUs, modelled as starting when posted (NCCL stages a message through the connection's FIFO
    buffers, NCCL_BUFFSIZE 4 MiB, from the send kernel)."""
    optimizer_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per parameter tensor per optimizer step (a per-tensor update loop: torch's Adam on
    CPU; ~0 with the fused/foreach kernels on GPU). Measured (AdamW over 32 vs 8 tensors); refitted by
    `plancast calibrate` on the optimizer spans of >= 2 runs with different tensor counts per rank."""
    dtensor_optimizer_overhead_us: float = Field(default=0.0, ge=0)
    """The same when the parameters are DTensors (tensor parallel, ZeRO-2/3 with FSDP2): each update op
    goes through DTensor's dispatch. Measured and refitted as optimizer_overhead_us, on DTensors."""


def _gpu_table(gpu: Any) -> dict[str, Any]:
    """A catalog GPU name as its table (`name` included); a table as it is; anything else as no keys."""
    if isinstance(gpu, str):
        return {"name": gpu, **lookup_preset(catalog.GPUS, gpu, "GPU", "gpu")}
    return dict(gpu) if isinstance(gpu, Mapping) else {}


def _shrink_node_tier(data: Mapping[str, Any], preset_node: Any) -> Mapping[str, Any]:
    """A preset whose innermost tier is its node (NVLink within a DGX/HGX node), given fewer GPUs per
    node: the tier shrinks with the node, as NVLink does not reach past the node's GPUs (DGX A100/H100
    and HGX user guides: the NVSwitches join the node's own GPUs)."""
    tiers, node = data.get("tiers"), data.get("gpus_per_node")
    if not (isinstance(preset_node, int) and isinstance(node, int) and node < preset_node):
        return data
    if not isinstance(tiers, list) or len(tiers) < 2 or not isinstance(tiers[0], Mapping):
        return data
    if tiers[0].get("size") != preset_node:
        return data
    inner = [{**tiers[0], "size": node}] if node > 1 else []  # one GPU a node: no NVLink tier at all
    return {**data, "tiers": [*inner, *tiers[1:]]}


def fit_tiers(tiers: list[Mapping[str, Any]], world: int, per_node: int) -> list[dict[str, Any]]:
    """The link tiers of a cluster of `world` GPUs in nodes of `per_node`: an inner tier (a scale-up
    domain) that does not divide the world shrinks to the largest whole-node unit that does, at most its
    own size, and a tier left no wider than the one inside it is dropped; the outermost spans the world.
    The innermost tier, not the node, is the rule for what runs on the fast links: a GB200 NVL72 rack is
    one NVLink domain of 72 GPUs in nodes of 4 (NVIDIA GB200 NVL72 spec); 1,024 such GPUs are planned as
    16 domains of 64 (16 of a rack's 18 trays), as 72 does not divide 1,024."""
    fitted: list[dict[str, Any]] = []
    prev = 1
    for tier in tiers[:-1]:
        size = min(int(tier.get("size") or world), world)
        unit = per_node if size >= per_node else prev
        size = max((d for d in range(prev, size + 1) if world % d == 0 and d % prev == 0 and d % unit == 0),
                   default=prev)
        if size > prev:
            fitted.append({**tier, "size": size})
            prev = size
    return [*fitted, {**tiers[-1], "size": None}]


def _fit_preset_tiers(data: Mapping[str, Any], from_preset: bool) -> Mapping[str, Any]:
    """A preset's tiers fitted to the cluster's size (fit_tiers) where a scale-up domain does not divide
    it; tiers written in the scenario are left for validation to check."""
    tiers, node, nodes = data.get("tiers"), data.get("gpus_per_node", 8), data.get("num_nodes", 1)
    if not (from_preset and data.get("preset") and isinstance(tiers, list) and len(tiers) > 1):
        return data
    if not (isinstance(node, int) and isinstance(nodes, int) and node > 0 and nodes > 0):
        return data
    if not all(isinstance(t, Mapping) for t in tiers):
        return data
    world = node * nodes
    if all(isinstance(t.get("size"), int) and world % t["size"] == 0 for t in tiers[:-1]):
        return data
    return {**data, "tiers": fit_tiers(tiers, world, node)}


class Cluster(Strict):
    """The machines: a GPU type, the node shape and the link tiers, innermost first."""

    preset: str | None = None
    """Catalog name (`plancast catalog`); explicit keys override it."""
    gpu: GPU
    """Catalog GPU name, or a table with peak_tflops, hbm_GBps, memory_GiB; over a preset the table may
    set only some keys (`[cluster.gpu] memory_GiB = 40`) and keeps the preset GPU's others."""
    num_nodes: int = Field(default=1, gt=0)
    """Nodes in the cluster; a preset's node count is scaled by setting it."""
    gpus_per_node: int = Field(default=8, gt=0)
    """GPUs (or CPU ranks) per node."""
    tiers: list[Tier] = Field(min_length=1)
    """Link tiers, innermost first."""
    compute: ComputeModel = ComputeModel()
    """Compute efficiency model (calibratable)."""
    checkpoint_bandwidth_GBps: float = Field(default=1.0, gt=0)
    """Write (and read) bandwidth to checkpoint storage per node, GB/s. Default: Llama 3's Tectonic store
    sustains 2 TB/s for 2,048 nodes (Dubey et al. 2024, sec. 3.3.1), ~1 GB/s per node."""
    restart_overhead_s: float = Field(default=600.0, ge=0)
    """Time from a failure to training again, checkpoint read excluded (detect, reschedule, initialise).
    Default 10 min, the restart time R of Daly 2006 (FGCS 22(3), Fig. 3-5)."""
    pue: float = Field(default=1.1, ge=1)
    """Power usage effectiveness (facility / IT energy). Default 1.10: Google's 2023 fleet average
    (Google 2024 Environmental Report)."""
    compute_slots_per_node: int | None = Field(default=None, gt=0)
    """Ranks of a node share this many compute units (CPU cores when ranks are CPU processes): with more
    runnable passes than units, each runs at units / runnable of one (processor sharing, as Linux's
    scheduler shares cores: simulator/engine/cores.py). None: every rank has its own device.
    `plancast calibrate` sets it to this machine's cores."""

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        explicit_gpu = data.get("gpu") if isinstance(data, Mapping) else None
        explicit_compute = data.get("compute") if isinstance(data, Mapping) else None
        explicit = set(data) if isinstance(data, Mapping) else set()
        node_only = isinstance(data, Mapping) and "gpus_per_node" in data and "tiers" not in data
        preset_node = None
        if node_only and isinstance(data.get("preset"), str) and data["preset"] in catalog.CLUSTERS:
            preset_node = catalog.CLUSTERS[data["preset"]].get("gpus_per_node")
        data = merge_preset(data, catalog.CLUSTERS, "cluster")
        if not isinstance(data, Mapping):
            return data
        data = _shrink_node_tier(data, preset_node)
        data = _fit_preset_tiers(data, from_preset="tiers" not in explicit)
        if isinstance(explicit_gpu, Mapping) and data.get("preset") is not None:
            # A partial [cluster.gpu] table overrides only its keys of the preset's GPU
            # (`memory_GiB = 40` on a dgx-a100-80gb keeps the A100's peaks and bandwidth).
            preset_gpu = merge_preset({"preset": data["preset"]}, catalog.CLUSTERS, "cluster").get("gpu")
            data = {**data, "gpu": {**_gpu_table(preset_gpu), **explicit_gpu}}
        elif isinstance(data.get("gpu"), str):
            data = {**data, "gpu": _gpu_table(data["gpu"])}
        if isinstance(explicit_compute, Mapping) and data.get("preset") is not None:
            # so does a partial [cluster.compute] table of the preset's compute model: `matmul_efficiency
            # = 0.5` on a dgx-h100-80gb keeps its Hopper attention rates, not the A100 defaults
            preset = merge_preset({"preset": data["preset"]}, catalog.CLUSTERS, "cluster")
            if isinstance(preset.get("compute"), Mapping):
                data = {**data, "compute": {**preset["compute"], **explicit_compute}}
        return data

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def tier_sizes(self) -> tuple[int, ...]:
        """Ranks per unit of each tier, innermost first; the outermost spans the cluster."""
        sizes = [t.size or self.world_size for t in self.tiers[:-1]]
        return (*sizes, self.world_size)
