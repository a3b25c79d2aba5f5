#!/usr/bin/env python3
"""Lines of non-test code per file of crates/*/src, largest first (a file's `#[cfg(test)]`
module and everything after it left out). `--over N` lists only files above N and exits 1
if there is one. `--crate-share P` lists each crate's share of the code instead and exits 1
if one holds over P percent (the unpublished test tooling, crates/testkit, counted too)."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = re.compile(r"^#\[cfg\(test\)\]\s*\n(\s*//[^\n]*\n|\s*#\[[^\n]*\]\s*\n)*\s*mod tests\b", re.M)


def code_lines(path):
    text = path.read_text()
    m = TESTS.search(text)
    return (text[: m.start()] if m else text).count("\n")


def crate_shares(limit):
    lines = {}
    for f in ROOT.glob("crates/*/src/**/*.rs"):
        crate = f.relative_to(ROOT).parts[1]
        lines[crate] = lines.get(crate, 0) + code_lines(f)
    total = sum(lines.values())
    over = False
    for crate, n in sorted(lines.items(), key=lambda kv: -kv[1]):
        share = 100 * n / total
        over |= share > limit
        print(f"{share:5.1f} % {n:6} crates/{crate}" + ("  <- over" if share > limit else ""))
    if over:
        sys.exit(1)


def main():
    if "--crate-share" in sys.argv:
        crate_shares(float(sys.argv[sys.argv.index("--crate-share") + 1]))
        return
    over = int(sys.argv[sys.argv.index("--over") + 1]) if "--over" in sys.argv else None
    sizes = sorted(
        ((code_lines(f), f.relative_to(ROOT)) for f in ROOT.glob("crates/*/src/**/*.rs")
         if not f.name == "tests.rs"),
        reverse=True,
    )
    shown = [(n, f) for n, f in sizes if over is None or n > over]
    for n, f in shown:
        print(f"{n:5} {f}")
    if over is not None and shown:
        sys.exit(1)


if __name__ == "__main__":
    main()
