"""Projection of content items into typed blocks: each kind, edits, errors, bounded sizes."""

from __future__ import annotations

import base64
from typing import Any

import orjson

from relaybus.shared.transcript.projection import project_line


def _line(rtype: str, content: Any, **fields: Any) -> bytes:
    message: dict[str, Any] = {"role": rtype, "content": content}
    if rtype == "assistant":
        message.update(id="msg_1", stop_reason=None)
    rec = {"type": rtype, "sessionId": "s", "isSidechain": False, "message": message, **fields}
    return orjson.dumps(rec) + b"\n"


def blocks(rtype: str, content: Any, **kwargs: Any) -> list[dict[str, Any]]:
    limits = {k: kwargs.pop(k) for k in ("text_max_chars", "data_max_bytes") if k in kwargs}
    result = project_line(_line(rtype, content, **kwargs), **limits)
    assert result.publish and result.event is not None
    decoded: list[dict[str, Any]] = orjson.loads(orjson.dumps(result.event))["blocks"]
    return decoded


def result_line(
    content: Any, tool_use_result: Any = None, is_error: bool | None = None
) -> list[dict[str, Any]]:
    item: dict[str, Any] = {"type": "tool_result", "tool_use_id": "toolu_1", "content": content}
    if is_error is not None:
        item["is_error"] = is_error
    extra = {} if tool_use_result is None else {"toolUseResult": tool_use_result}
    return blocks("user", [item], **extra)


def test_text_and_thinking_blocks() -> None:
    """Assistant text and thinking items become text and thinking blocks, in order."""
    got = blocks(
        "assistant",
        [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "answer"},
        ],
    )
    assert got == [{"kind": "thinking", "text": "hmm"}, {"kind": "text", "text": "answer"}]


def test_empty_thinking_keeps_its_block() -> None:
    """Thinking persisted only as a signature keeps a thinking block with empty text."""
    got = blocks("assistant", [{"type": "thinking", "thinking": "", "signature": "EqQB"}])
    assert got == [{"kind": "thinking", "text": ""}]


def test_redacted_thinking() -> None:
    """redacted_thinking becomes an empty thinking block marked redacted (never its data)."""
    got = blocks("assistant", [{"type": "redacted_thinking", "data": "opaque"}])
    assert got == [{"kind": "thinking", "text": "", "redacted": True}]


def test_tool_block() -> None:
    """tool_use becomes a tool block with id, name and the input as written."""
    tool_input = {"command": "ls", "description": "List"}
    item = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": tool_input}
    got = blocks("assistant", [item])
    assert got == [{"kind": "tool", "toolUseId": "toolu_1", "name": "Bash", "input": tool_input}]


def test_tool_result_text_and_is_error() -> None:
    """A tool_result carries its id, text and is_error (absent is_error means false)."""
    assert result_line("fine") == [
        {"kind": "tool_result", "toolUseId": "toolu_1", "isError": False, "text": "fine"}
    ]
    assert result_line("bad", is_error=True)[0]["isError"] is True


