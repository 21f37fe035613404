"""Landlock layer: ABI detection, the rules it plans, and what a confined shell can still do."""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.layers import landlock
from sandbox.layers._confinement import Confinement
from sandbox.layers._syscall import Verdict
from tests.sandbox._layer_checks import in_fork

_ABI = landlock.abi_version()
needs_landlock = pytest.mark.skipif(_ABI < 1, reason="Landlock is absent or disabled here")
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}


@pytest.fixture
def workspace() -> Iterator[Path]:
    # Outside /tmp, whose sibling entries would otherwise dominate the planned rules.
    path = Path(f"/var/tmp/landlock-{secrets.token_hex(6)}")
    (path / "sub").mkdir(parents=True)
    (path / ".env").write_text("secret")
    yield path
    shutil.rmtree(path)


def confined_bash(confinement: Confinement, script: str, cwd: Path) -> str:
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=lambda: landlock.apply(confinement),
    )
    return result.stdout


def _active_security_modules() -> list[str] | None:
    """The kernel's LSM list from securityfs, mounted in a private mount namespace when the
    host has not mounted it (root only)."""
    try:
        with open("/sys/kernel/security/lsm") as handle:
            return handle.read().split(",")
    except OSError:
        pass
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    script = "mount -t securityfs none /sys/kernel/security && cat /sys/kernel/security/lsm"
    result = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, check=False
    )
    return result.stdout.strip().split(",") if result.returncode == 0 else None


def test_abi_version_matches_the_kernels_active_security_modules() -> None:
    active = _active_security_modules()
    if active is None:
        pytest.skip("cannot read the active security modules (securityfs)")
    assert (_ABI >= 1) is ("landlock" in active)


@needs_landlock
def test_confined_shell_keeps_its_everyday_abilities(workspace: Path) -> None:
    script = (
        "echo a > /dev/null && echo b | cat > /dev/stdout && ls / > /dev/null"
        " && /bin/true && echo written > sub/f && cat sub/f && mv sub/f sub/g && cat sub/g"
    )

    output = confined_bash(Confinement(writable=(str(workspace),)), script, workspace)

    assert output == "b\nwritten\nwritten\n"


@needs_landlock
def test_file_created_later_beside_a_denied_path_is_writable_not_readable(
    workspace: Path,
) -> None:
    # The documented cost of building "all but the secret" from an allow-list.
    confinement = Confinement(writable=(str(workspace),), read_denied=(str(workspace / ".env"),))
    script = "echo top > late; cat late; echo deep > sub/late; cat sub/late"

    output = confined_bash(confinement, script, workspace)

    assert output == "deep\n"
    assert (workspace / "late").read_text() == "top\n"


def _reaches(rule_path: str, path: str) -> bool:
    return path == rule_path or path.startswith(rule_path.rstrip("/") + "/")


