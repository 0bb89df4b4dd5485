"""A throwaway PostgreSQL cluster for one benchmark run (standard library only).

    python benchmarks/harness/pgcluster.py DIR PORT

initdb in DIR (a new directory; trust authentication, user `bench`), then becomes the
postmaster listening on 127.0.0.1:PORT only, durability off (fsync, synchronous_commit,
full_page_writes: the data is recreated every run).  Run as root, it drops to the
`postgres` user first (PostgreSQL refuses to run as root).  SIGTERM stops it; removing
DIR afterwards is the caller's business (the harness's temporary directory).
The server binaries are the newest under /usr/lib/postgresql/*/bin.
"""

import glob
import os
import pwd
import re
import subprocess
import sys


def bin_dir():
    dirs = glob.glob("/usr/lib/postgresql/*/bin")
    if not dirs:
        sys.exit(
            "no PostgreSQL server under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
        )

    def version(path):
        return [int(n) for n in re.findall(r"\d+", path.split("/")[-2])]

    return max(dirs, key=version)


def main():
    data, port = os.path.abspath(sys.argv[1]), sys.argv[2]
    pg = bin_dir()
    os.makedirs(data, exist_ok=True)
    user = None
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(data, user.pw_uid, user.pw_gid)
        os.chmod(os.path.dirname(data), 0o755)
    initdb = [f"{pg}/initdb", "-D", data, "-U", "bench", "--auth=trust", "-E", "UTF8"]
    initdb += ["--no-sync", "--no-instructions"]
    kwargs = {"user": user.pw_uid, "group": user.pw_gid} if user else {}
    proc = subprocess.run(initdb, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        sys.exit(f"initdb failed: {proc.stderr[-500:]}")
    print(f"pgcluster: {pg}, data in {data}, port {port}", flush=True)
    if user:
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
    argv = [f"{pg}/postgres", "-D", data, "-p", port, "-h", "127.0.0.1", "-k", data]
    for setting in ("fsync=off", "synchronous_commit=off", "full_page_writes=off"):
        argv += ["-c", setting]
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
