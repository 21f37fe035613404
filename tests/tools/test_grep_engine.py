"""grep's engines: RE2 gives exactly Python's matches; Python's engine runs in a worker that
is killed at the deadline; lines are read_file's lines; long lines are shown around the
match; the output modes agree."""

from __future__ import annotations

import _sre
import io
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import Sandbox
from tests.discovery_helpers import tools
from workspace_tools import ErrorCode, Workspace, invoke_tool, invoke_tool_sync
from workspace_tools._errors import ToolError
from workspace_tools.search import _matcher as _search
from workspace_tools.search import _worker
from workspace_tools.search._matcher import MAX_PATTERN, Matcher, NeedsWorker
from workspace_tools.search._re2 import _CASE_EXTRA, translate
from workspace_tools.search._runner import MAX_LINE, GrepRun
from workspace_tools.search._searcher import BOOT
from workspace_tools.search._worker import Searchers
from workspace_tools.text._lines import read_lines
from workspace_tools.tools import grep as grep_module
from workspace_tools.tools import workspace_tools
from workspace_tools.tools.grep import SEARCHERS_KEY, MatcherPool


def tools_of(workspace: Workspace) -> dict[str, Any]:
    return {t.name: t for t in workspace_tools(workspace)}


def grep(root: Path, **args: object):  # type: ignore[no-untyped-def]
    return invoke_tool_sync(tools(root)["grep"], args)


def child_processes(pid: int) -> set[int]:
    """The live child processes of ``pid``, from the process table."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.update(int(p) for p in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return {p for p in found if _alive(p)}


def children(pid: int) -> set[int]:
    """The live grep searchers ``pid`` started. Only searchers: a spawn server another
    test's tools start ahead, in a thread of their own, may come at any time
    (``/proc/PID/cmdline`` tells them apart)."""
    return {p for p in child_processes(pid) if _is_searcher(p)}


def _is_searcher(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return argv[1:3] == [b"-c", BOOT.encode()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False  # gone, also between the open and the read


def wait_for(predicate: Any, what: str, seconds: float = 20.0) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``seconds``."""
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"still waiting after {seconds} s for {what}")
        time.sleep(0.02)


pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="reads the process table from /proc"
)

# --- RE2 gives exactly Python's matches ---------------------------------------------------

PIECES = [
    *["a", "b", "k", "i", "s", "é", "ß", ".", r"\w", r"\W", r"\s", r"\S", r"\d", r"\D"],
    *["[ab]", "[^a]", r"[\w-]", r"[^\s\d]", "[a-z]", "[^K]", "(a|b)", "(?:a|)", "x"],
    *["^", "$", r"\A", r"\Z", r"\b", r"\B", " ", "_", "(?i:k)", "(?s:.)", "(?a:\\w)"],
]
QUANTIFIERS = ["", "+", "*", "?", "{2}", "{1,3}", "+?", "*?", "??"]
# ASCII and not, word and not, Unicode digits and spaces, the characters Python's
# case-insensitive matching pairs with ASCII letters, CR and LF.
ALPHABET = "abkisxKIS_ 1\t\x1c\u00a0\u0663é\u212a\u0130\u0131\u017f\u00df\r\n"


@st.composite
def patterns(draw: Any) -> str:
    parts = draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=4))
    out = []
    for part in parts:
        quantifier = draw(st.sampled_from(QUANTIFIERS))
        repeatable = part not in ("^", "$", r"\A", r"\Z", r"\b", r"\B")
        out.append(f"(?:{part}){quantifier}" if repeatable and quantifier else part)
    return "".join(out)


def python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every Matcher built after this use Python's engine."""
    monkeypatch.setattr(_search, "translate", lambda *args, **kwargs: None)


