"""The ASGI edge: the WebSocket endpoint, the h11 guards and the HTTP security policy.

Only the gateway's composition (``app``, ``runtime``, ``main``) imports it.
"""
