#!/usr/bin/env python3
"""Where a controller's heap goes, by what holds it, from a heaptrack trace taken by run.sh.

    hack/heap-profile/summarize.py TRACE.zst [TRACE.zst ...]

run.sh ends each controller with SIGKILL, so what the trace counts as never freed ("leaked") is
the heap in use at that moment: at rest, for the fleet benchmark. heaptrack_print writes each
allocation's stack with its bytes (its flame-graph form); each stack is put in the first group
(in the order below) whose pattern one of its frames matches, and the groups are printed as a
Markdown table, largest first, with the bytes and their share.

The groups say what the bytes are, not who asked for them: a cached object's bytes are its
type's (found by the deserializer that built it), wherever the watch that read it ran.
"""

import re
import subprocess
import sys
from collections import defaultdict

# (group, pattern on one frame). Object types come first: a Pod read by a watch is a Pod, not a
# buffer of the HTTP client that carried it. The type is the outermost deserializer's.
GROUPS = [
    ("kube's Event recorder (events kept for series)", r"kube_runtime::events"),
    ("watch caches: the store's index (object keys, maps)", r"kube_runtime::reflector::store"),
    ("Valkey connections (redis client buffers, tasks)", r"\bredis::"),
    ("TLS (rustls)", r"\brustls::"),
    ("HTTP client (hyper, h2, buffers)", r"\b(hyper|hyper_util|h2|tower)::"),
    ("metrics (prometheus-client)", r"prometheus_client::"),
    ("logging (tracing)", r"\btracing(_subscriber|_core)?::"),
    ("Tokio runtime (tasks, timers, I/O driver)", r"\btokio::"),
]

# The type a deserializer builds: `<k8s_openapi::api::core::v1::pod::Pod as
# serde::de::Deserialize>::deserialize` and the visitors kube and serde derive for it.
DESERIALIZE = re.compile(
    r"<([A-Za-z0-9_:]+?)(?:<[^;]*?>)? as serde(?:_core)?::de::Deserialize>::deserialize"
)


def stacks(trace):
    """(frames, bytes) of each stack of `trace` still allocated at the end."""
    out = subprocess.run(
        ["heaptrack_print", "-f", trace, "-F", "/dev/stdout", "--flamegraph-cost-type", "leaked",
         "--print-peaks", "0", "--print-allocators", "0", "--print-temporary", "0", "--print-leaks", "0"],
        capture_output=True, text=True, check=True,
    ).stdout
    for line in out.splitlines():
        stack, _, cost = line.rpartition(" ")
        if not cost.isdigit() or not int(cost):
            continue
        yield [f for f in stack.split(";") if f], int(cost)


def group_of(frames):
    # Root first: the outermost deserialized type names the object.
    for frame in frames:
        found = DESERIALIZE.search(frame)
        if found:
            name = found.group(1).split("::")[-1]
            if name not in ("Value", "Map", "String", "Vec", "Option", "Box"):
                return f"objects read from the API: {name}"
    for group, pattern in GROUPS:
        if any(re.search(pattern, f) for f in frames):
            return group
    return "other"


def main(traces):
    for trace in traces:
        totals = defaultdict(int)
        for frames, cost in stacks(trace):
            totals[group_of(frames)] += cost
        whole = sum(totals.values()) or 1
        print(f"\n{trace}: {whole / 2**20:.1f} MiB on the heap at the end\n")
        print("| what | MiB | share |")
        print("| --- | ---: | ---: |")
        for group, cost in sorted(totals.items(), key=lambda kv: -kv[1]):
            print(f"| {group} | {cost / 2**20:.2f} | {100 * cost / whole:.0f}% |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
