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
the bytecode in the user's cache directory (see ``MAIN_PY_TEMPLATE`` and
``CACHE_WRITER_SOURCE``).

Every byte of the archive is a function of the module source and of the
interpreters used (each compiles in a fresh process): entries are written
through ``zipfile.ZipInfo`` with a fixed date, host system, permissions and
compression level, so neither the clock, the umask, the
working directory nor the source file's mtime or mode reach the output.  The
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

# The archive's entry point.  Parsed by every Python from 2.7 on (ASCII only,
# no f-strings, no print statement or function), so that an old interpreter
# prints one readable line instead of dying with a SyntaxError inside
# memprove_mcp.  It imports nothing the interpreter has not already loaded to
# run a zipapp (runpy, importlib.util, os and with it stat and os.path, zlib),
# and zipimport compiles it at every start (it never caches bytecode), so it
# holds only what a start from bytecode needs: what makes, mends and writes the
# cache is CACHE_WRITER_SOURCE, compiled only by a start that compiles the
# module anyway or finds the cache directory missing or open to others.  The
# build writes the SHA-256 of the packed source into it.  Run as a zipapp its
# __name__ is "__main__"; under any other name it only defines its functions,
# which is how the tests call them.
MAIN_PY_TEMPLATE = b"""\
# Entry point of memprove_mcp.pyz, written by build_zipapp.py.  Keep this file
# parseable by Python 2.7 and 3.0-3.5: it refuses them in one line before it
# touches memprove_mcp.
import sys

if sys.version_info < (3, 6):
    sys.stderr.write("memprove-mcp needs Python 3.6 or newer; this is Python %d.%d.%d.\\n"
                     % tuple(sys.version_info[:3]))
    sys.exit(1)

import os
import stat

SOURCE_SHA256 = "@SOURCE_SHA256@"   # of memprove_mcp.py in this archive
MODULE = "memprove_mcp"
CACHE_WRITER = "@CACHE_WRITER_NAME@"   # the rest of the cache, compiled only when needed
# Compiled code is 0.8 to 1.5 times the size of its source: a longer cache
# file is no bytecode of it, and is not read (a huge file is never read whole).
CACHE_LIMIT_PER_SOURCE_BYTE = 4
CACHE_LIMIT_SLACK = 1 << 16
WRITER = {}


def cache_directory(platform, environ, home):
    # Where bytecode the archive does not carry is kept on platform (a
    # sys.platform value), or None.  Nothing here asks the running system, so
    # every platform's answer can be checked on any.
    if platform == "win32":
        # Only %LOCALAPPDATA%, per-user by its access list: Windows has no owner
        # or mode that would tell whether a folder XDG_CACHE_HOME names is shared.
        import ntpath as path       # os.path on Windows, so already loaded there
        base = environ.get("LOCALAPPDATA")
    else:
        import posixpath as path    # os.path everywhere else
        base = environ.get("XDG_CACHE_HOME")
        if not base or not path.isabs(base):
            base = path.join(home, "Library/Caches" if platform == "darwin" else ".cache")
    if base and path.isabs(base):
        return path.join(base, "memprove-mcp")
    return None


def archive():
    # The .pyz (or, unpacked, the directory) this file was run from.
    return getattr(__loader__, "archive", None) or sys.path[0]


def cache_writer():
    # CACHE_WRITER's functions, compiled once into a copy of this namespace.
    if not WRITER:
        WRITER.update(globals())
        source = __loader__.get_data(archive() + "/" + CACHE_WRITER)
        exec(compile(source, CACHE_WRITER, "exec", dont_inherit=True), WRITER)
    return WRITER


def open_cache(directory, writable):
    # POSIX: a descriptor of the cache directory itself, never of what a link
    # in its place points to, once only this user can have written in it; it
    # is then used only through that descriptor, so that no one who can change
    # a directory above it can swap it between a check and a use.  None when
    # there is none.  Missing, a link, another user's or open to others:
    # CACHE_WRITER decides, and makes or mends it when it may.
    handle = None
    try:
        handle = os.open(directory, os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY)
        info = os.fstat(handle)
        if info.st_uid == os.geteuid() and not info.st_mode & 0o077:
            return handle
    except (OSError, AttributeError):
        pass
    try:
        prepare = cache_writer()["prepare"]
    except OSError:         # the archive changed under this start: no cache, then
        if handle is not None:
            os.close(handle)
        return None
    return prepare(directory, handle, writable)


def reparse_point(path):
    # Windows: a reparse point that names another path, a symbolic link or a
    # junction (the tag's name-surrogate bit); a OneDrive placeholder is the
    # file itself.  Without the tag (3.6, 3.7), any reparse point.
    info = os.lstat(path)
    if not getattr(info, "st_file_attributes", 0) & 0x400:
        return False
    tag = getattr(info, "st_reparse_tag", None)
    return tag is None or bool(tag & 0x20000000)


def read_cached(directory, handle, name, limit):
    # The cache file's bytes when only this user can have written it, else
    # b"" (its hash header says only that it is not stale).  POSIX: opened
    # through the directory's descriptor without following a link or waiting
    # on a FIFO, a regular file of the user's that no one else can write.
    # Windows, with no owner or mode to tell: no reparse point in the place of
    # the directory or of the file.  Never more than limit bytes are read.
    try:
        if handle is None:
            path = os.path.join(directory, name)
            if reparse_point(directory) or reparse_point(path):
                return b""
            opened = os.open(path, os.O_RDONLY | os.O_BINARY)
        else:
            opened = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=handle)
    except (OSError, NotImplementedError):
        return b""
    try:
        info = os.fstat(opened)
        if stat.S_ISREG(info.st_mode) and info.st_size <= limit and (handle is None or (
                info.st_uid == os.geteuid() and not info.st_mode & 0o022)):
            return os.read(opened, info.st_size)    # a short read fails the CRC-32
    except OSError:
        pass
    finally:
        os.close(opened)
    return b""


def load():
    # The module's code object and where it came from: the archive's bytecode
    # for this interpreter ("shipped"), else the user's cache ("cached"), else
    # the source, compiled now and cached when allowed ("compiled").
    import marshal
    import importlib.util   # runpy imported it to run this file
    read = __loader__.get_data
    root = archive()
    tag = sys.implementation.cache_tag
    magic = importlib.util.MAGIC_NUMBER
    if tag:
        try:
            data = read(root + "/pyc/" + tag + "/" + MODULE + ".pyc")
        except OSError:
            data = b""
        if data[:4] == magic:
            try:
                return marshal.loads(data[16:]), "shipped"
            except (EOFError, ValueError, TypeError):
                pass
    import zlib             # zipimport imported it to read this file
    source = read(root + "/" + MODULE + ".py")
    directory = None
    if tag:
        directory = cache_directory(sys.platform, os.environ, os.path.expanduser("~"))
    writable = not sys.dont_write_bytecode
    handle = None
    if directory is not None and os.name != "nt":
        handle = open_cache(directory, writable)
        if handle is None:
            directory = None
    if directory is None:
        return compile(source, MODULE + ".py", "exec", dont_inherit=True), "compiled"
    try:
        # A hash-based .pyc (PEP 552, checked) of exactly this source, followed
        # by the CRC-32 of everything before it, so damage anywhere is seen.
        if hasattr(importlib.util, "source_hash"):
            check = importlib.util.source_hash(source)
        else:   # 3.6
            check = (zlib.crc32(source) & 0xFFFFFFFF).to_bytes(4, "little") + (
                len(source) & 0xFFFFFFFF).to_bytes(4, "little")
        header = magic + b"\\x03\\x00\\x00\\x00" + check
        optimize = sys.flags.optimize
        name = "%s-%s.%s%s.pyc" % (
            MODULE, SOURCE_SHA256, tag, ".opt-%d" % optimize if optimize else "")
        data = read_cached(directory, handle, name,
                           CACHE_LIMIT_SLACK + CACHE_LIMIT_PER_SOURCE_BYTE * len(source))
        if data[:16] == header and len(data) > 20 and (
                zlib.crc32(data[:-4]) & 0xFFFFFFFF).to_bytes(4, "little") == data[-4:]:
            try:
                return marshal.loads(data[16:-4]), "cached"
            except (EOFError, ValueError, TypeError):
                pass
        code = compile(source, MODULE + ".py", "exec", dont_inherit=True)
        if writable:
            data = header + marshal.dumps(code)
            data += (zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "little")
            try:
                cache_writer()["write"](directory, handle, name, data)
            except OSError:     # the archive changed under this start: not cached
                pass
    finally:
        if handle is not None:
            os.close(handle)
    return code, "compiled"


def run():
    code, origin = load()
    path = os.path.join(archive(), MODULE + ".py")
    module = type(sys)(MODULE)
    module.__file__ = path
    module.__loader__ = __loader__
    module.__spec__ = type(__spec__)(MODULE, __loader__, origin=path)
    module.BYTECODE_ORIGIN = origin
    sys.modules[MODULE] = module
    exec(code, module.__dict__)
    return module.main()


if __name__ == "__main__":
    sys.exit(run())
"""