def results(found: Any) -> tuple[int, list[tuple[int, int, str, int]], dict[int, str]]:
    if found is None:
        return 0, [], {}
    return (
        found.count,
        [(line, column, text, length) for line, column, text, length in found.lines],
        found.context,
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=patterns(),
    text=st.text(alphabet=ALPHABET, max_size=40),
    encoding=st.sampled_from(["utf-8", "utf-16", "latin-1"]),
    ignore_case=st.booleans(),
    multiline=st.booleans(),
    keep=st.sampled_from([0, 1, 100]),
    context=st.integers(0, 2),
)
def test_re2_finds_what_pythons_engine_finds(
    pattern: str,
    text: str,
    encoding: str,
    ignore_case: bool,
    multiline: bool,
    keep: int,
    context: int,
) -> None:
    if encoding == "latin-1":
        text = text.encode("latin-1", "replace").decode("latin-1")
        data = text.encode("latin-1")
    else:
        data = text.encode(encoding)
    options = {"ignore_case": ignore_case, "multiline": multiline}
    fast = Matcher(pattern, **options, in_process=True)
    try:
        got = results(fast.find(data, keep, context))
    except NeedsWorker:
        # Only Python's engine serves this text: the matcher said so up front, and in the
        # worker it searches the ASCII text on RE2 and the rest on Python's engine.
        assert fast.needs_worker
        got = results(Matcher(pattern, **options).find(data, keep, context))
    with pytest.MonkeyPatch.context() as patch:
        python_only(patch)
        slow = Matcher(pattern, **options)
    assert not slow.needs_worker or slow._ascii is not None
    assert got == results(slow.find(data, keep, context)), (pattern, data)


def test_patterns_in_re2s_subset_never_need_the_worker() -> None:
    for pattern in [r"(a+)+$", r"def \w+_\w+\(self, \w+\)", r"(?i)kelvin", r"[^\W\d]+\s*=", "."]:
        assert not Matcher(pattern).needs_worker, pattern
    for pattern in [r"a(?=b)", r"(a)\1", r"(?<=x)y", r"(a)?(?(1)b|c)", "a{2000}", r"\bword"]:
        assert Matcher(pattern).needs_worker, pattern
    # \b is RE2's on ASCII text: a non-ASCII text is what needs the worker.
    matcher = Matcher(r"\bword\b", in_process=True)
    assert matcher.find(b"a word\n", 10, 0) is not None
    with pytest.raises(NeedsWorker):
        matcher.find("a wörd word\n".encode(), 10, 0)


def test_case_folding_pairs_are_pythons_own() -> None:
    # Every character Python's IGNORECASE matches with an ASCII letter, over all of Unicode.
    everything = "".join(map(chr, range(0x110000)))
    for letter in "abcdefghijklmnopqrstuvwxyz":
        found = {m.group() for m in re.finditer(re.escape(letter), everything, re.IGNORECASE)}
        extra = {chr(c) for c in _CASE_EXTRA.get(letter, ())}
        assert found == {letter, letter.upper(), *extra}, letter
    # No character lower-cases to an uncased one: an uncased literal matches only itself.
    assert [
        c
        for c in range(0x110000)
        if _sre.unicode_tolower(c) != c and not _sre.unicode_iscased(_sre.unicode_tolower(c))
    ] == []


def test_translation_of_a_pattern_re2_cannot_take_is_none() -> None:
    for pattern in [r"(?=a)", r"(a)\1", r"(?(1)a|b)", "a{1001}"]:
        assert translate(pattern, re.MULTILINE, per_line=True) is None, pattern
    # Python's non-multiline $ also matches before a final newline: no RE2 form.
    assert translate("(?-m:a$)", re.MULTILINE | re.DOTALL, per_line=False) is None


# --- Pattern size and errors --------------------------------------------------------------


