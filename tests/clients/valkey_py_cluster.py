"""valkey-py's cluster client, as an application outside the Kubernetes cluster uses it.

Connects through one seed address, writes KEYS keys spread over every slot range with WAIT 1 on
each key's primary, reads them back, and prints one JSON line: how many were written and read
back, and the addresses the client learnt for the cluster's nodes (what CLUSTER SLOTS told it),
so the test can check they are the external ones. The password, if any, comes from the
environment (VALKEY_PASSWORD), never from the command line.

    PYTHONPATH=.localkube/python python3 tests/clients/valkey_py_cluster.py HOST PORT KEYS
"""

import json
import os
import sys

from valkey.cluster import ValkeyCluster


def main() -> int:
    host, port, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    client = ValkeyCluster(
        host=host,
        port=port,
        password=os.environ.get("VALKEY_PASSWORD") or None,
        socket_timeout=5,
    )
    written = 0
    for i in range(keys):
        key = f"py:{i}"
        if client.set(key, f"v{i}"):
            # WAIT on the key's own primary: acknowledged by a replica too.
            node = client.get_node_from_key(key)
            client.execute_command("WAIT", 1, 2000, target_nodes=node)
            written += 1
    read = sum(1 for i in range(keys) if client.get(f"py:{i}") == f"v{i}".encode())
    nodes = sorted(f"{n.host}:{n.port}" for n in client.get_nodes())
    print(json.dumps({"written": written, "read": read, "nodes": nodes}))
    return 0 if written == read == keys else 1


if __name__ == "__main__":
    sys.exit(main())
