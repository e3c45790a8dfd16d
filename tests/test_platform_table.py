"""The platform table (contract.md §5 "Platforms"): every rule that differs
between Linux, macOS and Windows, checked by giving the platform to the
function that applies it, so that the macOS and Windows rules are checked on
any machine.  (The Windows tier, the tests that take `win`, runs them under the
real Windows interpreter.)  Expected values are written out from the spec and
from docs/clients-verified.md ("Where each client keeps its files"), never
computed by the module.

Doctor's fix lines per platform are in test_doctor_fix_lines.py.
"""

import ntpath
import os
from pathlib import Path

import pytest

from harness import ask_python
import memprove_mcp as mp


HOME = "/home/ana"
ENVIRON = {"HOME": HOME, "USERPROFILE": "C:\\Users\\ana", "APPDATA": "C:\\Users\\ana\\AppData\\Roaming"}


def test_sys_platform_names():
    assert mp.platform_name("linux") == "linux"
    assert mp.platform_name("darwin") == "darwin"
    assert mp.platform_name("win32") == "win32"
    assert mp.platform_name("freebsd14") == "linux"       # any other Unix: the POSIX rules
    assert mp.platform_name("cygwin") == "linux"          # POSIX paths, POSIX shell


def test_windows_entries_name_the_interpreter_and_fixes_are_powershell():
    assert mp.PLATFORMS["win32"]["interpreter_first"] is True
    assert mp.PLATFORMS["win32"]["shell"] == "powershell"
    for name in ("linux", "darwin"):
        assert mp.PLATFORMS[name]["interpreter_first"] is False
        assert mp.PLATFORMS[name]["shell"] == "sh"


# -- where each client's user file lives ---------------------------------------

def user_file(client, platform, environ=ENVIRON):
    base, parts, _ = next(place for place in mp.CLIENTS[client].places(platform)
                          if place[0] != "root")
    path = mp.place_path(base, parts, environ, "/ws", platform)
    # (Joined by the host's os.path: a Windows host writes a POSIX platform's path with \.)
    return path.replace("\\", "/") if path and os.name == "nt" and platform != "win32" else path


@pytest.mark.parametrize("client, linux, darwin", [
    ("claude-code", "/home/ana/.claude.json", "/home/ana/.claude.json"),
    ("codex", "/home/ana/.codex/config.toml", "/home/ana/.codex/config.toml"),
    ("gemini", "/home/ana/.gemini/settings.json", "/home/ana/.gemini/settings.json"),
    ("opencode", "/home/ana/.config/opencode/opencode.json",
     "/home/ana/.config/opencode/opencode.json"),                 # xdg-basedir, not Library
    ("cline", "/home/ana/.cline/data/settings/cline_mcp_settings.json",
     "/home/ana/.cline/data/settings/cline_mcp_settings.json"),
    ("continue", "/home/ana/.continue/config.yaml", "/home/ana/.continue/config.yaml"),
    ("cursor", "/home/ana/.cursor/mcp.json", "/home/ana/.cursor/mcp.json"),
    ("vscode", "/home/ana/.config/Code/User/mcp.json",
     "/home/ana/Library/Application Support/Code/User/mcp.json"),
    ("windsurf", "/home/ana/.codeium/windsurf/mcp_config.json",
     "/home/ana/.codeium/windsurf/mcp_config.json"),
    ("zed", "/home/ana/.config/zed/settings.json", "/home/ana/.config/zed/settings.json"),
    ("goose", "/home/ana/.config/goose/config.yaml", "/home/ana/.config/goose/config.yaml"),
])
def test_user_files_on_linux_and_macos(client, linux, darwin):
    assert user_file(client, "linux") == linux
    assert user_file(client, "darwin") == darwin


def test_xdg_config_home_moves_the_files_of_the_clients_that_read_it():
    environ = dict(ENVIRON, XDG_CONFIG_HOME="/xdg")
    assert user_file("vscode", "linux", environ) == "/xdg/Code/User/mcp.json"
    assert user_file("zed", "linux", environ) == "/xdg/zed/settings.json"
    assert user_file("goose", "darwin", environ) == "/xdg/goose/config.yaml"
    # Zed ignores it on macOS; VS Code keeps Library there.
    assert user_file("zed", "darwin", environ) == "/home/ana/.config/zed/settings.json"
    assert user_file("vscode", "darwin", environ).startswith("/home/ana/Library/")
    # A relative value is no XDG directory.
    assert user_file("goose", "linux", dict(ENVIRON, XDG_CONFIG_HOME="rel")) == \
        "/home/ana/.config/goose/config.yaml"


@pytest.mark.parametrize("client, parts", [
    ("claude-code", ("C:\\Users\\ana", ".claude.json")),
    ("vscode", ("C:\\Users\\ana\\AppData\\Roaming", "Code", "User", "mcp.json")),
    ("zed", ("C:\\Users\\ana\\AppData\\Roaming", "Zed", "settings.json")),
    ("goose", ("C:\\Users\\ana", "AppData", "Roaming", "Block", "goose", "config", "config.yaml")),
    ("opencode", ("C:\\Users\\ana", ".config", "opencode", "opencode.json")),
    ("cline", ("C:\\Users\\ana", ".cline", "data", "settings", "cline_mcp_settings.json")),
])
def test_user_files_on_windows(client, parts):
    # os.path.join is this machine's: compare the pieces, not the separators.
    assert user_file(client, "win32") == os.path.join(*parts)