def test_pattern_over_the_cap_is_invalid_arguments(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a\n")
    result = grep(tmp_path, pattern="a" * (MAX_PATTERN + 1))
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert result.error == (
        "The pattern is 10,001 characters long; grep takes patterns of at most 10,000 "
        "characters. Search for a shorter, distinctive part."
    )
    assert grep(tmp_path, pattern="a" * MAX_PATTERN).model_text() == "No matches"


def test_invalid_regex_is_invalid_arguments_with_position(tmp_path: Path) -> None:
    result = grep(tmp_path, pattern="a{2,1}")
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert result.error is not None
    assert result.error.startswith(
        "Invalid regular expression at position 2: min repeat greater than max repeat."
    )


def test_too_deeply_nested_groups_are_invalid_arguments(tmp_path: Path) -> None:
    result = grep(tmp_path, pattern="(" * 1000 + "a" + ")" * 1000)
    assert (result.error_code, result.error) == (
        ErrorCode.INVALID_ARGUMENTS,
        "Invalid regular expression: its groups are nested too deeply for Python's regex "
        "compiler; flatten the pattern.",
    )


def test_pattern_too_big_for_re2_runs_on_pythons_engine(tmp_path: Path) -> None:
    # Thousands of Unicode \w classes: more than RE2 takes; the worker finds the match.
    (tmp_path / "f.txt").write_text("é" * 3000 + "\n" + "a" * 10 + "\n")
    assert Matcher(r"\w" * 3000).needs_worker
    result = grep(tmp_path, pattern=r"\w" * 3000, output_mode="count")
    assert result.model_text() == "f.txt:1"


# --- No hang --------------------------------------------------------------------------------


@pytest.fixture
def backtracking(tmp_path: Path) -> Path:
    (tmp_path / "f.txt").write_text("a" * 40 + "!\n")
    return tmp_path


def test_nested_repeat_runs_on_re2(backtracking: Path) -> None:
    before = children(os.getpid())  # helpers earlier tests left running
    result = invoke_tool_sync(tools(backtracking)["grep"], {"pattern": "(a+)+$"}, timeout=3)
    assert (result.error_code, result.model_text()) == (None, "No matches")
    assert children(os.getpid()) <= before  # no worker was started


@pytest.mark.parametrize("pattern", [r"(a+)+(?=b)", r"(a*)*\1$"])
def test_backtracking_pattern_times_out_and_its_worker_is_killed(
    backtracking: Path, pattern: str
) -> None:
    before = children(os.getpid())
    # 2 s, as the other timeout tests here give the same search: a worker starts within
    # it many times over on a loaded host; the rest is waiting for the deadline.
    result = invoke_tool_sync(tools(backtracking)["grep"], {"pattern": pattern}, timeout=2)
    assert result.error_code == ErrorCode.TOOL_TIMEOUT, result.error
    wait_for(lambda: children(os.getpid()) <= before, "the grep worker to be gone")


def same_group() -> set[int]:
    """Live processes of this process's group (forked descendants stay in it, also once
    reparented), other than this one."""
    group, found = os.getpgid(0), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if fields[0] != "Z" and int(fields[2]) == group:
                found.add(int(entry))
    return found


def test_a_timed_out_searcher_is_replaced_by_the_next_search(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a" * 40 + "!\n")
    before = same_group()
    grep_tool = tools(tmp_path)["grep"]
    result = invoke_tool_sync(grep_tool, {"pattern": r"(a+)+(?=b)"}, timeout=2)
    assert result.error_code == ErrorCode.TOOL_TIMEOUT, result.error
    wait_for(lambda: same_group() <= before, "the killed searcher to be gone")
    again = invoke_tool_sync(grep_tool, {"pattern": r"(a+)(?=!)"}, timeout=30)
    assert (again.error, again.model_text()) == (None, "f.txt:1:" + "a" * 40 + "!")


def test_backtracking_pattern_without_a_call_timeout_stops_at_grep_deadline(
    backtracking: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_worker, "WORKER_SECONDS", 1.0)
    before = children(os.getpid())
    result = grep(backtracking, pattern=r"(a+)+(?=b)")
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert result.error is not None
    assert result.error.startswith(
        "grep timed out after 1 s: this pattern needs Python's backtracking regex engine"
    )
    assert children(os.getpid()) <= before  # killed and reaped before the call returned


def test_worker_returns_what_pythons_engine_finds(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("foobar\nfoo baz\n")
    (tmp_path / "b.txt").write_text("über wort\nwort\n")
    ahead = grep(tmp_path, pattern=r"foo(?=bar)")
    assert ahead.model_text() == "a.txt:1:foobar"
    # \b on non-ASCII text: Python's Unicode word boundary, not RE2's ASCII one.
    word = grep(tmp_path, pattern=r"\bber\b|\bwort\b", output_mode="count")
    assert word.model_text() == "b.txt:2"
    single = grep(tmp_path, pattern=r"(o)\1", path="a.txt", context=1)
    assert single.model_text() == "a.txt:1:foobar\na.txt:2:foo baz"
    named_dir = grep(tmp_path, pattern=r"(o)\1", path="missing.txt")
    assert named_dir.error_code == ErrorCode.NOT_FOUND


def test_non_ascii_file_in_a_split_search_moves_it_to_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_worker, "_running_now", lambda: 0)  # a CPU free for the searcher
    total = _worker.MIN_FILES_TO_SPLIT + 100
    for i in range(total):
        (tmp_path / f"f{i:04d}.txt").write_text("a word\nswordfish\n")
    (tmp_path / "f0500.txt").write_text("ä word\néword\n")
    before = children(os.getpid())
    workspace = Workspace(tmp_path)
    grep_tool = tools_of(workspace)["grep"]
    # The searcher, ready, searches some blocks: one of them (or the caller's) meets the
    # text only Python's engine searches, and the whole search moves to a searcher.
    workspace.kept(SEARCHERS_KEY, Searchers).wait_ready(1, 30.0)
    try:
        for _ in range(2):
            result = invoke_tool_sync(
                grep_tool, {"pattern": r"\bword\b", "output_mode": "count", "limit": 5000}
            )
            assert result.details.match_count == total
            assert "f0500.txt:1" in result.model_text().splitlines()
    finally:
        workspace.close()
    wait_for(lambda: children(os.getpid()) <= before, "the searchers to be gone")


def test_worker_that_dies_without_an_answer_is_a_tool_error(
    backtracking: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_job = _worker.Searcher.start_job

    def killed_at_once(searcher: Any, *args: Any) -> int:
        number = start_job(searcher, *args)
        os.kill(searcher.pid, signal.SIGKILL)  # as the kernel's OOM killer would
        return number

    monkeypatch.setattr(_worker.Searcher, "start_job", killed_at_once)
    run = GrepRun(Matcher(r"(a+)+(?=b)"), limit=10, context=0)
    searchers = _worker.Searchers()
    try:
        with pytest.raises(ToolError) as caught:
            _worker.search_in_worker(
                run, searchers, str(backtracking), ["f.txt"], deadline=None, stopped=lambda: False
            )
    finally:
        searchers.close()
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.TOOL_ERROR,
        "grep's search process died without an answer (out of memory?); narrow the "
        "pattern or the path",
    )


def test_worker_error_reaches_the_caller(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    result = grep(tmp_path, pattern=r"(o)\1", path="fifo")
    assert result.error_code == ErrorCode.TOOL_ERROR
    assert result.error == (
        "fifo is a FIFO (named pipe), not a regular file; grep searches files and directories"
    )


@pytest.mark.anyio
async def test_a_backtracking_grep_blocks_no_other_call(backtracking: Path) -> None:
    grep_tool = tools(backtracking)["grep"]
    before = children(os.getpid())
    done: list[Any] = []

    async def slow() -> None:
        done.append(await invoke_tool(grep_tool, {"pattern": r"(a+)+(?=b)"}, timeout=60))

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        with anyio.fail_after(20):
            while not children(os.getpid()) - before:
                await anyio.sleep(0.02)
        quick = await invoke_tool(grep_tool, {"pattern": "a+!"}, timeout=10)
        assert (quick.error, done) == (None, [])
        assert quick.model_text() == "f.txt:1:" + "a" * 40 + "!"
        tg.cancel_scope.cancel()
    wait_for(lambda: children(os.getpid()) <= before, "the grep worker to be gone")


# --- Lines are read_file's lines --------------------------------------------------------------


def read_file_lines(data: bytes) -> list[str]:
    return read_lines(io.BytesIO(data), 1, 10_000, 10_000, whole=True, name="f").lines


@settings(max_examples=200, deadline=None)
@given(
    data=st.text(alphabet="ab\r\né", max_size=40).map(str.encode)
    | st.binary(max_size=40).map(lambda b: b.replace(b"\0", b"a")),
    pattern=st.sampled_from(["a", "a$", "^b", r"\r", "$", "^", ".$", r"a\s*$", r"\S$", "é"]),
)
def test_shown_lines_are_read_files_lines(data: bytes, pattern: str) -> None:
    lines = read_file_lines(data)
    found = Matcher(pattern).find(data, 10_000, 0)
    got = [] if found is None else [(line, text) for line, _, text, _ in found.lines]
    rx = re.compile(pattern)
    assert got == [(n, line) for n, line in enumerate(lines, 1) if rx.search(line)]


@pytest.mark.parametrize(
    "data, pattern, expected",
    [
        (b"x = 1\r\ny = 2\r\n", r"\d$", "f:1:x = 1\nf:2:y = 2"),
        (b"x = 1\r\ny = 2\r\n", r"^y", "f:2:y = 2"),
        (b"x = 1\r\ny = 2\r\n", r"1\s*\ny", "No matches"),
        (b"end\r\n", r"\r", "No matches"),
        (b"lone\rcr\n", r"\r", "f:1:lone\rcr"),
        ("x = 1\r\ny = 2\r\n".encode("utf-16"), r"\d$", "f:1:x = 1\nf:2:y = 2"),
        ("é = 1\r\n".encode(), r"1$", "f:1:é = 1"),
        (b"caf\xe9 1\r\n", r"\d$", "f:1:café 1"),
    ],
    ids=["dollar", "caret", "no-cross", "crlf-cr", "lone-cr", "utf16", "utf8", "latin1"],
)
def test_crlf_lines_end_before_the_cr(
    tmp_path: Path, data: bytes, pattern: str, expected: str
) -> None:
    (tmp_path / "f").write_bytes(data)
    assert grep(tmp_path, pattern=pattern).model_text() == expected
    # The same lines on Python's engine (a lookahead sends the pattern there).
    slow = grep(tmp_path, pattern=f"(?=[\\s\\S]){pattern}").model_text()
    assert slow == expected


def test_crlf_multiline_match_spans_shown_lines(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"a = [\r\n  1,\r\n]\r\n")
    result = grep(tmp_path, pattern=r"\[\n.*,$", multiline=True)
    assert result.model_text() == "f:1:a = [\nf:2:  1,"
    assert result.details.matches[0].text == "a = [\n  1,"


def test_crlf_in_a_file_read_in_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workspace_tools.search import _reading

    monkeypatch.setattr(_reading, "WINDOW", 64)
    body = b"".join(b"line %03d end\r\n" % i for i in range(200))
    (tmp_path / "f").write_bytes(body)
    result = grep(tmp_path, pattern=r"(?:1|7)\d end$", limit=1000, path="f", context=1)
    assert result.details.match_count == 40
    assert "\r" not in result.model_text()
    assert result.details.matches[0].text == "line 010 end"


# --- Long lines ----------------------------------------------------------------------------


def test_match_far_into_a_minified_line_is_shown(tmp_path: Path) -> None:
    head, tail = "x" * 150_000, "y" * 50_000
    (tmp_path / "app.min.js").write_text(f"{head}NEEDLE{tail}\nshort NEEDLE\n")
    result = grep(tmp_path, pattern="NEEDLE")
    first = result.details.matches[0]
    assert (first.line, first.column) == (1, 150_001)
    lead = (MAX_LINE - len("NEEDLE")) // 2
    assert first.text == (
        f"[{150_000 - lead:,} characters cut] … "
        + "x" * lead
        + "NEEDLE"
        + "y" * (MAX_LINE - lead - len("NEEDLE"))
        + f" … [{50_000 - (MAX_LINE - lead - len('NEEDLE')):,} characters cut]"
    )
    assert result.model_text().splitlines() == [
        f"app.min.js:1:{first.text}",
        "app.min.js:2:short NEEDLE",
    ]


@pytest.mark.parametrize(
    "line, start, expected",
    [
        (
            "a" * 10 + "M" + "b" * 3000,
            10,
            "a" * 10 + "M" + "b" * 1989 + " … [1,011 characters cut]",
        ),
        ("a" * 3000 + "M", 3000, "[1,001 characters cut] … " + "a" * 1999 + "M"),
    ],
    ids=["near-start", "at-end"],
)
def test_long_line_window_keeps_the_match_in_view(
    tmp_path: Path, line: str, start: int, expected: str
) -> None:
    (tmp_path / "f").write_text(f"{line}\n")
    result = grep(tmp_path, pattern="M")
    assert result.details.matches[0].column == start + 1
    assert result.details.matches[0].text == expected


def test_long_context_line_is_cut_at_its_head(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("c" * 2500 + "\nhit\n")
    result = grep(tmp_path, pattern="hit", context=1)
    assert result.model_text() == "f-1-" + "c" * 2000 + " … [500 characters cut]\nf:2:hit"


# --- The output modes agree ---------------------------------------------------------------

FILE_BODIES = st.one_of(
    st.text(alphabet="ab x\r\né", max_size=30).map(str.encode),
    st.text(alphabet="ab x\r\né", max_size=30).map(lambda t: t.encode("utf-16")),
    st.text(alphabet="ab x\r\n", max_size=30).map(lambda t: "\ufeff".encode() + t.encode()),
    st.binary(max_size=20).map(lambda b: b.replace(b"\0", b"a") + b"\xe9 a\n"),
    st.just(b"a\0binary a\n"),
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    bodies=st.lists(FILE_BODIES, min_size=1, max_size=5),
    pattern=st.sampled_from(["a", "a$", "^b", r"\s", "a|é", r"x\n", r"(?=a)a", r"\ba", "b*"]),
    multiline=st.booleans(),
    context=st.integers(0, 2),
    limit=st.sampled_from([1, 3, 1000]),
)
def test_count_and_files_agree_with_content(
    tmp_path_factory: pytest.TempPathFactory,
    bodies: list[bytes],
    pattern: str,
    multiline: bool,
    context: int,
    limit: int,
) -> None:
    root = tmp_path_factory.mktemp("tree")
    for i, body in enumerate(bodies):
        (root / f"f{i}.txt").write_bytes(body)
    args = {"pattern": pattern, "multiline": multiline, "context": context}
    full = grep(root, **args, limit=100_000)
    per_file: dict[str, int] = {}
    for m in full.details.matches:
        per_file[m.path] = per_file.get(m.path, 0) + 1
    assert len(full.details.matches) == full.details.match_count
    count = grep(root, **args, output_mode="count", limit=limit)
    files = grep(root, **args, output_mode="files_with_matches", limit=limit)
    shown = list(per_file.items())
    assert [(f.path, f.count) for f in count.details.files] == shown[:limit]
    assert [f.path for f in files.details.files] == [p for p, _ in shown[:limit]]
    for result in (count, files):
        assert (result.details.match_count, result.details.files_matched) == (
            sum(per_file.values()),
            len(per_file),
        )
    if full.details.match_count:
        counted = "\n".join(f"{p}:{n}" for p, n in shown[:limit])
        assert count.model_text().startswith(counted)
    cut = grep(root, **args, limit=limit)
    assert cut.details.match_count == full.details.match_count
    assert [(m.path, m.line) for m in cut.details.matches] == [
        (m.path, m.line) for m in full.details.matches[:limit]
    ]


# --- Matchers kept for repeated patterns ---------------------------------------------------


def test_pool_lends_a_matcher_to_one_call_at_a_time_and_keeps_recent_patterns() -> None:
    pool = MatcherPool(size=2)
    first = pool.take("a+", ignore_case=False, multiline=False)
    # Taken and not given back: a concurrent call with the pattern gets its own.
    second = pool.take("a+", ignore_case=False, multiline=False)
    assert second is not first
    pool.give(first)
    assert pool.take("a+", ignore_case=False, multiline=False) is first
    assert pool.take("a+", ignore_case=True, multiline=False) is not first
    pool.give(first)
    pool.give(Matcher("b"))
    pool.give(Matcher("c"))  # the oldest pattern, "a+", goes
    assert pool.take("a+", ignore_case=False, multiline=False) is not first


def test_repeated_call_gives_the_same_answer_after_a_move_to_the_worker(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a word\n")
    (tmp_path / "b.txt").write_text("ä word\néword\n")
    grep_tool = tools(tmp_path)["grep"]
    answers = [invoke_tool_sync(grep_tool, {"pattern": r"\bword"}).model_text() for _ in range(3)]
    assert answers == ["a.txt:1:a word\nb.txt:1:ä word"] * 3


BACKTRACKING_TIMEOUT = (
    "grep timed out after 2 s: this pattern needs Python's backtracking regex engine "
    "(for lookaround, a backreference, \\b on non-ASCII text, or a repeat count over 1000), "
    "on which nested repeats such as (a+)+ can take exponential time and a long counted "
    "repeat retries from every character. Simplify the pattern or narrow the path."
)


@pytest.mark.parametrize("run", range(5))
def test_the_backtracking_timeout_message_is_the_same_every_run(
    backtracking: Path, run: int
) -> None:
    # The worker stops before the call's deadline, so grep's own words always win, and
    # they name the call's timeout, not the time left when the worker started.
    before = children(os.getpid())
    result = invoke_tool_sync(tools(backtracking)["grep"], {"pattern": r"(a+)+(?=b)"}, timeout=2)
    assert (result.error_code, result.error) == (ErrorCode.TOOL_TIMEOUT, BACKTRACKING_TIMEOUT)
    wait_for(lambda: children(os.getpid()) <= before, "the grep worker to be gone")


def test_the_calls_timeout_firing_first_gives_grep_s_words_too(
    backtracking: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker left to run past the call's deadline: the call's own timeout fires, and
    # reports what grep would have said; the worker goes once the call is over.
    monkeypatch.setattr(grep_module, "WORKER_MARGIN", -30.0)
    before = children(os.getpid())
    result = invoke_tool_sync(tools(backtracking)["grep"], {"pattern": r"(a+)+(?=b)"}, timeout=2)
    assert (result.error_code, result.error) == (ErrorCode.TOOL_TIMEOUT, BACKTRACKING_TIMEOUT)
    wait_for(lambda: children(os.getpid()) <= before, "the grep worker to be gone")


def test_a_sandboxed_grep_names_the_calls_timeout_too(backtracking: Path) -> None:
    # The sandbox's child gets the call's deadline and timeout with its context.
    box = Sandbox(layers=False)
    try:
        grep_tool = next(t for t in workspace_tools(backtracking, sandbox=box) if t.name == "grep")
        # A first call starts the sandbox's worker, which on a loaded host can take most of
        # 2 s: the timed call then measures the pattern, not the worker's start.
        warm = invoke_tool_sync(grep_tool, {"pattern": "a"})
        assert warm.error is None, warm.error
        result = invoke_tool_sync(grep_tool, {"pattern": r"(a+)+(?=b)"}, timeout=2)
    finally:
        box.close()
    assert (result.error_code, result.error) == (ErrorCode.TOOL_TIMEOUT, BACKTRACKING_TIMEOUT)
