"""The ``*** Begin Patch`` envelope run by us and by ``codex-apply-patch`` (0.4.0, a port of
Codex's engine): generated multi-file patches (updates with several chunks, ``@@`` lines and
``*** End of File``, adds, deletes, moves) give the same tree wherever Codex's result is
defined, the conformance suite agrees with it except where a test names the README line
that says we differ, and patches Codex's parser rejects we reject too, unless the README
lists the leniency."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import codex_apply_patch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.file_support import call, tools
from tests.probe5._oracle import check_refusal, said_in_readme
from tests.probe5._render import VOCABULARY, Edit, chunks, edits
from workspace_tools.text._patch_parse import PatchSyntaxError, parse_patch

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "patch_scenarios"

Tree = dict[str, bytes]


PANIC: Tree = {"<panic>": b""}


def codex(patch: str, tree: Tree) -> Tree | None:
    """The tree Codex's engine leaves, or ``None`` when it fails (its in-memory errors carry
    no text). A moved file's old path is left out of its ``files`` as it is on disk."""
    try:
        result = codex_apply_patch.apply_patch_in_memory(
            patch, {k: v.decode("utf-8") for k, v in tree.items()}
        )
    except RuntimeError:
        return None
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        # Its engine panics on some patches (a chunk appended at the end, then another
        # chunk): no result to compare with.
        return PANIC
    out = dict(tree)
    for moved in re.finditer(r"\*\*\* Update File: (.+)\n\*\*\* Move to: (.+)\n", patch):
        if moved.group(1).strip() != moved.group(2).strip():
            out.pop(moved.group(1).strip(), None)
    out.update({k: v.encode("utf-8") for k, v in result.files.items()})
    for gone in result.deleted:
        out.pop(gone, None)
    return out


def read_tree(root: Path) -> Tree:
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


#: The scenarios whose outcome Codex's engine decides otherwise, and the README words that
#: say what we do instead.
DIFFER = {
    "010_move_refuses_existing_destination": "Add or Move onto an existing file is",
    "011_add_refuses_existing_file": "Add or Move onto an existing file is",
    "014_update_keeps_missing_final_newline": "the final-newline state (a file",
    "016_pure_addition_without_place_refused": "never appended at the end",
    "023_stacked_anchors": "`@@ text` anchors that may be stacked",  # the port's parser
    "024_ambiguous_chunk_refused": "never the first one taken",
    "025_trailing_whitespace_level": "Context lines stay the file's own bytes",
    "026_unicode_punctuation_level": "Context lines stay the file's own bytes",
    "028_crlf_file": "each line's ending (an added line takes",
    "031_utf8_bom_file": "encoding and BOM",
    "033_heredoc_wrapper": "a heredoc wrapper",
    "035_mixed_line_endings": "each line's ending (an added line takes",
    "038_unified_range_header": "unified ranges after `@@`",
    "040_pure_addition_after_anchor": "A chunk of only `+` lines goes right after its `@@` line",
    "041_delete_then_add_same_path": "operations on one path apply in order",
    "043_move_only": "an Update with only `*** Move to:` renames the file as it is",
    "044_anchor_repeated_lines_after_two_occurrences": "the places after every occurrence",
    "046_pure_addition_after_repeated_anchor": "A chunk of only `+` lines goes right after",
    "048_anchor_repeated_for_chunks_of_one_block": "still counts for lines found after that",
}


def scenario_trees(folder: Path) -> tuple[Tree, str, Tree | None]:
    expected = read_tree(folder / "expected") if (folder / "expected").is_dir() else None
    return read_tree(folder / "input"), (folder / "patch.txt").read_text("utf-8"), expected


UTF8_SCENARIOS = sorted(
    p.name for p in SCENARIOS.iterdir() if p.name not in {"029_latin1_file", "030_utf16_bom_file"}
)


@pytest.mark.parametrize("name", UTF8_SCENARIOS)
def test_the_conformance_suite_agrees_with_codex_or_says_why_not(name: str) -> None:
    before, patch, expected = scenario_trees(SCENARIOS / name)
    theirs = codex(patch.replace("\r\n", "\n") if name != "034_crlf_patch_text" else patch, before)
    if name in DIFFER:
        assert theirs != expected, f"{name} no longer differs from Codex: drop it from DIFFER"
        said_in_readme(DIFFER[name])
    else:
        assert theirs == expected, (theirs, expected)


