"""What a checkpoint costs: time and bytes per step, against a shadow git repository.

Run from the repository root: ``python benchmarks/bench_checkpoints.py``.

The tree is the mypy source tree: the sdist of mypy from PyPI (``pip download mypy==1.15.0
--no-deps --no-binary :all:``; later sdists need a newer setuptools than this machine's
package index has to prepare their metadata), unpacked in a temporary directory. When PyPI
cannot be reached, a copy of the installed standard library (as ``bench_search.py`` builds
it) stands in; the script says which.

Printed, each as the median of several runs:

- the first checkpoint of a session (every file hashed and stored);
- a step that changes one file (``write_file``): the checkpoint before it and the one after
  it, and the bytes the store grew by;
- a ``run_command`` that changes 100 files: the same figures;
- the peer, Gemini CLI's design: ``git add -A && git commit`` into a shadow ``GIT_DIR``
  with the tree as its work tree, for the same two steps, and the ratio.

Runs are :data:`SETTLE_SECONDS` apart, as a model's steps are: a file changed within two
seconds of a checkpoint is hashed again by the next (its timestamp may not have ticked).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workspace_tools import invoke_tool_sync, workspace_tools
from workspace_tools.session._checkpoints import Checkpoints
from workspace_tools.workspace import Workspace

MYPY = "mypy==1.15.0"
RUNS = 5
SETTLE_SECONDS = 2.1


def mypy_tree(base: Path) -> Path | None:
    """The unpacked mypy sdist, or ``None`` when it cannot be downloaded."""
    pip = [sys.executable, "-m", "pip", "download", MYPY, "--no-deps", "--no-binary", ":all:"]
    done = subprocess.run(
        [*pip, "-d", str(base), "-q"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    archives = list(base.glob("mypy-*.tar.gz"))
    if done.returncode != 0 or not archives:
        return None
    with tarfile.open(archives[0]) as archive:
        archive.extractall(base / "src", filter="data")
    return next((base / "src").iterdir())


def tree_of(base: Path) -> tuple[str, Path]:
    root = mypy_tree(base)
    if root is not None:
        return f"mypy source tree ({MYPY} sdist from PyPI)", root
    from bench_search import make_stdlib_tree

    return "standard library copy (PyPI not reachable)", make_stdlib_tree(base)


def tree_size(root: Path) -> tuple[int, int]:
    files = total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                files += 1
                total += os.path.getsize(path)
    return files, total


def python_files(root: Path, count: int) -> list[str]:
    found = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if ".git" not in p.parts)
    return found[:count]


class Timed:
    """Median seconds and store growth of a step's checkpoints."""

    def __init__(self) -> None:
        self.before: list[float] = []
        self.after: list[float] = []
        self.bytes: list[int] = []
        self.peer: list[float] = []

    def line(self, title: str) -> str:
        before, after = statistics.median(self.before), statistics.median(self.after)
        peer = statistics.median(self.peer)
        grown = statistics.median(self.bytes)
        ours = before + after
        return (
            f"{title:<28} before {before * 1000:7.1f} ms  after {after * 1000:7.1f} ms  "
            f"store +{grown / 1024:8.1f} KiB  | shadow git {peer * 1000:7.1f} ms  "
            f"ratio {ours / peer:4.2f}"
        )


def step(checkpoints: Checkpoints, change: Callable[[int], None], run: int, timed: Timed) -> None:
    blobs_before = checkpoints.store.size()[1]
    started = time.perf_counter()
    checkpoints.before()
    timed.before.append(time.perf_counter() - started)
    timed.bytes.append(checkpoints.store.size()[1] - blobs_before)
    change(run)
    started = time.perf_counter()
    checkpoints.after(run)
    timed.after.append(time.perf_counter() - started)


def shadow_git(git_dir: Path, root: Path) -> Callable[[], None]:
    env = {
        **os.environ,
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(root),
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }
    subprocess.run(["git", "init", "-q"], env=env, check=True)

    def commit() -> None:
        subprocess.run(["git", "add", "-A"], env=env, check=True, cwd=root)
        subprocess.run(
            ["git", "commit", "-q", "--no-verify", "--allow-empty", "-m", "checkpoint"],
            env=env,
            check=True,
            cwd=root,
        )

    return commit


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-checkpoints-") as tmp:
        base = Path(tmp)
        what, root = tree_of(base)
        files, total = tree_size(root)
        print(f"tree: {what}: {files:,} files, {total / 1e6:.1f} MB")
        print(f"machine: {os.cpu_count()} cores, shared with other work; medians of {RUNS} runs")
        workspace = Workspace(root)
        tools = {t.name: t for t in workspace_tools(workspace)}
        targets = python_files(root, 100)

        firsts, first_bytes = [], 0
        for _ in range(RUNS):
            fresh = Checkpoints(Workspace(root), directory=base / f"store-{len(firsts)}")
            started = time.perf_counter()
            fresh.before()
            firsts.append(time.perf_counter() - started)
            first_bytes = fresh.store.size()[1]
        print(
            f"{'first checkpoint':<28} {statistics.median(firsts) * 1000:7.1f} ms  "
            f"store {first_bytes / 1e6:.1f} MB"
        )

        checkpoints = Checkpoints(workspace, directory=base / "store")
        checkpoints.before()
        checkpoints.after(-1)
        commit = shadow_git(base / "shadow.git", root)
        commit()

        def write_one(run: int) -> None:
            path = targets[0]
            text = (root / path).read_text() + f"# run {run}\n"
            result = invoke_tool_sync(tools["write_file"], {"path": path, "content": text})
            if result.error:
                raise SystemExit(result.error)

        def command_100(run: int) -> None:
            listed = " ".join(targets)
            command = f"for f in {listed}; do printf '# run {run}\\n' >> \"$f\"; done"
            result = invoke_tool_sync(tools["run_command"], {"command": command})
            if result.is_error:
                raise SystemExit(result.model_text())

        for title, change in (
            ("write_file, 1 file", write_one),
            ("run_command, 100 files", command_100),
        ):
            timed = Timed()
            for run in range(RUNS):
                time.sleep(SETTLE_SECONDS)
                step(checkpoints, change, run, timed)
                started = time.perf_counter()
                commit()
                timed.peer.append(time.perf_counter() - started)
            print(timed.line(title))


if __name__ == "__main__":
    main()
