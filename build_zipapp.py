#!/usr/bin/env python3
"""Build dist/memprove_mcp.pyz, a reproducible zipapp of memprove_mcp.py.

    python3 build_zipapp.py [-o PATH] [--source PATH] [--python PATH]...
                            [--exclude-tag TAG]... [--no-bytecode]
                            [--release vX.Y.Z]

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
system and permissions, and stored rather than deflated, so neither the
clock, the umask, the working directory, the files' mtimes or modes nor the
zlib a Python was built with reach the output.  The stdlib ``zipapp`` module
is not used because it stores each file's real mtime and walks directories
unsorted.

Beside the archive the build writes ``SHA256SUMS``, one line in the format
of ``sha256sum`` that ``sha256sum -c``, ``shasum -a 256 -c`` and
PowerShell's ``Get-FileHash`` check.  It writes both through temporary files
renamed over the outputs, so a failed build never leaves a half-written one.

``--release vX.Y.Z`` builds what a release publishes: it refuses unless the
tag is ``v`` followed by the module's VERSION and CHANGELOG.md has that
version's dated section, compiles bytecode with the ``--python``
interpreters alone (none searched for, so that the release notes can name
every one), and writes ``RELEASE-NOTES.md`` beside the archive: the
changelog's section, then the sum and the interpreters that rebuild the
same bytes.

Standard library only; runs on Python 3.6 and newer.
"""

import argparse
import collections
import hashlib
import io
import os
import re
import sys
import tempfile
import warnings
import zipfile

__all__ = ["build", "archive_bytes", "release_notes", "main"]

HERE = os.path.dirname(os.path.realpath(os.path.abspath(__file__)))
DEFAULT_SOURCE = os.path.join(HERE, "memprove_mcp.py")
DEFAULT_OUTPUT = os.path.join(HERE, "dist", "memprove_mcp.pyz")
CHANGELOG = os.path.join(HERE, "CHANGELOG.md")
SUMS_NAME = "SHA256SUMS"
NOTES_NAME = "RELEASE-NOTES.md"

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
# Stored, not deflated: DEFLATE's bytes depend on the zlib build (zlib-ng on
# Fedora, another in each Windows Python), so a deflated archive would be
# rebuilt the same only with the same zlib.  It costs size (4.3 MB against
# 1.8 MB with the bytecode of ten Pythons), not start time: `mcp print-config`
# took 42.4 ms stored and 44.2 ms deflated under 3.12, 43.1 and 47.1 under 3.6
# (medians of 60 runs each, interleaved).
ENTRY_COMPRESS_TYPE = zipfile.ZIP_STORED
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


