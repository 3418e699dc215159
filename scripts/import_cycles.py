#!/usr/bin/env python3
"""Import cycles between the files of one crate.

    python3 scripts/import_cycles.py            # every crate of the workspace; exit 1 on a cycle
    python3 scripts/import_cycles.py --graph    # also print each file's imports
    python3 scripts/import_cycles.py --report-only rwlock,cli  # their cycles printed, not fatal
    python3 scripts/import_cycles.py --self-test  # the check on a small crate with known cycles
    python3 scripts/import_cycles.py --layers     # only the core crate's layers (LAYERS below)

For each crate (a `src/lib.rs` or `src/main.rs` root and the files its `mod x;` declarations
reach), builds the graph "file A names an item of file B" from every `crate::…`, `super::…` and
`self::…` path: in `use` declarations (nested groups included) and inline in code
(`crate::store::memory::Db::new()`). A path is resolved the way rustc does, segment by segment:
a module is followed into its file, and a name that a module binds with a `use` (such as the
crate root's `pub use crate::error::Error`) is followed to where it is defined. So the edge goes
to the file that defines the item, not to the facade that re-exports it.

Not edges: `mod x;` declarations, and a module's `pub use` of items of its own descendants (the
facade a `mod.rs` or `lib.rs` presents; a re-export is not a use) unless the module's own code
names the re-exported item as well. Comments (doc links
included), strings and `pub(in …)` are ignored; `#[cfg(test)]` modules count like any code.

With `--layers`, checks instead that the core crate's lower layers name only what is below them
(LAYERS): the scripting vocabulary and the slot arithmetic nothing lock-level, the stores and
the notifications nothing of the locks.

Every cycle is reported as its strongly connected component (the files that reach each other)
plus one concrete cycle through it. Python 3 standard library only.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The core crate's layers, bottom up: the files under each prefix may import only from the
# prefixes listed with it. Everything above (the lock kinds: expire_lock, engine, guard, fair,
# redlock, replicated, …) may import from all of these.
FOUNDATION = ["src/error.rs", "src/clock.rs", "src/sync.rs", "src/blocking.rs"]
LAYERS = [
    # Slot arithmetic: CRC16, hash tags, the same-slot check.
    ("src/slot.rs", FOUNDATION),
    # The scripting vocabulary: Script, Reply, Db, decoders, native helpers.
    ("src/script/", ["src/script/"] + FOUNDATION),
    # The expire lock's script declarations: written in the vocabulary only.
    ("src/scripts/", ["src/scripts/", "src/script/"] + FOUNDATION),
    # Key naming.
    ("src/keys.rs", ["src/slot.rs"] + FOUNDATION),
    # Traces and metrics: what the lock kinds report, knowing nothing of them.
    ("src/observe/", ["src/observe/"] + FOUNDATION),
    # Release notifications: below the stores, which make notifiers.
    ("src/notify/", ["src/notify/", "src/observe/"] + FOUNDATION),
    # The stores run scripts (and `compare_and_delete` is defined as the release script).
    (
        "src/store/",
        ["src/store/", "src/script/", "src/scripts/", "src/slot.rs", "src/notify/"] + FOUNDATION,
    ),
]


# ---------------------------------------------------------------------------------------------
# Lexing: drop comments, strings and character literals, keeping line structure.


def strip(src):
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if src[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:]) and not (i and (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", src[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Use trees.


def split_top(s, sep=","):
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def use_leaves(tree, prefix=()):
    """(path segments, bound name or None for a glob) for every leaf of a use tree."""
    tree = " ".join(tree.split())
    if "{" in tree:
        head, _, rest = tree.partition("{")
        body = rest[: rest.rfind("}")]
        head = [s for s in head.strip().rstrip(":").split("::") if s.strip()]
        for part in split_top(body):
            yield from use_leaves(part, prefix + tuple(s.strip() for s in head))
        return
    alias = None
    m = re.match(r"(.*?)\s+as\s+(\w+)$", tree)
    if m:
        tree, alias = m.group(1), m.group(2)
    segs = prefix + tuple(s.strip() for s in tree.split("::") if s.strip())
    if not segs:
        return
    if segs[-1] == "*":
        yield segs[:-1], None
    elif segs[-1] == "self":
        yield segs[:-1], alias or segs[-2]
    else:
        yield segs, alias or segs[-1]


# ---------------------------------------------------------------------------------------------
# Modules.


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of names from the crate root
        self.file = file  # the file that holds its body
        self.uses = []  # (segments, bound name, is pub)
        self.paths = []  # inline paths: segments
        self.code = ""  # its text without `use` declarations, for bare names
        self.children = set()


USE_RE = re.compile(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);")
MOD_RE = re.compile(r"\bmod\s+(\w+)\s*([;{])")
PATH_RE = re.compile(r"(?<![\w$:])((?:crate|super|self)(?:\s*::\s*\w+)+)")
VIS_RE = re.compile(r"\bpub\s*\(\s*in\s+[^)]*\)")


def child_dir(file):
    """The directory where `mod x;` of a module at this file looks for x.rs."""
    if file.name in ("lib.rs", "main.rs", "mod.rs"):
        return file.parent
    return file.parent / file.stem


def load_crate(root_file):
    modules = {}
    todo = [((), root_file)]
    while todo:
        path, file = todo.pop()
        src = strip(file.read_text())
        parse_file(modules, path, file, src, todo)
    return modules


def parse_file(modules, path, file, src, todo):
    """Record the file's modules (inline ones too), their uses and their inline paths."""
    base = child_dir(file)
    # Walk the text, tracking inline `mod x { … }` by brace depth.
    stack = [(path, 0, base)]  # (module path, brace depth where it ends, dir for `mod y;`)
    mod_at = {}
    for m in MOD_RE.finditer(src):
        mod_at[m.start()] = m
    modules.setdefault(path, Module(path, file))
    depth = 0
    i = 0
    segments = []  # (start, end, module path) for attributing text
    seg_start = 0
    while i < len(src):
        if i in mod_at:
            m = mod_at[i]
            name = m.group(1)
            cur, _, cur_dir = stack[-1]
            child = cur + (name,)
            modules[cur].children.add(name)
            if m.group(2) == ";":
                for cand in (cur_dir / f"{name}.rs", cur_dir / name / "mod.rs"):
                    if cand.exists():
                        todo.append((child, cand))
                        break
                i = m.end()
                continue
            segments.append((seg_start, m.end(), cur))
            seg_start = m.end()
            modules.setdefault(child, Module(child, file))
            depth += 1
            stack.append((child, depth, cur_dir / name))
            i = m.end()
            continue
        ch = src[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            if len(stack) > 1 and stack[-1][1] == depth:
                segments.append((seg_start, i, stack[-1][0]))
                seg_start = i + 1
                stack.pop()
            depth -= 1
        i += 1
    segments.append((seg_start, len(src), stack[-1][0]))
    for start, end, mpath in segments:
        text = VIS_RE.sub("", src[start:end])
        text = MOD_RE.sub(" ", text)
        mod = modules[mpath]
        for u in USE_RE.finditer(text):
            is_pub = bool(u.group(1)) and "self" not in u.group(1) and "super" not in u.group(1)
            for segs, name in use_leaves(u.group(2)):
                mod.uses.append((segs, name, is_pub))
        rest = USE_RE.sub(" ", text)
        mod.code += rest
        for p in PATH_RE.finditer(rest):
            mod.paths.append(tuple(s.strip() for s in p.group(1).split("::")))


def absolute(modules, cur, segs):
    """Segments relative to module `cur` made absolute, or None when external."""
    if not segs:
        return None
    if segs[0] == "crate":
        return (), list(segs[1:])
    if segs[0] in ("self", "super"):
        base = list(cur)
        rest = list(segs)
        if rest[0] == "self":
            rest = rest[1:]
        while rest and rest[0] == "super":
            if not base:
                return None
            base.pop()
            rest = rest[1:]
        return tuple(base), rest
    # A 2018 relative path: a child module or a name bound in `cur`.
    if segs[0] in modules[cur].children:
        return cur, list(segs)
    return None


def resolve(modules, cur, segs, depth=0):
    """The module an absolute or relative path lands in (its defining module for an item)."""
    start = absolute(modules, cur, segs)
    if start is None or depth > 20:
        return None
    mod, rest = start
    while rest:
        name = rest[0]
        child = mod + (name,)
        if child in modules:
            mod, rest = child, rest[1:]
            continue
        bound = [u for u in modules[mod].uses if u[1] == name]
        if bound:
            target = resolve(modules, mod, bound[0][0], depth + 1)
            if target is None:
                return mod  # re-exported from another crate: this module is its source
            return target
        return mod
    return mod


def is_descendant(a, b):
    return len(a) > len(b) and a[: len(b)] == b


def graph(modules):
    edges = {}
    for mpath, mod in modules.items():
        src = mod.file
        for segs, name, is_pub in mod.uses:
            target = resolve(modules, mpath, segs)
            if target is None:
                continue
            # A facade's re-export of its own descendants' items is not a use, unless the
            # module's own code names the item too.
            if (
                is_pub
                and is_descendant(target, mpath)
                and not (name and re.search(rf"\b{re.escape(name)}\b", mod.code))
            ):
                continue
            add(edges, modules, src, target, segs)
        for segs in mod.paths:
            target = resolve(modules, mpath, segs)
            if target is not None:
                add(edges, modules, src, target, segs)
    return edges


def add(edges, modules, src, target, segs):
    dst = modules[target].file
    if dst != src:
        edges.setdefault(src, {}).setdefault(dst, "::".join(segs))


def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def one_cycle(comp, edges):
    """A shortest cycle through the component's first file."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, {})):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def crates(root):
    for member in ["."] + sorted(p.parent.name for p in root.glob("*/Cargo.toml")):
        for crate_root in ("src/lib.rs", "src/main.rs"):
            f = root / member / crate_root
            if f.exists():
                yield f


def cycles(root_file):
    """(edges, [component, …]) for the crate rooted at `root_file`."""
    modules = load_crate(root_file)
    edges = graph(modules)
    files = {m.file for m in modules.values()}
    return modules, edges, sccs(files, edges)


def member_of(root, root_file):
    """The workspace member directory of a crate root: `.` for the root crate, else its name."""
    return str(root_file.parent.parent.relative_to(root))


def check(root, show=False, out=print, report_only=()):
    """Print every cycle; return how many there are outside the members named in `report_only`
    (directories such as `rwlock`, whose cycles are printed but not counted)."""
    found = 0
    for root_file in crates(root):
        modules, edges, comps = cycles(root_file)
        rel = lambda p: str(p.relative_to(root))  # noqa: E731
        lenient = member_of(root, root_file) in report_only
        note = " (reported, not fatal)" if lenient else ""
        if show:
            out(f"# {rel(root_file)}")
            for f in sorted({m.file for m in modules.values()}):
                deps = sorted(rel(d) for d in edges.get(f, {}))
                out(f"{rel(f)} -> {', '.join(deps) if deps else '(nothing)'}")
        for comp in comps:
            found += 0 if lenient else 1
            cycle = one_cycle(comp, edges)
            steps = "".join(f"{rel(a)} --[{edges[a][b]}]--> " for a, b in zip(cycle, cycle[1:]))
            out(
                f"cycle in {rel(root_file)}{note}: {len(comp)} files: "
                f"{' '.join(rel(f) for f in comp)}"
            )
            out("  e.g. " + steps + rel(cycle[-1]))
    return found


SELF_TEST = {
    # A real cycle: a names b's item, b names a's (through a facade re-export at the root).
    "src/lib.rs": "mod a;\nmod b;\nmod facade;\nmod tree;\npub use crate::a::A;\n",
    "src/a.rs": "use crate::b::B;\npub struct A(B);\n",
    "src/b.rs": "pub struct B;\nfn f() -> Option<crate::A> { None }\n",
    # A facade that only re-exports its child, which uses the facade's own item: one way.
    "src/facade/mod.rs": "mod child;\npub use self::child::C;\npub struct Shared;\n"
    "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    "src/facade/child.rs": "// use super::nothing; a comment is not an import\n"
    "pub struct C(super::Shared);\nconst S: &str = \"crate::tree::Leaf\";\n",
    # A parent whose own code uses what it re-exports, and a child using the parent: a cycle.
    "src/tree/mod.rs": "mod leaf;\npub use self::leaf::Leaf;\npub struct Root(Leaf);\n",
    "src/tree/leaf.rs": "use super::{Root as R};\npub struct Leaf(Box<Option<R>>);\n",
}


def self_test():
    """The check finds the cycles it should and no others, on a crate written for it."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, text in SELF_TEST.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        lines = []
        found = check(root, out=lines.append)
        text = "\n".join(lines)
        expected = [
            "cycle in src/lib.rs: 2 files: src/a.rs src/b.rs",
            "cycle in src/lib.rs: 2 files: src/tree/leaf.rs src/tree/mod.rs",
        ]
        missing = [e for e in expected if e not in text]
        if found != 2 or missing:
            print(text)
            print(f"import_cycles: self-test FAILED: {found} cycle(s), missing {missing}")
            return 1
        # The same crate as report-only: both cycles printed, marked, and none counted.
        lines = []
        found = check(root, out=lines.append, report_only={"."})
        marked = [ln for ln in lines if ln.startswith("cycle in src/lib.rs (reported, not fatal):")]
        if found != 0 or len(marked) != 2:
            print("\n".join(lines))
            print(f"import_cycles: self-test FAILED: report-only counted {found}, marked {marked}")
            return 1
    print("import_cycles: self-test passed")
    return 0


def layers(root=ROOT):
    """Imports that go up the core crate's LAYERS: each printed; their number returned."""
    root_file = root / "src/lib.rs"
    modules = load_crate(root_file)
    edges = graph(modules)
    bad = 0
    for src in sorted(edges):
        name = str(src.relative_to(root))
        rule = next((allowed for prefix, allowed in LAYERS if name.startswith(prefix)), None)
        if rule is None:
            continue
        for dst, via in sorted(edges[src].items()):
            target = str(dst.relative_to(root))
            if not any(target.startswith(a) for a in rule):
                bad += 1
                print(f"layer: {name} imports {target} ({via}), above it")
    return bad


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    if "--layers" in sys.argv[1:]:
        bad = layers()
        print(f"import_cycles: {bad} import(s) against the core crate's layers")
        return 1 if bad else 0
    report_only = report_only_members(sys.argv[1:])
    if report_only is None:
        return 2
    found = check(ROOT, show="--graph" in sys.argv[1:], report_only=report_only)
    if found:
        print(f"import_cycles: {found} cycle(s)")
        return 1
    if report_only:
        print(
            "import_cycles: no import cycle between the files of any crate but those of "
            + ", ".join(sorted(report_only))
            + " (reported only)"
        )
        return 0
    print("import_cycles: no import cycle between the files of any crate")
    return 0


def report_only_members(args):
    """The members named by `--report-only a,b` (or `--report-only=a,b`, repeatable): a set,
    or None (after saying why) when one is not a crate of the workspace."""
    names = []
    for i, arg in enumerate(args):
        if arg == "--report-only":
            if i + 1 >= len(args):
                print("import_cycles: --report-only needs a list of members, e.g. rwlock,cli")
                return None
            names += args[i + 1].split(",")
        elif arg.startswith("--report-only="):
            names += arg.split("=", 1)[1].split(",")
    members = {member_of(ROOT, f) for f in crates(ROOT)}
    unknown = [n for n in names if n.strip().strip("/") not in members]
    if unknown:
        print(f"import_cycles: --report-only: not a crate of the workspace: {', '.join(unknown)}")
        print(f"  (the crates: {', '.join(sorted(members))})")
        return None
    return {n.strip().strip("/") for n in names}


if __name__ == "__main__":
    sys.exit(main())
