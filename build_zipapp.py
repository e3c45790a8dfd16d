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

import memprove_mcp

sys.exit(memprove_mcp.main())
'''


class BuildError(Exception):
    """The archive cannot be built; the message says why."""


def hash_based_pyc_entries(module_source):
    """Return extra (name, bytes) entries holding compiled bytecode; none yet.

    The place to add PEP 552 hash-based bytecode later.  zipimport never
    writes bytecode caches, so a source-only archive recompiles the module on
    every start (~50 ms instead of ~15 ms for a large module).  To add it:
    compile ``module_source`` with ``py_compile.compile(...,
    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)`` (a
    timestamp .pyc is ignored inside the zip, whose entries are all dated
    1980) and return ``[(MODULE_NAME + ".pyc", data)]``: zipimport looks for
    ``memprove_mcp.pyc`` beside ``memprove_mcp.py`` at the archive root, not
    in ``__pycache__``.  The bytecode only helps the one interpreter minor
    version that built it (others fall back to the source), and it makes the
    archive's bytes depend on that version, so the reproducibility tests must
    then pin the building interpreter.
    """
    return []


def archive_entries(module_source):
    """The archive's entries as (name, bytes), sorted by name."""
    entries = [("__main__.py", MAIN_PY), (MODULE_NAME + ".py", module_source)]
    entries.extend(hash_based_pyc_entries(module_source))
    return sorted(entries)


def archive_bytes(module_source):
    """The complete .pyz for the given module source, as bytes."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in archive_entries(module_source):
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


def build(source=DEFAULT_SOURCE, output=DEFAULT_OUTPUT):
    """Build the archive at output; return (size, sha256 hex digest)."""
    data = archive_bytes(read_source(source))
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
    return parser.parse_args(argv)


def main(argv=None):
    """Run the command line; return the exit status (2 for usage errors)."""
    try:
        arguments = parse_arguments(argv)
    except SystemExit as stop:      # argparse: 2 for usage errors, 0 for --help
        return stop.code if isinstance(stop.code, int) else 2
    output = os.path.abspath(arguments.output)
    try:
        size, digest = build(os.path.abspath(arguments.source), output)
    except BuildError as error:
        sys.stderr.write("build_zipapp.py: error: %s\n" % error)
        return 1
    sys.stdout.write("built %s (%d bytes, sha256 %s)\n" % (output, size, digest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
