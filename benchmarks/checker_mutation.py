"""Who checks the checker: small bugs injected into the checkers' own code, one at a time, in a copy of
the repository, each run against a targeted test selection: *killed* (a test went red, and passes again
on the unmutated copy), *survived* (all green; the mutant's entry says why that is harmless, or a test
was written to kill it), *timeout*, *stale* (its site is no longer in the code), *flaky*.

    .venv/bin/python benchmarks/checker_mutation.py            # every mutant; writes the report
    .venv/bin/python benchmarks/checker_mutation.py --only sym-zero-digits-half --no-report
    .venv/bin/python benchmarks/checker_mutation.py --list     # the mutants and where they apply

The mutants, and the test selections they run, are listed in benchmarks/checker_mutants.py.

Not mutmut: mutmut 3 mutates code inside functions only (these thresholds are module constants), sweeps
every operator, and names modules by path (core/x.py -> core.x), while the folders here are installed as
vjpcert.core, vjpcert.symbolic, ... (pyproject's package-dir): its copy would not be what is imported.

The copy: the working tree in <tmp>/repo, and the installed layout mirrored in <tmp>/pkg (pkg/vjpcert =
vjpcert/, pkg/vjpcert/core = core/, ... from package-dir), first on PYTHONPATH, ahead of the editable
install's finder; tests run in <tmp>/repo with PYTHONSAFEPATH=1 (its own vjpcert/ is never imported),
no bytecode (a same-size mutant restored within a second would be served a stale .pyc) and, for a Numba
file's mutant, its own NUMBA_CACHE_DIR. Controls before any mutant, each stopping the run if it fails:
every package imports from the mirror; every selection runs on the unmutated copy (tests red there are
deselected and listed, so a tree others are editing cannot make every mutant look killed); a canary
(raise at the top of each mutated file) turns its selection red. Sites are found in the AST (scope and
node source), so lines may move; only the node's text is replaced, the rest of the file kept byte for byte.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "benchmarks" / "checker_mutation"
COMMAND = ".venv/bin/python benchmarks/checker_mutation.py"
CANARY = "checker-mutation canary: this file's code is under test"
PYTEST = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=-rfE"]
IGNORE = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", ".pytest_cache", ".ipynb_checkpoints")

# the mutant list lives beside this script (found whatever sys.path[0] is, e.g. under PYTHONSAFEPATH)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from checker_mutants import FILE_SELECTION, MUTANTS, SELECTIONS, Mutant  # noqa: E402


# ---------------------------------------------------------------------------------------------- AST sites
class SiteError(Exception):
    pass


def _parse_target(text: str) -> ast.AST:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return ast.parse(text).body[0]


def _scope_node(tree: ast.Module, scope: str) -> ast.AST:
    node = tree
    for name in filter(None, scope.split(".")):
        found = [n for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n.name == name]
        if not found:
            raise SiteError(f"no scope {scope!r}")
        node = found[0]
    return node


def locate(m: Mutant, source: str) -> ast.AST:
    tree = ast.parse(source)
    scope = _scope_node(tree, m.scope)
    want = _parse_target(m.target)
    hits = sorted((n for n in ast.walk(scope) if type(n) is type(want) and ast.dump(n) == ast.dump(want)),
                  key=lambda n: (n.lineno, n.col_offset))
    if len(hits) <= (m.nth or 0):
        raise SiteError(f"{m.target!r} not found in {m.scope or 'the module'} ({len(hits)} matches)")
    if m.nth is None and len(hits) > 1:
        raise SiteError(f"{m.target!r} is ambiguous in {m.scope or 'the module'} ({len(hits)} matches): set nth")
    return hits[m.nth or 0]


def mutate(op: tuple, node: ast.AST) -> ast.AST:
    """The mutated node. ops: ("scale", f) a number times f; ("value", src) the node replaced by src;
    ("add", k) node + k; ("cmp", Op) the comparison's operator; ("boolop", Op) and <-> or; ("not",) the
    negation; ("drop", "left"|"right") a binary operation (or a two-operand boolean) reduced to one side;
    ("call", name) the call's function renamed; ("call2", name) a binary operation as name(left, right)."""
    kind = op[0]
    if kind == "value":
        return _parse_target(op[1])
    if kind == "scale":
        if not (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))):
            raise SiteError("scale needs a number")
        v = node.value * op[1]
        return ast.Constant(int(v) if isinstance(node.value, int) and float(v).is_integer() else v)
    if kind == "add":
        return ast.BinOp(node, ast.Add() if op[1] > 0 else ast.Sub(), ast.Constant(abs(op[1])))
    if kind == "cmp":
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            raise SiteError("cmp needs a single comparison")
        return ast.Compare(node.left, [op[1]()], node.comparators)
    if kind == "boolop":
        return ast.BoolOp(op[1](), node.values)
    if kind == "not":
        return ast.UnaryOp(ast.Not(), node)
    if kind == "drop":
        if isinstance(node, ast.BinOp):
            return node.right if op[1] == "left" else node.left
        if isinstance(node, ast.BoolOp) and len(node.values) == 2:
            return node.values[0] if op[1] == "right" else node.values[1]
        raise SiteError("drop needs a binary operation")
    if kind == "call":
        return ast.Call(ast.Name(op[1]), node.args, node.keywords)
    if kind == "call2":
        return ast.Call(ast.Name(op[1]), [node.left, node.right], [])
    raise SiteError(f"unknown op {op!r}")


