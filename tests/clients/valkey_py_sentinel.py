"""valkey-py's Sentinel client, as an application that finds its primary through Sentinel uses it.

Asks the Sentinels at SENTINELS (comma-separated host:port) for the primary of MASTER, then writes
keys `<PREFIX>:<n>` through `Sentinel.master_for` until the file STOP exists (or SECONDS pass),
each followed by `WAIT 1 1000`: a write is acknowledged when SET answered OK and confirmed when a
replica acknowledged it too. Connection errors and a read-only replica (a failover under way) are
counted and retried, as an application's pool would. Prints one JSON line: the acknowledged
count, the confirmed keys, the errors seen, the primary each Sentinel names at the end, and the
longest gap between two acknowledged writes. The password, if any, comes from the environment
(VALKEY_PASSWORD), for the Sentinels and the servers alike, never from the command line. With
VALKEY_TLS_CA (a PEM file) every connection, to the Sentinels and to the servers, is TLS verified
against that CA.

    PYTHONPATH=.localkube/python python3 tests/clients/valkey_py_sentinel.py \
        SENTINELS MASTER PREFIX STOP SECONDS
"""

import json
import os
import sys
import time

from valkey.exceptions import ConnectionError, ReadOnlyError, ResponseError, TimeoutError
from valkey.sentinel import MasterNotFoundError, Sentinel


def main() -> int:
    sentinels_arg, master, prefix, stop, seconds = sys.argv[1:6]
    password = os.environ.get("VALKEY_PASSWORD") or None
    sentinels = [
        (hp.rsplit(":", 1)[0], int(hp.rsplit(":", 1)[1])) for hp in sentinels_arg.split(",")
    ]
    ca = os.environ.get("VALKEY_TLS_CA") or None
    tls = {"ssl": True, "ssl_ca_certs": ca} if ca else {}
    # A connect timeout, as applications set one: without it a Sentinel whose pod is gone (its
    # address with it) holds each discovery for the system's connect timeout, tens of seconds.
    timeouts = {"socket_timeout": 2, "socket_connect_timeout": 1}
    sentinel_kwargs = {"password": password, **timeouts, **tls}
    sentinel = Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs, **timeouts)
    client = sentinel.master_for(master, password=password, **timeouts, **tls)
    deadline = time.monotonic() + float(seconds)
    acked, confirmed, errors = 0, [], {}
    last_ack, longest_gap = None, 0.0
    n = 0
    while time.monotonic() < deadline and not os.path.exists(stop):
        key = f"{prefix}:{n}"
        try:
            if client.set(key, f"v{n}"):
                acked += 1
                now = time.monotonic()
                if last_ack is not None:
                    longest_gap = max(longest_gap, now - last_ack)
                last_ack = now
                if client.execute_command("WAIT", 1, 1000) >= 1:
                    confirmed.append(key)
                n += 1
        except (ConnectionError, TimeoutError, ReadOnlyError, MasterNotFoundError, ResponseError) as e:
            name = type(e).__name__
            errors[name] = errors.get(name, 0) + 1
            time.sleep(0.1)
    named = []
    for host, port in sentinels:
        try:
            one = Sentinel([(host, port)], sentinel_kwargs=sentinel_kwargs)
            addr = one.discover_master(master)
            named.append(f"{addr[0]}:{addr[1]}")
        except Exception as e:  # a Sentinel lost on purpose answers nothing
            named.append(f"error: {type(e).__name__}")
    print(
        json.dumps(
            {
                "acked": acked,
                "confirmed": confirmed,
                "errors": errors,
                "named": named,
                "longest_gap_s": round(longest_gap, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
