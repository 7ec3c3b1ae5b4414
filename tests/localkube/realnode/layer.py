#!/usr/bin/env python3
"""Writes an image layer: an uncompressed tar of a root file system, the same bytes for the same
files (names sorted, every time 0, owner root unless an --owner rule names the path, no user or
group names), whoever runs it, so an image's digest changes only when its files do.

    layer.py ROOTFS OUT.tar [--owner PATH=UID:GID ...]

An --owner rule applies to PATH itself only (a directory's contents stay root's).
"""
import argparse
import os
import stat
import sys
import tarfile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("rootfs")
    p.add_argument("out")
    p.add_argument("--owner", action="append", default=[], metavar="PATH=UID:GID")
    a = p.parse_args()
    owners = {}
    for rule in a.owner:
        path, _, ids = rule.partition("=")
        uid, _, gid = ids.partition(":")
        owners[path.strip("/")] = (int(uid), int(gid))

    entries = []
    for dirpath, dirnames, filenames in os.walk(a.rootfs):
        dirnames.sort()
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            entries.append(os.path.relpath(full, a.rootfs))
    entries.sort()
    unused = set(owners) - set(entries)
    if unused:
        sys.exit(f"layer.py: --owner names paths not in {a.rootfs}: {sorted(unused)}")

    with tarfile.open(a.out, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in entries:
            info = tar.gettarinfo(os.path.join(a.rootfs, rel), arcname=rel)
            if info.type not in (tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE):
                sys.exit(f"layer.py: {rel}: only files, directories and symlinks belong in a layer")
            info.uid, info.gid = owners.get(rel, (0, 0))
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = stat.S_IMODE(os.lstat(os.path.join(a.rootfs, rel)).st_mode)
            info.pax_headers = {}
            if info.isreg():
                with open(os.path.join(a.rootfs, rel), "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


if __name__ == "__main__":
    main()
