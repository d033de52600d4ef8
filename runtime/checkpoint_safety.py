"""Reading a checkpoint without running code from it: the run folder is data, never a program.

A DCP checkpoint is a ``.metadata`` pickle plus ``__R_0.distcp`` files, and each rank's progress is a
``torch.save`` file; ``pickle.load``/``torch.load(weights_only=False)`` on either runs whatever a crafted
file names (a ``__reduce__`` is a function call). Resuming someone else's run folder must not run their
code as you, so (docs/run-directory.md, "Checkpoints"):

- ``.metadata`` is unpickled by ``_MetadataUnpickler``, which resolves only the classes DCP's metadata
  is built of (torch/distributed/checkpoint/metadata.py, filesystem.py ``_StorageInfo``, ``torch.Size``,
  dtypes, layouts, ``pathlib`` paths); any other global is refused before it is looked up.
- tensors in ``.distcp`` files are read by DCP with ``torch.load(weights_only=True)`` (filesystem.py
  ``read_data``); the non-tensor items (an optimizer's ``lr``, ``betas``) by ``SafeLoadPlanner``,
  which loads them with ``weights_only=True`` too, where DCP's DefaultLoadPlanner uses False.
- ``rank-NNNNN.pt`` is loaded with ``weights_only=True``: it holds ints, floats, lists and tensors only.

``find_resumable`` checks a run's complete checkpoints, newest first, in the launcher before any rank
starts: a checkpoint that names code is refused (CheckpointRefusedError, exit 2); a damaged one (a file cut
short by a kill or a full disk) is skipped for the previous complete one, and the reason is returned.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

METADATA_NAME = ".metadata"  # torch/distributed/checkpoint/filesystem.py _metadata_fn
MAX_METADATA_BYTES = 64 * 1024**2  # ours are kilobytes (one small record per tensor)
MAX_PROGRESS_BYTES = 64 * 1024**2  # a rank's losses, step times and RNG states: kilobytes

_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_ALLOWED_GLOBALS = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # a layout by its name, e.g. "torch.strided"
    ("pathlib", "PosixPath"),  # StorageMeta.checkpoint_id
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}
PROGRESS_KEYS = {"steps_done", "losses", "step_times_s", "rng", "cuda_rng"}


class CheckpointRefusedError(ValueError):
    """A checkpoint file names something other than data: it is refused, never loaded."""


class CheckpointDamagedError(ValueError):
    """A checkpoint file that is cut short or unreadable: an older complete checkpoint may serve."""


def _refuse(path: Path, what: str) -> CheckpointRefusedError:
    return CheckpointRefusedError(
        f"{path} {what}, which a checkpoint plancast writes never holds: refused without loading it "
        "(a crafted checkpoint can run code when unpickled). Resume only run folders you trust to hold "
        "plancast's own checkpoints, or delete that checkpoint folder"
    )


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, path: Path) -> None:
        super().__init__(io.BytesIO(data))
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if module == _METADATA_MODULE:
            found = getattr(__import__(module, fromlist=[name]), name, None)
            if isinstance(found, type) and found.__module__ == module:
                return found
        elif module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        elif (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise _refuse(self.path, f"names {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _refuse(self.path, "holds a persistent reference")


def _read_capped(path: Path, cap_bytes: int) -> bytes:
    """The bytes of a regular file of at most `cap_bytes`; CheckpointDamagedError otherwise."""
    if path.is_symlink() or not path.is_file():
        raise CheckpointDamagedError(f"{path} is missing or not a regular file")
    with path.open("rb") as handle:
        data = handle.read(cap_bytes + 1)
    if len(data) > cap_bytes:
        raise CheckpointDamagedError(f"{path} is larger than {cap_bytes // 1024**2} MiB, so not plancast's")
    return data


def read_metadata(folder: Path) -> Metadata:
    """DCP's metadata of a checkpoint folder, unpickled with only DCP's metadata classes allowed."""
    path = Path(folder) / METADATA_NAME
    data = _read_capped(path, MAX_METADATA_BYTES)
    try:
        metadata = _MetadataUnpickler(data, path).load()
    except CheckpointRefusedError:
        raise
    except Exception as err:  # a pickle cut short raises any of a dozen types
        raise CheckpointDamagedError(f"{path} cannot be read ({type(err).__name__}: {err})") from err
    if not isinstance(metadata, Metadata):
        raise _refuse(path, f"holds a {type(metadata).__name__}, not DCP metadata")
    return metadata


def check_storage(folder: Path, metadata: Metadata) -> None:
    """Every item the metadata places in a file lies inside that file, and every file inside `folder`."""
    ends: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        name = str(getattr(info, "relative_path", ""))
        if not name or Path(name).name != name or name in {".", ".."}:
            raise _refuse(folder / METADATA_NAME, f"points at the file {name!r} outside its folder")
        ends[name] = max(ends.get(name, 0), int(info.offset) + int(info.length))
    for name, end in ends.items():
        path = Path(folder) / name
        size = path.stat().st_size if path.is_file() and not path.is_symlink() else None
        if size is None or size < end:
            found = "missing" if size is None else f"{size} bytes"
            needs = f"its metadata needs {end} bytes, found {found}"
            raise CheckpointDamagedError(f"{path} is cut short: {needs}")


def load_progress(path: Path) -> dict[str, Any]:
    """A rank's progress file (``rank-NNNNN.pt``), loaded with ``weights_only=True``."""
    data = _read_capped(path, MAX_PROGRESS_BYTES)
    try:
        saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # weights_only refuses every global but tensors and containers
        raise _refuse(path, f"names a type beyond tensors and plain containers ({err})") from err
    except Exception as err:  # a zip cut short: RuntimeError from the stream reader, EOFError, ...
        raise CheckpointDamagedError(f"{path} cannot be read ({type(err).__name__}: {err})") from err
    if not isinstance(saved, dict) or not {"steps_done", "losses", "step_times_s", "rng"} <= saved.keys():
        raise CheckpointDamagedError(f"{path} does not hold a rank's progress (steps_done, losses, ...)")
    return saved


