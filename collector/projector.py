"""Transcript lines to projected facts and batch plans, counted in the collector's metrics."""

from __future__ import annotations

from relaybus.collector.batch_plan import BatchPlan
from relaybus.collector.metrics import CollectorMetrics
from relaybus.collector.session_state import SessionState
from relaybus.collector.tailer import Line
from relaybus.shared.aio import now_ms
from relaybus.shared.settings import Settings
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.transcript import projection
from relaybus.shared.transcript.projection import Projected


class Projector:
    def __init__(self, settings: Settings, metrics: CollectorMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.idle_ms = int(settings.session_idle_minutes * 60_000)

    def project(
        self, lines: list[Line], plan: BatchPlan | None = None
    ) -> tuple[list[Projected], list[OutEvent | None]]:
        """Project lines; with ``plan``, also encode each line's event right away.

        An event is serialised just after its line was parsed, while both are still in the
        CPU cache.
        """
        m = self.metrics
        out: list[Projected] = []
        encoded: list[OutEvent | None] = []
        nbytes = malformed = 0
        dropped: dict[str, int] = {}
        for line in lines:
            nbytes += line.size + 1
            p = self.project_one(line)
            if p.malformed:
                malformed += 1
            if not p.publish:
                reason = p.drop_reason or "unpublished"
                dropped[reason] = dropped.get(reason, 0) + 1
            out.append(p)
            if plan is not None:
                ev = plan.encode(p)
                if ev is None and p.publish:
                    dropped["warmup"] = dropped.get("warmup", 0) + 1  # the rest of a warm-up agent
                encoded.append(ev)
        for reason, n in dropped.items():
            m.dropped(reason, n)
        if malformed:
            m.lines_malformed.inc(malformed)
        m.lines_read.inc(len(lines))
        m.bytes_read.inc(nbytes)
        return out, encoded

    def project_one(self, line: Line) -> Projected:
        """One line's projection (an oversize line's stand-in), counting nothing."""
        if line.raw is None:
            return projection.oversize_line(line.size)
        return projection.project_line(line.raw, data_max_bytes=self.settings.data_max_bytes)

    def plan(
        self,
        state: SessionState,
        *,
        collapse: bool = False,
        agent_id: str | None = None,
        parent: str | None = None,
    ) -> BatchPlan:
        return BatchPlan(
            state,
            host=self.settings.host_id,
            now_ms=now_ms(),
            idle_ms=self.idle_ms,
            collapse=collapse,
            keep_events=self.settings.backfill_events,
            agent_id=agent_id,
            parent_tool_use_id=parent,
        )

    def feed(
        self, plan: BatchPlan, lines: list[Line], *, encode: bool = False
    ) -> list[projection.Projected]:
        """Project ``lines`` and plan them: :meth:`BatchPlan.prime` with all of them first
        (so ``session_started`` carries cwd and entrypoint), then each line in order; the
        projected lines. ``encode``: each event is encoded as its line is projected."""
        projected, encoded = self.project(lines, plan if encode else None)
        plan.prime(projected)
        if encode:
            for p, ev in zip(projected, encoded, strict=True):
                plan.line(p, ev)
        else:
            for p in projected:
                plan.line(p)
        return projected

    def plan_batch(
        self,
        state: SessionState,
        lines: list[Line],
        *,
        collapse: bool = False,
        agent_id: str | None = None,
        parent: str | None = None,
        encode: bool = False,
    ) -> BatchPlan:
        """The finished plan of one batch of lines on ``state`` (:meth:`plan`, :meth:`feed`,
        :meth:`BatchPlan.finish`)."""
        plan = self.plan(state, collapse=collapse, agent_id=agent_id, parent=parent)
        self.feed(plan, lines, encode=encode)
        plan.finish()
        return plan
