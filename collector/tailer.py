"""Read complete lines of one transcript from its committed offset.

The cursor never moves by itself: :meth:`FileTail.read` returns lines with their end
offsets and the caller :meth:`FileTail.commit`s the end of the last line it published.
A partial last line waits for its newline. A line longer than ``max_line_bytes`` is never
held in memory whole: it is skipped through in chunks and returned as an oversize
:class:`Line` (``raw is None``) carrying its size.

Transcript names are untrusted: every open goes through :func:`open_regular`, which never
blocks (a FIFO swapped in for a transcript would freeze the event loop), never follows a
symlink, and yields only regular files.
"""

from __future__ import annotations

import enum
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

CHUNK_BYTES = 256 * 1024
#: The published bytes just before the committed offset that a replaced file (a new inode)
#: must hold at the same place to continue it (:meth:`FileTail.continued_by`).
TIP_BYTES = 4096
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class NotRegular(OSError):
    """The path is a FIFO, device, directory or symlink: never read as a transcript."""


def open_regular(path: Path | str) -> BinaryIO:
    """Open a regular file for reading without blocking or following a final symlink.

    ``O_NONBLOCK`` makes opening a FIFO return at once (it has no effect on regular
    files); ``fstat`` on the open descriptor then refuses anything but a regular file.
    Raises :class:`NotRegular` (an ``OSError``) or the ``OSError`` of ``open``.
    """
    fd, _st = open_fd(path)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_fd(path: Path | str) -> tuple[int, os.stat_result]:
    """:func:`open_regular` as a bare descriptor and its ``fstat`` (the caller closes it)."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"not a regular file: {path}")
        return fd, st
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True, slots=True)
class Identity:
    dev: int
    ino: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_dev, st.st_ino)


class Line(NamedTuple):
    """One complete line without its newline; ``raw`` is ``None`` above the size cap."""

    raw: bytes | None
    size: int
    end: int


@dataclass(frozen=True, slots=True)
class Tip:
    """A digest of the published bytes ``[end - size, end)`` (the end of the published prefix)."""

    end: int
    size: int
    digest: bytes

    @classmethod
    def of(cls, data: bytes, end: int) -> Tip:
        """The tip of ``data``, the bytes that end at offset ``end``."""
        chunk = data[-TIP_BYTES:]
        return cls(end, len(chunk), _digest(chunk))

    @classmethod
    def of_lines(cls, lines: list[Line]) -> Tip | None:
        """The tip of a batch's lines, from memory (``None`` when its last line is oversize)."""
        last = lines[-1]
        if last.raw is None:
            return None
        if len(lines) == 1 or last.size >= TIP_BYTES:  # the common case: the last line alone
            return cls.of(last.raw + b"\n", last.end)
        parts: list[bytes] = []
        size = 0
        for line in reversed(lines):
            if line.raw is None or size >= TIP_BYTES:
                break
            parts.append(line.raw + b"\n")
            size += line.size + 1
        if not parts:
            return None
        return cls.of(b"".join(reversed(parts)), lines[-1].end)


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class Status(enum.Enum):
    SAME = "same"
    MISSING = "missing"
    REPLACED = "replaced"
    TRUNCATED = "truncated"


@dataclass(frozen=True, slots=True)
class Probe:
    status: Status
    size: int = 0
    identity: Identity | None = None
    mtime: float = 0.0


_MISSING = Probe(Status.MISSING)