def check_checkpoint(folder: Path, world_size: int) -> None:
    """CheckpointRefusedError or CheckpointDamagedError unless `folder` is a whole checkpoint of
    `world_size` ranks."""
    folder = Path(folder)
    check_storage(folder, read_metadata(folder))
    for rank in range(world_size):
        load_progress(folder / f"rank-{rank:05d}.pt")


def find_resumable(folders: list[tuple[int, Path]], world_size: int) -> tuple[int, list[str]]:
    """(steps done, why each newer one was skipped) of the newest whole checkpoint among `folders`
    ((steps, folder), any order). CheckpointRefusedError at once for one that names code;
    CheckpointDamagedError naming each problem when none is whole."""
    skipped: list[str] = []
    for steps, folder in sorted(folders, reverse=True):
        try:
            check_checkpoint(folder, world_size)
        except CheckpointDamagedError as err:
            skipped.append(f"{folder.name} is damaged ({err})")
            continue
        return steps, skipped
    raise CheckpointDamagedError("no complete checkpoint can be read: " + "; ".join(skipped))


class SafeFileSystemReader(FileSystemReader):
    """DCP's file reader with ``read_metadata`` through ``_MetadataUnpickler`` (no arbitrary pickle)."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        folder = Path(self.path)
        metadata = read_metadata(folder)
        check_storage(folder, metadata)
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()  # as FileSystemReader does
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner whose non-tensor items load with ``weights_only=True``."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        checked = torch.load(value, weights_only=True)  # refuses any global but plain containers
        again = io.BytesIO()  # hand the parent a stream that holds only what was just checked
        torch.save(checked, again)
        again.seek(0)
        super().load_bytes(read_item, again)