def test_tool_result_list_content_is_joined() -> None:
    """List content: text parts are joined; images follow as image blocks."""
    png = base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()
    got = result_line(
        [
            {"type": "text", "text": "one"},
            {"type": "text", "text": "two"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        ]
    )
    assert got[0]["text"] == "one\ntwo"
    assert got[1] == {"kind": "image", "mediaType": "image/png", "bytes": 100}


def test_tool_use_error_is_dewrapped() -> None:
    """<tool_use_error>…</tool_use_error> is unwrapped and marks the result as an error."""
    got = result_line(
        "<tool_use_error>File has not been read yet.</tool_use_error>",
        tool_use_result="Error: File has not been read yet.",
    )
    assert got[0]["text"] == "File has not been read yet."
    assert got[0]["isError"] is True


def test_tool_use_error_inside_text_is_left_alone() -> None:
    """Only a leading wrapper counts: a file that mentions the tag is not an error."""
    text = "line 1: if x.startswith('<tool_use_error>'):"
    got = result_line(text)
    assert got[0]["text"] == text
    assert got[0]["isError"] is False


def test_string_tool_use_result() -> None:
    """A string toolUseResult is tolerated and fills in text when the content has none."""
    rejected = "User rejected tool use"
    got = result_line(rejected, tool_use_result=rejected, is_error=True)
    assert got[0]["text"] == "User rejected tool use"
    got = result_line([], tool_use_result="Error: Exit code 1")
    assert got[0]["text"] == "Error: Exit code 1"
    assert "edit" not in got[0]


def test_num_lines_from_read_and_grep() -> None:
    """numLines comes from Read's file.numLines and Grep's numLines."""
    read = {"type": "text", "file": {"filePath": "/a", "content": "…", "numLines": 42}}
    assert result_line("…", tool_use_result=read)[0]["numLines"] == 42
    grep = {"mode": "content", "numFiles": 0, "filenames": [], "content": "x", "numLines": 7}
    assert result_line("x", tool_use_result=grep)[0]["numLines"] == 7


def test_structured_patch_becomes_edit() -> None:
    """structuredPatch hunks give added/removed counts and {oldStart, lines} hunks."""
    patch = [
        {
            "oldStart": 3,
            "oldLines": 3,
            "newStart": 3,
            "newLines": 4,
            "lines": [" keep", "-old", "+new", "+newer"],
        },
        {"oldStart": 40, "oldLines": 2, "newStart": 41, "newLines": 1, "lines": ["-gone", " ctx"]},
    ]
    tur = {
        "filePath": "/a.py",
        "oldString": "old",
        "newString": "new",
        "originalFile": "…",
        "structuredPatch": patch,
        "userModified": False,
        "replaceAll": False,
    }
    got = result_line("The file /a.py has been updated.", tool_use_result=tur)[0]
    assert got["edit"] == {
        "added": 2,
        "removed": 2,
        "hunks": [
            {"oldStart": 3, "lines": [" keep", "-old", "+new", "+newer"]},
            {"oldStart": 40, "lines": ["-gone", " ctx"]},
        ],
    }


def test_write_create_is_one_added_hunk() -> None:
    """A Write that creates a file (empty structuredPatch) counts all its lines as added."""
    tur = {"type": "create", "filePath": "/n.txt", "content": "a\nb\nc\n", "structuredPatch": []}
    edit = result_line("File created successfully", tool_use_result=tur)[0]["edit"]
    hunk = {"oldStart": 0, "lines": ["+a", "+b", "+c"]}
    assert edit == {"added": 3, "removed": 0, "hunks": [hunk]}


def test_huge_patch_keeps_counts_but_bounds_lines() -> None:
    """A patch larger than the text cap keeps exact counts and only a bounded set of lines."""
    lines = [f"+line {i} " + "x" * 80 for i in range(20_000)]
    tur = {"filePath": "/big", "structuredPatch": [{"oldStart": 1, "lines": lines}]}
    got = result_line("updated", tool_use_result=tur)[0]["edit"]
    assert got["added"] == 20_000
    assert got["truncated"] is True
    assert sum(len(x) for x in got["hunks"][0]["lines"]) <= 16_384


def test_tool_use_result_ignored_when_ambiguous() -> None:
    """With two tool_results on one line, toolUseResult describes neither."""
    tur = {"file": {"numLines": 5}}
    got = blocks(
        "user",
        [
            {"type": "tool_result", "tool_use_id": "a", "content": "1"},
            {"type": "tool_result", "tool_use_id": "b", "content": "2"},
        ],
        toolUseResult=tur,
    )
    assert [b["toolUseId"] for b in got] == ["a", "b"]
    assert all("numLines" not in b for b in got)


def test_user_image_block_reports_decoded_size() -> None:
    """A pasted base64 image becomes {kind: image, mediaType, bytes} with the decoded size."""
    raw = bytes(range(256)) * 3 + b"!"  # 769 bytes: base64 ends in "=="
    data = base64.b64encode(raw).decode()
    got = blocks(
        "user",
        [
            {"type": "text", "text": "see"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/jpeg", "data": data},
            },
        ],
    )
    assert got[1] == {"kind": "image", "mediaType": "image/jpeg", "bytes": 769}


def test_multi_megabyte_image_line_is_bounded() -> None:
    """A 3 MB base64 image line projects to a small event: no image data, data is a stand-in."""
    data = base64.b64encode(b"\x01" * 3_000_000).decode()
    raw = _line(
        "user",
        [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}],
    )
    assert len(raw) > 4_000_000
    result = project_line(raw)
    assert result.event is not None
    encoded = orjson.dumps(result.event)
    assert len(encoded) < 1000
    assert orjson.loads(encoded)["blocks"] == [
        {"kind": "image", "mediaType": "image/png", "bytes": 3_000_000}
    ]
    stand_in = {"type": "user", "truncated": True, "bytes": len(raw) - 1}
    assert orjson.loads(encoded)["data"] == stand_in


def test_long_texts_are_cut_with_original_length() -> None:
    """Text, thinking and tool_result text above the cap are cut and say their real length."""
    long = "y" * 50_000
    got = blocks("assistant", [{"type": "thinking", "thinking": long}], text_max_chars=1000)
    cut = {"kind": "thinking", "text": "y" * 1000, "truncated": True, "originalChars": 50_000}
    assert got == [cut]
    got = blocks("assistant", [{"type": "text", "text": long}], text_max_chars=1000)
    assert got[0]["truncated"] is True and len(got[0]["text"]) == 1000
    got = result_line(long)
    assert got[0]["truncated"] is True
    assert got[0]["originalChars"] == 50_000
    assert len(got[0]["text"]) == 16_384


def test_long_tool_input_strings_are_cut() -> None:
    """Long strings inside tool input (Write content, MultiEdit edits) are cut, paths reported."""
    tool_input = {
        "file_path": "/big.txt",
        "content": "z" * 200_000,
        "edits": [{"old_string": "a", "new_string": "b" * 30_000}],
    }
    item = {"type": "tool_use", "id": "t", "name": "Write", "input": tool_input}
    got = blocks("assistant", [item])
    block = got[0]
    assert block["input"]["file_path"] == "/big.txt"
    assert len(block["input"]["content"]) == 16_384
    assert len(block["input"]["edits"][0]["new_string"]) == 16_384
    assert block["input"]["edits"][0]["old_string"] == "a"
    assert block["truncated"] is True
    assert block["truncatedFields"] == {"content": 200_000, "edits.0.new_string": 30_000}


