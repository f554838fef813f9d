"""Push: reach the person when Claude needs them (issue 15).

* :mod:`.store` — the Redis side: VAPID keys, subscriptions per token, capabilities, claims.
* :mod:`.policy` — pure: which log event becomes which notification, for which device.
* :mod:`.senders` — Web Push (pywebpush) and Apprise.
* :mod:`.notify` — a consumer group over the log: one push per event across the gateways.
* :mod:`.holds` — holds permission requests for devices that get approvals.
* :mod:`.routes` — ``/push/*`` HTTP: the public key, subscriptions, the Approve/Deny capability.
* :mod:`.service` — owns them all (``async with``), composed by the gateway runtime.
"""
