"""The apply_patch conformance suite: ``tests/data/patch_scenarios/<name>/``.

Each scenario holds ``input/`` (the tree before), ``patch.txt``, ``about.txt`` (what it
checks, and where we decide differently from the Codex engine) and either ``expected/``
(the tree after, byte for byte) or ``error.txt`` (the error code on the first line, then the
exact message; the tree must then be ``input/`` unchanged). For a success, every diff in the
details, applied by ``git apply`` to a copy of ``input/``, must give ``expected/`` too
(UTF-16/32 files excepted: git treats them as binary), and its counts are unidiff's.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from unidiff import PatchSet

from tests.file_support import DIFF_CODECS, call, tools

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "patch_scenarios"
NAMES = sorted(p.name for p in SCENARIOS.iterdir())


def tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():  # an input/ git could not keep: empty
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_suite_covers_every_case_it_promises() -> None:
    assert len(NAMES) == 52
    for name in NAMES:
        folder = SCENARIOS / name
        assert (folder / "expected").is_dir() != (folder / "error.txt").is_file(), name


def _copy_input(folder: Path, work: Path) -> None:
    if (folder / "input").is_dir():
        shutil.copytree(folder / "input", work)
    else:  # an empty input tree: git keeps no empty directory
        work.mkdir()


@pytest.mark.parametrize("name", NAMES)
def test_scenario(name: str, tmp_path: Path) -> None:
    folder = SCENARIOS / name
    work = tmp_path / "w"
    _copy_input(folder, work)
    patch = (folder / "patch.txt").read_bytes().decode("utf-8")
    result = call(tools(work)["apply_patch"], patch=patch)
    if (folder / "error.txt").is_file():
        code, _, message = (folder / "error.txt").read_text(encoding="utf-8").partition("\n")
        assert (result.error_code, result.error) == (code, message)
        assert tree(work) == tree(folder / "input"), "a failed patch changed a file"
        return
    assert result.error is None, result.error
    assert tree(work) == tree(folder / "expected")
    scratch = tmp_path / "git"
    _copy_input(folder, scratch)
    subprocess.run(["git", "init", "-q"], cwd=scratch, check=True)
    expected = tree(folder / "expected")
    for entry in result.details.files:
        patch_set = PatchSet(entry.diff)
        counted = (sum(f.added for f in patch_set), sum(f.removed for f in patch_set))
        assert (entry.additions, entry.deletions) == counted, entry.diff
        if entry.encoding not in DIFF_CODECS:
            continue  # git sees UTF-16/32 as binary; the tree check above holds
        subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-"],
            input=entry.diff.encode(DIFF_CODECS[entry.encoding]),
            cwd=scratch,
            check=True,
            capture_output=True,
        )
        for path in (entry.path, entry.move_to):
            if path is not None:
                on_disk = (scratch / path).read_bytes() if (scratch / path).exists() else None
                assert on_disk == expected.get(path), (path, entry.diff)
    assert result.details.additions == sum(f.additions for f in result.details.files)
    assert result.details.deletions == sum(f.deletions for f in result.details.files)