def test_line_total_is_bounded_across_blocks() -> None:
    """Many long strings on one line share one budget: the event stays near 4x the cap."""
    items = [
        {"type": "tool_result", "tool_use_id": f"t{i}", "content": "q" * 20_000} for i in range(30)
    ]
    result = project_line(_line("user", items))
    assert result.event is not None
    assert len(orjson.dumps(result.event)) < 5 * 16_384 + 30 * 200
    assert len(result.event["blocks"]) == 30


def test_small_tool_input_is_not_copied() -> None:
    """When nothing is cut, a tool block's input is the parsed object itself."""
    big_but_short = {"content": "k" * 20_000}
    result = project_line(
        _line(
            "assistant", [{"type": "tool_use", "id": "t", "name": "Write", "input": big_but_short}]
        ),
        text_max_chars=30_000,
    )
    assert result.event is not None
    assert result.event["blocks"][0]["input"] == big_but_short
    assert "truncated" not in result.event["blocks"][0]


def test_task_notification_attachment() -> None:
    """A queued task-notification attachment becomes a neutral notification block."""
    prompt = (
        "<task-notification>\n<task-id>b7636e2</task-id>\n<status>completed</status>\n"
        '<summary>Background command "tests" completed (exit code 0)</summary>\n'
        "</task-notification>"
    )
    rec = {
        "type": "attachment",
        "sessionId": "s",
        "isSidechain": False,
        "attachment": {
            "type": "queued_command",
            "prompt": prompt,
            "commandMode": "task-notification",
        },
    }
    result = project_line(orjson.dumps(rec))
    assert result.publish
    event = orjson.loads(orjson.dumps(result.event))
    assert event["type"] == "attachment"
    assert event["blocks"] == [
        {
            "kind": "notification",
            "source": "task-notification",
            "text": prompt,
            "summary": 'Background command "tests" completed (exit code 0)',
        }
    ]


def test_queued_prompt_attachment_shows_the_words() -> None:
    """A prompt queued while Claude worked is published as the user's text."""
    rec = {
        "type": "attachment",
        "sessionId": "s",
        "attachment": {
            "type": "queued_command",
            "prompt": "also fix docs",
            "commandMode": "prompt",
        },
    }
    event = orjson.loads(orjson.dumps(project_line(orjson.dumps(rec)).event))
    assert event["blocks"] == [{"kind": "text", "text": "also fix docs"}]


def test_unknown_content_item_is_neutral_block() -> None:
    """An unknown content item becomes a block of its own kind, keeping any text."""
    got = blocks("assistant", [{"type": "future_widget", "text": "hello"}, {"type": "opaque"}])
    assert got == [{"kind": "future_widget", "text": "hello"}, {"kind": "opaque"}]


def test_server_tool_and_its_result() -> None:
    """server_tool_use and web_search_tool_result pair up as tool / tool_result."""
    got = blocks(
        "assistant",
        [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        ],
    )
    assert got[0]["kind"] == "tool" and got[1]["kind"] == "tool_result"
    assert got[0]["toolUseId"] == got[1]["toolUseId"] == "srvtoolu_1"


def test_deeply_nested_tool_input_is_cut_so_it_encodes() -> None:
    """Tool input nested past orjson's encoder limit is cut at a fixed depth; the event encodes."""
    item = {"type": "tool_use", "id": "t", "name": "X", "input": "INPUT"}
    deep = b'{"tree":' + b'{"a":' * 400 + b"{}" + b"}" * 400 + b"}"
    raw = _line("assistant", [item]).replace(b'"INPUT"', deep)
    result = project_line(raw)
    assert result.event is not None
    block = orjson.loads(orjson.dumps(result.event))["blocks"][0]
    assert block["truncated"] is True
    [(path, length)] = block["truncatedFields"].items()
    assert path.startswith("tree.a.a.")
    assert length == 0


def test_truncated_fields_list_is_bounded() -> None:
    """A tool input with thousands of cut strings lists only the first few paths."""
    tool_input = {"todos": [{"content": "c" * 100} for _ in range(3000)]}
    item = {"type": "tool_use", "id": "t", "name": "TodoWrite", "input": tool_input}
    result = project_line(_line("assistant", [item]), text_max_chars=1000)
    assert result.event is not None
    block = result.event["blocks"][0]
    assert block["truncated"] is True
    assert len(block["truncatedFields"]) == 16
    assert len(orjson.dumps(result.event)) < 200_000


def test_document_block_reports_size_not_data() -> None:
    """A base64 document (PDF) becomes {kind: document, mediaType, bytes} without its data."""
    data = base64.b64encode(b"%PDF" + b"\0" * 1000).decode()
    got = blocks(
        "user",
        [
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": data},
            }
        ],
    )
    assert got == [{"kind": "document", "mediaType": "application/pdf", "bytes": 1004}]
