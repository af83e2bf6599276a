#!/usr/bin/env python3
"""No import cycles between the top-level modules of a crate (`make lint`).

For each crate under crates/ (and the root package), every `crate::a::...`
path in a module's files is an edge from that module to `a`; `super::` in a
file directly under src/ names the crate root, not a module. A cycle (a uses
b, b uses a, directly or through others) fails the check, printed with the
files that make each edge. Modules that only their parent uses (`mod x;`
inside another module) count as part of their top-level module.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
USE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")


def top_module(src: pathlib.Path, f: pathlib.Path):
    rel = f.relative_to(src).parts
    if len(rel) == 1:
        name = rel[0][:-3]
        return None if name in ("lib", "main") else name
    return rel[0]


def graph(src: pathlib.Path):
    edges = {}
    for f in sorted(src.rglob("*.rs")):
        m = top_module(src, f)
        # Test modules (`tests.rs`, `*_tests.rs`) may reach anywhere.
        if m is None or f.name == "tests.rs" or f.name.endswith("_tests.rs"):
            continue
        text = f.read_text()
        # Tests may reach anywhere: they are not the module's dependencies.
        text = re.split(r"#\[cfg\(test\)\]\s*mod tests\s*\{", text)[0]
        # Comments name modules without using them.
        text = re.sub(r"//[^\n]*", "", text)
        for target in USE.findall(text):
            if target != m and (src / f"{target}.rs").exists() or (src / target).is_dir():
                if target != m:
                    edges.setdefault(m, {}).setdefault(target, set()).add(str(f.relative_to(ROOT)))
    return edges


def cycles(edges):
    found = []
    for a, targets in edges.items():
        for b in targets:
            if a < b and a in edges.get(b, {}):
                found.append((a, b))
    # Longer cycles: depth-first search for a path back.
    def reach(start, node, seen, path):
        for nxt in edges.get(node, {}):
            if nxt == start and len(path) > 2:
                return path + [nxt]
            if nxt not in seen:
                seen.add(nxt)
                p = reach(start, nxt, seen, path + [nxt])
                if p:
                    return p
        return None
    longer = []
    for a in edges:
        p = reach(a, a, {a}, [a])
        if p and min(p[:-1]) == a:
            longer.append(p)
    return found, longer


def main():
    crates = [ROOT / "src"] + [d / "src" for d in sorted((ROOT / "crates").iterdir()) if (d / "src").is_dir()]
    bad = False
    for src in crates:
        edges = graph(src)
        pairs, longer = cycles(edges)
        for a, b in pairs:
            bad = True
            print(f"module cycle in {src.relative_to(ROOT)}: {a} <-> {b}")
            print(f"  {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
            print(f"  {b} -> {a}: {', '.join(sorted(edges[b][a]))}")
        for p in longer:
            if len(p) > 3:
                bad = True
                print(f"module cycle in {src.relative_to(ROOT)}: {' -> '.join(p)}")
    if bad:
        sys.exit(1)
    print(f"module cycles: none in {len(crates)} crates")


main()