@dataclass(frozen=True)
class Operation:
    kind: str  # update, move, delete, add
    path: str
    edit: Edit | None = None
    omit_first_at: bool = False
    added: tuple[str, ...] = ()


def envelope(operations: list[Operation]) -> str:
    """The patch a model writes for ``operations``."""
    text = ["*** Begin Patch"]
    for op in operations:
        if op.kind == "delete":
            text.append(f"*** Delete File: {op.path}")
        elif op.kind == "add":
            text.append(f"*** Add File: {op.path}")
            text += ["+" + line for line in op.added]
        else:
            assert op.edit is not None
            text.append(f"*** Update File: {op.path}")
            if op.kind == "move":
                text.append(f"*** Move to: moved/{op.path}")
            for number, (anchor, body, eof, _) in enumerate(chunks(op.edit)):
                if not (number == 0 and anchor is None and op.omit_first_at):
                    text.append("@@" if anchor is None else f"@@ {anchor}")
                text += [kind + line for kind, line in body]
                if eof:
                    text.append("*** End of File")
    text.append("*** End Patch")
    return "\n".join(text) + "\n"


@st.composite
def patches(draw: st.DrawFn) -> list[Operation]:
    """One to three existing files updated, moved or deleted, and perhaps one added; the
    files are LF with a final newline, where Codex's engine keeps the bytes it does not
    change (it ends every file it writes with one)."""
    operations = []
    for index in range(draw(st.integers(1, 3))):
        edit = draw(edits(crlf=False))
        edit = Edit(
            edit.lines,
            "\n",
            True,
            edit.regions,
            edit.context,
            edit.anchors,
            edit.end_of_file,
            stacked=False,  # the port's parser takes one @@ line a chunk
        )
        kind = draw(st.sampled_from(["update", "update", "move", "delete"]))
        operations.append(
            Operation(kind, f"d{index}/p{index}.txt", edit, omit_first_at=draw(st.booleans()))
        )
    if draw(st.booleans()):
        added = tuple(draw(st.lists(st.sampled_from(VOCABULARY), max_size=4)))
        operations.append(Operation("add", "new/added.txt", added=added))
    return operations


