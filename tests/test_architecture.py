"""docs/architecture.md is the map of the C core: these checks keep it true.

The page's layer table says, for each folder of csrc/, which folders its files may
include; its file list names every C file. A change that adds a file, moves one or
includes across the layers the wrong way fails here until the page says so.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
PAGE = ROOT / "docs" / "architecture.md"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LINE_LIMIT = 1600


def page():
    return PAGE.read_text(encoding="utf-8")


def layer_rules():
    """{folder: set of folders it may include}, from the table whose header starts
    '| layer | folder | may include |'."""
    rules = {}
    rows = iter(page().splitlines())
    for line in rows:
        if re.match(r"\|\s*layer\s*\|\s*folder\s*\|\s*may include", line):
            next(rows)  # the |---| row
            for row in rows:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip("|").split("|")]
                folder = cells[1].strip("`").rstrip("/")
                allowed = set(re.findall(r"`([^`]+)`", cells[2]))
                rules[folder] = {a.rstrip("/") for a in allowed}
            break
    return rules


def c_files():
    return sorted(p.relative_to(ROOT).as_posix() for p in CSRC.rglob("*.[ch]"))


def includes(path):
    """The files path includes, as csrc/... paths: a name is looked up beside the file
    first, then under csrc/ (the compiler's -Icsrc), as the compiler does."""
    here = (ROOT / path).parent
    found = []
    for inc in INCLUDE.findall((ROOT / path).read_text(encoding="utf-8")):
        beside = here / inc
        target = beside if beside.exists() else CSRC / inc
        found.append(target.resolve().relative_to(ROOT).as_posix() if target.exists() else inc)
    return found


def test_the_page_has_a_layer_for_every_folder():
    rules = layer_rules()
    folders = {str(pathlib.PurePosixPath(f).parent) for f in c_files()}
    assert rules, "docs/architecture.md has no '| layer | folder | may include |' table"
    assert folders <= set(rules), f"folders without a layer: {sorted(folders - set(rules))}"


def test_the_page_names_every_c_file():
    text = page()
    missing = [f for f in c_files() if f"`{f}`" not in text]
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_the_page_names_no_file_that_is_gone():
    named = set(re.findall(r"`(csrc/[\w/]+\.[ch])`", page()))
    gone = sorted(named - set(c_files()))
    assert not gone, f"docs/architecture.md names files that do not exist: {gone}"


def test_includes_follow_the_layers():
    rules = layer_rules()
    wrong = []
    for f in c_files():
        here = str(pathlib.PurePosixPath(f).parent)
        for target in includes(f):
            if not target.startswith("csrc/"):
                wrong.append(f"{f}: includes {target!r}, which is not under csrc/")
                continue
            there = str(pathlib.PurePosixPath(target).parent)
            if there != here and there not in rules.get(here, set()):
                wrong.append(f"{f} ({here}) includes {target} ({there})")
    assert not wrong, "\n".join(wrong)


def test_no_include_circle_but_the_documented_pairs():
    graph = {}
    for f in c_files():
        stem = f.rsplit(".", 1)[0]
        deps = graph.setdefault(stem, set())
        for target in includes(f):
            dep = target.rsplit(".", 1)[0]
            if dep != stem:
                deps.add(dep)
    pairs = set()
    for m in re.finditer(r"circle: `(csrc/[\w/]+)` and `(csrc/[\w/]+)`", page()):
        pairs.add(frozenset(m.groups()))
    circles = []
    for a, deps in graph.items():
        for b in deps:
            if a < b and a in graph.get(b, set()) and frozenset((a, b)) not in pairs:
                circles.append((a, b))
    assert not circles, f"files that include each other: {circles}"
    # Longer circles: a depth-first walk over the graph without the documented pairs.
    state = {}

    def walk(node, path):
        state[node] = 1
        for dep in graph.get(node, ()):
            if frozenset((node, dep)) in pairs:
                continue
            if state.get(dep) == 1:
                raise AssertionError(f"include circle: {path[path.index(dep) :] + [dep]}")
            if dep not in state:
                walk(dep, path + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])


def test_no_c_file_over_the_line_limit():
    long = {f: n for f in c_files() if (n := len((ROOT / f).read_text().splitlines())) > LINE_LIMIT}
    assert not long, f"over {LINE_LIMIT} lines: {long}"
