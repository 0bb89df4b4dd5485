"""A server behind nginx's uwsgi_pass, as one command the harness can start and stop.

    python benchmarks/peers/behind_nginx.py PORT UPSTREAM_PORT TMPDIR -- SERVER ARGV...

Starts SERVER ARGV (which must speak the uwsgi protocol on 127.0.0.1:UPSTREAM_PORT),
waits until it accepts, then nginx in the foreground (one worker) listening on
127.0.0.1:PORT with `include uwsgi_params; uwsgi_pass 127.0.0.1:UPSTREAM_PORT;`. The
harness stops the whole process group; when either child exits, the other is stopped and
this script exits with its status. Both children are in this process tree, so the CPU
the harness reads for it is nginx's and the server's together.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

CONF = """\
worker_processes 1;
daemon off;
master_process on;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            include {params};
            uwsgi_pass 127.0.0.1:{upstream};
        }}
    }}
}}
"""


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def main(argv):
    if len(argv) < 5 or argv[3] != "--":
        sys.exit(__doc__)
    port, upstream, tmp = int(argv[0]), int(argv[1]), os.path.abspath(argv[2])
    server_argv = argv[4:]
    tmp = os.path.join(tmp, f"nginx-uwsgi-{port}")
    os.makedirs(tmp, exist_ok=True)
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        params = "/etc/nginx/uwsgi_params"
        f.write(CONF.format(tmp=tmp, port=port, upstream=upstream, params=params))
    server = subprocess.Popen(server_argv)
    children = [server]

    def stop(signum=None, frame=None):
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        sys.exit(0 if signum else 1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    deadline = time.monotonic() + 30
    while not accepts(upstream):
        if server.poll() is not None or time.monotonic() > deadline:
            stop()
        time.sleep(0.05)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    children.append(subprocess.Popen([nginx, "-p", tmp, "-e", f"{tmp}/error.log", "-c", conf]))
    while all(child.poll() is None for child in children):
        time.sleep(0.2)
    stop()


if __name__ == "__main__":
    main(sys.argv[1:])
