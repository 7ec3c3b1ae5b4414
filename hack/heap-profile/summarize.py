#!/usr/bin/env python3
"""Where a controller's heap goes, by what holds it, from a heaptrack trace taken by run.sh.

    hack/heap-profile/summarize.py TRACE.zst [TRACE.zst ...]

run.sh ends each controller with SIGKILL, so what the trace counts as never freed ("leaked") is
the heap in use at that moment: at rest, for the fleet benchmark. heaptrack_print writes each
allocation's stack with its bytes (its flame-graph form); a stack through a watch store's writer
is that cache's (by the type it holds), any other is put in the first group below whose pattern
one of its frames matches, and the groups are printed as a Markdown table, largest first, with
the bytes and their share.
"""

import re
import subprocess
import sys
from collections import defaultdict

# (group, pattern on one frame), in order: the first group one of a stack's frames matches. What
# a pass allocates for a library (a Valkey connection it opens, a request it sends) has the
# controller's frames under it too, so the libraries come before the controllers' own group.
GROUPS = [
    ("kube's Event recorder (events kept for series)", r"kube_runtime::events|plumbing::events"),
    ("Valkey connections (redis client buffers, tasks)", r"\bredis::"),
    ("TLS (rustls)", r"\brustls::"),
    ("HTTP client (hyper, h2, buffers)", r"\b(hyper|hyper_util|h2|tower)::"),
    ("metrics (prometheus-client)", r"prometheus_client::"),
    ("the controllers' queues and passes in flight", r"kube_runtime::(controller|scheduler)"),
    ("Tokio runtime (tasks, timers, I/O driver)", r"\btokio::"),
]

# A watch cache's object: the store's writer names the type it holds.
CACHED = re.compile(r"apply_watcher_event<([^;]+?)> \(store\.rs\)")


def type_name(generic):
    """`kube_core::metadata::PartialObjectMeta<k8s_openapi::...::Secret>` -> `Secret (metadata)`."""
    names = re.findall(r"([A-Za-z0-9_]+)(?=[<>]|$)", generic)
    inner = names[-1] if names else generic
    if "PartialObjectMeta" in generic:
        return f"{inner} (metadata)"
    return inner


def stacks(trace):
    """(frames, bytes) of each stack of `trace` still allocated at the end, read as heaptrack_print
    writes them (unshortened, a trace's stacks run to gigabytes)."""
    printer = subprocess.Popen(
        ["heaptrack_print", "--shorten-templates", "0", "-f", trace, "-F", "/dev/stdout",
         "--flamegraph-cost-type", "leaked", "--print-peaks", "0", "--print-allocators", "0",
         "--print-temporary", "0", "--print-leaks", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    for line in printer.stdout:
        stack, _, cost = line.rstrip("\n").rpartition(" ")
        if cost.isdigit() and int(cost):
            yield stack, int(cost)
    printer.wait()


# A watch cache's object whose store frame was inlined without its type (a build with link-time
# optimisation names some inlined frames `apply_watcher_event<>`): still a cache's, not the
# controller's, though the controller's stream is what polled it.
CACHED_UNNAMED = re.compile(r"apply_watcher_event<?>? \(store\.rs\)|\(reflect\.rs\)")


def group_of(stack):
    found = CACHED.search(stack)
    if found:
        return f"watch caches: {type_name(found.group(1))}"
    if CACHED_UNNAMED.search(stack):
        return "watch caches: kind not named in the trace (inlined)"
    for group, pattern in GROUPS:
        if re.search(pattern, stack):
            return group
    return "other"


def main(traces):
    for trace in traces:
        totals = defaultdict(int)
        for stack, cost in stacks(trace):
            totals[group_of(stack)] += cost
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
