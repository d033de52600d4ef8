"""Reading an input file with limits: the one reader behind every file plancast is handed.

A path given to plancast may name a FIFO (a read that never ends), ``/dev/zero`` (one that never stops),
a file of gigabytes, a ``.json.gz`` that unpacks a thousandfold, text nested tens of thousands deep
(parsers recurse once per level) or a number of hundreds of digits. Each is refused here with a message
naming the file, the limit and the fix (exit code 2 through the CLI, docs/cli.md "Input limits"):

- regular files only: the file is opened without blocking and checked with ``fstat`` before a byte is read;
- a size cap per kind of input (``MAX_*_BYTES``), read as at most cap + 1 bytes;
- gzip streamed, stopping at the size cap or at ``MAX_GZIP_RATIO`` times the compressed size;
- TOML and JSON: nesting at most ``MAX_NESTING`` deep and integers of at most ``MAX_INT_DIGITS`` digits,
  checked on the text by one linear scan before any parser sees it.

Tests lower the caps (they are read at call time) so that small inputs exercise them.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import tomllib
import zlib
from pathlib import Path
from typing import Any

MiB = 1024**2
MAX_SCENARIO_BYTES = 4 * MiB
"""A scenario, a preset or a calibrated cluster profile (TOML): ours are a few KiB."""
MAX_CONFIG_BYTES = 4 * MiB
"""An imported config: HF config.json, a DeepSpeed JSON, a Megatron-LM argument file (KiB each)."""
MAX_TRACE_BYTES = 2 * 1024 * MiB
"""A profiler trace (unpacked): Kineto traces of a few steps of a large job are hundreds of MiB."""
MAX_GZIP_RATIO = 200
"""Unpacked over packed size: profiler JSON packs 5-30x; deflate's ceiling is about 1032x (RFC 1951
stores at most 258 bytes per 2-bit code), so a file beyond 200x is built to fill memory."""
MAX_NESTING = 64
"""Levels of arrays/tables/objects: a scenario needs 3, a DeepSpeed config 4, a trace's args 3."""
MAX_INT_DIGITS = 40
"""Digits of an integer. Every number plancast reads is bounded far lower (simulator/validation.py
BOUNDS: 1e15 at most; int64 ids: 19 digits); a longer one is refused here, before Python converts it (a
cost that grows with the square of the digits, which is why CPython stops at 4300), while a merely too
large value still reaches validation and its message naming the key."""
MAX_RANKS = 1_000_000
"""Ranks a trace may name (0 .. MAX_RANKS - 1): simulator/validation.py MAX_WORLD_SIZE, the largest world
plancast plans for (10x the largest published clusters)."""


class BoundedReadError(ValueError):
    """An input that is not a regular file, or passes a limit; the message names the file and the fix."""


