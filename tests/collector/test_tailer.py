"""The tailer: complete lines only, from the committed offset, whatever happens to the file."""

from __future__ import annotations

import os
from pathlib import Path

from relaybus.collector.tailer import (
    CHUNK_BYTES,
    TIP_BYTES,
    FileTail,
    Identity,
    Line,
    Status,
    Tip,
    probe,
)

LIMITS = {"max_lines": 100, "max_bytes": 1 << 20, "max_line_bytes": 4096}


def tail_of(path: Path, offset: int = 0) -> FileTail:
    p = probe(path)
    assert p is not None and p.identity is not None
    return FileTail(path, p.identity, offset)


def write(path: Path, data: bytes, mode: str = "ab") -> None:
    with open(path, mode) as f:
        f.write(data)


def read_all(t: FileTail, **kw: int) -> list[bytes | None]:
    lines = t.read(**(LIMITS | kw))
    if lines:
        t.commit(lines[-1].end)
    return [ln.raw for ln in lines]


def test_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    """A line without its newline is not returned until the newline is written."""
    f = tmp_path / "a.jsonl"
    write(f, b'{"a":1}\n{"b":')
    t = tail_of(f)
    assert read_all(t) == [b'{"a":1}']
    assert t.offset == 8
    t.check()
    assert read_all(t) == []
    write(f, b"2}\n")
    t.check()
    assert read_all(t) == [b'{"b":2}']
    assert t.offset == os.path.getsize(f)


def test_offsets_are_line_ends_and_reads_resume_there(tmp_path: Path) -> None:
    """Each line carries the offset after its newline; a new cursor resumes at any of them."""
    f = tmp_path / "a.jsonl"
    write(f, b"one\ntwo\nthree\n")
    lines = tail_of(f).read(**LIMITS)
    assert [(ln.raw, ln.end) for ln in lines] == [(b"one", 4), (b"two", 8), (b"three", 14)]
    assert read_all(tail_of(f, 8)) == [b"three"]


def test_batch_limits(tmp_path: Path) -> None:
    """At most max_lines per read; the rest comes on the next read."""
    f = tmp_path / "a.jsonl"
    write(f, b"".join(b"line%d\n" % i for i in range(10)))
    t = tail_of(f)
    assert len(read_all(t, max_lines=4)) == 4
    assert read_all(t, max_lines=100) == [b"line%d" % i for i in range(4, 10)]


def test_truncation_is_detected(tmp_path: Path) -> None:
    """A file shorter than the committed offset is reported truncated; reading restarts at 0."""
    f = tmp_path / "a.jsonl"
    write(f, b"aaaa\nbbbb\n")
    t = tail_of(f)
    read_all(t)
    write(f, b"new\n", mode="wb")
    pr = t.check()
    assert pr.status is Status.TRUNCATED and pr.size == 4
    assert pr.identity is not None
    t.reset(pr.identity, 0)
    assert read_all(t) == [b"new"]


def test_replacement_with_a_new_inode_is_detected(tmp_path: Path) -> None:
    """A file replaced by rename (new inode) is reported replaced, even if it is longer."""
    f = tmp_path / "a.jsonl"
    write(f, b"old\n")
    t = tail_of(f)
    read_all(t)
    other = tmp_path / "b.tmp"
    write(other, b"x\ny\nz\n")
    os.replace(other, f)
    pr = t.check()
    assert pr.status is Status.REPLACED
    assert pr.identity is not None
    t.reset(pr.identity, 0)
    assert read_all(t) == [b"x", b"y", b"z"]


def test_deletion_is_detected(tmp_path: Path) -> None:
    """A deleted file is reported missing and reads return nothing."""
    f = tmp_path / "a.jsonl"
    write(f, b"a\n")
    t = tail_of(f)
    f.unlink()
    assert t.check().status is Status.MISSING
    assert t.read(**LIMITS) == []


def test_read_refuses_a_file_replaced_after_check(tmp_path: Path) -> None:
    """If the inode at the path is not the cursor's, read returns nothing (no mixed content)."""
    f = tmp_path / "a.jsonl"
    write(f, b"a\n")
    t = FileTail(f, Identity(0, 0), 0)
    assert t.read(**LIMITS) == []