# Run by each interpreter the build uses: prints its cache tag, a space, its
# full version (for the release notes), a newline, then a hash-based .pyc (PEP 552, unchecked) of the source on standard input;
# 3.6, which predates PEP 552, gets the same 16-byte header with no hash.
# __main__.py checks only the magic number: the archive carries the source it
# was compiled from.  co_filename is fixed so that no build path reaches the
# bytes.  Parsed by 3.6.
COMPILE_PYC = """\
import importlib.util, marshal, platform, sys
source = sys.stdin.buffer.read()
code = compile(source, "memprove_mcp.py", "exec", dont_inherit=True)
if hasattr(importlib.util, "source_hash"):
    header = (1).to_bytes(4, "little") + importlib.util.source_hash(source)
else:
    header = bytes(12)
sys.stdout.buffer.write(sys.implementation.cache_tag.encode("ascii") + b" "
                        + platform.python_version().encode("ascii") + b"\\n"
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


# One interpreter's bytecode: its cache tag (cpython-313), its full version
# (3.13.9), the interpreter's path and the .pyc's bytes.
Bytecode = collections.namedtuple("Bytecode", "tag version interpreter data")


def compile_with(interpreter, module_source):
    """The Bytecode interpreter makes of the module, or None when it cannot."""
    import subprocess
    try:
        # cwd "/": the tests' chroot wrappers run the interpreter in the
        # caller's directory, and "/" exists inside every chroot.
        done = subprocess.run([interpreter, "-I", "-c", COMPILE_PYC], input=module_source,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                              cwd=os.path.abspath(os.sep))
    except (OSError, subprocess.SubprocessError):
        return None
    first, _, data = done.stdout.partition(b"\n")
    tag, _, version = first.decode("ascii", "replace").partition(" ")
    if done.returncode != 0 or not tag or len(data) <= 16:
        return None
    return Bytecode(tag, version, interpreter, data)


def compiled_bytecode(module_source, interpreters, explicit=(), exclude_tags=()):
    """The Bytecode of each cache tag, sorted by tag.

    zipimport never writes bytecode caches, so a source-only archive would
    recompile the module on every start (20-35 ms).  Each interpreter's .pyc
    goes in pyc/<cache tag>/, which __main__.py reads first.  The explicit
    interpreters come first and must work; a found one that does not run is
    skipped, as is one whose minor version an earlier one covered.
    """
    made = {}
    covered = set()
    for interpreter in list(explicit) + list(interpreters):
        minor = _minor_of(interpreter)
        if interpreter not in explicit and minor is not None and minor in covered:
            continue
        bytecode = compile_with(interpreter, module_source)
        if bytecode is None:
            if interpreter in explicit:
                raise BuildError("%s cannot compile the module" % interpreter)
            continue
        match = re.match(r"cpython-3([0-9]+)\Z", bytecode.tag)
        if match:
            covered.add(int(match.group(1)))
        if bytecode.tag not in exclude_tags:
            made.setdefault(bytecode.tag, bytecode)
    # cpython-36 before cpython-310: the notes list them in the order of the versions.
    return sorted(made.values(), key=lambda bytecode: [
        int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", bytecode.tag)])


def hash_based_pyc_entries(module_source, interpreters, explicit=(), exclude_tags=()):
    """(name, bytes) entries of compiled bytecode, one per cache tag."""
    return [("pyc/%s/%s.pyc" % (bytecode.tag, MODULE_NAME), bytecode.data)
            for bytecode in compiled_bytecode(module_source, interpreters, explicit, exclude_tags)]


def archive_entries(module_source, bytecode=()):
    """The archive's entries as (name, bytes), sorted by name."""
    entries = [(MAIN_NAME, main_py(module_source)),
               (CACHE_WRITER_NAME, read_program(CACHE_WRITER_NAME)),
               (MODULE_NAME + ".py", module_source)]
    entries.extend(("pyc/%s/%s.pyc" % (made.tag, MODULE_NAME), made.data) for made in bytecode)
    return sorted(entries)


