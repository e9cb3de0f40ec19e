#!/usr/bin/env python3
"""The environment table against every reader: each name, default and bound is written once.

environment/include/ringrun/environment_variables.hpp defines every variable ringrun reads or sets,
and environment/include/ringrun/variable_read.hpp reads one applying the table's default and bounds
(README, Architecture: "Contracts"). This checks the product code (C++, Python, the benchmarks):

1. no string literal spells a RINGRUN_* name but the table's own (C++ comments and Python
   docstrings are documentation and may name one);
2. no C++ reader takes a table variable's value past the typed readers (getenv, or a lookup in a
   captured environment, by the table's constant);
3. no reader of a variable with a default in the table adds one of its own (.value_or on a read);
4. no Python reader takes a table variable from os.environ with a default of its own.

Usage: variable_literals.py SOURCE_DIR. Prints every breach, one line each; exits 1 if any.
"""
import io
import pathlib
import re
import sys
import tokenize

TABLE = "environment/include/ringrun/environment_variables.hpp"
READER_HOME = "environment/"
PRODUCT_ROOTS = ["environment", "launcher", "allocation", "topology", "runtime/src", "runtime/store",
                 "runtime/gpu", "runtime/python/src", "runtime/python/ringrun", "runtime/python/tensorflow",
                 "runtime/bench"]
CXX_SUFFIXES = {".c", ".cpp", ".h", ".hpp"}

ENTRY = re.compile(r'inline constexpr Variable (k\w+)\{(.*?)\};', re.S)
FIELD_NAME = re.compile(r'\.name = "([A-Z0-9_]+)"')
FIELD_DEFAULT = re.compile(r'\.default_value = "([^"]*)"')
CXX_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
BYPASS = re.compile(r'(getenv\(|\.(?:find|count|at)\(\s*(?:std::string\()?)\s*(?:variables::|v::)(k\w+)\.name')
SECOND_DEFAULT = re.compile(
    r'\b(?:read_integer|read_number|read_flag|read_text|env_integer|env_number|env_flag|env_text|shim_integer)'
    r'\((?:[^()]*?,\s*)?(?:variables::|v::)(k\w+)\b[^;]*?\)\s*\.value_or\(')
PY_ENVIRON_DEFAULT = re.compile(r'os\.(?:environ\.get|getenv)\(\s*_?variables\.\w+\s*,')


def table(root):
    entries = {}
    for constant, body in ENTRY.findall((root / TABLE).read_text()):
        name = FIELD_NAME.search(body).group(1)
        default = FIELD_DEFAULT.search(body)
        entries[constant] = (name, default.group(1) if default else "")
    return entries


def strip_cxx_comments(text):
    """The text with // and /* */ comments blanked, strings kept (a // inside a string stays)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append("\n" * text.count("\n", i, n if j < 0 else j))
            i = n if j < 0 else j + 2
        elif text[i] == '"':
            m = CXX_STRING.match(text, i)
            end = m.end() if m else i + 1
            out.append(text[i:end])
            i = end
        elif text[i] == "'" and i + 2 < n:
            j = text.find("'", i + 1 + (text[i + 1] == "\\"))
            out.append(text[i:j + 1] if j > 0 else text[i])
            i = j + 1 if j > 0 else i + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def python_literals(text):
    """(line, string) of every string literal that is not a docstring."""
    found, previous = [], None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING:
            docstring = previous is None or previous.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE) \
                or (previous.type == tokenize.OP and previous.string == ":")
            if not docstring:
                found.append((tok.start[0], tok.string))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok
    return found


def product_files(root):
    for top in PRODUCT_ROOTS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and (path.suffix in CXX_SUFFIXES or path.suffix == ".py"):
                yield path


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    entries = table(root)
    names = {name for name, _ in entries.values() if name.startswith("RINGRUN_")}
    word = re.compile(r"\b(" + "|".join(sorted(names, key=len, reverse=True)) + r")\b")
    breaches = []
    for path in product_files(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(errors="replace")
        if path.suffix == ".py":
            for line, literal in python_literals(text):
                for m in word.finditer(literal):
                    breaches.append(f"{rel}:{line}: the literal spells {m.group(1)}: use ringrun._ringrun.variables")
            for number, line in enumerate(text.splitlines(), 1):
                if PY_ENVIRON_DEFAULT.search(line):
                    breaches.append(f"{rel}:{number}: a default beside the table's: use variables.read()")
            continue
        code = strip_cxx_comments(text)
        lines = code.splitlines()
        if rel != TABLE:
            for number, line in enumerate(lines, 1):
                for literal in CXX_STRING.findall(line):
                    for m in word.finditer(literal):
                        breaches.append(f"{rel}:{number}: the literal spells {m.group(1)}: use variables::k...name")
        if rel.startswith(READER_HOME):
            continue
        for number, line in enumerate(lines, 1):
            for m in BYPASS.finditer(line):
                breaches.append(f"{rel}:{number}: reads {entries.get(m.group(2), (m.group(2),))[0]} past "
                                "ringrun/variable_read.hpp (its default and bounds would not apply)")
        flat = re.sub(r"\s+", " ", code)
        for m in SECOND_DEFAULT.finditer(flat):
            name, default = entries.get(m.group(1), (m.group(1), ""))
            if default:
                breaches.append(f"{rel}: reads {name} with a default of its own beside the table's {default!r}")
    for name in sorted(names):
        count = len(re.findall(r'"' + name + r'"', (root / TABLE).read_text()))
        if count != 1:
            breaches.append(f"{TABLE}: {name} is spelled {count} times")
    for b in breaches:
        print(b)
    if breaches:
        return 1
    print(f"variable literals: {len(names)} RINGRUN_ names each spelled once, in the table; every reader goes "
          "through ringrun/variable_read.hpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
