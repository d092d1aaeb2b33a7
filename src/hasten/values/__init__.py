"""Values a request carries through every floor above: who asks (``caller``), the trace
stage it is recorded under (``stage``), the token counts of an answer (``usage``), and how
it ended (``outcome``). Nothing here does I/O."""