def _offset(lines: list[bytes], lineno: int, col: int) -> int:
    return sum(len(line) for line in lines[:lineno - 1]) + col


def apply(m: Mutant, source: str) -> tuple[str, int]:
    """(mutated source, line): the node's segment replaced by the mutant's source, in parentheses
    (keeps precedence wherever the node stood); every other byte kept."""
    node = locate(m, source)
    target = node.value if isinstance(node, ast.Assign) else node      # a constant: its value
    text = f"({ast.unparse(mutate(m.op, target))})"
    raw = source.encode()
    lines = raw.splitlines(keepends=True)
    start = _offset(lines, target.lineno, target.col_offset)
    end = _offset(lines, target.end_lineno, target.end_col_offset)
    out = (raw[:start] + text.encode() + raw[end:]).decode()
    if out == source:
        raise SiteError("the mutant is the original")
    compile(out, m.file, "exec")
    return out, node.lineno


def canary(source: str) -> str:
    """``raise RuntimeError(CANARY)`` as the first statement after the module docstring and
    ``from __future__`` imports (which must come first)."""
    tree = ast.parse(source)
    after = 0
    for stmt in tree.body:
        doc = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
        if doc and after == 0 or isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            after = stmt.end_lineno
            continue
        break
    lines = source.splitlines(keepends=True)
    return "".join(lines[:after]) + f"raise RuntimeError({CANARY!r})\n" + "".join(lines[after:])


# ---------------------------------------------------------------------------------------------- the copy
def _package_dirs() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-dir"]


