#!/usr/bin/env python3
"""Build dist/memprove_mcp.pyz, a reproducible zipapp of memprove_mcp.py.

    python3 build_zipapp.py [-o PATH] [--source PATH]

The archive is a shebang line followed by a zip with exactly two entries,
sorted by name: a tiny ``__main__.py`` and ``memprove_mcp.py``, copied byte
for byte.  Every byte of it is a function of the module source alone: entries
are written through ``zipfile.ZipInfo`` with a fixed date, host system,
permissions and compression level, so neither the clock, the umask, the
working directory nor the source file's mtime or mode reach the output.  The
stdlib ``zipapp`` module is not used because it stores each file's real mtime
and walks directories unsorted.

The build writes a temporary file in the output directory and renames it
over the output, so a failed build never leaves a half-written archive.

Standard library only; runs on Python 3.8 to 3.13.
"""

import argparse
import hashlib
import io
import os
import sys
import tempfile
import warnings
import zipfile

__all__ = ["build", "archive_bytes", "main"]

HERE = os.path.dirname(os.path.realpath(os.path.abspath(__file__)))
DEFAULT_SOURCE = os.path.join(HERE, "memprove_mcp.py")
DEFAULT_OUTPUT = os.path.join(HERE, "dist", "memprove_mcp.pyz")

MODULE_NAME = "memprove_mcp"
SHEBANG = b"#!/usr/bin/env python3\n"

# Fixed metadata of every entry.
ENTRY_DATE_TIME = (1980, 1, 1, 0, 0, 0)   # the earliest date a zip can hold
# "Made by" host 3 = Unix.  ZipInfo otherwise picks 0 on Windows and 3
# elsewhere, so fixing it makes the bytes independent of the build OS; Unix
# rather than MS-DOS because the high 16 bits of external_attr are a Unix
# st_mode, which unzip tools only honour when the host is Unix.
ENTRY_CREATE_SYSTEM = 3
ENTRY_EXTERNAL_ATTR = 0o644 << 16         # rw-r--r--, whatever the source's mode
ENTRY_COMPRESS_TYPE = zipfile.ZIP_DEFLATED
ENTRY_COMPRESSLEVEL = 9
ARCHIVE_MODE = 0o755                      # set with chmod, so the umask cannot change it

# Parsed by every Python from 2.6 on (ASCII only, no f-strings, no print
# statement or function), so that an old interpreter prints one readable line
# instead of dying with a SyntaxError inside memprove_mcp.
MAIN_PY = b'''\
# Entry point of memprove_mcp.pyz.  Keep this file parseable by Python 2.7 and
# 3.0-3.7: it must refuse them with one line before importing memprove_mcp.
import sys

if sys.version_info < (3, 8):
    sys.stderr.write("memprove-mcp needs Python 3.8 or newer; this is Python %d.%d.%d.\\n"
                     % tuple(sys.version_info[:3]))
    sys.exit(1)

# Bytecode the build compiled for this interpreter's cache tag, if any, so
# nothing is compiled at start.  Should it not load (a pre-release of the same
# tag with another magic number: zipimport 3.11+ raises rather than skipping
# it), the source at the archive's root is imported instead.
bytecode = None
if getattr(sys.implementation, "cache_tag", None):
    bytecode = sys.path[0] + "/pyc/" + sys.implementation.cache_tag
    sys.path.insert(0, bytecode)
try:
    import memprove_mcp
except ImportError:
    if bytecode is None:
        raise
    sys.path.remove(bytecode)
    sys.path_importer_cache.pop(bytecode, None)
    sys.modules.pop("memprove_mcp", None)
    import memprove_mcp

sys.exit(memprove_mcp.main())
'''


class BuildError(Exception):
    """The archive cannot be built; the message says why."""


# Run by each interpreter the build finds: prints its cache tag, a newline,
# then an unchecked hash-based .pyc (PEP 552) of the source on standard input.
# A timestamp .pyc would be ignored inside the zip (its entries are all dated
# 1980), and co_filename is fixed so that no build path reaches the bytes.
COMPILE_PYC = """\
import importlib.util, marshal, sys
source = sys.stdin.buffer.read()
code = compile(source, "memprove_mcp.py", "exec", dont_inherit=True)
sys.stdout.buffer.write(sys.implementation.cache_tag.encode("ascii") + b"\\n"
                        + importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little")
                        + importlib.util.source_hash(source) + marshal.dumps(code))
"""
BYTECODE_VERSIONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13")


