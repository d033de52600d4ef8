"""The host side of a GPU: its link to host memory and the host memory and bandwidth it shares.

What offloading (training.optimizer_cpu_offload, training.activation_offload) moves over and keeps in.
Per GPU, by the start of the GPU's catalog name (a calibrated or custom GPU keeps its family's):
- link_GBps, per direction: PCIe Gen4 x16 = 32 GB/s raw (A100 SXM4/PCIe: PCI-SIG PCIe 4.0 spec), PCIe
  Gen5 x16 = 64 GB/s raw (H100, H200, H800, B200 datasheets: "PCIe Gen5 128 GB/s" both directions),
  NVLink-C2C 450 GB/s per direction (GH200 datasheet: 900 GB/s total); a GB200 / GB300 superchip links
  one Grace to two GPUs over 900 GB/s of NVLink-C2C (NVIDIA GB200 NVL72 / GB300 NVL72 spec tables), 225
  GB/s a GPU and direction. Other GPUs: the DGX H100's.
- host_memory_GiB: the node's DRAM over its 8 GPUs: DGX A100 2 TB (DGX A100 user guide, 2 TB option;
  1 TB standard: set it), DGX H100 2 TB (DGX H100 datasheet), GH200 480 GB LPDDR5X per superchip,
  GB200 / GB300 NVL72 17 TB LPDDR5X per 72 GPUs (spec tables: 480 GB per Grace, two GPUs each).
- host_memory_GBps: the node's DRAM bandwidth over its 8 GPUs: DGX A100 2 x AMD EPYC 7742, 8 channels of
  DDR4-3200 each (25.6 GB/s a channel): 409.6 GB/s; DGX H100 2 x Xeon 8480C, 8 channels of DDR5-4800
  (38.4 GB/s a channel): 614 GB/s; GH200 LPDDR5X 512 GB/s per superchip (datasheet); GB200 / GB300
  NVL72 up to 14 TB/s per 72 GPUs (spec tables).
A CPU rank's "host" is its own memory: offloading moves nothing (the local-cpu preset).
"""

from __future__ import annotations

from typing import NamedTuple


class HostSide(NamedTuple):
    link_GBps: float
    host_memory_GiB: float
    host_memory_GBps: float


_TB = 1e12 / 2**30  # GiB in a TB

HOST_SIDES: dict[str, HostSide] = {
    "A100": HostSide(32.0, 2 * _TB / 8, 409.6 / 8),
    "H100": HostSide(64.0, 2 * _TB / 8, 614.4 / 8),
    "H800": HostSide(64.0, 2 * _TB / 8, 614.4 / 8),
    "H200": HostSide(64.0, 2 * _TB / 8, 614.4 / 8),
    "GH200": HostSide(450.0, 480e9 / 2**30, 512.0),
    "GB200": HostSide(900.0 / 2 / 2, 17e12 / 72 / 2**30, 14e12 / 72 / 1e9),
    "GB300": HostSide(900.0 / 2 / 2, 17e12 / 72 / 2**30, 14e12 / 72 / 1e9),
}
DEFAULT_HOST_SIDE = HOST_SIDES["H100"]


def host_side(gpu_name: str) -> HostSide:
    """The host side of the GPU named `gpu_name` (the longest catalog family its name starts with)."""
    matches = [k for k in HOST_SIDES if gpu_name.upper().startswith(k)]
    return HOST_SIDES[max(matches, key=len)] if matches else DEFAULT_HOST_SIDE
