"""Where hasten keeps its data: ``sqlite`` opens a SQLite file and runs it on one thread,
``budget`` holds a table of expiring rows under its byte budget, ``redis`` builds a Redis
client that fails fast."""
