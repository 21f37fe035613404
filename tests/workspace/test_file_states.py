"""FileStates keeps recent contents instead of their hashes: staleness is judged exactly as
with hashes, whatever is recorded, dropped or handed to a sandbox child."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.workspace import _state
from workspace_tools.workspace._state import FileStates, content_hash

PATHS = [Path("/w/a"), Path("/w/b"), Path("/w/c")]
contents = st.sampled_from([b"", b"one", b"two", b"x" * 40, b"y" * 70])
steps = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.sampled_from(PATHS), contents),
        st.tuples(st.just("record_digest"), st.sampled_from(PATHS), contents),
        st.tuples(st.just("forget"), st.sampled_from(PATHS), st.just(b"")),
        st.tuples(st.just("check"), st.sampled_from(PATHS), contents),
        st.tuples(st.just("check_meanwhile"), st.sampled_from(PATHS), contents),
        st.tuples(st.just("round_trip"), st.sampled_from(PATHS), st.just(b"")),
        st.tuples(st.just("scoped_round_trip"), st.sampled_from(PATHS), contents),
        st.tuples(st.just("snapshot"), st.sampled_from(PATHS), st.just(b"")),
    ),
    max_size=30,
)


def fresh(states: FileStates, path: Path, data: bytes, *, meanwhile: bool = False) -> bool:
    """Whether ``data`` at ``path`` passes the staleness check; ``meanwhile``: with its hash
    taken by a thread beside the caller, as an edit of a large file takes it."""
    digest = states.hash_meanwhile(path, data) if meanwhile else None
    try:
        states.check_fresh(path, data, "f", digest)
    except ToolError as exc:
        assert exc.code is ErrorCode.STALE_FILE
        return False
    return True


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # the bounds never change
)
@given(steps=steps)
def test_staleness_matches_a_table_of_hashes(steps, monkeypatch_bounds) -> None:  # type: ignore[no-untyped-def]
    states = FileStates()
    model: dict[str, bytes] = {}  # what a plain table of hashes would hold
    for kind, path, data in steps:
        if kind == "record":
            states.record(path, data)
            model[str(path)] = content_hash(data)
        elif kind == "record_digest":
            states.record_digest(path, content_hash(data))
            model[str(path)] = content_hash(data)
        elif kind == "forget":
            states.forget(path)
            model.pop(str(path), None)
        elif kind == "round_trip":
            # A sandbox child given the whole table: hands back its changes.
            child = FileStates()
            child.restore(states.snapshot())
            before = child.snapshot()
            child.record(path, b"from the child")
            model[str(path)] = content_hash(b"from the child")
            states.apply(child.changes(before))
        elif kind == "scoped_round_trip":
            # A sandbox child given the hashes of the one file its call names: it judges
            # that file as the whole table would, and hands back only what it changed.
            child = FileStates()
            shipped = states.snapshot([path])
            assert shipped == {k: v for k, v in model.items() if k == str(path)}
            child.restore(shipped, [path])
            expected = str(path) not in model or model[str(path)] == content_hash(data)
            assert fresh(child, path, data) is expected
            child.record(path, data)
            recorded, forgotten = child.changes(shipped)
            assert forgotten == []
            assert recorded == (
                {}
                if shipped.get(str(path)) == content_hash(data)
                else {str(path): content_hash(data)}
            )
            states.apply((recorded, forgotten))
            model[str(path)] = content_hash(data)
        elif kind == "snapshot":  # takes the hashes not taken yet
            assert states.snapshot() == model
        else:
            expected = str(path) not in model or model[str(path)] == content_hash(data)
            assert fresh(states, path, data, meanwhile=kind == "check_meanwhile") is expected
    assert states.snapshot() == model


@pytest.fixture
def monkeypatch_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small bounds: contents are dropped for their hashes within a few steps.
    monkeypatch.setattr(_state, "KEPT_FILE_BYTES", 50)
    monkeypatch.setattr(_state, "KEPT_TOTAL_BYTES", 45)


def test_a_kept_content_is_compared_not_hashed(monkeypatch: pytest.MonkeyPatch) -> None:
    states = FileStates()
    states.record(PATHS[0], b"content")
    hashed: list[bytes] = []
    monkeypatch.setattr(_state, "content_hash", lambda data: hashed.append(data) or b"")
    assert fresh(states, PATHS[0], b"content")
    assert not fresh(states, PATHS[0], b"changed")
    assert hashed == []


def test_a_scoped_child_refuses_to_judge_a_path_it_was_not_given() -> None:
    # The call's path resolved to another file in the child than in the caller (a link
    # swapped meanwhile): the caller's hash of that file was not shipped.
    states = FileStates()
    states.record(PATHS[1], b"seen")
    child = FileStates()
    child.restore(states.snapshot([PATHS[0]]), [PATHS[0]])
    assert fresh(child, PATHS[0], b"anything")  # in scope, never seen: fresh
    with pytest.raises(ToolError) as caught:
        child.check_fresh(PATHS[1], b"seen", "b.txt")
    assert caught.value.code is ErrorCode.STALE_FILE
    assert caught.value.message == (
        "b.txt changed on disk while the call was starting (it now leads to another file); "
        "read it again with read_file, then repeat the change"
    )
    child.record(PATHS[1], b"read here")  # recorded in the child: judged as ever
    assert fresh(child, PATHS[1], b"read here")
    assert not fresh(child, PATHS[1], b"other")
    assert fresh(child, PATHS[2], None)  # type: ignore[arg-type]  # deleted: fresh


def test_a_scoped_snapshot_hashes_only_the_paths_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    states = FileStates()
    for i, path in enumerate(PATHS):
        states.record(path, b"content %d" % i)
    hashed: list[bytes] = []
    real_hash = _state.content_hash
    monkeypatch.setattr(_state, "content_hash", lambda data: hashed.append(data) or real_hash(data))
    assert states.snapshot([PATHS[1], Path("/w/never")]) == {
        str(PATHS[1]): content_hash(b"content 1")
    }
    assert hashed == [b"content 1"]


def test_a_large_contents_hash_is_taken_meanwhile_and_judged_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_state, "KEPT_FILE_BYTES", 50)
    states = FileStates()
    large = b"z" * 60
    states.record(PATHS[0], large)  # known by its hash, taken by a thread
    assert states.hash_meanwhile(PATHS[0], b"small") is None  # hashed as it is checked
    digest = states.hash_meanwhile(PATHS[0], large)
    assert isinstance(digest, _state.PendingDigest)
    assert digest.result() == content_hash(large)
    assert states.check_fresh(PATHS[0], large, "f", digest) is None
    changed = b"y" * 60
    with pytest.raises(ToolError) as caught:
        states.check_fresh(PATHS[0], changed, "f", states.hash_meanwhile(PATHS[0], changed))
    assert caught.value.code is ErrorCode.STALE_FILE
    # A content kept whole, or a file never seen, is judged without a hash.
    states.record(PATHS[1], b"kept")
    assert states.hash_meanwhile(PATHS[1], large) is None
    assert states.hash_meanwhile(PATHS[2], large) is None
    assert states.snapshot() == {
        str(PATHS[0]): content_hash(large),
        str(PATHS[1]): content_hash(b"kept"),
    }


def test_a_hash_being_taken_is_taken_again_in_a_fork() -> None:
    # The thread taking it is not in a forked child: there the digest is its own work.
    data = b"q" * (1 << 22)
    pending = _state.PendingDigest(data)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, pending.result())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        from_child = answer.read()
    assert os.waitpid(pid, 0)[1] == 0
    assert from_child == pending.result() == content_hash(data)


def test_a_snapshot_waits_for_a_hash_being_taken_without_holding_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Other calls on the table go on while a large file's hash is still being taken.
    monkeypatch.setattr(_state, "KEPT_FILE_BYTES", 50)
    real_hash, release, waiting = _state.content_hash, threading.Event(), threading.Event()

    def slow_hash(data: bytes) -> bytes:
        if data == b"z" * 60:
            assert release.wait(30), "the test never let the hash end"
        return real_hash(data)

    real_result = _state.PendingDigest.result

    def result(self: _state.PendingDigest) -> bytes:
        waiting.set()
        return real_result(self)

    monkeypatch.setattr(_state, "content_hash", slow_hash)
    monkeypatch.setattr(_state.PendingDigest, "result", result)
    states = FileStates()
    states.record(PATHS[0], b"z" * 60)
    shipped: list[dict[str, bytes]] = []
    snapshot = threading.Thread(target=lambda: shipped.append(states.snapshot()))
    snapshot.start()
    try:
        assert waiting.wait(30), "the snapshot never waited for the hash"
        took = states._guard.acquire(timeout=10)
        if took:
            states._guard.release()
        assert took, "the snapshot held the table while it waited for the hash"
    finally:
        release.set()
        snapshot.join(30)
    assert shipped == [{str(PATHS[0]): real_hash(b"z" * 60)}]