@pytest.mark.parametrize(
    ("writable", "denied"),
    [
        ((), (".env",)),
        (("",), (".env",)),
        (("",), ("sub",)),
        (("sub",), ("",)),
        (("", "sub"), (".env", "sub/missing")),
    ],
)
def test_planned_rules_never_grant_reading_a_denied_path(
    workspace: Path, writable: tuple[str, ...], denied: tuple[str, ...]
) -> None:
    def absolute(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(str(workspace / name) if name else str(workspace) for name in names)

    confinement = Confinement(writable=absolute(writable), read_denied=absolute(denied))

    rules = landlock.plan_rules(confinement, max(_ABI, 1))

    existing_denied = [path for path in absolute(denied) if os.path.exists(path)]
    readers = [path for path, rights in rules if rights & landlock.ACCESS_FS_READ_FILE]
    # A rule reaches everything beneath it, so none may sit on or above a denied path.
    assert [rule for rule in readers for secret in existing_denied if _reaches(rule, secret)] == []
    assert any(_reaches(rule, "/usr/bin/env") for rule in readers)


def test_apply_refuses_relative_paths() -> None:
    def attempt() -> bool:
        try:
            landlock.apply(Confinement(writable=("relative/dir",)))
        except OSError as exc:
            return exc.errno == errno.EINVAL
        return False

    assert in_fork(attempt) == Verdict(True)


# A fixed tree; the property draws which of its nodes are writable and which denied.
_TREE_DIRS = ("", "a", "a/b", "a/b/c", "d")
_TREE_FILES = ("f", "a/f", "a/b/f", "a/b/c/f", "d/f")


@pytest.fixture(scope="module")
def tree() -> Iterator[Path]:
    root = Path(f"/var/tmp/landlock-tree-{secrets.token_hex(6)}")
    for name in _TREE_DIRS:
        (root / name).mkdir(parents=True, exist_ok=True)
    for name in _TREE_FILES:
        (root / name).write_text(name)
    yield root
    shutil.rmtree(root)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writable=st.sets(st.sampled_from(_TREE_DIRS + _TREE_FILES), max_size=3),
    denied=st.sets(st.sampled_from(_TREE_DIRS + _TREE_FILES), max_size=3),
)
def test_planned_rules_give_each_file_what_its_closest_entry_says(
    tree: Path, writable: set[str], denied: set[str]
) -> None:
    def absolute(name: str) -> str:
        return str(tree / name) if name else str(tree)

    confinement = Confinement(
        writable=tuple(map(absolute, sorted(writable))),
        read_denied=tuple(map(absolute, sorted(denied))),
    )
    rules = landlock.plan_rules(confinement, 7)

    for name in _TREE_FILES:
        # Landlock's own semantics: a file gets the union of the rules on its ancestors.
        rights = 0
        for path, allowed in rules:
            if _reaches(path, absolute(name)):
                rights |= allowed
        owners = [entry for entry in writable | denied if entry == "" or _reaches(entry, name)]
        closest = max(owners, key=lambda entry: (len(entry), entry in denied), default=None)
        readable = closest not in denied
        assert bool(rights & landlock.ACCESS_FS_READ_FILE) is readable, (name, rights)
        if readable:
            writable_file = closest in writable
            assert bool(rights & landlock.ACCESS_FS_WRITE_FILE) is writable_file, (name, rights)


@needs_landlock
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writable=st.sets(st.sampled_from(_TREE_DIRS + _TREE_FILES), max_size=3),
    denied=st.sets(st.sampled_from(_TREE_DIRS + _TREE_FILES), max_size=3),
)
def test_kernel_accepts_every_planned_ruleset(
    tree: Path, writable: set[str], denied: set[str]
) -> None:
    confinement = Confinement(
        writable=tuple(str(tree / name) for name in sorted(writable)),
        read_denied=tuple(str(tree / name) for name in sorted(denied)),
    )

    def confine() -> bool:
        landlock.apply(confinement)
        return True

    verdict = in_fork(confine)
    assert verdict, verdict


@needs_landlock
@pytest.mark.parametrize(
    "nest",
    [landlock.nest, lambda: landlock.prepare_nest()()],
    ids=["nest", "prepared, then entered (a warm worker's child)"],
)
def test_past_the_deepest_nesting_linux_allows_the_refusal_says_so(
    nest: Callable[[], None],
) -> None:
    """Linux stacks at most 16 Landlock domains on a process; the 17th is refused with
    words that name that limit, not a bare errno."""

    def nest_past_the_limit() -> bool:
        entered = 0
        with pytest.raises(OSError) as refused:
            for _ in range(landlock.MAX_DOMAINS + 1):
                nest()
                entered += 1
        seen = (entered, refused.value.errno, str(refused.value))
        assert seen == (
            16,
            errno.E2BIG,
            f"[Errno {errno.E2BIG}] cannot confine this process: it is in 16 nested Landlock "
            "domains already, the most Linux allows (a sandbox started by a sandboxed call "
            "adds two: sandboxes nest at most 8 deep)",
        ), seen
        return True

    verdict = in_fork(nest_past_the_limit)
    assert verdict, verdict