def archive_bytes(module_source, bytecode=()):
    """The complete .pyz for the given module source and Bytecode, as bytes."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in archive_entries(module_source, bytecode):
            info = zipfile.ZipInfo(name, date_time=ENTRY_DATE_TIME)
            info.create_system = ENTRY_CREATE_SYSTEM
            info.external_attr = ENTRY_EXTERNAL_ATTR
            info.compress_type = ENTRY_COMPRESS_TYPE
            archive.writestr(info, data)
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


def write_atomically(outputs):
    """Write each (path, data, mode) through a temporary file beside it, then
    rename them over their paths in order: a failure before the renames leaves
    every old output as it was, and no temporary file.  The caller puts the
    archive last, so that a rename refused on the way (another user's
    SHA256SUMS in a shared folder) leaves the old archive beside the new sum,
    which a check then fails, never a new archive beside an old sum."""
    temporaries = []
    try:
        for path, data, mode in outputs:
            directory = os.path.dirname(path) or os.curdir
            try:
                os.makedirs(directory, exist_ok=True)
                descriptor, temporary = tempfile.mkstemp(
                    prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
            except OSError as error:
                raise BuildError("cannot write in %s: %s" % (directory, error.strerror or error))
            temporaries.append(temporary)
            try:
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.chmod(temporary, mode)
            except OSError as error:
                raise BuildError("cannot write %s: %s" % (path, error.strerror or error))
        for (path, _, _), temporary in zip(outputs, temporaries):
            try:
                os.replace(temporary, path)
            except OSError as error:
                raise BuildError("cannot write %s: %s" % (path, error.strerror or error))
    finally:
        for temporary in temporaries:
            try:
                os.unlink(temporary)
            except OSError:
                pass


def explicit_interpreters(pythons=(), environ=None):
    """--python PATHs, then those of $MEMPROVE_BUILD_PYTHONS, without repeats."""
    environ = os.environ if environ is None else environ
    listed = list(pythons) + environ.get(PYTHONS_VARIABLE, "").split(os.pathsep)
    unique = []
    for path in listed:
        if path and path not in unique:
            unique.append(path)
    return unique


# A name SHA256SUMS can hold as is: sha256sum escapes a backslash or a line
# break, and shasum and Get-FileHash read no escapes, so only printable ASCII.
SUMMABLE_NAME = re.compile(r"[ -\[\]-~]+\Z")


def sums_line(digest, name):
    """One line of SHA256SUMS, as `sha256sum` writes it for a file read in
    binary mode on POSIX (two spaces), which every checker reads."""
    return "%s  %s\n" % (digest, name)


# --- the release ---------------------------------------------------------------

# The module's version, as the server's own archive_module_version reads it.
MODULE_VERSION = re.compile(r'(?m)^VERSION = "([0-9A-Za-z.+-]{1,32})"$')
# A changelog's section heading ("Keep a Changelog"), on one line.
SECTION = re.compile(r"## \[([^\]\n]{1,64})\](?: - ([0-9]{4}-[0-9]{2}-[0-9]{2}))?[ \t]*\Z")
FENCE = re.compile(r"(```|~~~)")
LINK_REFERENCE = re.compile(r"\[[^\]\n]+\]: \S")
MAX_CHANGELOG = 1 << 20           # bytes: a changelog is read whole
MAX_NOTES = 100000                # characters of a section: GitHub takes 125,000 for notes


def module_version(module_source):
    found = MODULE_VERSION.search(module_source.decode("utf-8", "replace"))
    if not found:
        raise BuildError('the module holds no line VERSION = "X.Y.Z"')
    return found.group(1)


def changelog_headings(lines):
    """(line index, version, date or None) of each section heading, those in
    fenced code left out (an example heading is no section)."""
    headings, fence = [], None
    for index, line in enumerate(lines):
        opening = FENCE.match(line.lstrip(" "))
        if opening:
            fence = None if fence == opening.group(1) else fence or opening.group(1)
            continue
        heading = None if fence else SECTION.match(line)
        if heading:
            headings.append((index, heading.group(1), heading.group(2)))
    return headings


def changelog_section(changelog, version):
    """(date, text) of the changelog's section `## [version] - YYYY-MM-DD`,
    below its heading; BuildError when it has none, or an undated one, or when
    its text holds what the notes must not (controls, characters that hide
    text, the notes' own headings) or is longer than notes can be."""
    lines = changelog.split("\n")
    headings = changelog_headings(lines)
    for number, (index, name, date) in enumerate(headings):
        if name != version:
            continue
        if not date:
            raise BuildError("CHANGELOG.md's section [%s] has no date (## [%s] - YYYY-MM-DD)"
                             % (version, version))
        end = headings[number + 1][0] if number + 1 < len(headings) else len(lines)
        body = lines[index + 1:end]
        # Link references ("[0.2.0]: https://...") end a changelog: dropped from its end only.
        while body and (not body[-1].strip() or LINK_REFERENCE.match(body[-1])):
            body.pop()
        text = "\n".join(body).strip("\n") + "\n"
        check_notes_text(text, version)
        return date, text
    raise BuildError("CHANGELOG.md has no section ## [%s] - YYYY-MM-DD" % version)


def check_notes_text(text, version):
    """BuildError unless the section's text can be published as it is."""
    import unicodedata
    where = "CHANGELOG.md's section [%s]" % version
    if len(text) > MAX_NOTES:
        raise BuildError("%s is over %d characters" % (where, MAX_NOTES))
    for character in text:
        if character not in "\n\t" and unicodedata.category(character) in (
                "Cc", "Cf", "Cs", "Co", "Zl", "Zp"):
            raise BuildError("%s holds U+%04X, a control or a character that hides text"
                             % (where, ord(character)))
    for heading in ("### The archive", "### Rebuilding the same bytes"):
        if heading in text:
            raise BuildError("%s holds %r, a heading the notes add themselves" % (where, heading))


# The repository the notes name for `gh attestation verify`: GitHub's runners
# say it (GITHUB_REPOSITORY); elsewhere the notes say "<this repository>".
REPOSITORY = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}\Z")