def test_huge_line_becomes_an_oversize_stand_in(tmp_path: Path) -> None:
    """A line above the cap is returned as raw=None with its size, between normal lines."""
    f = tmp_path / "a.jsonl"
    big = b"x" * (3 * CHUNK_BYTES + 17)
    write(f, b"before\n" + big + b"\nafter\n")
    t = tail_of(f)
    lines = t.read(**LIMITS)
    assert [ln.raw for ln in lines] == [b"before", None, b"after"]
    assert lines[1].size == len(big)
    assert lines[2].end == os.path.getsize(f)


def test_huge_partial_line_is_skipped_in_chunks_then_completed(tmp_path: Path) -> None:
    """A huge line still being written waits, resuming the scan where it stopped."""
    f = tmp_path / "a.jsonl"
    write(f, b"ok\n" + b"y" * (2 * CHUNK_BYTES))
    t = tail_of(f)
    assert read_all(t) == [b"ok"]
    t.check()
    assert read_all(t) == []
    write(f, b"y" * CHUNK_BYTES)
    t.check()
    assert bool(t.has_unread)  # bool(): mypy would keep a narrowed t.has_unread past t.check()
    assert read_all(t) == []
    t.check()
    assert not t.has_unread  # nothing new since the scan stopped
    write(f, b"y\nnext\n")
    t.check()
    lines = t.read(**LIMITS)
    assert [ln.raw for ln in lines] == [None, b"next"]
    assert lines[0].size == 3 * CHUNK_BYTES + 1


def test_line_just_above_the_cap_within_one_chunk(tmp_path: Path) -> None:
    """A line longer than max_line_bytes but read in one chunk is also a stand-in."""
    f = tmp_path / "a.jsonl"
    write(f, b"z" * 5000 + b"\nsmall\n")
    assert read_all(tail_of(f)) == [None, b"small"]


def test_non_utf8_and_malformed_bytes_are_returned_as_lines(tmp_path: Path) -> None:
    """The tailer splits on newlines only; bytes are the projection's business."""
    f = tmp_path / "a.jsonl"
    write(f, b"\xff\xfe\x00bad\n{not json\n")
    assert read_all(tail_of(f)) == [b"\xff\xfe\x00bad", b"{not json"]


def test_tip_of_lines_is_the_digest_of_the_published_bytes_before_the_end() -> None:
    """One line, a last line above the tip size, or several lines: the same digest as the
    bytes themselves; ``None`` when the last line is oversize."""
    one = [Line(b"a" * 10, 10, 111)]
    assert Tip.of_lines(one) == Tip.of(b"a" * 10 + b"\n", 111)
    big = [Line(b"x" * 5, 5, 6), Line(b"y" * TIP_BYTES, TIP_BYTES, 6 + TIP_BYTES + 1)]
    assert Tip.of_lines(big) == Tip.of(b"x" * 5 + b"\n" + b"y" * TIP_BYTES + b"\n", big[-1].end)
    several = [Line(b"p%d" % i, 2, 3 * (i + 1)) for i in range(3)]
    assert Tip.of_lines(several) == Tip.of(b"p0\np1\np2\n", 9)
    assert Tip.of_lines([Line(b"q", 1, 2), Line(None, 99, 102)]) is None


def test_held_read_stops_at_the_size_its_check_saw(tmp_path: Path) -> None:
    """A held descriptor given its check's size reads up to it, not to what was appended
    after the check (the next check and read get that); a truncation's size is honoured."""
    path = tmp_path / "t.jsonl"
    write(path, b"a\n")
    t = tail_of(path)
    t.hold = True
    assert read_all(t) == [b"a"] and t.is_open
    write(path, b"b\n")
    pr = t.check()
    write(path, b"c\n")  # appended after the check
    assert [ln.raw for ln in t.read(**LIMITS, size=pr.size)] == [b"b"]
    assert read_all(t) == [b"b", b"c"]  # no size: the fstat's
    write(path, b"x\n", "r+b")
    os.truncate(path, 2)
    pr = t.check()
    assert pr.status is Status.TRUNCATED and pr.size == 2
    t.reset(t.identity, 0)
    write(path, b"more\n")  # after the check
    assert [ln.raw for ln in t.read(**LIMITS, size=pr.size)] == [b"x"] and t.is_open