class Roots:
    """A directory, our apply_patch over it, and the names of the examples' directories."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tool = tools(root)["apply_patch"]
        self.names = count()

    def __repr__(self) -> str:
        return f"Roots({self.root})"


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Roots:
    root = tmp_path_factory.mktemp("envelope")
    return Roots(root)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=patches())
def test_envelopes_give_codexs_tree_where_its_result_is_defined(
    roots: Roots, operations: list[Operation]
) -> None:
    before = {op.path: op.edit.data for op in operations if op.edit is not None}
    patch = envelope(operations)
    theirs = codex(patch, before)
    # Each example in a directory of its own: the paths of the patch are relative to it.
    here = roots.root / f"e{next(roots.names)}"
    for path, data in before.items():
        (here / path).parent.mkdir(parents=True, exist_ok=True)
        (here / path).write_bytes(data)
    rooted = re.sub(r"(File|to): ", lambda m: f"{m.group(0)}{here.name}/", patch)
    result = call(roots.tool, patch=rooted)
    ours = read_tree(here)
    if result.error is None:
        assert ours == truth(operations), (patch, result.content)
        if theirs is not PANIC and theirs is not None:
            theirs = without_codexs_empty_line_bug(operations, theirs)
        if theirs is not PANIC:
            assert ours == theirs, (patch, result.content)
        return
    assert ours == before, "a refused patch changed a file"
    assert result.error.endswith(
        "No file was changed: correct this part and send the whole patch again."
    )
    if theirs is None:
        return  # both refuse
    # Codex applied it (or panicked): our refusal must be one of the deliberate ones.
    failing = next(op for op in operations if result.error.startswith(f"{here.name}/{op.path}: "))
    assert failing.edit is not None
    check_refusal(failing.edit, result.error)


def truth(operations: list[Operation]) -> Tree:
    """The tree the patch describes."""
    tree = {op.path: op.edit.data for op in operations if op.edit is not None}
    for op in operations:
        if op.kind == "add":
            tree[op.path] = "".join(line + "\n" for line in op.added).encode()
        elif op.kind == "delete":
            del tree[op.path]
        else:
            assert op.edit is not None
            del tree[op.path]
            tree[op.path if op.kind == "update" else f"moved/{op.path}"] = op.edit.result
    return tree


def without_codexs_empty_line_bug(operations: list[Operation], theirs: Tree) -> Tree:
    """``theirs`` with the bug of Codex's engine undone: an updated file whose last line is
    empty comes out without it (``a`` replaced by an empty line gives an empty file, not
    one line break)."""
    fixed = dict(theirs)
    for op in operations:
        if op.edit is None or op.kind == "delete":
            continue
        path = op.path if op.kind == "update" else f"moved/{op.path}"
        result = op.edit.result
        if result.endswith(b"\n\n") or result == b"\n":
            assert theirs.get(path) == result[:-1], "Codex keeps an empty last line now"
            fixed[path] = result
    return fixed


REJECTED_BY_BOTH = {
    "no begin marker": "garbage\n",
    "no end marker": "*** Begin Patch\n*** Delete File: a.txt\n",
    "unknown header": "*** Begin Patch\n*** Frob File: a\n*** End Patch\n",
    "update without chunks": "*** Begin Patch\n*** Update File: a.txt\n*** End Patch\n",
    "line of no kind": "*** Begin Patch\n*** Update File: a.txt\n@@\nxx\n*** End Patch\n",
    "last @@ without lines": (
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+b\n@@\n*** End Patch\n"
    ),
    "@@ then end of file": (
        "*** Begin Patch\n*** Update File: a.txt\n@@\n*** End of File\n*** End Patch\n"
    ),
    "add line without +": "*** Begin Patch\n*** Add File: n.txt\n+a\nb\n*** End Patch\n",
    "text after the end": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\ntrailing\n",
}


@pytest.mark.parametrize("patch", REJECTED_BY_BOTH.values(), ids=REJECTED_BY_BOTH.keys())
def test_patches_codexs_parser_rejects_we_reject(patch: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid (patch|hunk)"):
        codex_apply_patch.parse_patch(patch)
    with pytest.raises(PatchSyntaxError, match=r"^invalid patch: "):
        parse_patch(patch)


ACCEPTED_HERE = {
    "heredoc wrapper": (
        "apply_patch <<'EOF'\n*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\nEOF\n",
        "a heredoc wrapper",
    ),
    "blank line between operations": (
        "*** Begin Patch\n*** Delete File: a.txt\n\n*** Delete File: b.txt\n*** End Patch\n",
        "blank lines between operations",
    ),
    "move without chunks": (
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n*** End Patch\n",
        "an Update with only `*** Move to:` renames the file as it is",
    ),
    "@@ without its space": (
        "*** Begin Patch\n*** Update File: a.txt\n@@def\n-a\n*** End Patch\n",
        "`@@text` without its space",
    ),
}


@pytest.mark.parametrize(("patch", "readme"), ACCEPTED_HERE.values(), ids=ACCEPTED_HERE.keys())
def test_patches_codexs_parser_rejects_we_accept_where_the_readme_says(
    patch: str, readme: str
) -> None:
    with pytest.raises(ValueError, match=r"^invalid (patch|hunk)"):
        codex_apply_patch.parse_patch(patch)
    assert parse_patch(patch)
    said_in_readme(readme)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=patches())
def test_the_diffs_we_report_are_what_git_apply_needs_to_make_the_same_tree(
    roots: Roots, operations: list[Operation]
) -> None:
    before = {op.path: op.edit.data for op in operations if op.edit is not None}
    here = roots.root / f"g{next(roots.names)}"
    write_tree(here / "ours", before)
    write_tree(here / "git", before)
    tool = tools(here / "ours")["apply_patch"]
    result = call(tool, patch=envelope(operations))
    if result.error is not None:
        return  # refusals are the test above's
    diff = "".join(entry.diff for entry in result.details.files)
    subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"],
        input=diff.encode(),
        cwd=here / "git",
        check=True,
        capture_output=True,
    )
    assert read_tree(here / "git") == read_tree(here / "ours") == truth(operations), diff


def write_tree(root: Path, tree: Tree) -> None:
    for rel, data in tree.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
