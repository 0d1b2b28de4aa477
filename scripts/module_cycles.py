#!/usr/bin/env python3
"""Fails (exit 1) when the library's top-level modules import each other in a cycle.

Reads every `crate::X` / `dicomflow::X` path in src/ (the binary's `app/` is left out: the
library never imports it, which the compiler already enforces) outside `#[cfg(test)]` modules,
builds the module graph and prints it; a cycle is printed with its edges.
usage: scripts/module_cycles.py [SRC_DIR]
"""
import os
import re
import sys


def non_test_text(text):
    # Test modules may use anything (a test builds fixtures with `synth`): cut from the first
    # `#[cfg(test)]` to the end of the file, where this crate keeps its test modules.
    cut = text.find("#[cfg(test)]")
    return text if cut < 0 else text[:cut]


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    tops = {d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)) and d != "app"}
    tops |= {f[:-3] for f in os.listdir(src) if f.endswith(".rs") and f not in ("lib.rs", "main.rs")}
    graph = {t: set() for t in tops}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            top = rel.split(os.sep)[0].removesuffix(".rs")
            if top not in tops:
                continue
            text = non_test_text(open(os.path.join(root, f), encoding="utf-8").read())
            for m in re.findall(r"\b(?:crate|dicomflow)::(\w+)", text):
                if m != top and m in tops:
                    graph[top].add(m)
    for t in sorted(graph):
        print(f"{t} -> {', '.join(sorted(graph[t])) or '-'}")
    cycles = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            # a -> b closes a cycle when a is reachable from b
            seen, todo = set(), [b]
            while todo:
                x = todo.pop()
                for y in graph[x]:
                    if y not in seen:
                        seen.add(y)
                        todo.append(y)
            if a in seen:
                cycles.append(f"{a} -> {b}")
    if cycles:
        print("cycle edges: " + "; ".join(cycles))
        return 1
    print("no cycle between top-level modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