def probe(path: Path) -> Probe | None:
    """Stat a path: ``None`` when it does not exist or is not a regular file (a symlink is not)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return Probe(Status.SAME, st.st_size, Identity.of(st), st.st_mtime)


class FileTail:
    """The read cursor of one file: its identity and the committed offset.

    ``hold``: :meth:`read` keeps the file open between reads (one ``fstat`` and ``pread``
    per read instead of ``open``, ``fstat``, ``pread`` and ``close``) until :meth:`close`;
    the descriptor is used only while its inode is the cursor's :attr:`identity` (a
    :meth:`reset` to another inode closes it), and :meth:`check` still looks at the path,
    so truncation, replacement and deletion are seen as before.
    """

    def __init__(self, path: Path, identity: Identity, offset: int, *, hold: bool = False) -> None:
        self.path = path
        self.identity = identity
        self.offset = offset
        self.size = offset
        self.hold = hold
        #: The descriptor held open (``hold``) and the inode it is: never another's.
        self._fd: int | None = None
        self._fd_identity: Identity | None = None
        # An oversize line being skipped: (its start offset, bytes scanned so far without \n).
        self._skip: tuple[int, int] | None = None
        #: The end of what was published (set by the caller once Redis accepted it).
        self.tip: Tip | None = None
        #: Why the file is read again from its start, until that is announced.
        self.restarted: str | None = None

    def check(self) -> Probe:
        """Compare the file on disk with the cursor (the caller decides what to do)."""
        try:
            st = os.lstat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return _MISSING
        if not stat.S_ISREG(st.st_mode):
            return _MISSING
        size = self.size = st.st_size
        ident = self.identity
        if st.st_ino != ident.ino or st.st_dev != ident.dev:
            return Probe(Status.REPLACED, size, Identity.of(st), st.st_mtime)
        if size < self.offset:
            return Probe(Status.TRUNCATED, size, ident, st.st_mtime)
        return Probe(Status.SAME, size, ident, st.st_mtime)

    def read_tip(self, end: int) -> Tip | None:
        """The tip of this file's bytes before ``end`` (``None``: gone, replaced, or short)."""
        start = max(0, end - TIP_BYTES)
        try:
            fd, st = open_fd(self.path)
        except OSError:
            return None
        try:
            if Identity.of(st) != self.identity:
                return None
            data = os.pread(fd, end - start, start)
        finally:
            os.close(fd)
        return Tip.of(data, end) if len(data) == end - start else None

    def continued_by(self, identity: Identity) -> bool:
        """The file now at the path (``identity``, a new inode) holds what was published, up
        to the committed offset, at the same place: a copy of this one, perhaps with more.

        Checks the digest of the last published bytes (:data:`TIP_BYTES`) at the same offset.
        """
        tip = self.tip
        if tip is None or tip.end != self.offset:
            return False
        try:
            fd, st = open_fd(self.path)
        except OSError:
            return False
        try:
            if Identity.of(st) != identity or st.st_size < tip.end:
                return False
            data = os.pread(fd, tip.size, tip.end - tip.size)
        finally:
            os.close(fd)
        return _digest(data) == tip.digest

    def reset(self, identity: Identity, offset: int = 0) -> None:
        """Start over (truncation or a new inode at the same path)."""
        if identity != self._fd_identity:
            self.close()  # the old inode's: never read again
        self.identity = identity
        self.offset = offset
        self._skip = None

    @property
    def has_unread(self) -> bool:
        if self._skip is not None and self._skip[0] == self.offset:
            return self.size > self._skip[1]
        return self.size > self.offset

    @property
    def lag_bytes(self) -> int:
        return max(0, self.size - self.offset)

    def rewind(self, offset: int) -> None:
        """Back to a confirmed offset (the batch read after it was not accepted)."""
        self.offset = offset
        self._skip = None

    def commit(self, end: int) -> None:
        self.offset = end
        if self._skip is not None and self._skip[0] < end:
            self._skip = None

    def read(
        self, *, max_lines: int, max_bytes: int, max_line_bytes: int, size: int | None = None
    ) -> list[Line]:
        """Complete lines from the committed offset, up to ``max_lines``/about ``max_bytes``.

        Reads with ``pread`` up to the size the open file has (what is appended meanwhile
        is the next call's): a line or two cost one read of their own size, not a buffered
        read of :data:`CHUNK_BYTES`. ``size``: the size a :meth:`check` just saw; a held
        descriptor is then read up to it without an ``fstat`` of its own (the check found
        the path to be this inode; what is appended after it wakes the caller again).
        """
        lines: list[Line] = []
        opened = self._open(size)
        if (
            opened is None
        ):  # gone, replaced, or swapped for a FIFO/symlink: the next check() sees it
            return lines
        fd, size = opened
        try:
            base = self.offset
            buf = b""
            i = 0
            total = 0
            if self._skip is not None and self._skip[0] == base:
                found = self._skip_through(fd, base, self._skip[1])
                if found is None:
                    return lines
                lines.append(found)
                total += 1
                base = found.end
            while len(lines) < max_lines and total < max_bytes:
                nl = buf.find(b"\n", i)
                if nl >= 0:
                    n = nl - i
                    raw = None if n > max_line_bytes else buf[i:nl]
                    lines.append(Line(raw, n, base + nl + 1))
                    total += n + 1 if raw is not None else 1
                    i = nl + 1
                    continue
                if len(buf) - i > max_line_bytes:
                    found = self._skip_through(fd, base + i, base + len(buf))
                    if found is None:
                        break
                    lines.append(found)
                    total += 1
                    base, buf, i = found.end, b"", 0
                    continue
                at = base + len(buf)
                want = min(CHUNK_BYTES, size - at)
                data = os.pread(fd, want, at) if want > 0 else b""
                if not data:
                    break
                base += i
                buf = buf[i:] + data if i < len(buf) else data
                i = 0
        finally:
            if not self.hold:
                self.close()
        return lines

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def _open(self, size: int | None = None) -> tuple[int, int] | None:
        """The descriptor of this cursor's inode and its size (``size`` when known): the
        held one, or the path opened now (``None`` when the path is gone, not a regular
        file, or another inode)."""
        if self._fd is not None:
            if self._fd_identity is self.identity or self._fd_identity == self.identity:
                return self._fd, os.fstat(self._fd).st_size if size is None else size
            self.close()
        try:
            fd, st = open_fd(self.path)
        except OSError:
            return None
        if Identity.of(st) != self.identity:
            os.close(fd)
            return None
        self._fd, self._fd_identity = fd, self.identity
        return fd, st.st_size

    def close(self) -> None:
        """Close the held descriptor (the next :meth:`read` opens the path again)."""
        fd, self._fd, self._fd_identity = self._fd, None, None
        if fd is not None:
            os.close(fd)

    def _skip_through(self, fd: int, start: int, scanned: int) -> Line | None:
        """Scan an oversize line for its newline without keeping its bytes."""
        while True:
            data = os.pread(fd, CHUNK_BYTES, scanned)
            if not data:
                self._skip = (start, scanned)
                return None
            k = data.find(b"\n")
            if k >= 0:
                end = scanned + k + 1
                self._skip = None
                return Line(None, end - 1 - start, end)
            scanned += len(data)
