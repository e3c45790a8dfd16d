#!/usr/bin/env python3
"""Build dist/memprove_mcp.pyz, a reproducible zipapp of memprove_mcp.py.

    python3 build_zipapp.py [-o PATH] [--source PATH] [--python PATH]...
                            [--exclude-tag TAG]... [--no-bytecode]

The archive is a shebang line followed by a zip whose entries are sorted by
name: a tiny ``__main__.py``, ``bytecode_cache.py`` (the part of it that
writes the bytecode cache), ``memprove_mcp.py`` copied byte for byte, and
``pyc/<cache tag>/memprove_mcp.pyc`` for every CPython 3.6 or newer the build
finds (pyenv, PATH, ``--python``, ``$MEMPROVE_BUILD_PYTHONS``).  On any other
interpreter ``__main__.py`` compiles the module at its first start and caches
the bytecode in the user's cache directory.  The first two are the files of
the same names in ``pyz/`` beside this script (see ``PROGRAMS_DIR``).

Every byte of the archive is a function of the module source, of the files
in ``pyz/`` and of the interpreters used (each compiles in a fresh process):
entries are written through ``zipfile.ZipInfo`` with a fixed date, host
system, permissions and compression level, so neither the clock, the umask,
the working directory nor the files' mtimes or modes reach the output.  The
stdlib ``zipapp`` module is not used because it stores each file's real mtime
and walks directories unsorted.

The build writes a temporary file in the output directory and renames it
over the output, so a failed build never leaves a half-written archive.

Standard library only; runs on Python 3.7 and newer (3.6 has no compresslevel
for zipfile, so its archive would differ).
"""

import argparse
import hashlib
import io
import os
import re
import sys
import tempfile
import warnings
import zipfile

__all__ = ["build", "archive_bytes", "main"]

HERE = os.path.dirname(os.path.realpath(os.path.abspath(__file__)))
DEFAULT_SOURCE = os.path.join(HERE, "memprove_mcp.py")
DEFAULT_OUTPUT = os.path.join(HERE, "dist", "memprove_mcp.pyz")

MODULE_NAME = "memprove_mcp"
# The archive's own programs, files of these names in PROGRAMS_DIR (below); the
# entry names the cache writer again, as CACHE_WRITER.
MAIN_NAME = "__main__.py"
CACHE_WRITER_NAME = "bytecode_cache.py"
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


class BuildError(Exception):
    """The archive cannot be built; the message says why."""


# The archive's own two programs, kept as source files in the folder pyz/ and
# written into the archive under the same names.  The folder is named for what
# it holds and for no module of the standard library, which it would shadow
# (running this script puts its folder first on sys.path): not zipapp.
#
#   __main__.py         its entry point, run by every Python that opens the
#                       archive (2.7 included, so that an old one is refused in
#                       one line);
#   bytecode_cache.py   what makes, mends and writes the bytecode cache, run
#                       by __main__.py only on a start that needs it.
#
# The build writes the SHA-256 of the packed source into __main__.py, in place
# of SOURCE_SHA256_PLACEHOLDER.
PROGRAMS_DIR = os.path.join(HERE, "pyz")
SOURCE_SHA256_PLACEHOLDER = b"@SOURCE_SHA256@"


def read_program(name):
    """The bytes of pyz/<name>, line ends made LF whatever the checkout did."""
    path = os.path.join(PROGRAMS_DIR, name)
    try:
        with open(path, "rb") as handle:
            return handle.read().replace(b"\r\n", b"\n")
    except OSError as error:
        raise BuildError("cannot read %s: %s" % (path, error.strerror or error))


def main_py(module_source):
    """The archive's __main__.py for this module source."""
    template = read_program(MAIN_NAME)
    if template.count(SOURCE_SHA256_PLACEHOLDER) != 1:
        raise BuildError("%s must hold %s once" % (
            os.path.join(PROGRAMS_DIR, MAIN_NAME), SOURCE_SHA256_PLACEHOLDER.decode("ascii")))
    digest = hashlib.sha256(module_source).hexdigest().encode("ascii")
    return template.replace(SOURCE_SHA256_PLACEHOLDER, digest)


