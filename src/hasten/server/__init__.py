"""`hasten serve`: the process around the app: config resolution, uvicorn, connections, logs."""
