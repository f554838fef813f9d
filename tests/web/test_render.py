"""Sub-agent groups by id, compaction and Markdown, rendered by the client's own renderer.

The grouping test feeds ChatRenderer the typed events the projection publishes (with the
additive ``parentToolUseId`` / ``agentId`` fields) in a real browser; the compaction and
Markdown test goes through the real collector and gateway.
"""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect

from tests.support import web as w
from tests.support.collector_records import line, record
from tests.web.conftest import Stack, artifacts_dir, open_app


def _ev(seq: int, etype: str, *blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "kind": "event",
        "seqId": seq,
        "event": {"type": etype, "blocks": list(blocks), **extra},
    }


def _task(seq: int, tool_id: str, description: str) -> dict[str, Any]:
    block = {
        "kind": "tool",
        "toolUseId": tool_id,
        "name": "Task",
        "input": {"description": description},
    }
    return _ev(seq, "assistant", block)


def _side(seq: int, text: str, **ids: str) -> dict[str, Any]:
    return _ev(seq, "assistant", {"kind": "text", "text": text}, sidechain=True, **ids)


def _result(seq: int, tool_id: str, text: str, agent_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {
        "kind": "tool_result",
        "toolUseId": tool_id,
        "isError": False,
        "text": text,
    }
    if agent_id:
        block["agentId"] = agent_id
    return _ev(seq, "user", block)


ITEMS = [
    _ev(1, "user", {"kind": "text", "text": "Explore the parser, the store and the views"}),
    _task(2, "t1", "Explore the parser"),
    _task(3, "t2", "Explore the store"),
    _task(4, "t3", "Explore the views"),
    # The second agent speaks first and names no tool: placed by position for now...
    _side(5, "store: reading store.js", agentId="b2"),
    _side(6, "views: reading listView.js", agentId="c3", parentToolUseId="t3"),
    # ...until the store Task's result names its agent: the group moves under t2.
    _result(7, "t2", "The store keeps 500 events.", "b2"),
    _side(8, "parser: reading markdown.js", agentId="a1"),
    _side(9, "parser: done", agentId="a1"),
    _result(10, "t1", "The parser is a single pass.", "a1"),
    _side(11, "summarising the conversation", agentId="acompact-7f3"),
    _ev(
        12,
        "user",
        {"kind": "text", "text": "This session is being continued... (a long summary)"},
        compactSummary=True,
    ),
    _ev(
        13,
        "assistant",
        {
            "kind": "text",
            "text": 'It is **4**: see `count()` and\n- one\n- two\n<img src=x onerror="window.__pwned=1">',
        },
    ),
    _side(14, "views: still reading", agentId="c3", parentToolUseId="t3"),
]


def test_sub_agent_work_is_grouped_under_its_own_task_by_id_and_collapsed_when_done(
    page: Page, stack: Stack
) -> None:
    """Each sub-agent's events land under the Task that started it (by parentToolUseId or the result's agentId), completed groups collapse, compaction is one closed row, Markdown is rendered without HTML."""
    page.goto(f"{stack.gateway.url}?token={w.TOKEN}")
    expect(page.locator("#empty")).to_be_visible()
    page.evaluate(
        """async (items) => {
          const { ChatRenderer } = await import('./render.js');
          document.querySelectorAll('.view').forEach((v) => { v.hidden = true; });
          const main = document.createElement('main');
          main.className = 'view scroller';
          main.id = 'render-test';
          const list = document.createElement('div');
          list.className = 'messages';
          main.append(list);
          document.body.append(main);
          const r = new ChatRenderer(list, { onDecision: () => {} });
          for (const item of items) r.append(item);
        }""",
        ITEMS,
    )
    root = page.locator("#render-test")

    def group_texts(tool_id: str) -> list[str]:
        texts: list[str] = root.locator(
            f'.tool[data-tool-use-id="{tool_id}"] > .agent-group .bubble'
        ).evaluate_all("els => els.map(e => e.textContent)")
        return texts

    assert group_texts("t1") == ["parser: reading markdown.js", "parser: done"]
    assert group_texts("t2") == ["store: reading store.js"]
    assert group_texts("t3") == ["views: reading listView.js", "views: still reading"]
    t1 = root.locator('.tool[data-tool-use-id="t1"] > .agent-group')
    expect(t1).not_to_have_attribute("open", "")  # completed: collapsed
    expect(t1.locator("summary")).to_have_text("Sub-agent a1 · 2 steps")
    expect(root.locator('.tool[data-tool-use-id="t2"] > .agent-group')).not_to_have_attribute(
        "open", ""
    )
    expect(root.locator('.tool[data-tool-use-id="t3"] > .agent-group')).to_have_attribute(
        "open", ""
    )
    # The result text sits above the group, inside the Task row.
    expect(root.locator('.tool[data-tool-use-id="t2"] > .result')).to_contain_text("500 events")

    compaction = root.locator(".agent-group.compaction")
    expect(compaction).to_have_count(1)
    expect(compaction).not_to_have_attribute("open", "")
    expect(compaction.locator("summary")).to_have_text("Compacting the conversation · 1 step")
    compacted = root.locator("details.compacted")
    expect(compacted).to_have_count(1)
    expect(compacted).not_to_have_attribute("open", "")
    expect(compacted.locator("summary")).to_have_text("Conversation compacted · summary")
    expect(root.locator(".bubble.user")).to_have_count(1)  # the summary is not a user bubble

    md = root.locator(".bubble.md")
    expect(md.locator("strong")).to_have_text("4")
    expect(md.locator("code")).to_have_text("count()")
    expect(md.locator("li")).to_have_text(["one", "two"])
    expect(md.locator("img")).to_have_count(0)
    expect(md).to_contain_text('<img src=x onerror="window.__pwned=1">')
    assert page.evaluate("window.__pwned") is None
    root.screenshot(path=str(artifacts_dir() / "subagent-groups.png"), scale="css")


def test_compaction_and_markdown_from_a_real_transcript(page: Page, stack: Stack) -> None:
    """A compact summary line becomes one collapsed 'Conversation compacted' row; assistant Markdown is rendered, user text is not."""
    sid, path = stack.new_session()
    summary = record(
        sid,
        "user",
        isCompactSummary=True,
        message={
            "role": "user",
            "content": "This session is being continued from a previous conversation. " * 40,
        },
    )
    stack.write(
        path,
        w.prompt(sid, "keep **this** literal"),
        line(summary),
        w.reply(sid, "Counted **4** files in `src/`:\n1. a.py\n2. b.py"),
    )
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    compacted = page.locator("#messages details.compacted")
    expect(compacted).to_have_count(1)
    expect(compacted).not_to_have_attribute("open", "")
    expect(compacted.locator("summary")).to_have_text("Conversation compacted · summary")
    expect(page.locator("#messages .item.user .bubble")).to_have_text(["keep **this** literal"])
    bubble = page.locator("#messages .bubble.assistant.md")
    expect(bubble.locator("strong")).to_have_text("4")
    expect(bubble.locator("code")).to_have_text("src/")
    expect(bubble.locator("ol li")).to_have_text(["a.py", "b.py"])
    expect(bubble).to_have_text(re.compile(r"^Counted 4 files in src/:"))
