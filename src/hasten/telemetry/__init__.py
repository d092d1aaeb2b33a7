"""Telemetry: OpenTelemetry tracing of the request path (optional, the ``otel`` extra).

``tracing.Tracing`` is built at startup and hung off the ``Gateway``; ``stage.Stage`` is
what the request path holds (a span, or the no-op ``NO_STAGE`` when tracing is off);
``attributes`` says what spans record; ``otel`` is the only module importing OpenTelemetry.
"""
