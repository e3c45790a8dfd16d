# The bytecode cache's writer, copied into memprove_mcp.pyz by build_zipapp.py:
# what makes the cache directory, makes it private, empties it and writes a
# file in it (contract.md section 6 rule 13).  The archive's __main__.py runs
# it, as a module of its own, only on a start that compiles the module (30-60
# ms) anyway, or finds the directory missing or open to others.  Run by 3.6 and
# newer only.
import os
import stat


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


def windows_directory(directory, reparse_point):
    # Windows: the directory, made when missing, when it is one and no
    # reparse point (a link or a junction) is in its place; reparse_point is
    # __main__.py's test, which it also applies when it reads the cache.
    try:
        if not os.path.lexists(directory):
            os.makedirs(os.path.dirname(directory), exist_ok=True)
            os.mkdir(directory)
        return stat.S_ISDIR(os.lstat(directory).st_mode) and not reparse_point(directory)
    except OSError:
        return False


def write(directory, handle, name, data, reparse_point):
    # Atomically: a new 0600 temporary file beside it, renamed over whatever
    # bears the name, which is thereby replaced, never followed.  POSIX,
    # through the directory's descriptor; Windows, by path.
    temporary = "%s.%d.tmp" % (name, os.getpid())
    if handle is None:
        if not windows_directory(directory, reparse_point):
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