class Copy:
    """The working tree copied to ``tmp/repo`` and the installed layout mirrored in ``tmp/pkg``."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.repo = tmp / "repo"
        self.pkg = tmp / "pkg"
        shutil.copytree(ROOT, self.repo, ignore=IGNORE, symlinks=True)
        self.mirror: dict[str, Path] = {}               # top-level folder -> its place in the mirror
        for pkg, folder in sorted(_package_dirs().items(), key=lambda kv: kv[0].count(".")):
            dest = self.pkg.joinpath(*pkg.split("."))
            shutil.copytree(self.repo / folder, dest, dirs_exist_ok=True, ignore=IGNORE)
            self.mirror[folder] = dest
        self.originals: dict[str, tuple[str, int]] = {}

    def paths(self, rel: str) -> list[Path]:
        top, _, rest = rel.partition("/")
        return [self.repo / rel, self.mirror[top] / rest]

    def write(self, rel: str, text: str):
        for path in self.paths(rel):
            if rel not in self.originals:
                self.originals[rel] = (path.read_text(), path.stat().st_mtime_ns)
            path.write_text(text)
            os.utime(path, ns=(time.time_ns(), time.time_ns()))

    def restore(self, rel: str):
        text, mtime = self.originals[rel]
        for path in self.paths(rel):
            path.write_text(text)
            os.utime(path, ns=(mtime, mtime))            # Numba's cache of the original stays valid

    def source(self, rel: str) -> str:
        return self.originals[rel][0] if rel in self.originals else (self.repo / rel).read_text()

    def env(self, numba_dir: str = "base") -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
        env.update(PYTHONPATH=str(self.pkg), PYTHONSAFEPATH="1", PYTHONDONTWRITEBYTECODE="1",
                   NUMBA_CACHE_DIR=str(self.tmp / "numba" / numba_dir), NUMBA_NUM_THREADS="1",
                   MPLBACKEND="Agg")
        return env


# ---------------------------------------------------------------------------------------------- running
@dataclass
class Run:
    rc: int | None               # None: timed out
    seconds: float
    output: str
    failed: list[str] = field(default_factory=list)


_SUMMARY = re.compile(r"^(FAILED|ERROR) (.+?)(?: - .*)?$", re.M)


def pytest_run(copy: Copy, args: list[str], timeout: float, numba_dir: str = "base", first: bool = True) -> Run:
    cmd = [sys.executable, "-m", "pytest", *(PYTEST if first else [a for a in PYTEST if a != "-x"]), *args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=copy.repo, env=copy.env(numba_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)                          # the forked strategy children go with it
        out, _ = proc.communicate()
        rc = None
    return Run(rc, time.monotonic() - start, out or "", [m.group(2).strip() for m in _SUMMARY.finditer(out or "")])


def _with_deselect(args: list[str], red: list[str]) -> list[str]:
    return [*args, *(x for t in red for x in ("--deselect", t))]


def check_imports(copy: Copy):
    """Every package must be imported from the mirror, never from the editable install."""
    names = sorted(_package_dirs())
    code = ("import importlib, json\n"
            f"print(json.dumps({{n: importlib.import_module(n).__file__ for n in {names!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=copy.repo, env=copy.env(), capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"the copy does not import:\n{out.stderr[-3000:]}")
    files = json.loads(out.stdout.strip().splitlines()[-1])
    wrong = {n: f for n, f in files.items() if not Path(f).resolve().is_relative_to(copy.pkg.resolve())}
    if wrong:
        raise SystemExit(f"not imported from the copy: {wrong}")
    return files


def log(msg: str):
    print(msg, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="mutant ids (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and check their sites, run nothing")
    ap.add_argument("--no-report", action="store_true", help="do not write reports/benchmarks/checker_mutation.*")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy")
    ap.add_argument("--timeout-factor", type=float, default=3.0)
    ap.add_argument("--render", action="store_true", help="write the .md again from the .json, run nothing")
    args = ap.parse_args(argv)
    if args.render:
        data = json.loads(REPORT.with_suffix(".json").read_text())
        write_report(data["summary"], data["mutants"])
        return 0
    mutants = [m for m in MUTANTS if not args.only or m.id in args.only]
    if args.only and len(mutants) != len(args.only):
        raise SystemExit(f"unknown mutant ids: {sorted(set(args.only) - {m.id for m in MUTANTS})}")
    if len({m.id for m in MUTANTS}) != len(MUTANTS):
        raise SystemExit("mutant ids are not unique")

    if args.list:
        bad = 0
        for m in mutants:
            try:
                _, line = apply(m, (ROOT / m.file).read_text())
                where = f"{m.file}:{line}"
            except SiteError as exc:
                where, bad = f"STALE ({exc})", bad + 1
            log(f"{m.id:40} {where:36} {m.desc}")
        return 1 if bad else 0

    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="checker-mutation-"))
    try:
        log(f"copying {ROOT} to {tmp}")
        copy = Copy(tmp)
        files = check_imports(copy)
        log(f"control 1/3: every package imports from the copy ({files['vjpcert.core']})")

        results: list[dict] = []
        sites: dict[str, tuple[str, int]] = {}
        for m in mutants:
            try:
                sites[m.id] = apply(m, copy.source(m.file))
            except SiteError as exc:
                results.append({"id": m.id, "file": m.file, "line": None, "description": m.desc,
                                "status": "stale", "detail": str(exc), "seconds": 0.0})
                log(f"  stale: {m.id}: {exc}")

        def selection_of(m):
            return m.selection or FILE_SELECTION[m.file]
        used = sorted({selection_of(m) for m in mutants if m.id in sites})
        baseline: dict[str, dict] = {}
        for name in used:
            run = pytest_run(copy, SELECTIONS[name], 1800, first=False)     # every red test, in one pass
            red = list(run.failed)
            if run.rc not in (0, 1) or (run.rc == 1 and not red):
                raise SystemExit(f"selection {name} does not run on the unmutated copy (rc {run.rc}):\n"
                                 f"{run.output[-3000:]}")
            seconds = run.seconds
            passed = re.search(r"(\d+) passed", run.output)
            baseline[name] = {"seconds": round(seconds, 1), "red_on_unmutated": red,
                              "passed": int(passed.group(1)) if passed else 0,
                              "timeout": round(args.timeout_factor * seconds + 60)}
            log(f"control 2/3: selection {name}: {baseline[name]['passed']} tests green in {seconds:.0f} s"
                + (f"; red on the unmutated copy, deselected: {red}" if red else ""))

        for rel in sorted({m.file for m in mutants if m.id in sites}):
            name = FILE_SELECTION[rel]
            if name not in baseline:
                continue
            copy.write(rel, canary(copy.source(rel)))
            run = pytest_run(copy, _with_deselect(SELECTIONS[name], baseline[name]["red_on_unmutated"]),
                             baseline[name]["timeout"], numba_dir="canary")
            copy.restore(rel)
            # the selection is green on the unmutated copy, so a red run here is this file's canary at
            # work (its message may be wrapped: a checker that catches errors turns them into verdicts)
            if run.rc not in (1, 2, 3) and not (run.rc == 4 and CANARY in run.output):   # 4: at conftest import
                raise SystemExit(f"control 3/3 failed: a canary in {rel} did not reach selection {name} "
                                 f"(rc {run.rc}): the copy is not the code under test")
            log(f"control 3/3: the canary in {rel} fails selection {name}"
                + ("" if CANARY in run.output else f" ({run.failed[:1]}, the canary's message wrapped)"))

        for i, m in enumerate(mutants, 1):
            if m.id not in sites:
                continue
            text, line = sites[m.id]
            name = selection_of(m)
            base = baseline[name]
            numba_dir = m.id if "numba" in copy.source(m.file) else "base"
            copy.write(m.file, text)
            run = pytest_run(copy, _with_deselect(SELECTIONS[name], base["red_on_unmutated"]), base["timeout"],
                             numba_dir=numba_dir)
            copy.restore(m.file)
            entry = {"id": m.id, "file": m.file, "line": line, "description": m.desc, "selection": name,
                     "seconds": round(run.seconds, 1)}
            if run.rc is None:
                entry["status"] = "timeout"
            elif run.rc == 0:
                entry["status"] = "survived"
                if m.harmless:
                    entry["harmless"] = m.harmless
            elif run.rc in (1, 2, 3, 4):                  # 4: the session itself failed to start
                killer = run.failed[0] if run.failed else "(collection)" if run.rc != 4 else "(conftest import)"
                entry.update(status="killed", killed_by=killer)
                if run.failed:                            # the killing test must pass on the original
                    again = pytest_run(copy, [killer], base["timeout"])
                    if again.rc != 0:
                        entry.update(status="flaky", detail=f"{killer} fails on the unmutated copy too")
            else:
                entry.update(status="error", detail=run.output[-500:])
            results.append(entry)
            log(f"[{i}/{len(mutants)}] {entry['status']:8} {m.id} ({run.seconds:.0f} s)"
                + (f" by {entry['killed_by']}" if entry.get("killed_by") else ""))
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    order = {m.id: k for k, m in enumerate(MUTANTS)}
    results.sort(key=lambda r: order[r["id"]])
    summary = _summary(results)
    summary.update(seconds=round(time.time() - started), baseline=baseline,
                   command=COMMAND + (" --only " + " ".join(args.only) if args.only else ""))
    log(f"killed {summary['killed']} of {summary['counted']} ({summary['kill_ratio']:.0%}); "
        f"survived {summary['survived']} ({summary['survived_harmless']} harmless); "
        f"timeout {summary['timeout']}; stale {summary['stale']}; flaky {summary['flaky']}")
    if not args.no_report:
        write_report(summary, results)
    return 0


def _summary(results: list[dict]) -> dict:
    count = {s: sum(r["status"] == s for r in results) for s in ("killed", "survived", "timeout", "stale", "flaky", "error")}
    counted = count["killed"] + count["survived"] + count["timeout"]
    harmless = sum(r["status"] == "survived" and bool(r.get("harmless")) for r in results)
    return {**count, "counted": counted, "survived_harmless": harmless,
            "kill_ratio": count["killed"] / counted if counted else 0.0,
            "kill_ratio_non_equivalent": count["killed"] / (counted - harmless) if counted - harmless else 0.0}


def write_report(summary: dict, results: list[dict]):
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.with_suffix(".json").write_text(json.dumps({"summary": summary, "mutants": results}, indent=2) + "\n")
    s = summary
    lines = [
        "# Checker mutation run",
        "",
        "Small bugs injected into the checkers' own code, one at a time, in a copy of the repository "
        "(`benchmarks/checker_mutation.py`: each mutant's site, its description and, for a survivor, why it "
        "is harmless: equivalent, or only on the safe side). Each mutant runs a targeted test selection with `-x`; **killed** "
        "means a test went red (and passes again on the unmutated copy), **survived** that every selected "
        "test stayed green.",
        "",
        f"Regenerate: `{s['command']}`",
        "",
        f"- killed **{s['killed']} of {s['counted']}** ({s['kill_ratio']:.0%}); of the mutants not explained "
        f"as harmless, {s['kill_ratio_non_equivalent']:.0%}",
        f"- survived {s['survived']} ({s['survived_harmless']} with the reason they are harmless, below); "
        f"timeout {s['timeout']}; stale sites {s['stale']}; flaky {s['flaky']}; errors {s['error']}",
        f"- {s['seconds'] // 60} min in all",
        "",
        "Controls run first: every package imports from the copy; every selection is green on the "
        "unmutated copy (tests red there are deselected, listed below); a canary raising at the top of "
        "each mutated file fails its selection.",
        "",
        "| selection | tests | seconds | red on the unmutated copy (deselected) |",
        "|---|---|---|---|",
    ]
    for name, b in s["baseline"].items():
        lines.append(f"| {name} | {b['passed']} | {b['seconds']} | {', '.join(f'`{t}`' for t in b['red_on_unmutated']) or '-'} |")
    lines += ["", "| mutant | site | what | result | seconds |", "|---|---|---|---|---|"]
    for r in results:
        site = f"`{r['file']}:{r['line']}`" if r.get("line") else f"`{r['file']}`"
        if r["status"] == "killed":
            res = f"killed by `{r['killed_by']}`"
        elif r["status"] == "survived":
            res = "survived" + (f" (harmless: {r['harmless']})" if r.get("harmless") else " **(not explained)**")
        else:
            res = r["status"] + (f": {r['detail']}" if r.get("detail") and r["status"] != "error" else "")
        lines.append(f"| `{r['id']}` | {site} | {r['description']} | {res} | {r['seconds']} |")
    REPORT.with_suffix(".md").write_text("\n".join(lines) + "\n")
    log(f"wrote {REPORT.with_suffix('.md')} and .json")


if __name__ == "__main__":
    sys.exit(main())
