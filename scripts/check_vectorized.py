#!/usr/bin/env python3
"""Checks that GCC vectorizes every loop the kernels mark with `#pragma omp simd`.

  scripts/check_vectorized.py --build build   # exit 1 with one line per loop left scalar
  scripts/check_vectorized.py --self-test     # shows the check failing on a loop GCC keeps scalar

The element-wise kernels are written as plain loops that GCC vectorizes; nothing in their results shows
whether it did. Twice a flag or a call made GCC keep such loops scalar with every test passing: a NaN check
under trapping math kept GELU, softmax and the attention rows one float at a time (7% and 6% of a prompt),
and std::sqrt's errno branch kept AdamW's update at a sixth of the memory's rate. This compiles each source
that has the pragma with the build's own command (build/compile_commands.json, every target that compiles
it, so every instruction set of src/kernels/isa/), asks GCC which loops it vectorized
(-fopt-info-vec-optimized), and names each marked loop that is not among them. GCC's report does not say which
copy of a loop it vectorized, so a loop compiled several times (a template for float and double, an activation
for each kind) passes when one copy is: the check catches what keeps a loop scalar everywhere (a flag, a call, a
branch in shared code), not one copy left scalar beside vectorized ones.
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

PRAGMA = re.compile(r"^\s*#\s*pragma\s+omp\s+simd\b")
REPORT = re.compile(r"^(.*?):(\d+):\d+: optimized: loop vectorized")


def loop_extent(lines, first):
    """The lines (1-based, inclusive) of the loop whose `for` is on line index `first`: its header and its body,
    a braced block or one statement. GCC names a loop by its body's first statement, not always the `for`."""
    text = "\n".join(re.sub(r"//.*", "", line) for line in lines[first:])  # comments hold no code
    depth, i, n = 0, text.index("("), len(text)
    while i < n:  # the header's parentheses
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    while i < n and text[i].isspace():
        i += 1
    if i < n and text[i] == "{":
        depth = 0
        while i < n:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
    else:
        while i < n and text[i] != ";":
            i += 1
    return first + 1, first + 1 + text.count("\n", 0, i)


def marked_loops(source):
    """(first, last) lines of each loop that follows a `#pragma omp simd` in the file."""
    lines = source.read_text().splitlines()
    loops = []
    for i, line in enumerate(lines):
        if not PRAGMA.match(line):
            continue
        j = i + 1
        while j < len(lines) and not re.match(r"\s*for\s*\(", lines[j]):
            j += 1
        loops.append(loop_extent(lines, j) if j < len(lines) else (i + 1, i + 1))
    return loops


def report_command(entry, report):
    """The entry's compile command writing no object and no dependency file, with GCC's report to `report`."""
    words = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out, skip = [], 0
    for w in words:
        if skip:
            skip -= 1
            continue
        if w in ("-o", "-MF", "-MT", "-MQ"):
            skip = 1
            continue
        if w in ("-MD", "-MMD"):
            continue
        out.append(w)
    return out + ["-o", os.devnull, f"-fopt-info-vec-optimized={report}"]


def vectorized_lines(entry, source):
    """The lines of `source` holding a loop GCC vectorized when compiled by `entry`."""
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "vec.txt"
        run = subprocess.run(report_command(entry, report), cwd=entry["directory"], capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{source}: the compile command failed:\n{run.stderr}")
        lines = set()
        for line in report.read_text().splitlines() if report.exists() else []:
            m = REPORT.match(line)
            if m and pathlib.Path(m.group(1)).name == source.name:
                lines.add(int(m.group(2)))
        return lines


def target_of(entry):
    """The target an entry compiles for, from its object's path (CMakeFiles/<target>.dir/...)."""
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", entry.get("command", " ".join(entry.get("arguments", []))))
    return m.group(1) if m else "?"


def check(entries, root):
    """One line per marked loop that some compile of its file leaves scalar."""
    jobs = []
    for entry in entries:
        source = pathlib.Path(entry["file"])
        if not source.is_absolute():
            source = pathlib.Path(entry["directory"]) / source
        source = source.resolve()
        try:
            source.relative_to(root / "src")
        except ValueError:
            continue
        loops = marked_loops(source)
        if loops:
            jobs.append((entry, source, loops))
    if not jobs:
        return ["no source under src/ with `#pragma omp simd` in the compile commands"]
    problems = []
    compiled = {job[1] for job in jobs}
    for source in sorted((root / "src").rglob("*.cpp")):
        if source.resolve() not in compiled and marked_loops(source):
            problems.append(f"{source.relative_to(root)}: has loops marked `omp simd` but no compile command")
    workers = max(1, min(len(jobs), int(os.environ.get("ATTEND_CHECK_JOBS", "2"))))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        done = pool.map(lambda job: vectorized_lines(job[0], job[1]), jobs)
        for (entry, source, loops), lines in zip(jobs, done):
            for first, last in loops:
                if not any(first <= line <= last for line in lines):
                    problems.append(f"{source.relative_to(root)}:{first}: a loop marked `omp simd` is not vectorized "
                                    f"in {target_of(entry)} (see `-fopt-info-vec-missed` for why)")
    return problems


def self_test():
    """A loop under the pragma that calls std::sqrt with errno kept is scalar: the check must say so."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp).resolve()
        (root / "src").mkdir()
        source = root / "src" / "loops.cpp"
        source.write_text(
            "#include <cmath>\n"
            "void fine(float* a, long n) {\n"
            "#pragma omp simd\n"
            "  for (long i = 0; i < n; ++i) a[i] = 2.0f * a[i] + 1.0f;\n"
            "}\n"
            "void scalar(float* a, long n) {\n"
            "#pragma omp simd\n"
            "  for (long i = 0; i < n; ++i) a[i] = std::sqrt(a[i]);\n"
            "}\n")
        compiler = os.environ.get("CXX", "g++")
        entry = {"directory": tmp, "file": str(source),
                 "arguments": [compiler, "-O3", "-fopenmp", "-fmath-errno", "-march=x86-64", "-o", "loops.o", "-c",
                               str(source)]}
        problems = check([entry], root)
        if len(problems) != 1 or not problems[0].startswith("src/loops.cpp:8:"):
            print("self-test: expected one problem at src/loops.cpp:8, got:", *problems, sep="\n  ")
            return 1
        entry["arguments"][3] = "-fno-math-errno"
        problems = check([entry], root)
        if problems:
            print("self-test: expected no problem with -fno-math-errno, got:", *problems, sep="\n  ")
            return 1
    print("self-test: a scalar loop under `omp simd` is reported, and passes once GCC vectorizes it")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=pathlib.Path, help="a build tree with compile_commands.json")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if args.build is None:
        parser.error("--build DIR or --self-test")
    commands = args.build / "compile_commands.json"
    if not commands.exists():
        print(f"{commands}: not found (configure with CMAKE_EXPORT_COMPILE_COMMANDS=ON)")
        return 1
    root = pathlib.Path(__file__).resolve().parent.parent
    problems = check(json.loads(commands.read_text()), root)
    for p in problems:
        print(p)
    if not problems:
        print("every loop marked `omp simd` under src/ is vectorized in every target that compiles it")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
