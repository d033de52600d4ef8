"""pyproject.toml lists every package the source tree has, so `pip install .` ships all of them.

setuptools' explicit `packages` list (needed for the package-dir mapping that installs the folders as
plancast.*) does not grow by itself: a new sub-package missing from it installs a plancast without
that module (as `plancast.commands` once was)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _source_packages() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    roots = {"plancast": "plancast", **config["package-dir"]}
    found = set()
    for name, folder in roots.items():
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            if name == "plancast" and parts and parts[0] in {k.split(".")[1] for k in config["package-dir"]}:
                continue  # the source tree's symlinks plancast/<x> -> ../<x>, listed under their own root
            found.add(".".join((name, *parts)))
    return found


def test_every_package_is_listed() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    missing = _source_packages() - listed
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"


def test_every_mapped_folder_is_a_listed_package() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    for package, folder in config["package-dir"].items():
        assert package in config["packages"]
        assert (REPO / folder).is_dir()
        assert (REPO / "plancast" / package.split(".")[1]).resolve() == (REPO / folder).resolve()
