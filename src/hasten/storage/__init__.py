"""Where hasten keeps its files: ``sqlite`` opens a SQLite file and runs it on one thread,
``budget`` holds a table of expiring rows under its byte budget."""