def test_goose_follows_the_profile_where_vscode_follows_appdata():
    """docs/clients-verified.md: goose's Windows strategy is <home>\\AppData\\Roaming (the Rust
    home crate: %USERPROFILE%), VS Code's and Zed's is %APPDATA%; they differ only
    where %APPDATA% was moved."""
    environ = dict(ENVIRON, APPDATA="D:\\Roaming")
    assert user_file("goose", "win32", environ) == os.path.join(
        "C:\\Users\\ana", "AppData", "Roaming", "Block", "goose", "config", "config.yaml")
    assert user_file("vscode", "win32", environ) == os.path.join(
        "D:\\Roaming", "Code", "User", "mcp.json")


def test_home_and_versioned_python_per_platform():
    environ = {"HOME": "/home/ana", "USERPROFILE": "C:\\Users\\ana"}
    assert mp.home_directory(environ, "win32") == "C:\\Users\\ana"
    assert mp.home_directory(environ, "darwin") == "/home/ana"
    assert mp.PLATFORMS["win32"]["versioned_python"].format("3.13") == "py -3.13"
    assert mp.PLATFORMS["linux"]["versioned_python"].format("3.13") == "python3.13"


def test_codex_home_moves_codex_on_every_platform():
    environ = dict(ENVIRON, CODEX_HOME="/codex")
    for platform in ("linux", "darwin", "win32"):
        assert user_file("codex", platform, environ) == (
            os.path.join("/codex", "config.toml") if platform == "win32" else "/codex/config.toml")


# -- files Windows tools write -----------------------------------------------------

@pytest.mark.parametrize("data", [
    b"tok-123\n", b"tok-123\r\n", b"\xef\xbb\xbftok-123\r\n",
    "tok-123\r\n".encode("utf-16-le").join([b"\xff\xfe", b""]),
    b"\xfe\xff" + "tok-123\r\n".encode("utf-16-be"),
])
def test_text_a_person_wrote_is_read_as_meant(data):
    assert mp.user_text(data).split("\n")[0].strip() == "tok-123"


# -- share modes ---------------------------------------------------------------------

def refused_then(result, refusals):
    """An action that is refused `refusals` times, as the C runtime's open is while
    another process renames over the file (a PermissionError with no winerror)."""
    calls = []

    def action():
        calls.append(None)
        if len(calls) <= refusals:
            raise PermissionError(13, "Permission denied")
        return result
    return action, calls


def test_windows_waits_out_a_refusal_the_c_runtime_gives_without_a_winerror():
    action, calls = refused_then("read", 3)
    assert mp.while_shared(action, mp.time.monotonic() + 60, platform="win32") == "read"
    assert len(calls) == 4


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_posix_reports_a_refusal_at_once(platform):
    action, calls = refused_then("read", 1)
    with pytest.raises(PermissionError):
        mp.while_shared(action, mp.time.monotonic() + 60, platform=platform)
    assert len(calls) == 1


def test_windows_gives_up_at_the_deadline():
    action, calls = refused_then("read", 1)
    with pytest.raises(PermissionError):
        mp.while_shared(action, mp.time.monotonic() - 1, platform="win32")   # passed already
    assert len(calls) == 1


def test_the_module_tests_the_platform_in_one_place():
    """contract.md §5: platform differences live in PLATFORMS (and, for a client's
    files, in its CLIENTS record), so no section tests os.name or sys.platform, or
    compares a platform name, on its own."""
    import ast
    tree = ast.parse(Path(mp.__file__).read_text(encoding="utf-8"))
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "platform_name":
            allowed.update(id(inner) for inner in ast.walk(node))
    offenders = []
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        if isinstance(node, ast.Attribute) and (node.attr, getattr(node.value, "id", None)) in (
                ("name", "os"), ("platform", "sys")):
            offenders.append(node.lineno)
        if isinstance(node, ast.Compare) and any(
                isinstance(part, ast.Constant) and part.value in mp.PLATFORMS
                for part in [node.left] + node.comparators):
            offenders.append(node.lineno)
    assert not offenders, "platform tested outside PLATFORMS at lines %s" % offenders


# -- links on Windows -------------------------------------------------------------

class Status:
    """What os.lstat gives on Windows, as far as is_link looks."""
    st_mode = 0o40755

    def __init__(self, attributes, tag=None):
        self.st_file_attributes = attributes
        if tag is not None:
            self.st_reparse_tag = tag


@pytest.mark.parametrize("status, linked", [
    (Status(0x10), False),                           # a plain directory
    (Status(0x10 | 0x400, 0xA000000C), True),        # IO_REPARSE_TAG_SYMLINK
    (Status(0x10 | 0x400, 0xA0000003), True),        # IO_REPARSE_TAG_MOUNT_POINT: a junction
    (Status(0x10 | 0x400, 0x9000001A), False),       # IO_REPARSE_TAG_CLOUD_A: OneDrive's
    (Status(0x20 | 0x400, 0x80000013), False),       # IO_REPARSE_TAG_DEDUP
    (Status(0x10 | 0x400), True),                    # no tag reported (3.6, 3.7): any
], ids=["directory", "symlink", "junction", "onedrive", "dedup", "untagged"])
def test_only_a_reparse_point_naming_another_path_is_a_link(status, linked):
    assert mp.is_link(status) is linked


def test_the_windows_python_is_what_the_tests_think(win):
    """The wrappers run python.org's Windows build: os.name nt, MSC, an absolute
    Windows sys.executable (what every entry must name)."""
    assert ntpath.isabs(win.executable) and win.executable.lower().endswith("python.exe")
    version = ask_python(win.python, "sys.version + ' ' + os.name")
    assert "MSC" in version and version.endswith(" nt"), version
