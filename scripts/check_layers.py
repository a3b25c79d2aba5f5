#!/usr/bin/env python3
"""The walls between voxlake's files, checked (scripts/test.sh runs this).

No two files of a crate's `src/` import each other: a file's imports are its `use crate::…`,
`use super::…`, `use self::…` and child-module paths, and `crate::…`/`super::…` paths in its
code (comments and its `#[cfg(test)]` module left out), each resolved to the file of the
module it names, through `pub use` re-exports. Prints every pair and exits 1 if there is one.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def modules(src):
    """module path (tuple) -> file"""
    out = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts == ["lib"] or parts == ["main"]:
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        if parts and parts[0] == "bin":
            continue
        out.setdefault(tuple(parts), f)
    return out


def code_of(path):
    text = path.read_text()
    m = re.search(r"^#\[cfg\(test\)\]\s*\n(\s*//[^\n]*\n|\s*#\[[^\n]*\]\s*\n)*\s*mod tests\b", text, re.M)
    if m:
        text = text[: m.start()]
    lines = [l for l in text.splitlines() if not l.lstrip().startswith("//")]
    return "\n".join(lines)


def expand(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]"""
    tree = tree.strip()
    i = tree.find("{")
    if i < 0:
        return [tree.split(" as ")[0].strip()]
    head = tree[:i]
    body = tree[i + 1 : tree.rfind("}")]
    items, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    items.append(cur)
    out = []
    for it in items:
        if it.strip():
            out += [head + p if p != "self" else head.rstrip(":") for p in expand(it)]
    return out


def paths_in(code):
    uses = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        uses += expand(m.group(1).replace("\n", " "))
    inline = re.findall(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code)
    return uses + inline


def resolve(path, here, mods, exports, depth=0):
    """The module (tuple) a path names, or None for another crate's or std's."""
    parts = [p for p in path.split("::") if p]
    if not parts:
        return None
    if parts[0] == "crate":
        base, rest = (), parts[1:]
    elif parts[0] in ("super", "self"):
        base = here
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                base = base[:-1]
            parts = parts[1:]
        rest = parts
    elif here + (parts[0],) in mods:
        base, rest = here, parts
    else:
        return None
    mod = base
    while rest and mod + (rest[0],) in mods:
        mod = mod + (rest[0],)
        rest = rest[1:]
    if rest and rest[0] != "*" and depth < 8:
        target = exports.get(mod, {}).get(rest[0])
        if target is not None:
            return resolve(target, mod, mods, exports, depth + 1) or mod
    return mod


def check(src):
    mods = modules(src)
    codes = {m: code_of(f) for m, f in mods.items()}
    exports = {}
    for m, code in codes.items():
        for u in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", code):
            for p in expand(u.group(1).replace("\n", " ")):
                name = p.split("::")[-1]
                exports.setdefault(m, {})[name] = p
    edges = {}
    for m, code in codes.items():
        for p in paths_in(code):
            t = resolve(p, m, mods, exports)
            # A module's own children (declared with `mod`) are its rooms, not its imports;
            # the crate root only re-exports.
            if t is None or t == m or m == () or t[: len(m)] == m:
                continue
            edges.setdefault(m, set()).add(t)
    pairs = set()
    for a, ts in edges.items():
        for b in ts:
            if a in edges.get(b, set()) and b != ():
                pairs.add(tuple(sorted([a, b])))
    return [(mods[a], mods[b]) for a, b in sorted(pairs)]


def main():
    bad = []
    for src in sorted(ROOT.glob("crates/*/src")):
        bad += check(src)
    for a, b in bad:
        print(f"{a.relative_to(ROOT)} <-> {b.relative_to(ROOT)}: each imports the other")
    if bad:
        sys.exit(1)
    print("layers: no two files of crates/*/src import each other")


if __name__ == "__main__":
    main()
