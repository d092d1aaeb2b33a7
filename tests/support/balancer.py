"""Debian's nginx as a round-robin load balancer on loopback, run unprivileged from a
temporary directory: the one in front of several gateway replicas in the fleet tests.

Never the system service: nginx gets its own prefix, config, pid file, logs and temp paths
inside the directory (``nginx -p DIR -c DIR/nginx.conf -e DIR/error.log``), runs in the
foreground and is stopped by the test that started it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.servers import ProcessDied, free_port, stop_process, wait_listening

# Every response through the balancer names the replica that answered it (host:port), so a
# test can tell which replica a client landed on without asking the gateway.
REPLICA_HEADER = "x-fleet-replica"
START_TIMEOUT_S = 10.0
NGINX_PATHS = ("/usr/sbin/nginx", "/usr/local/sbin/nginx")


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in NGINX_PATHS if os.access(p, os.X_OK)), None)
    if found is None:
        raise RuntimeError("nginx is not installed: run scripts/ensure-nginx.sh")
    return found


def nginx_conf(workdir: Path, listen_port: int, upstream_ports: Sequence[int]) -> str:
    """Round robin over ``upstream_ports``, streaming both ways (SSE passes chunk by chunk),
    HTTP/1.1 keep-alive to the replicas, the client's headers passed on."""
    servers = "".join(
        f"    server 127.0.0.1:{port} max_fails=1 fail_timeout=5s;\n" for port in upstream_ports
    )
    temp = {name: workdir / name for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    # Started as root, nginx would run its workers as nobody, who cannot reach temp paths
    # under a private test directory; unprivileged, nginx ignores `user` (with a warning).
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
    return f"""{user}worker_processes 1;
pid {workdir / "nginx.pid"};
error_log {workdir / "error.log"} warn;
events {{
  worker_connections 2048;
}}
http {{
  access_log {workdir / "access.log"};
  client_body_temp_path {temp["client_body"]};
  proxy_temp_path {temp["proxy"]};
  fastcgi_temp_path {temp["fastcgi"]};
  uwsgi_temp_path {temp["uwsgi"]};
  scgi_temp_path {temp["scgi"]};
  client_max_body_size 64m;
  upstream replicas {{
{servers}    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{listen_port};
    location / {{
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_cache off;
      gzip off;
      proxy_read_timeout 120s;
      proxy_send_timeout 120s;
      add_header {REPLICA_HEADER} $upstream_addr always;
    }}
  }}
}}
"""


class Nginx:
    """One nginx process balancing ``upstream_ports`` on a free loopback port."""

    def __init__(self, workdir: Path, upstream_ports: Sequence[int]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.upstream_ports = tuple(upstream_ports)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "nginx.conf"
        conf.write_text(nginx_conf(self.workdir, self.port, self.upstream_ports))
        command = [nginx_binary(), "-p", str(self.workdir), "-c", str(conf)]
        command += ["-e", str(self.workdir / "error.log"), "-g", "daemon off;"]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            if wait_listening(self.proc, self.port, START_TIMEOUT_S, poll_s=0.02):
                return self
        except TimeoutError:
            self.stop()
            raise ProcessDied(f"nginx did not start: {self.errors()}") from None
        raise ProcessDied(f"nginx exited ({self.proc.returncode}): {self.errors()}")

    def errors(self) -> str:
        path = self.workdir / "error.log"
        logged = path.read_text(errors="replace") if path.exists() else ""
        if self.proc is not None and self.proc.poll() is not None and self.proc.stderr is not None:
            logged += self.proc.stderr.read().decode(errors="replace")
        return logged[-4000:]

    def stop(self) -> None:
        stop_process(self.proc)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def __enter__(self) -> Nginx:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
