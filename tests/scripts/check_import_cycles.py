#!/usr/bin/env python3
"""No import cycle between files, and no loop between the folders of a crate (project
rules): fails, naming each cycle, when the non-test .rs files of one crate import each
other in a loop, or when its top-level folders under src/ do (`train/` importing from
`checkpoint/` and `checkpoint/` from `train/`).

Why a check: the redesign removed every file cycle, and three came back within two
features (fused attention's saved state, scatter_add's arguments, AdamW's slots). A
cycle means neither file can be read, tested or moved without the other; the fix is to
move the shared item to the file both can import.

What counts as an import of file B by file A (A != B), after dropping comments, string
literals and `#[cfg(test)]` items:
  - a `use` of a path into B's module (`use crate::ops::accumulate::ScatterArgs;`,
    `use super::dropout::{self, AttentionDropout};`), except re-exports (`pub use`,
    `pub(crate) use`): a module's face hands names on, its code does not use them;
  - a path into B's module written in code (`super::attention_cuda::forward(..)`).
A path names B's module when B's module is its longest prefix that is a module file
(`src/a/b.rs` and `src/a/b/mod.rs` are module `crate::a::b`, `src/lib.rs` is `crate`).
Paths through other crates are not followed: crates cannot import each other in a loop
(cargo refuses it).

    python3 tests/scripts/check_import_cycles.py          # the repository's crates
"""
import os
import re
import subprocess
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_code(text):
    """The text without comments and string/char literals (kept as empty quotes)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not re.match(r"[A-Za-z0-9_]", text[i - 1:i] or " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_cfg_test(code):
    """`code` without each `#[cfg(test)]` item (a block, or an item ending in `;`)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]", code)
        if not m:
            return code
        i, depth = m.end(), 0
        while i < len(code):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            elif code[i] == ";" and depth == 0:
                break
            i += 1
        code = code[: m.start()] + code[i + 1:]


def expand_use_tree(tree):
    """`a::{b, c::{d, self}}` -> [[a, b], [a, c, d], [a, c]]."""
    tree = re.sub(r"\s+", "", tree)
    tree = re.sub(r"\bas" + IDENT, "", tree)

    def split_top(s):
        parts, depth, start = [], 0, 0
        for k, ch in enumerate(s):
            depth += ch == "{"
            depth -= ch == "}"
            if ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        return [p for p in parts if p]

    def walk(s, prefix):
        brace = s.find("{")
        if brace < 0:
            segs = [x for x in s.split("::") if x and x != "*"]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            return [prefix + segs]
        head = [x for x in s[:brace].split("::") if x]
        inner = s[brace + 1: s.rfind("}")]
        paths = []
        for part in split_top(inner):
            paths += walk(part, prefix + head)
        return paths

    return walk(tree, [])


def module_of(rel):
    """`a/b.rs` or `a/b/mod.rs` (relative to src/) -> ('a', 'b'); `lib.rs` -> ()."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


def absolute(path, here):
    """A `use`/code path as segments from the crate root, or None outside this crate."""
    if not path:
        return None
    if path[0] == "crate":
        return list(path[1:])
    base = list(here)
    rest = list(path)
    if rest[0] == "self":
        rest = rest[1:]
    elif rest[0] != "super":
        return None
    while rest and rest[0] == "super":
        if not base:
            return None
        base, rest = base[:-1], rest[1:]
    return base + rest


def crate_edges(src_dir, files):
    modules = {module_of(os.path.relpath(f, src_dir)): f for f in files}
    edges = {f: set() for f in files}
    for f in files:
        here = module_of(os.path.relpath(f, src_dir))
        code = drop_cfg_test(strip_code(open(f, encoding="utf-8").read()))
        paths = []
        use_statement = r"(\bpub(\([^)]*\))?\s+)?\buse\s+([^;]+);"
        for m in re.finditer(use_statement, code):
            if not m.group(1):  # a `pub use` is a re-export
                paths += expand_use_tree(m.group(3))
        code = re.sub(use_statement, ";", code)
        for m in re.finditer(r"(?<![A-Za-z0-9_$:])((?:crate|super|self)(?:::" + IDENT + ")+)", code):
            paths.append(m.group(1).split("::"))
        for path in paths:
            segs = absolute(path, here)
            if segs is None:
                continue
            for k in range(len(segs), -1, -1):
                target = modules.get(tuple(segs[:k]))
                if target is not None:
                    if target != f:
                        edges[f].add(target)
                    break
    return edges


def folder_edges(src_dir, edges):
    """The file edges between different top-level folders under `src_dir`, as folder
    edges (files at the top of src/ are not folders and take no part)."""
    def folder(f):
        parts = os.path.relpath(f, src_dir).split("/")
        return src_dir + "/" + parts[0] + "/" if len(parts) > 1 else None

    out = {}
    for f, targets in edges.items():
        a = folder(f)
        if a is None:
            continue
        out.setdefault(a, set())
        for t in targets:
            b = folder(t)
            if b is not None and b != a:
                out[a].add(b)
                out.setdefault(b, set())
    return out


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    os.chdir(root)
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.rs"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    src_dirs = sorted({p[: -len("/lib.rs")] for p in tracked
                       if (p == "src/lib.rs" or p.endswith("/src/lib.rs")) and "/tests/" not in p})
    found = []
    for src in src_dirs:
        files = [p for p in tracked if p.startswith(src + "/") and "/tests/" not in p
                 and not p.endswith(("tests.rs", "_tests.rs")) and "/bin/" not in p
                 and not p.startswith(src + "/main.rs") and os.path.exists(p)]
        edges = crate_edges(src, files)
        found += cycles(edges)
        found += cycles(folder_edges(src, edges))
    if found:
        print("import cycles between files (move the shared item where both can import it):",
              file=sys.stderr)
        for comp in found:
            print("  " + " <-> ".join(comp), file=sys.stderr)
        sys.exit(1)
    print(f"import cycles: none between the files of {len(src_dirs)} crates")


if __name__ == "__main__":
    main()
