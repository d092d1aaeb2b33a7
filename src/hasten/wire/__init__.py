"""The wire: the ASGI toolkit, the SSE codec and the response head, below everything that
decides what to send."""