def find_interpreters():
    """The interpreters of BYTECODE_VERSIONS on this machine, one per version."""
    import glob
    import shutil
    roots = [os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv")]
    found = {}
    for version in BYTECODE_VERSIONS:
        candidates = []
        if sys.version_info[:2] == tuple(int(part) for part in version.split(".")):
            candidates.append(sys.executable)
        for root in filter(None, roots):
            candidates.extend(sorted(glob.glob(os.path.join(
                root, "versions", version + ".*", "bin", "python" + version)), reverse=True))
        candidates.append(shutil.which("python" + version))
        for candidate in candidates:
            # A version manager's shim may name a version it does not have.
            if candidate and "shims" not in candidate.split(os.sep) and os.access(candidate, os.X_OK):
                found[version] = candidate
                break
    return [found[version] for version in BYTECODE_VERSIONS if version in found]


def hash_based_pyc_entries(module_source, interpreters):
    """(name, bytes) entries of compiled bytecode, one per interpreter.

    zipimport never writes bytecode caches, so a source-only archive
    recompiles the module on every start (20-35 ms here).  Each interpreter's
    .pyc goes in pyc/<cache tag>/, which __main__.py puts first on sys.path;
    zipimport checks its magic number, so any other interpreter simply
    imports the source at the archive's root.
    """
    import subprocess
    entries = {}
    for interpreter in interpreters:
        try:
            done = subprocess.run([interpreter, "-I", "-c", COMPILE_PYC], input=module_source,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        except (OSError, subprocess.SubprocessError):
            continue
        tag, _, data = done.stdout.partition(b"\n")
        if done.returncode == 0 and tag and data:
            entries["pyc/%s/%s.pyc" % (tag.decode("ascii"), MODULE_NAME)] = data
    return sorted(entries.items())


def archive_entries(module_source, interpreters=()):
    """The archive's entries as (name, bytes), sorted by name."""
    entries = [("__main__.py", MAIN_PY), (MODULE_NAME + ".py", module_source)]
    entries.extend(hash_based_pyc_entries(module_source, interpreters))
    return sorted(entries)


def archive_bytes(module_source, interpreters=()):
    """The complete .pyz for the given module source, as bytes."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in archive_entries(module_source, interpreters):
            info = zipfile.ZipInfo(name, date_time=ENTRY_DATE_TIME)
            info.create_system = ENTRY_CREATE_SYSTEM
            info.external_attr = ENTRY_EXTERNAL_ATTR
            info.compress_type = ENTRY_COMPRESS_TYPE
            archive.writestr(info, data, compresslevel=ENTRY_COMPRESSLEVEL)
    return buffer.getvalue()


def read_source(path):
    """The module source as bytes, after checking that it compiles."""
    try:
        with open(path, "rb") as handle:
            source = handle.read()
    except OSError as error:
        raise BuildError("cannot read %s: %s" % (path, error.strerror or error))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        raise BuildError("%s does not compile: %s" % (path, error))
    return source


def write_atomically(path, data, mode):
    """Write data to path through a temporary file and a rename."""
    directory = os.path.dirname(path) or os.curdir
    try:
        os.makedirs(directory, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(
            prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    except OSError as error:
        raise BuildError("cannot write in %s: %s" % (directory, error.strerror or error))
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        if isinstance(error, OSError):
            raise BuildError("cannot write %s: %s" % (path, error.strerror or error))
        raise


def build(source=DEFAULT_SOURCE, output=DEFAULT_OUTPUT, bytecode=True):
    """Build the archive at output; return (size, sha256 hex digest)."""
    interpreters = find_interpreters() if bytecode else ()
    data = archive_bytes(read_source(source), interpreters)
    write_atomically(output, data, ARCHIVE_MODE)
    return len(data), hashlib.sha256(data).hexdigest()


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="build_zipapp.py",
        description="Build a reproducible zipapp of memprove_mcp.py.",
        allow_abbrev=False)
    parser.add_argument(
        "-o", "--output", metavar="PATH", default=DEFAULT_OUTPUT,
        help="where to write the archive (default: %(default)s)")
    parser.add_argument(
        "--source", metavar="PATH", default=DEFAULT_SOURCE,
        help="the module to pack (default: %(default)s)")
    parser.add_argument(
        "--no-bytecode", dest="bytecode", action="store_false",
        help="pack the source alone, without the compiled bytecode of the "
             "Pythons 3.8-3.13 found on this machine")
    return parser.parse_args(argv)


def main(argv=None):
    """Run the command line; return the exit status (2 for usage errors)."""
    try:
        arguments = parse_arguments(argv)
    except SystemExit as stop:      # argparse: 2 for usage errors, 0 for --help
        return stop.code if isinstance(stop.code, int) else 2
    output = os.path.abspath(arguments.output)
    try:
        size, digest = build(os.path.abspath(arguments.source), output, arguments.bytecode)
    except BuildError as error:
        sys.stderr.write("build_zipapp.py: error: %s\n" % error)
        return 1
    sys.stdout.write("built %s (%d bytes, sha256 %s)\n" % (output, size, digest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
