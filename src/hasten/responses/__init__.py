"""State for the OpenAI Responses API: the responses hasten keeps for ``store: true``.

``record`` is what is kept of one response (and its checksummed bytes); ``store`` the
stores (memory here; ``sqlite_store``, ``redis_store``), every one scoped to the tenant;
``state`` the service the request path asks (``hasten.proxy.ports.ResponseStates``): a
``previous_response_id`` expanded into the request's input, and the answer's send watched
so that the record is written before the client gets the answer's end; ``endpoints`` the
``GET``/``DELETE /v1/responses/{id}`` and ``input_items`` answers.
"""