def release_notes(tag, module_source, changelog, archive_name, digest, bytecode, repository=None):
    """The release notes of `tag`: the changelog's section, then what checks the
    archive and what rebuilds its bytes.  BuildError when the tag is not
    `v` + the module's VERSION or the changelog has no dated section for it."""
    version = module_version(module_source)
    if tag != "v" + version:
        raise BuildError("the tag %s is not v%s, the module's VERSION" % (tag, version))
    date, section = changelog_section(changelog, version)
    lines = [section, "### The archive", "",
             "`%s`, SHA-256 `%s` (`%s`). Check it with `sha256sum -c %s` (macOS: "
             "`shasum -a 256 -c %s`; Windows: `Get-FileHash`), and its origin with "
             "`gh attestation verify %s --repo %s`."
             % (archive_name, digest, SUMS_NAME, SUMS_NAME, SUMS_NAME, archive_name,
                repository if REPOSITORY.match(repository or "") else "<this repository>"), "",
             "### Rebuilding the same bytes", "",
             "The entries are stored, not deflated, so no zlib is involved: the tag's tree "
             "and these interpreters rebuild the archive byte for byte, each passed as "
             "`--python` to `python3 build_zipapp.py --release %s`:" % tag, ""]
    lines += ["- `%s`: CPython %s" % (made.tag, made.version) for made in bytecode] or \
        ["- none: the archive carries no bytecode"]
    lines += ["", "On any other Python the archive compiles the module at its first start and "
              "keeps the bytecode in the user's cache directory."]
    return "\n".join(lines) + "\n"


def read_changelog(path=CHANGELOG):
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CHANGELOG + 1)
        if len(data) > MAX_CHANGELOG:
            raise BuildError("%s is over %d bytes" % (path, MAX_CHANGELOG))
        return data.decode("utf-8").replace("\r\n", "\n")
    except (OSError, UnicodeDecodeError) as error:
        raise BuildError("cannot read %s: %s" % (path, getattr(error, "strerror", None) or error))


Built = collections.namedtuple("Built", "size digest bytecode")


def build(source=DEFAULT_SOURCE, output=DEFAULT_OUTPUT, bytecode=True, pythons=(),
          exclude_tags=(), release=None):
    """Build the archive at output, SHA256SUMS beside it and, for a release
    tag, RELEASE-NOTES.md; return a Built (size, sha256 hex digest, Bytecode)."""
    if not SUMMABLE_NAME.match(os.path.basename(output)):
        raise BuildError("%r: the archive's name must be printable ASCII without a backslash, "
                         "as %s names it" % (os.path.basename(output), SUMS_NAME))
    module_source = read_source(source)
    if release is not None:
        changelog = read_changelog()
        release_notes(release, module_source, changelog, "", "", ())    # refuse before compiling
    made = ()
    if bytecode:
        found = () if release is not None else find_interpreters()
        made = compiled_bytecode(module_source, found, explicit_interpreters(pythons),
                                 exclude_tags)
    data = archive_bytes(module_source, made)
    digest = hashlib.sha256(data).hexdigest()
    name = os.path.basename(output)
    outputs = [(os.path.join(os.path.dirname(output), SUMS_NAME),
                sums_line(digest, name).encode("ascii"), 0o644)]
    if release is not None:
        notes = release_notes(release, module_source, changelog, name, digest, made,
                              os.environ.get("GITHUB_REPOSITORY"))
        outputs.append((os.path.join(os.path.dirname(output), NOTES_NAME),
                        notes.encode("utf-8"), 0o644))
    write_atomically(outputs + [(output, data, ARCHIVE_MODE)])
    return Built(len(data), digest, made)


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="build_zipapp.py",
        description="Build a reproducible zipapp of memprove_mcp.py, and SHA256SUMS beside it.",
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
    parser.add_argument(
        "--release", metavar="vX.Y.Z",
        help="build the release of this tag: it must be v + the module's VERSION, with a "
             "dated section in CHANGELOG.md; only the --python interpreters compile "
             "bytecode; also writes %s" % NOTES_NAME)
    return parser.parse_args(argv)


def main(argv=None):
    """Run the command line; return the exit status (2 for usage errors)."""
    try:
        arguments = parse_arguments(argv)
    except SystemExit as stop:      # argparse: 2 for usage errors, 0 for --help
        return stop.code if isinstance(stop.code, int) else 2
    output = os.path.abspath(arguments.output)
    try:
        built = build(os.path.abspath(arguments.source), output, arguments.bytecode,
                      arguments.pythons, frozenset(arguments.exclude_tags), arguments.release)
    except BuildError as error:
        sys.stderr.write("build_zipapp.py: error: %s\n" % error)
        return 1
    sys.stdout.write("built %s (%d bytes, sha256 %s)\n" % (output, built.size, built.digest))
    for made in built.bytecode:
        sys.stdout.write("  bytecode %s from CPython %s (%s)\n"
                         % (made.tag, made.version, made.interpreter))
    return 0


if __name__ == "__main__":
    sys.exit(main())
