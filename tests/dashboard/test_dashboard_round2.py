"""The dashboard cannot be walked out of (issue 35): a listed run is confined as a typed one, uploads go
to a private folder that a refusal leaves empty, and text that is no path is a message, not a traceback."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import OpenPage, no_exception, widget
from streamlit.testing.v1 import AppTest

from plancast.dashboard import data


def test_a_listed_link_that_points_outside_is_not_listed(tmp_path: Path, healthy_run: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    shutil.copytree(healthy_run, root / "inside")
    outside = Path(shutil.copytree(healthy_run, tmp_path / "elsewhere"))
    (root / "escape").symlink_to(outside)  # a run, but outside the runs folder
    (root / "alias").symlink_to(root / "inside")  # a link that stays inside
    (root / "loop").symlink_to(root / "loop")
    found = data.runs_in_folder(root, [root.resolve()])
    assert found == [(root / "inside").resolve()]  # the alias is the same run, once resolved
    assert outside.resolve() not in found


@pytest.mark.parametrize("typed", ["runs\x00/x", "a\nb", "x" * 5000])
def test_text_that_is_no_path_is_refused_with_a_message(tmp_path: Path, typed: str) -> None:
    with pytest.raises(data.UploadError, match="the path typed"):
        data.confined(typed, [tmp_path])


def test_a_nul_in_the_runs_folder_box_is_a_message(open_page: OpenPage) -> None:
    at = open_page(None, "overview")
    widget(at.sidebar.text_input, "Runs folder").set_value("runs\x00evil").run()
    no_exception(at)
    assert any("the path typed holds the character" in e.value for e in at.error)


def test_a_refused_upload_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "MAX_EXTRACTED_BYTES", 1000)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("run/scenario.toml", "x" * 600)
        archive.writestr("run/predicted/events.parquet", "y" * 600)  # passes the limit part-way
    with pytest.raises(data.UploadError, match="expands to more than"):
        data.materialize_upload([("run.zip", buffer.getvalue())], tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_uploads_go_to_a_private_folder_per_session(
    open_page: OpenPage, healthy_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    planted = shared / "plancast-dashboard-0"  # what a predictable name would have followed
    planted.symlink_to(tmp_path)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in healthy_run.rglob("*"):
            if path.is_file():
                archive.write(path, f"up/{path.relative_to(healthy_run).as_posix()}")
    first = open_page(None, "overview")
    first.sidebar.file_uploader[0].upload("up.zip", buffer.getvalue(), "application/zip").run()
    no_exception(first)
    folders = [p for p in shared.iterdir() if not p.is_symlink()]
    assert len(folders) == 1 and stat.S_IMODE(folders[0].stat().st_mode) == 0o700
    assert any(folders[0].glob("upload-*/up/predicted/events.parquet"))
    assert not any(tmp_path.glob("upload-*"))  # nothing went through the planted link
    second = AppTest.from_file(str(data.Path(__file__).resolve().parents[2] / "dashboard" / "app.py")).run()
    no_exception(second)
    assert len([p for p in shared.iterdir() if not p.is_symlink()]) == 1  # none until it uploads


def test_the_upload_folder_is_removed_when_the_process_exits(tmp_path: Path) -> None:
    code = "from plancast.dashboard import data; p = data.upload_root(); (p / 'f').write_text('x'); print(p)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        check=False,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    made = Path(done.stdout.strip().splitlines()[-1])
    assert made.parent == tmp_path and made.name.startswith("plancast-dashboard-")
    assert not made.exists()


def test_viewing_pages_without_uploading_makes_no_upload_folder(
    open_page: OpenPage, healthy_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder per page view outlived every server stopped by a signal (121 left in /tmp by one day's
    test runs): the folder is made at the first upload only."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for page in ("overview", "memory"):
        no_exception(open_page(healthy_run, page))
    assert not list(tmp_path.glob("plancast-dashboard-*"))