# The archive's bytecode_cache.py: what makes the cache directory, makes it
# private, empties it and writes a file in it (contract.md section 6 rule 13).
# __main__.py runs it, in a copy of its own namespace, only on a start that
# compiles the module (30-60 ms) anyway, or finds the directory missing or
# open to others.  Run by 3.6 and newer only.
CACHE_WRITER_SOURCE = b"""\
# Part of memprove_mcp.pyz's __main__.py, written by build_zipapp.py: run in a
# copy of its namespace (os, stat and reparse_point come from it).


def prepare(directory, handle, writable):
    # The cache directory's descriptor once only this user can have written
    # in it (handle: the one __main__.py opened, else None), or None, and
    # handle closed.  A missing directory is made when writable.
    if not descriptors_usable():
        handle = closed(handle)
    elif handle is None and writable:
        handle = made(directory)
    if handle is None:
        return None
    try:
        if made_private(handle, writable):
            return handle
    except (OSError, RecursionError):
        pass
    return closed(handle)


def closed(handle):
    if handle is not None:
        os.close(handle)
    return None


def descriptors_usable():
    # Whether this system can open, rename, unlink and list through a
    # directory's descriptor; without that the cache cannot be used safely.
    return (all(hasattr(os, name) for name in ("O_NOFOLLOW", "O_DIRECTORY", "fchmod"))
            and os.listdir in os.supports_fd
            and all(call in os.supports_dir_fd
                    for call in (os.open, os.rename, os.unlink, os.rmdir)))


def made(directory):
    # The directory made 0700 (the ones above it as makedirs makes them) and
    # opened as __main__.py opens it; whoever made it first, what is opened is
    # checked after.
    try:
        os.makedirs(os.path.dirname(directory), exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        return os.open(directory, os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY)
    except OSError:
        return None


def made_private(handle, writable):
    # True when only this user can write in the open directory: it is theirs
    # and, when writable, made 0700, after removing all that others could
    # have put in it, since a cache file's header does not say who wrote it.
    # Read-only (-B), nothing is changed, and it is used only when no one
    # else could write in it.
    info = os.fstat(handle)
    if info.st_uid != os.geteuid():
        return False
    if not info.st_mode & 0o077:
        return True
    if not writable:
        return not info.st_mode & 0o022
    os.fchmod(handle, 0o700)
    if info.st_mode & 0o022:
        empty(handle)
    return not os.fstat(handle).st_mode & 0o077


def empty(handle):
    # Removes every entry of the open directory: a link itself, never what it
    # points to; a directory once emptied the same way.  OSError when one stays.
    for name in os.listdir(handle):
        try:
            os.unlink(name, dir_fd=handle)
            continue
        except OSError:
            pass
        inner = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=handle)
        try:
            empty(inner)
        finally:
            os.close(inner)
        os.rmdir(name, dir_fd=handle)


def windows_directory(directory):
    # Windows: the directory, made when missing, when it is one and no
    # reparse point (a link or a junction) is in its place.
    try:
        if not os.path.lexists(directory):
            os.makedirs(os.path.dirname(directory), exist_ok=True)
            os.mkdir(directory)
        return stat.S_ISDIR(os.lstat(directory).st_mode) and not reparse_point(directory)
    except OSError:
        return False


def write(directory, handle, name, data):
    # Atomically: a new 0600 temporary file beside it, renamed over whatever
    # bears the name, which is thereby replaced, never followed.  POSIX,
    # through the directory's descriptor; Windows, by path.
    temporary = "%s.%d.tmp" % (name, os.getpid())
    if handle is None:
        if not windows_directory(directory):
            return
        temporary, name = os.path.join(directory, temporary), os.path.join(directory, name)
        flags, at, between = os.O_BINARY, {}, {}
    elif not descriptors_usable():
        return
    else:
        flags, at = os.O_NOFOLLOW, {"dir_fd": handle}
        between = {"src_dir_fd": handle, "dst_dir_fd": handle}
    try:
        opened = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | flags, 0o600, **at)
    except OSError:
        return
    try:
        try:
            if handle is not None:
                os.fchmod(opened, 0o600)    # whatever the umask took
            while data:
                data = data[os.write(opened, data):]
        finally:
            os.close(opened)
        os.replace(temporary, name, **between)
    except OSError:
        try:
            os.unlink(temporary, **at)
        except OSError:
            pass
"""


def main_py(module_source):
    """The archive's __main__.py for this module source."""
    digest = hashlib.sha256(module_source).hexdigest().encode("ascii")
    return MAIN_PY_TEMPLATE.replace(b"@SOURCE_SHA256@", digest).replace(
        b"@CACHE_WRITER_NAME@", CACHE_WRITER_NAME.encode("ascii"))


class BuildError(Exception):
    """The archive cannot be built; the message says why."""


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
    entries = [("__main__.py", main_py(module_source)),
               (CACHE_WRITER_NAME, CACHE_WRITER_SOURCE),
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
