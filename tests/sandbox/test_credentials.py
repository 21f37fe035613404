"""The default sandbox hides the well-known credential files; allow_read brings one back.

Each case reads fake credentials planted in a temporary home ($HOME points there) and the
host's /etc/shadow; the control run without layers proves they are readable.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import CREDENTIAL_PATHS, Sandbox
from sandbox import _sandbox as sandbox_module
from sandbox.layers import LANDLOCK, READ_DENIAL, SECCOMP, landlock, missing, seccomp
from sandbox.layers._plan import LayerPlan

pytestmark = pytest.mark.anyio

PLANTED = (".ssh/id_rsa", ".aws/credentials", ".config/git/credentials", ".netrc")


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A home with a secret token in each of PLANTED, and a public one in ``.bashrc``
    (the first entry, readable everywhere); returns path -> token. It lives outside
    /tmp, which bubblewrap replaces with a private one."""
    home = Path(tempfile.mkdtemp(prefix="sandbox-home-", dir="/var/tmp"))
    tokens = {}
    for relative in (".bashrc", *PLANTED):
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tokens[str(path)] = secrets.token_hex(16)
        path.write_text(tokens[str(path)] + "\n")
    monkeypatch.setenv("HOME", str(home))
    yield tokens
    shutil.rmtree(home)


def _shadow_line() -> bytes | None:
    try:
        with open("/etc/shadow", "rb") as handle:
            return handle.readline()
    except OSError:
        return None


MODES = ["plain", "bubblewrap", "landlock"]


