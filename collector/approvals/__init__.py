"""Permission requests from Claude Code's hook, held while someone can answer from a phone.

``relaybus hook permission-request`` POSTs the hook's JSON to the approval socket, a Unix
socket in a directory only this user can enter (:mod:`.endpoint`). The request is held only when a client with a full-access token watches the session
(``RELAYBUS_APPROVAL_MODE=always``: regardless) and the session is known; otherwise the
answer is "no decision" at once and Claude Code shows its own prompt. A held request is
published as a ``permission_request`` log event and turns the session ``waiting``. It
ends with the first of: a client's decision (claimed in Redis with ``SET NX`` by the
gateway, delivered by a ``permission_decision`` command and also polled), the timeout,
the hook going away, (watched mode) nobody watching for ``holds.UNWATCHED_GRACE_S``, or
the terminal answering first — the transcript shows the tool's result, or the live-process
file leaves ``waiting`` after it showed it (``answered_elsewhere``: the hook is answered
"no decision" at once and exits, and the decision key is claimed so a late client decision
is ``already_resolved``). However it ends, the session's ``approval_resolved`` key names it
for the approval timeout, so a late decision without a ``requestKey`` is
``already_resolved`` too. Only an explicit client decision ever allows; every other end is
"no decision".

The modules: :mod:`.endpoint` serves the socket, :mod:`.holds` holds the requests (their
state machine; their events and turn changes go through the engine's inbox,
``relaybus.collector.inbox``), :mod:`.records` writes their Redis records, :mod:`.preview` finds a request's tool call in the
transcript and previews its edit, :mod:`.asks` says what a request asks beyond yes/no
(questions, the CLI's suggestions, a plan) and turns a client's answer into the hook's. The hook command and the settings.json installer are
process tooling: ``relaybus.hookcli`` and ``relaybus.claude_settings``.
"""
