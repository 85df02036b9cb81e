#!/usr/bin/env python3
"""Checks that GCC vectorizes every loop the kernels mark with `#pragma omp simd`.

  scripts/check_vectorized.py --build build   # exit 1 with one line per loop left scalar
  scripts/check_vectorized.py --self-test     # shows the check failing on a loop GCC keeps scalar

The element-wise kernels are written as plain loops that GCC vectorizes; nothing in their results shows
whether it did. Twice a flag or a call made GCC keep such loops scalar with every test passing: a NaN check
under trapping math kept GELU, softmax and the attention rows one float at a time (7% and 6% of a prompt),
and std::sqrt's errno branch kept AdamW's update at a sixth of the memory's rate. This compiles each source
that has the pragma with the build's own command (build/compile_commands.json, every target that compiles
it, so every instruction set of src/kernels/isa/), reads GCC's vectorizer dump (-fdump-tree-vect-optimized-missed,
one section per function) for the loops it vectorized and those it could not, and names each marked loop
that no copy vectorized, and each copy (a template instantiation, an activation kind, a clone) that GCC tried and
left scalar. Instantiations for double are exempt: they are the oracles, and call the C library's exp, tanh and
erf.
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
REPORT = re.compile(r"^(.*?):(\d+):\d+: (optimized: loop vectorized|missed: couldn't vectorize loop)")
SECTION = re.compile(r"^;; Function (\S+)")


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
    return out + ["-o", os.devnull, f"-fdump-tree-vect-optimized-missed={report}"]


def loop_reports(entry, source):
    """{function: ({lines GCC vectorized a loop at}, {lines it could not})} for `source` compiled by `entry`: GCC's
    vectorizer dump, one section per function (each template instantiation and each clone its own)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "vect.dump"
        run = subprocess.run(report_command(entry, report), cwd=entry["directory"], capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{source}: the compile command failed:\n{run.stderr}")
        functions, function = {}, "?"
        for line in report.read_text(errors="replace").splitlines() if report.exists() else []:
            m = SECTION.match(line)
            if m:
                function = m.group(1)
                continue
            m = REPORT.match(line)
            if m and pathlib.Path(m.group(1)).name == source.name:
                done, missed = functions.setdefault(function, (set(), set()))
                (done if m.group(3).startswith("optimized") else missed).add(int(m.group(2)))
        return functions


def demangled(names):
    """The C++ names of mangled symbols (c++filt), or the names themselves where it is missing."""
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {name: name for name in names}


def target_of(entry):
    """The target an entry compiles for, from its object's path (CMakeFiles/<target>.dir/...)."""
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", entry.get("command", " ".join(entry.get("arguments", []))))
    return m.group(1) if m else "?"


def check(entries, root):
    """One line per marked loop that a compile of its file leaves scalar in every copy, and per float copy of a
    marked loop that GCC tried and left scalar beside vectorized ones."""
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
        done = pool.map(lambda job: loop_reports(job[0], job[1]), jobs)
        for (entry, source, loops), functions in zip(jobs, done):
            names = demangled(list(functions))
            for first, last in loops:
                inside = lambda lines: any(first <= line <= last for line in lines)
                where = f"{source.relative_to(root)}:{first}: a loop marked `omp simd`"
                if not any(inside(vectorized) for vectorized, _ in functions.values()):
                    problems.append(f"{where} is not vectorized in {target_of(entry)}")
                    continue
                # Each copy GCC could not vectorize, but for double instantiations: the oracles', whose
                # std::exp, std::tanh and std::erf are library calls.
                for function, (vectorized, missed) in functions.items():
                    name = names.get(function, function)
                    if inside(missed) and not inside(vectorized) and "<double" not in name:
                        problems.append(f"{where} is not vectorized in {target_of(entry)}'s {name[:160]}")
    return problems


def self_test():
    """A loop under the pragma that calls std::sqrt with errno kept is scalar, and so is one of a template's two
    copies where only that copy calls it: the check must name both."""
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
            "}\n"
            "template <int K> void kind(float* a, long n) {\n"
            "#pragma omp simd\n"
            "  for (long i = 0; i < n; ++i) a[i] = K == 0 ? 2.0f * a[i] : std::sqrt(a[i]);\n"
            "}\n"
            "template void kind<0>(float*, long);\n"
            "template void kind<1>(float*, long);\n")
        compiler = os.environ.get("CXX", "g++")
        entry = {"directory": tmp, "file": str(source),
                 "arguments": [compiler, "-O3", "-fopenmp", "-fmath-errno", "-march=x86-64", "-o", "loops.o", "-c",
                               str(source)]}
        problems = check([entry], root)
        if (len(problems) != 2 or not problems[0].startswith("src/loops.cpp:8:")
                or not problems[1].startswith("src/loops.cpp:12:") or "kind<1>" not in problems[1]):
            print("self-test: expected a problem at src/loops.cpp:8 and one in kind<1> at :12, got:", *problems,
                  sep="\n  ")
            return 1
        entry["arguments"][3] = "-fno-math-errno"
        problems = check([entry], root)
        if problems:
            print("self-test: expected no problem with -fno-math-errno, got:", *problems, sep="\n  ")
            return 1
    print("self-test: a scalar loop and a scalar copy under `omp simd` are reported, and pass once GCC vectorizes them")
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
