# Entry point of memprove_mcp.pyz, copied into it by build_zipapp.py, which
# writes the SHA-256 of the packed source into SOURCE_SHA256 below.
#
# Parsed by every Python from 2.7 on (ASCII only, no f-strings, no print
# statement or function), so that an old interpreter prints one readable line
# instead of dying with a SyntaxError inside memprove_mcp.  It imports nothing
# the interpreter has not already loaded to run a zipapp (runpy, importlib.util,
# os and with it stat and os.path, zlib), and zipimport compiles it at every
# start (it never caches bytecode), so it holds only what a start from bytecode
# needs: what makes, mends and writes the cache is CACHE_WRITER, compiled only
# by a start that compiles the module anyway or finds the cache directory
# missing or open to others.  Run as a zipapp its __name__ is "__main__"; under
# any other name it only defines its functions, which is how the tests call them.
import sys

if sys.version_info < (3, 6):
    sys.stderr.write("memprove-mcp needs Python 3.6 or newer; this is Python %d.%d.%d.\n"
                     % tuple(sys.version_info[:3]))
    sys.exit(1)

import os
import stat

SOURCE_SHA256 = "@SOURCE_SHA256@"   # of memprove_mcp.py in this archive
MODULE = "memprove_mcp"
CACHE_WRITER = "bytecode_cache.py"   # the rest of the cache, compiled only when needed
# Compiled code is 0.8 to 1.5 times the size of its source: a longer cache
# file is no bytecode of it, and is not read (a huge file is never read whole).
CACHE_LIMIT_PER_SOURCE_BYTE = 4
CACHE_LIMIT_SLACK = 1 << 16
WRITER = None   # CACHE_WRITER as a module, once cache_writer() has run it


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
    # CACHE_WRITER, the archive's file, run once as a module of its own (it
    # imports what it uses).  Read from this archive by path rather than
    # imported by name, which another file on sys.path could answer.  OSError
    # when the archive changed under this start.
    global WRITER
    if WRITER is None:
        path = archive() + "/" + CACHE_WRITER
        module = type(sys)(CACHE_WRITER[:-len(".py")])
        module.__file__ = path
        module.__loader__ = __loader__      # so that a traceback shows its lines
        code = compile(__loader__.get_data(path), path, "exec", dont_inherit=True)
        exec(code, module.__dict__)
        WRITER = module
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
        prepare = cache_writer().prepare
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
        header = magic + b"\x03\x00\x00\x00" + check
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
                cache_writer().write(directory, handle, name, data, reparse_point)
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
    module.SOURCE_SHA256 = SOURCE_SHA256    # so --version reads no file the archive's path holds now
    sys.modules[MODULE] = module
    exec(code, module.__dict__)
    return module.main()


if __name__ == "__main__":
    sys.exit(run())
