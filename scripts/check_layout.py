#!/usr/bin/env python3
"""The layout rules of docs/architecture.md, checked (issues 22 and 40):

1. No import circle between modules of src/, reported per directory. The
   module tree is read from the `mod` declarations (from lib.rs down,
   `#[path]` honoured, `#[cfg(test)]` modules left out: a test imports what
   it tests). Every path a file names (`crate::`, `self::`, `super::`, and a
   bare `child::` path naming a module the file declares) is an edge to the
   module the path names. A `pub use` is NOT followed to where the item is
   defined: `use super::script::Script` depends on the module `script`,
   whatever file of `script/` defines `Script`. Then, in each directory
   (module), its children and its own `mod.rs` are the nodes, an import
   between two of them (from any file inside one to any file inside the
   other) an edge, and every strongly connected component of more than one
   node is a circle. A module re-exporting its own descendants (`pub use
   self::child::Item`) is its public face, not an import; its `mod`
   declarations are none either.
2. No file in src/ or benches/ over 600 lines; none in clients/ over 600
   (lockfiles aside); none in lua/ (entry scripts and the files they
   include, lua/lib/ and lua/<script>/) over 400.
3. Every .rs file in src/ opens with a `//!` comment saying its one job.
4. Layers point down: domain <- notify <- store <- service <- http <-
   startup (lib.rs, main.rs, config/, telemetry.rs, healthcheck.rs);
   client/ and cli/ use domain (and the client) only.

Prints every violation and exits 1 if there is any. Its own test:
scripts/test_check_layout.py. Usage:
    python3 scripts/check_layout.py [--root DIR] [--max-lines N]
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 600
CLIENT_MAX_LINES = 600
LUA_MAX_LINES = 400
# Generated files in clients/ that no one edits by hand.
CLIENT_SKIP = {"package-lock.json"}

# Circles that are known, filed and being fixed: directory (relative to the
# root) -> (the issue, the nodes of the circle as this script prints them).
# A circle is let through only when its nodes are exactly (or a part of) an
# entry's; any other circle, in that directory or elsewhere, fails.
KNOWN_CIRCLES: dict[str, tuple[str, set[str]]] = {}

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

Mod = tuple[str, ...]


@dataclass
class Module:
    path: Mod
    file: Path
    # child name -> its module path
    children: dict[str, Mod] = field(default_factory=dict)


@dataclass
class Edge:
    target: Mod
    line: int
    text: str


def strip_comments(text: str) -> str:
    """Comments and string literals blanked (same length, same lines)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    pattern = r'/\*.*?\*/|//[^\n]*|\'(?:\\.|[^\'\\])\'|\br#*"(?:.|\n)*?"#*|"(?:\\.|[^"\\])*"'
    return re.sub(pattern, blank, text, flags=re.S)


def block_end(text: str, open_at: int) -> int:
    """The index after the brace closing the one at `open_at`."""
    depth = 0
    for j in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    return len(text)