# Run by each interpreter the build uses: prints its cache tag, a newline,
# then a hash-based .pyc (PEP 552, unchecked) of the source on standard input;
# 3.6, which predates PEP 552, gets the same 16-byte header with no hash.
# __main__.py checks only the magic number: the archive carries the source it
# was compiled from.  co_filename is fixed so that no build path reaches the
# bytes.  Parsed by 3.6.
COMPILE_PYC = """\
import importlib.util, marshal, sys
source = sys.stdin.buffer.read()
code = compile(source, "memprove_mcp.py", "exec", dont_inherit=True)
if hasattr(importlib.util, "source_hash"):
    header = (1).to_bytes(4, "little") + importlib.util.source_hash(source)
else:
    header = bytes(12)
sys.stdout.buffer.write(sys.implementation.cache_tag.encode("ascii") + b"\\n"
                        + importlib.util.MAGIC_NUMBER + header + marshal.dumps(code))
"""

# The oldest Python the server runs on; older interpreters are not used.
OLDEST_MINOR = 6
# Interpreters given by the environment, separated by os.pathsep (CI uses it
# for interpreters that are on no PATH, like the tests' chroot wrappers).
PYTHONS_VARIABLE = "MEMPROVE_BUILD_PYTHONS"
INTERPRETER_NAME = re.compile(r"python3\.([0-9]+)\Z")
RELEASE_DIR = re.compile(r"3\.([0-9]+)\.([0-9]+)\Z")


def _minor_of(path):
    match = INTERPRETER_NAME.match(os.path.basename(path))
    return int(match.group(1)) if match else None


def _runnable(path):
    # A version manager's shim may name a version it does not have.
    return bool(path) and "shims" not in path.split(os.sep) and os.path.isfile(path) \
        and os.access(path, os.X_OK)