def _open_regular(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens without a writer
    except FileNotFoundError:
        raise BoundedReadError(f"file not found: {path}") from None
    except OSError as err:
        raise BoundedReadError(f"cannot read {path}: {err.strerror or err}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO, socket or device"
        raise BoundedReadError(f"{path} is {kind}, not a regular file: give the path of a file")
    return fd


def regular_file_size(path: str | Path) -> int:
    """The size of the regular file `path`; BoundedReadError for a folder, FIFO, device or missing file."""
    fd = _open_regular(Path(path))
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _too_big(path: Path, cap_bytes: int, what: str) -> BoundedReadError:
    return BoundedReadError(
        f"{path} is larger than {cap_bytes / MiB:g} MiB, the limit for {what}: it is not one plancast "
        "can use (see docs/cli.md, Input limits)"
    )


def read_bytes(path: str | Path, cap_bytes: int, what: str) -> bytes:
    """The bytes of the regular file `path` (unpacked if its name ends in .gz), at most `cap_bytes`."""
    path = Path(path)
    fd = _open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        if not path.name.endswith(".gz"):
            data = handle.read(cap_bytes + 1)
            if len(data) > cap_bytes:
                raise _too_big(path, cap_bytes, what)
            return data
        packed = os.fstat(fd).st_size
        limit = min(cap_bytes, max(packed * MAX_GZIP_RATIO, MiB))
        try:
            with gzip.GzipFile(fileobj=handle) as unpacked:
                data = unpacked.read(limit + 1)
        except (OSError, EOFError, zlib.error) as err:
            raise BoundedReadError(
                f"{path} could not be unpacked ({err}): is it a complete gzip file?"
            ) from err
    if len(data) > limit:
        if limit == cap_bytes:
            raise _too_big(path, cap_bytes, f"{what} (unpacked)")
        raise BoundedReadError(
            f"{path} unpacks to more than {MAX_GZIP_RATIO}x its {packed} bytes: refused as a "
            "decompression bomb; unpack it yourself if you trust it"
        )
    return data


def read_text(path: str | Path, cap_bytes: int, what: str) -> str:
    """``read_bytes`` decoded as UTF-8; a leading byte-order mark (Windows editors write one) is dropped."""
    data = read_bytes(path, cap_bytes, what)
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        why = f"it is not UTF-8 text (byte {err.start}: {err.reason}); save it as UTF-8"
        raise BoundedReadError(f"cannot read {path}: {why}") from None


# Tokens whose brackets and digits do not count: strings (and TOML comments), then what does count.
_TOML_TOKENS = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]|[0-9][0-9_]*(?:\.[0-9_]+)?(?:[eE][+-]?[0-9_]+)?'
)
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]|[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?')


def check_text(text: str, source: str, toml: bool) -> None:
    """BoundedReadError when `text` nests deeper than MAX_NESTING or has an integer of more than
    MAX_INT_DIGITS digits (outside strings and comments). One linear regex scan."""
    depth = 0
    for match in (_TOML_TOKENS if toml else _JSON_TOKENS).finditer(text):
        token = match.group().replace("_", "")  # TOML's 1_000
        if token in "[{":
            depth += 1
            if depth > MAX_NESTING:
                line = text.count("\n", 0, match.start()) + 1
                raise BoundedReadError(
                    f"{source}: arrays or tables nested more than {MAX_NESTING} deep (line {line}); "
                    "a plancast input needs a handful of levels"
                )
        elif token in "]}":
            depth -= 1
        elif token[0].isdigit() and token.isdigit() and len(token) > MAX_INT_DIGITS:
            line = text.count("\n", 0, match.start()) + 1
            raise BoundedReadError(
                f"{source}: a number of {len(token)} digits at line {line}; plancast reads numbers of at "
                f"most {MAX_INT_DIGITS} digits"
            )


def load_toml(text: str, source: str) -> dict[str, Any]:
    """``tomllib.loads`` after ``check_text``; tomllib.TOMLDecodeError passes through for the caller."""
    check_text(text, source, toml=True)
    return tomllib.loads(text)


def _capped_int(token: str) -> int:
    if len(token.lstrip("-")) > MAX_INT_DIGITS:
        raise BoundedReadError(f"a number of {len(token)} digits; plancast reads at most {MAX_INT_DIGITS}")
    return int(token)


def load_json(text: str | bytes, source: str, *, scan: bool = True, **options: Any) -> Any:
    """``json.loads`` with the nesting and digit caps; json.JSONDecodeError passes through. `scan` False
    (large traces): the digits are checked by the parser's int hook, the nesting by its recursion limit."""
    if scan:
        check_text(text if isinstance(text, str) else text.decode("utf-8", "replace"), source, toml=False)
    try:
        return json.loads(text, parse_int=_capped_int, **options)
    except RecursionError:
        raise BoundedReadError(f"{source}: arrays or objects nested too deeply to read") from None
    except BoundedReadError as err:
        raise BoundedReadError(f"{source}: {err}") from None