def without_tests(text: str) -> str:
    """The text with inline `#[cfg(test)] mod ... { ... }` blocks blanked: a
    unit test module imports what it tests, which is no dependency."""
    out = list(text)
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*\{", text):
        end = block_end(text, m.end() - 1)
        for i in range(m.start(), end):
            if out[i] != "\n":
                out[i] = " "
    return "".join(out)


def declared_modules(text: str) -> list[tuple[str, str | None]]:
    """The file-backed `mod name;` a file declares: (name, #[path] or None),
    test-only ones left out."""
    found = []
    for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
        attrs = m.group(1)
        if "cfg(test)" in attrs.replace(" ", ""):
            continue
        p = re.search(r'#\[path\s*=\s*"([^"]+)"\]', attrs)
        found.append((m.group(2), p.group(1) if p else None))
    return found


def module_tree(src: Path) -> dict[Mod, Module]:
    mods: dict[Mod, Module] = {}
    lib = src / "lib.rs"
    if not lib.exists():
        return mods
    todo = [((), lib)]
    while todo:
        path, file = todo.pop()
        mod = Module(path, file)
        mods[path] = mod
        raw = file.read_text()
        text = without_tests(re.sub(r"//[^\n]*", "", raw))
        here_dir = file.parent if file.name in ("mod.rs", "lib.rs") else file.parent / file.stem
        for name, attr in declared_modules(text):
            if attr is not None:
                cand = [file.parent / attr]
            else:
                cand = [here_dir / f"{name}.rs", here_dir / name / "mod.rs"]
            child = next((c for c in cand if c.exists()), None)
            if child is None:
                continue
            mod.children[name] = path + (name,)
            todo.append((path + (name,), child))
    return mods


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", " ", tree).strip()
    out: list[str] = []

    def walk(prefix: str, s: str) -> None:
        s = s.strip()
        i = s.find("{")
        if i < 0:
            for part in split_top(s):
                out.append(prefix + part.split(" as ")[0].strip().replace(" ", ""))
            return
        head, body = s[:i].replace(" ", ""), s[i + 1 : match_brace(s, i)]
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
        if cur.strip():
            parts.append(cur)
        return [p.strip() for p in parts if p.strip()]

    walk("", tree)
    return out


def inline_modules(text: str) -> list[tuple[int, int, str]]:
    """Spans of inline `mod name { ... }` blocks: a path inside one starts
    from that module (`super::` inside `mod at {}` is the file's module)."""
    spans = []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", text):
        spans.append((m.start(), block_end(text, m.end() - 1), m.group(1)))
    return spans


def absolute(segs: list[str], here: Mod, children: dict[str, Mod]) -> Mod | None:
    if not segs:
        return None
    if segs[0] == "crate":
        return tuple(segs[1:])
    if segs[0] in ("self", "super"):
        cur = list(here)
        while segs and segs[0] in ("self", "super"):
            if segs[0] == "super":
                cur = cur[:-1]
            segs = segs[1:]
        return tuple(cur) + tuple(segs)
    if segs[0] in children:
        return tuple(here) + tuple(segs)
    return None


def resolve(parts: Mod, mods: dict[Mod, Module]) -> Mod | None:
    """The module the path names: its longest prefix that is a file module."""
    for depth in range(len(parts), -1, -1):
        if parts[:depth] in mods:
            return parts[:depth]
    return None


def imports(mod: Module, mods: dict[Mod, Module]) -> list[Edge]:
    raw = mod.file.read_text()
    text = without_tests(strip_comments(raw))
    spans = inline_modules(text)
    children = mod.children
    child_alt = "|".join(re.escape(c) for c in children) or r"(?!x)x"
    found: list[tuple[int, str, bool]] = []  # (offset, path, is a pub use)
    taken: set[int] = set()
    for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        is_pub = m.group(1) is not None
        for item in expand_use(m.group(2)):
            found.append((m.start(), item, is_pub))
        taken.update(range(m.start(), m.end()))
    head = r"(?:crate|super|self|" + child_alt + r")"
    for m in re.finditer(r"(?<![\w:])(" + head + r"(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
        if m.start() in taken:
            continue
        found.append((m.start(), m.group(1), False))
    edges = []
    for at, path, is_pub in found:
        here = list(mod.path)
        for start, end, name in spans:
            if start < at < end:
                here.append(name)
        segs = [s for s in path.split("::") if s and s != "*"]
        parts = absolute(segs, tuple(here), children if len(here) == len(mod.path) else {})
        if parts is None:
            continue
        target = resolve(parts, mods)
        if target is None or target == mod.path:
            continue
        if is_pub and target[: len(mod.path)] == mod.path:
            continue  # re-exporting its own descendant: its public face
        line = raw.count("\n", 0, at) + 1
        edges.append(Edge(target, line, path))
    return edges


def sccs(nodes: list[str], graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def node_name(mods: dict[Mod, Module], level: Mod, m: Mod) -> str:
    """How a module shows in the circle of directory `level`: the child of
    `level` that holds it (`name.rs` or `name/`), or the level's own file."""
    if m == level:
        return mods[level].file.name
    child = mods[level + m[len(level) : len(level) + 1]]
    return child.file.name if child.file.name != "mod.rs" else child.file.parent.name + "/"


def circles(root: Path, mods: dict[Mod, Module], edges: dict[Mod, list[Edge]]) -> list[str]:
    # level -> node -> node -> an example (file:line path)
    levels: dict[Mod, dict[str, dict[str, str]]] = {}
    for src, out in edges.items():
        for e in out:
            n = 0
            while n < min(len(src), len(e.target)) and src[n] == e.target[n]:
                n += 1
            level = src[:n]
            a, b = node_name(mods, level, src), node_name(mods, level, e.target)
            if a == b:
                continue
            where = f"{mods[src].file.relative_to(root)}:{e.line} {e.text}"
            levels.setdefault(level, {}).setdefault(a, {}).setdefault(b, where)
    problems = []
    for level in sorted(levels):
        graph = {a: set(bs) for a, bs in levels[level].items()}
        nodes = sorted(set(graph) | {b for bs in graph.values() for b in bs})
        f = mods[level].file
        # A directory's circle, or one among a file and its `#[path]` children.
        if f.name in ("mod.rs", "lib.rs"):
            where = f"{f.parent.relative_to(root)}/"
        else:
            where = str(f.relative_to(root))
        for comp in sccs(nodes, graph):
            members = set(comp)
            known = KNOWN_CIRCLES.get(where)
            if known and members <= known[1]:
                print(f"known circle in {where} (allowed: {known[0]}): " + ", ".join(comp))
                continue
            lines = [f"import circle in {where}: " + ", ".join(comp)]
            for a in comp:
                for b in sorted(graph.get(a, ())):
                    if b in members:
                        lines.append(f"    {a} -> {b}  ({levels[level][a][b]})")
            problems.append("\n".join(lines))
    return problems


def too_long(root: Path, files: list[Path], limit: int) -> list[str]:
    out = []
    for f in files:
        n = len(f.read_text(errors="replace").splitlines())
        if n > limit:
            out.append(f"too long: {f.relative_to(root)} has {n} lines (at most {limit})")
    return out


def client_files(root: Path) -> list[Path]:
    skip_dirs = {"node_modules", "dist", "build", ".venv", "__pycache__", ".mypy_cache",
                 ".ruff_cache", ".pytest_cache", "target"}
    out = []
    # In a git checkout, the files git tracks or would track: build output
    # (dist-test/, a Go or Java build) is ignored there and never counted.
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "clients"],
        capture_output=True, text=True, check=False,
    )
    if listed.returncode == 0:
        names = {root / line for line in listed.stdout.splitlines() if line}
    else:
        names = None
    for f in sorted((root / "clients").rglob("*")):
        if names is not None and f not in names:
            continue
        rel = f.relative_to(root / "clients").parts
        if not f.is_file() or any(p in skip_dirs or p.endswith(".egg-info") for p in rel):
            continue
        if f.name in CLIENT_SKIP or f.suffix in (".pyc", ".tsbuildinfo"):
            continue
        out.append(f)
    return out


def top(path: Mod) -> str:
    return path[0] if path else "lib"


def main(argv: list[str]) -> int:
    root = ROOT
    if "--root" in argv:
        root = Path(argv[argv.index("--root") + 1]).resolve()
    max_lines = MAX_LINES
    if "--max-lines" in argv:
        max_lines = int(argv[argv.index("--max-lines") + 1])
    src = root / "src"
    problems: list[str] = []
    mods = module_tree(src)
    edges = {p: imports(m, mods) for p, m in mods.items()}
    problems += circles(root, mods, edges)
    for p, out in sorted(edges.items()):
        src_top = top(p)
        for e in out:
            dst_top = top(e.target)
            where = f"{mods[p].file.relative_to(root)}:{e.line} ({src_top}) uses {e.text} ({dst_top})"
            if src_top in CLIENT_SIDE:
                if dst_top not in CLIENT_SIDE[src_top]:
                    problems.append(f"upward import: {where}; the client side uses domain only")
                continue
            a, b = LAYERS.get(src_top), LAYERS.get(dst_top)
            if a is not None and b is not None and b > a:
                problems.append(f"upward import: {where}")
    files = sorted(src.rglob("*.rs"))
    problems += too_long(root, files + sorted((root / "benches").rglob("*.rs")), max_lines)
    problems += too_long(root, client_files(root), CLIENT_MAX_LINES)
    problems += too_long(root, sorted((root / "lua").rglob("*.lua")), LUA_MAX_LINES)
    for f in files:
        first = f.read_text().lstrip().splitlines()[:1]
        if not first or not first[0].startswith("//!"):
            problems.append(f"no opening //! comment saying its job: {f.relative_to(root)}")
    for p in problems:
        print(p)
    print(
        f"layout: {len(mods)} modules, {sum(len(v) for v in edges.values())} imports, "
        f"{len(problems)} problem(s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
