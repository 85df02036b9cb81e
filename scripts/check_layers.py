#!/usr/bin/env python3
"""Checks that the layers are one picture in three places: the build, the architecture page and the code.

  scripts/check_layers.py              # this checkout; exit 1 with one line per disagreement
  scripts/check_layers.py --root DIR   # another tree of the same shape
  scripts/check_layers.py --self-test  # shows that a wrong-way include fails the check

The build (CMakeLists.txt) declares each layer with attend_layer(NAME BELOW ... HEADERS ...): the layers
it may include and the public headers (include/attend/) it owns. docs/ARCHITECTURE.md has the same table
under "Layout and layering". Every #include in src/ and include/attend/ must then go to the file's own
layer or to one listed below it, with no "../" and no src/ folder or public header left out of the table.
"""
import argparse
import pathlib
import re
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def build_table(root):
    """{layer: (below set, headers set)} from the attend_layer(...) calls of CMakeLists.txt."""
    text = (root / "CMakeLists.txt").read_text()
    table = {}
    for call in re.finditer(r"^attend_layer\(([^)]*)\)", text, re.M):
        words = call.group(1).split()
        name, section, parts = words[0], None, {"BELOW": [], "HEADERS": []}
        for w in words[1:]:
            if w in ("BELOW", "HEADERS", "PACKAGES", "SOURCES"):
                section = w
            elif section in parts:
                parts[section].append(w)
        table[name] = (set(parts["BELOW"]), set(parts["HEADERS"]))
    return table


def doc_table(root):
    """The same table from docs/ARCHITECTURE.md: | layer | folder | may include | public headers |."""
    text = (root / "docs" / "ARCHITECTURE.md").read_text()
    table = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"`src/[a-z]+/`", cells[1]):
            continue
        names = lambda cell: {w.strip("` ") for w in cell.split(",") if w.strip("`— ")}
        table[cells[0].strip("*` ")] = (names(cells[2]), names(cells[3]))
    return table


def check(root):
    problems = []
    built, documented = build_table(root), doc_table(root)
    if not built:
        return ["CMakeLists.txt: no attend_layer(...) calls"]
    for name in sorted(set(built) | set(documented)):
        if name not in documented:
            problems.append(f"docs/ARCHITECTURE.md: layer '{name}' is built but not in the layering table")
        elif name not in built:
            problems.append(f"CMakeLists.txt: layer '{name}' is in docs/ARCHITECTURE.md but not built")
        elif built[name] != documented[name]:
            problems.append(f"layer '{name}': CMakeLists.txt says below {sorted(built[name][0])}, headers "
                            f"{sorted(built[name][1])}; docs/ARCHITECTURE.md says below {sorted(documented[name][0])}, "
                            f"headers {sorted(documented[name][1])}")
    owner = {h: layer for layer, (_, headers) in built.items() for h in headers}
    for header in sorted(p.name for p in (root / "include" / "attend").glob("*.h")):
        if header not in owner:
            problems.append(f"include/attend/{header}: no layer owns it (add it to a layer's HEADERS)")
    for folder in sorted(p.name for p in (root / "src").iterdir() if p.is_dir()):
        if folder not in built:
            problems.append(f"src/{folder}/: not a layer of CMakeLists.txt")

    files = [(p, p.relative_to(root / "src").parts[0]) for p in sorted((root / "src").rglob("*")) if p.suffix in (".h", ".cpp")]
    files += [(p, owner.get(p.name)) for p in sorted((root / "include" / "attend").glob("*.h"))]
    for path, layer in files:
        if layer not in built:
            continue
        allowed = {layer} | built[layer][0]
        where = path.relative_to(root)
        text = path.read_text(errors="replace")
        for m in INCLUDE.finditer(text):
            target = m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            if "../" in target:
                problems.append(f"{where}:{line}: #include \"{target}\" climbs out with ../; name the layer's folder")
                continue
            first = target.split("/")[0]
            if target.startswith("attend/"):
                to = owner.get(target.split("/", 1)[1])
            elif m.group(1) == '"' and first in built and "/" in target:
                to = first
            else:
                continue  # the standard library, a package, or a file beside this one
            if to is not None and to not in allowed:
                problems.append(f"{where}:{line}: {layer} includes {target} of layer {to}, which is not below it "
                                f"(below {layer}: {', '.join(sorted(built[layer][0])) or 'nothing'})")
    return problems


def self_test():
    """A two-layer tree: clean, it passes; with one include the wrong way, the check names it."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "include" / "attend").mkdir(parents=True)
        (root / "src" / "low").mkdir(parents=True)
        (root / "src" / "high").mkdir(parents=True)
        (root / "CMakeLists.txt").write_text("attend_layer(low HEADERS low.h SOURCES src/low/a.cpp)\n"
                                             "attend_layer(high BELOW low HEADERS high.h SOURCES src/high/b.cpp)\n")
        (root / "docs" / "ARCHITECTURE.md").write_text("| layer | folder | may include | public headers |\n|---|---|---|---|\n"
                                                       "| low | `src/low/` | — | `low.h` |\n"
                                                       "| high | `src/high/` | low | `high.h` |\n")
        (root / "include" / "attend" / "low.h").write_text("#pragma once\n")
        (root / "include" / "attend" / "high.h").write_text("#pragma once\n#include <attend/low.h>\n")
        (root / "src" / "low" / "a.cpp").write_text('#include <attend/low.h>\n#include "low/a.h"\n#include <vector>\n')
        (root / "src" / "high" / "b.cpp").write_text('#include <attend/high.h>\n#include "low/a.h"\n')
        clean = check(root)
        assert clean == [], f"self-test: a clean tree failed: {clean}"
        (root / "src" / "low" / "a.cpp").write_text('#include <attend/low.h>\n#include "high/b.h"\n#include <attend/high.h>\n')
        (root / "include" / "attend" / "low.h").write_text('#pragma once\n#include "../src/high/b.h"\n')
        found = check(root)
        expected = ["src/low/a.cpp:2: low includes high/b.h of layer high",
                    "src/low/a.cpp:3: low includes attend/high.h of layer high",
                    "include/attend/low.h:2: #include \"../src/high/b.h\" climbs out"]
        for e in expected:
            assert any(p.startswith(e) for p in found), f"self-test: expected '{e}' among {found}"
        run = subprocess.run([sys.executable, __file__, "--root", str(root)], capture_output=True, text=True)
        assert run.returncode == 1 and "low includes high/b.h" in run.stdout, f"self-test: exit {run.returncode}: {run.stdout}"
        (root / "docs" / "ARCHITECTURE.md").write_text("| layer | folder | may include | public headers |\n|---|---|---|---|\n"
                                                       "| low | `src/low/` | — | `low.h` |\n")
        assert any("layer 'high' is built but not in the layering table" in p for p in check(root))
    print("check_layers: self-test passed (a clean tree passes; wrong-way includes, ../ and a missing table row fail)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} disagreement(s) between CMakeLists.txt, docs/ARCHITECTURE.md and the includes")
        return 1
    print(f"check_layers: {len(build_table(args.root))} layers; the build, docs/ARCHITECTURE.md and every include agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
