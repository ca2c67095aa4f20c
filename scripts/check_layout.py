#!/usr/bin/env python3
"""The layout rules of docs/architecture.md, checked (issue 22):

1. No import circle between files of src/: every `crate::`, `super::` and
   `self::` path a file names (in `use` lines or inline) is resolved to the
   file that defines it (following `pub use` re-exports of a `mod.rs`), and
   the graph of files must have no cycle.
2. No file in src/ or benches/ over 600 lines.
3. Every .rs file in src/ opens with a `//!` comment saying its one job.
4. Layers point down: domain <- notify <- store <- service <- http <-
   startup (lib.rs, main.rs, config/, telemetry.rs, healthcheck.rs);
   client/ and cli/ use domain (and the client) only.

Prints every violation and exits 1 if there is any. Usage:
    python3 scripts/check_layout.py [--max-lines N]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
MAX_LINES = 600

# Each top-level module's layer; a file may use its own layer and lower ones.
LAYERS = {
    "domain": 0,
    "notify": 1,
    "store": 2,
    "service": 3,
    "http": 4,
    "openapi": 4,
    # startup and process-wide plumbing
    "config": 5,
    "telemetry": 0,
    "healthcheck": 5,
    "startup": 5,
    "lib": 5,
    "main": 5,
}
# The client side: its own stack on top of domain only.
CLIENT_SIDE = {"client": ["domain", "client"], "cli": ["domain", "client", "cli", "config"]}


def module_path(file: Path) -> list[str]:
    rel = file.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def file_of(parts: list[str]) -> Path | None:
    if not parts:
        return SRC / "lib.rs"
    base = SRC.joinpath(*parts)
    for cand in (base.with_suffix(".rs"), base / "mod.rs"):
        if cand.exists():
            return cand
    return None


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    out: list[str] = []

    def walk(prefix: str, s: str) -> None:
        i = s.find("{")
        if i < 0:
            for part in split_top(s):
                part = part.split(" as ")[0]
                out.append(prefix + part)
            return
        head, body = s[:i], s[i + 1 : match_brace(s, i)]
        for part in split_top(body):
            walk(prefix + head, part)

    def match_brace(s: str, i: int) -> int:
        depth = 0
        for j in range(i, len(s)):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                return j
        return len(s)

    def split_top(s: str) -> list[str]:
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            cur += ch
        if cur:
            parts.append(cur)
        return [p for p in parts if p]

    walk("", tree)
    return out


def absolute(path: str, here: list[str]) -> list[str] | None:
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        return segs[1:]
    if segs[0] in ("self", "super"):
        cur = list(here)
        while segs and segs[0] in ("self", "super"):
            if segs[0] == "super":
                cur = cur[:-1]
            segs = segs[1:]
        return cur + segs
    return None


def reexports(mod_file: Path, mod_parts: list[str]) -> dict[str, list[str]]:
    """Names a mod.rs / lib.rs re-exports with `pub use`, to their origin."""
    text = strip_comments(mod_file.read_text())
    found: dict[str, list[str]] = {}
    for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
        for item in expand_use(m.group(1)):
            segs = [s for s in item.split("::") if s]
            if segs and segs[0] not in ("crate", "self", "super"):
                segs = ["self"] + segs
            origin = absolute("::".join(segs), mod_parts)
            if origin:
                # `pub use self::schemas::*`: any other name may come from there.
                found["*" if origin[-1] == "*" else origin[-1]] = (
                    origin[:-1] if origin[-1] == "*" else origin
                )
    return found


def resolve(parts: list[str]) -> Path | None:
    """The file defining the item at `parts` (longest existing module prefix,
    through re-exports)."""
    for depth in range(len(parts), -1, -1):
        f = file_of(parts[:depth])
        if f is None:
            continue
        rest = parts[depth:]
        if rest and f.name in ("mod.rs", "lib.rs"):
            found = reexports(f, parts[:depth])
            origin = found.get(rest[0])
            if origin is None and "*" in found:
                origin = found["*"] + [rest[0]]
            if origin and origin[: len(parts[:depth]) + 1] != parts[: depth + 1]:
                target = resolve(origin)
                if target is not None:
                    return target
        return f
    return None


def without_tests(text: str) -> str:
    """The text without inline `#[cfg(test)] mod ... { ... }` blocks: a unit
    test module imports what it tests, which is no dependency of the file."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 0, m.end() - 1
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        i = j
    out.append(text[i:])
    return "".join(out)


def deps(file: Path) -> set[Path]:
    text = without_tests(strip_comments(file.read_text()))
    here = module_path(file)
    if file.name not in ("mod.rs", "lib.rs", "main.rs"):
        mod_here = here
    else:
        mod_here = here
    paths: list[str] = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        if re.match(r"\s*(crate|self|super)\b", m.group(1)):
            paths.extend(expand_use(m.group(1)))
    for m in re.finditer(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
        if text.startswith("::{", m.end()):
            continue  # the head of a `use a::{...}` list: expanded above
        paths.append(m.group(1))
    out: set[Path] = set()
    for p in paths:
        parts = absolute(p, mod_here)
        if parts is None:
            continue
        target = resolve(parts)
        if target is not None and target != file:
            # A module's own children are its parts, not its imports.
            out.add(target)
    if file.name == "main.rs":
        out.discard(SRC / "lib.rs")
    return out


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components of more than one file (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on: set[Path] = set()
    found: list[list[Path]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: Path) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def top(file: Path) -> str:
    parts = module_path(file)
    if not parts:
        return file.stem
    return parts[0]


def main() -> int:
    max_lines = MAX_LINES
    if "--max-lines" in sys.argv:
        max_lines = int(sys.argv[sys.argv.index("--max-lines") + 1])
    problems: list[str] = []
    files = sorted(SRC.rglob("*.rs"))
    graph = {f: deps(f) for f in files}
    # mod.rs and lib.rs declare their children; an edge from a child back to
    # its own mod.rs (a `super::Item` defined there) is an import like any.
    for comp in cycles(graph):
        names = [str(f.relative_to(ROOT)) for f in comp]
        problems.append("import circle: " + " <-> ".join(names))
    for f in files:
        src_top = top(f)
        for d in graph[f]:
            dst_top = top(d)
            if src_top in CLIENT_SIDE:
                if dst_top not in CLIENT_SIDE[src_top]:
                    problems.append(
                        f"upward import: {f.relative_to(ROOT)} ({src_top}) uses "
                        f"{d.relative_to(ROOT)} ({dst_top}); the client side uses domain only"
                    )
                continue
            a, b = LAYERS.get(src_top), LAYERS.get(dst_top)
            if a is not None and b is not None and b > a:
                problems.append(
                    f"upward import: {f.relative_to(ROOT)} ({src_top}) uses "
                    f"{d.relative_to(ROOT)} ({dst_top})"
                )
    for f in files + sorted((ROOT / "benches").rglob("*.rs")):
        n = len(f.read_text().splitlines())
        if n > max_lines:
            problems.append(f"too long: {f.relative_to(ROOT)} has {n} lines (at most {max_lines})")
    for f in files:
        first = f.read_text().lstrip().splitlines()[:1]
        if not first or not first[0].startswith("//!"):
            problems.append(f"no opening //! comment saying its job: {f.relative_to(ROOT)}")
    for p in problems:
        print(p)
    print(
        f"layout: {len(files)} files, {sum(len(v) for v in graph.values())} imports, "
        f"{len(problems)} problem(s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