def make_box(mode: str, monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> Sandbox:
    if mode == "plain":
        return Sandbox(layers=False)
    if mode == "landlock":
        if not (landlock.works() and seccomp.works()):
            pytest.skip("Landlock or seccomp does not work here")
        forced = {"read_denial": LANDLOCK, "network_off": SECCOMP}
        monkeypatch.setattr(
            sandbox_module, "plan_layers", lambda: LayerPlan(commands=forced, calls=forced)
        )
    box = Sandbox(best_effort=True, **kwargs)  # type: ignore[arg-type]
    if box.capabilities.get(READ_DENIAL) != ("bubblewrap" if mode == "bubblewrap" else LANDLOCK):
        pytest.skip(f"{mode} does not deny reads here: {missing(READ_DENIAL)}")
    return box


@pytest.mark.parametrize("mode", MODES)
async def test_default_sandbox_hides_credentials(
    home: dict[str, str], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = make_box(mode, monkeypatch)
    result = await box.run(["bash", "-c", 'echo ran; cat "$@" /etc/shadow', "sh", *home])

    seen = result.stdout.complete + result.stderr.complete
    assert seen.startswith(b"ran\n"), seen
    public = next(iter(home))
    assert [path for path, token in home.items() if token.encode() in seen] == (
        list(home) if mode == "plain" else [public]
    )
    shadow = _shadow_line()
    if shadow is not None:  # readable by the test's user: root
        assert (shadow in seen) is (mode == "plain")


@pytest.mark.parametrize("mode", MODES)
async def test_allow_read_brings_one_back(
    home: dict[str, str], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = next(path for path in home if path.endswith(".netrc"))
    box = make_box(mode, monkeypatch, allow_read=[netrc])
    result = await box.run(["bash", "-c", 'cat "$@"', "sh", *home])

    seen = result.stdout.complete + result.stderr.complete
    readable = [path for path, token in home.items() if token.encode() in seen]
    assert readable == (list(home) if mode == "plain" else [next(iter(home)), netrc])


@pytest.mark.parametrize("confined", [False, True], ids=["plain", "sandbox"])
async def test_call_cannot_read_credentials(home: dict[str, str], confined: bool) -> None:
    box = Sandbox() if confined else Sandbox(layers=False)
    if confined and READ_DENIAL not in box.call_capabilities:
        pytest.skip(f"calls get no read denial here: {missing(READ_DENIAL)}")

    def read_all() -> list[str]:
        seen = []
        for path in home:
            try:
                seen.append(Path(path).read_text().strip())
            except PermissionError:
                seen.append("denied")
        return seen

    public, *secret = home.values()
    try:
        seen = await box.call(read_all)
    finally:
        box.close()  # no child forked ahead outlives the test (see test_protected_paths)
    assert seen == ([public, *["denied"] * len(secret)] if confined else [public, *secret])


def test_denied_paths_cover_the_account_home_and_home_variable(
    home: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_module, "plan_layers", LayerPlan)
    denied = Sandbox(best_effort=True).confinement.read_denied
    account_home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    fake_home = os.path.realpath(os.environ["HOME"])
    assert f"{account_home}/.ssh" in denied
    assert f"{fake_home}/.ssh" in denied
    assert "/etc/shadow" in denied
    home_entries = [entry for entry in CREDENTIAL_PATHS if entry.startswith("~/")]
    assert len(denied) == 2 * len(home_entries) + len(CREDENTIAL_PATHS) - len(home_entries)


def test_allow_read_inside_a_denied_directory_is_refused(
    home: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_module, "plan_layers", LayerPlan)
    ssh = os.path.realpath(os.path.join(os.environ["HOME"], ".ssh"))
    with pytest.raises(ValueError) as raised:
        Sandbox(best_effort=True, allow_read=[f"{ssh}/known_hosts"])
    assert str(raised.value) == (
        f"allow_read '{ssh}/known_hosts' lies inside '{ssh}', which stays denied; "
        f"allow '{ssh}' instead"
    )
    everything = Sandbox(best_effort=True, allow_read=["/"], read_denied=["/srv/x"])
    assert everything.confinement.read_denied == ()


async def test_secret_variables_are_still_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    result = await Sandbox(best_effort=True).run(["env"])
    assert b"AWS_SECRET_ACCESS_KEY" not in result.stdout.complete
    assert b"PATH=" in result.stdout.complete


# --- the command line ----------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, home: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": home}
    return subprocess.run(
        [sys.executable, "-m", "workspace_tools", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap for commands")
@pytest.mark.parametrize(
    ("flags", "readable"),
    [
        ([], ["notes"]),
        (["--allow-read=~/.netrc"], ["notes", "netrc"]),
        (["--deny-read", "notes.txt"], []),
        (["--deny-read", "./notes.txt"], []),  # relative: taken from --root, not the cwd
    ],
)
def test_cli_sandbox_takes_deny_read_and_allow_read(
    tmp_path: Path, home: dict[str, str], flags: list[str], readable: list[str]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    notes_token = secrets.token_hex(16)
    (workspace / "notes.txt").write_text(notes_token + "\n")
    netrc = next(path for path in home if path.endswith(".netrc"))
    home_dir = os.environ["HOME"]  # the CLI expands ~ where the shell did not
    flags = [str(workspace / f) if f == "notes.txt" else f for f in flags]
    # The CLI runs from the test's working directory, not the root.
    done = cli(
        "call", "run_command", f"command=cat notes.txt {netrc}", "--root", str(workspace),
        "--sandbox", *flags, home=home_dir,
    )  # fmt: skip
    seen = {"notes": notes_token in done.stdout, "netrc": home[netrc] in done.stdout}
    assert [name for name, shown in seen.items() if shown] == readable, done.stdout


def test_cli_read_flags_need_the_sandbox(tmp_path: Path) -> None:
    done = cli("call", "list_files", "--root", str(tmp_path), "--deny-read", "/x", home="/")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "workspace-tools: error: --deny-read, --allow-read and --max-processes need --sandbox\n"
    )


async def test_hiding_credentials_leaves_writes_open_to_a_call(
    home: dict[str, str], tmp_path: Path
) -> None:
    # Landlock denies every right it is not told to grant: read denial alone must still
    # grant writes everywhere.
    box = Sandbox()
    if READ_DENIAL not in box.call_capabilities:
        pytest.skip(f"calls get no read denial here: {missing(READ_DENIAL)}")
    target = tmp_path / "written.txt"
    try:
        assert await box.call(target.write_text, "x") == 1
    finally:
        box.close()
    assert target.read_text() == "x"


def test_cli_deny_read_of_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    done = cli(
        "call", "list_files", "--root", str(tmp_path), "--sandbox", "--deny-read", "nope.env",
        home="/",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"workspace-tools: error: --deny-read nope.env: {tmp_path}/nope.env does not exist, so "
        "there is nothing to hide (a relative path is taken from --root)\n"
    )
