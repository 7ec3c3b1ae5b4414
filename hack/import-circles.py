#!/usr/bin/env python3
"""Fails when a module of the product imports one that imports it back.

Each crate's source files are modules; an edge runs from a file to the module that defines what
it names (a `use`, or a `crate::`/`super::`/`self::` path in its code), followed through
re-exports (`pub use`), so naming an item through its parent's re-export counts as naming the
file that defines it. Test code (`#[cfg(test)]` modules and files) is left out: a test may
import anything. Prints every circle (a strongly connected set of modules) and exits 1 if any.

Usage: hack/import-circles.py [CRATE_DIR...]   (default: every crate of the workspace)
"""

import os
import re
import sys

CRATES = ["valkey-api", "codegen", "plumbing", "backup", "node-controller", "cluster-controller"]


def module_files(src):
    """Module path (tuple) -> file, for every .rs file under src."""
    modules = {}
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[0] == "bin":
                continue
            if rel == ["main"] and os.path.exists(os.path.join(src, "lib.rs")):
                continue  # the binary names its library by the crate's name, not `crate::`
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            modules[tuple(rel)] = path
    return modules


def strip(text):
    """The code without comments, strings' contents and `#[cfg(test)]` items."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    out = []
    i = 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        # Skip the item the attribute is on: up to its `;` or its balanced `{...}`.
        k = j + len("#[cfg(test)]")
        while k < len(text) and text[k] not in "{;":
            k += 1
        if k < len(text) and text[k] == "{":
            depth = 0
            while k < len(text):
                if text[k] == "{":
                    depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
        i = k + 1
    return "".join(out)


def test_modules(text):
    """Names of child modules declared under `#[cfg(test)]` (their files are test code)."""
    return set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text))


def expand(tree):
    """`a::{b, c::{d, e as f}}` -> ['a::b', 'a::c::d', 'a::c::e as f']."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        return [tree] if tree else []
    prefix = tree[:brace]
    inner = tree[brace + 1 : tree.rfind("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    result = []
    for part in parts:
        for leaf in expand(part):
            leaf = leaf.strip()
            if leaf == "self":
                result.append(prefix.rstrip(":"))
            elif leaf:
                result.append(prefix + leaf)
    return result


USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")


def uses(code):
    """(public, path, alias) for every `use` leaf."""
    found = []
    for m in USE.finditer(code):
        tree = re.sub(r"\s+as\s+", "@", m.group(2))
        for leaf in expand(re.sub(r"\s+", "", tree).replace("@", " as ")):
            alias = None
            if " as " in leaf:
                leaf, alias = [s.strip() for s in leaf.split(" as ")]
            found.append((m.group(1) is not None, leaf, alias))
    return found


class Crate:
    def __init__(self, src):
        self.modules = module_files(src)
        self.code = {}
        excluded = set()
        for module, path in self.modules.items():
            with open(path) as f:
                text = f.read()
            for child in test_modules(text):
                excluded.add(module + (child,))
            self.code[module] = strip(text)
        for module in list(self.modules):
            if any(module[: len(e)] == e for e in excluded):
                del self.modules[module]
                del self.code[module]
        self.exports = {}
        for module, code in self.code.items():
            table = {}
            for public, path, alias in uses(code):
                if not public:
                    continue
                name = alias or path.split("::")[-1]
                table[name] = path
            self.exports[module] = table

    def base(self, module, first):
        if first == "crate":
            return ()
        if first == "self":
            return module
        return None

    def resolve(self, module, path, depth=0):
        """The module defining what `path` (as written in `module`) names, or None."""
        if depth > 20:
            return None
        segs = [s for s in path.split("::") if s]
        if not segs:
            return None
        if segs[0] == "crate":
            cur, segs = (), segs[1:]
        elif segs[0] == "self":
            cur, segs = module, segs[1:]
        elif segs[0] == "super":
            cur = module
            while segs and segs[0] == "super":
                cur, segs = cur[:-1], segs[1:]
        elif module + (segs[0],) in self.modules:
            cur, segs = module, segs
        else:
            return None  # another crate, or std
        while segs and cur + (segs[0],) in self.modules:
            cur, segs = cur + (segs[0],), segs[1:]
        if not segs or segs == ["*"]:
            return cur
        target = self.exports.get(cur, {}).get(segs[0])
        if target is not None:
            via = self.resolve(cur, target + "".join("::" + s for s in segs[1:]), depth + 1)
            return via if via is not None else cur
        return cur

    def edges(self):
        graph = {m: set() for m in self.modules}
        self.why = {}
        inline = re.compile(r"\b(?:crate|super|self)(?:::\w+)+")
        for module, code in self.code.items():
            paths = [p for _, p, _ in uses(code)]
            paths += inline.findall(USE.sub("", re.sub(r"pub\(in [^)]*\)", "", code)))
            for path in paths:
                target = self.resolve(module, path)
                if target is not None and target != module and target in self.modules:
                    graph[module].add(target)
                    self.why.setdefault((module, target), set()).add(path)
        return graph


def circles(graph):
    """Strongly connected sets of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def self_test():
    """The checker finds a circle through a re-export, and none through test code or a
    visibility path; run before the real check so a checker that finds nothing cannot pass."""
    import tempfile

    files = {
        "lib.rs": "pub mod a;\npub mod b;\npub mod c;\npub use a::A;\n",
        "a.rs": "pub struct A;\npub fn f() -> crate::b::B { crate::b::B }\n",
        # b names A through the crate root's re-export: still an import of `a`.
        "b.rs": "use crate::A;\npub struct B;\npub fn g() -> A { A }\n",
        # c imports a only in test code, and names b in a visibility path.
        "c.rs": "pub(in crate::b) fn h() {}\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
    }
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "src"))
        for name, text in files.items():
            with open(os.path.join(root, "src", name), "w") as f:
                f.write(text)
        graph = Crate(os.path.join(root, "src")).edges()
    found = circles(graph)
    assert found == [[("a",), ("b",)]], f"self-test: expected the circle a <-> b, found {found}"
    assert not graph[("c",)], f"self-test: c imports nothing outside tests, found {graph[('c',)]}"


def main():
    self_test()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crates = sys.argv[1:] or [os.path.join(root, c) for c in CRATES]
    failed = False
    for crate in crates:
        src = os.path.join(crate, "src")
        if not os.path.isdir(src):
            continue
        crate_ = Crate(src)
        graph = crate_.edges()
        name = os.path.basename(os.path.normpath(crate))
        for group in circles(graph):
            failed = True
            names = ["::".join(m) or "crate" for m in group]
            print(f"{name}: import circle: {' <-> '.join(names)}")
            for m in group:
                for t in sorted(graph[m]):
                    if t in group:
                        paths = ", ".join(sorted(crate_.why[(m, t)]))
                        print(f"    {'::'.join(m) or 'crate'} -> {'::'.join(t) or 'crate'}: {paths}")
        print(f"{name}: {len(graph)} modules, {sum(len(e) for e in graph.values())} imports")
    if failed:
        sys.exit(1)
    print("no import circles")


if __name__ == "__main__":
    main()