def find_interpreters(environ=None):
    """CPython 3.6 and newer on this machine, one per minor version, newest first:
    pyenv's newest patch release of each, else `python3.X` on PATH, else the
    interpreter running the build.  Fixed rules, so that which interpreter
    runs the build does not change what it finds."""
    import glob
    environ = os.environ if environ is None else environ
    found = {}
    roots = [environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv")]
    for root in filter(None, roots):
        releases = []
        for path in glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3.*")):
            version = RELEASE_DIR.match(os.path.basename(os.path.dirname(os.path.dirname(path))))
            if version and _minor_of(path) == int(version.group(1)) and _runnable(path):
                releases.append(((int(version.group(1)), int(version.group(2))), path))
        for (minor, _), path in sorted(releases, reverse=True):
            found.setdefault(minor, path)
    for directory in environ.get("PATH", os.defpath).split(os.pathsep):
        if not directory or "shims" in directory.split(os.sep):
            continue
        for path in sorted(glob.glob(os.path.join(directory, "python3.*"))):
            minor = _minor_of(path)
            if minor is not None and minor not in found and _runnable(path):
                found[minor] = path
    own = sys.version_info[1]
    if sys.implementation.name == "cpython" and own not in found:
        found[own] = sys.executable
    return [found[minor] for minor in sorted(found, reverse=True) if minor >= OLDEST_MINOR]


def compile_with(interpreter, module_source):
    """(cache tag, .pyc bytes) made by interpreter, or None when it cannot."""
    import subprocess
    try:
        # cwd "/": the tests' chroot wrappers run the interpreter in the
        # caller's directory, and "/" exists inside every chroot.
        done = subprocess.run([interpreter, "-I", "-c", COMPILE_PYC], input=module_source,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                              cwd=os.path.abspath(os.sep))
    except (OSError, subprocess.SubprocessError):
        return None
    tag, _, data = done.stdout.partition(b"\n")
    if done.returncode != 0 or not tag or len(data) <= 16:
        return None
    return tag.decode("ascii"), data


def hash_based_pyc_entries(module_source, interpreters, explicit=(), exclude_tags=()):
    """(name, bytes) entries of compiled bytecode, one per cache tag.

    zipimport never writes bytecode caches, so a source-only archive would
    recompile the module on every start (20-35 ms).  Each interpreter's .pyc
    goes in pyc/<cache tag>/, which __main__.py reads first.  The explicit
    interpreters come first and must work; a found one that does not run is
    skipped, as is one whose minor version an earlier one covered.
    """
    entries = {}
    covered = set()
    for interpreter in list(explicit) + list(interpreters):
        minor = _minor_of(interpreter)
        if interpreter not in explicit and minor is not None and minor in covered:
            continue
        made = compile_with(interpreter, module_source)
        if made is None:
            if interpreter in explicit:
                raise BuildError("%s cannot compile the module" % interpreter)
            continue
        tag, data = made
        match = re.match(r"cpython-3([0-9]+)\Z", tag)
        if match:
            covered.add(int(match.group(1)))
        if tag not in exclude_tags:
            entries.setdefault("pyc/%s/%s.pyc" % (tag, MODULE_NAME), data)
    return sorted(entries.items())


def archive_entries(module_source, interpreters=(), explicit=(), exclude_tags=()):
    """The archive's entries as (name, bytes), sorted by name."""
    entries = [(MAIN_NAME, main_py(module_source)),
               (CACHE_WRITER_NAME, read_program(CACHE_WRITER_NAME)),
               (MODULE_NAME + ".py", module_source)]
    entries.extend(hash_based_pyc_entries(module_source, interpreters, explicit, exclude_tags))
    return sorted(entries)


def archive_bytes(module_source, interpreters=(), explicit=(), exclude_tags=()):
    """The complete .pyz for the given module source, as bytes."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in archive_entries(module_source, interpreters, explicit, exclude_tags):
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


def explicit_interpreters(pythons=(), environ=None):
    """--python PATHs, then those of $MEMPROVE_BUILD_PYTHONS, without repeats."""
    environ = os.environ if environ is None else environ
    listed = list(pythons) + environ.get(PYTHONS_VARIABLE, "").split(os.pathsep)
    unique = []
    for path in listed:
        if path and path not in unique:
            unique.append(path)
    return unique


def build(source=DEFAULT_SOURCE, output=DEFAULT_OUTPUT, bytecode=True, pythons=(),
          exclude_tags=()):
    """Build the archive at output; return (size, sha256 hex digest)."""
    module_source = read_source(source)
    if bytecode:
        data = archive_bytes(module_source, find_interpreters(), explicit_interpreters(pythons),
                             exclude_tags)
    else:
        data = archive_bytes(module_source)
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
             "Pythons 3.6 and newer found on this machine")
    parser.add_argument(
        "--python", metavar="PATH", action="append", default=[], dest="pythons",
        help="also compile bytecode with this interpreter, which must work "
             "(repeatable; so does $%s, a %r-separated list)" % (PYTHONS_VARIABLE, os.pathsep))
    parser.add_argument(
        "--exclude-tag", metavar="TAG", action="append", default=[], dest="exclude_tags",
        help="leave out the bytecode of this cache tag, e.g. cpython-311 (repeatable)")
    return parser.parse_args(argv)


def main(argv=None):
    """Run the command line; return the exit status (2 for usage errors)."""
    try:
        arguments = parse_arguments(argv)
    except SystemExit as stop:      # argparse: 2 for usage errors, 0 for --help
        return stop.code if isinstance(stop.code, int) else 2
    output = os.path.abspath(arguments.output)
    try:
        size, digest = build(os.path.abspath(arguments.source), output, arguments.bytecode,
                             arguments.pythons, frozenset(arguments.exclude_tags))
    except BuildError as error:
        sys.stderr.write("build_zipapp.py: error: %s\n" % error)
        return 1
    sys.stdout.write("built %s (%d bytes, sha256 %s)\n" % (output, size, digest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
