#!/usr/bin/env python3
"""The size check (docs/internals.md): no file over 500 lines and no function
over 80 in the project's own code, and a README of at most 350 lines, but for
what scripts/size-allow.txt names, each with its reason.

  python3 scripts/check_size.py [ROOT]

Prints each breach as `path:line: what` and exits 1 when there is one; an
allow-list entry that no longer matches anything is a breach too (it must
go when its reason does)."""
import ast
import os
import re
import sys

ROOTS = ("lib/src", "exporter/src", "stat", "python/gym_metrics")
MAX_FILE, MAX_FUNCTION, MAX_README = 500, 80, 350
CPP = (".cc", ".h", ".cpp", ".hpp")

# Keywords whose parenthesis opens a statement, not a function.
STATEMENTS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof", "decltype",
              "requires", "noexcept", "static_assert"}


def code_only(text):
    """`text` with comments, string and character literals blanked (newlines
    kept), so that braces and parentheses are the code's."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i)); i = j
        else:
            out.append(c); i += 1
    return "".join(out)


def cpp_functions(text):
    """(name, first line, lines) of each function body outside any other."""
    code = code_only(text)
    found, stack, last_stop = [], [], 0
    for i, c in enumerate(code):
        if c == "{":
            head = code[last_stop:i]
            is_function = not any(kind == "function" for kind, _, _ in stack) and is_function_head(head)
            stack.append(("function" if is_function else "block", i, head))
            last_stop = i + 1
        elif c == "}":
            if stack:
                kind, start, head = stack.pop()
                if kind == "function":
                    first = code.count("\n", 0, start) + 1
                    last = code.count("\n", 0, i) + 1
                    found.append((function_name(head), first, last - first + 1))
            last_stop = i + 1
        elif c == ";":
            last_stop = i + 1
    return found


def is_function_head(head):
    h = " ".join(head.split())
    if not h or "(" not in h:
        return False
    if re.match(r"^(namespace|class|struct|union|enum)\b", h.split("template")[-1].strip()):
        return False
    if h.endswith("=") or re.search(r"=\s*$", h):
        return False
    # What stands before the first top-level parenthesis names it.
    m = re.search(r"([~A-Za-z_][\w:~<>,\s*&]*?)\s*\(", h)
    if not m:
        return False
    word = re.findall(r"[~\w]+", m.group(1))
    return bool(word) and word[-1] not in STATEMENTS


def function_name(head):
    h = " ".join(head.split())
    m = re.search(r"([~\w:]+(?:<[^()]*>)?|operator\S+)\s*\(", h)
    return m.group(1) if m else h[:40]


def python_functions(text):
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.name, node.lineno, node.end_lineno - node.lineno + 1))
    return out


def load_allowed(path):
    allowed = {}
    if not os.path.exists(path):
        return allowed
    for n, line in enumerate(open(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, reason = line.partition(" ")
        if not reason.strip():
            sys.exit(f"{path}:{n}: an entry needs its reason: {line}")
        allowed[key] = n
    return allowed


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    allowed = load_allowed(os.path.join(root, "scripts", "size-allow.txt"))
    used, breaches = set(), []

    def breach(key, where, what):
        if key in allowed:
            used.add(key)
        else:
            breaches.append(f"{where}: {what}")

    for top in ROOTS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                if not (f.endswith(CPP) or f.endswith(".py")):
                    continue
                text = open(path, encoding="utf-8").read()
                lines = text.count("\n")
                if lines > MAX_FILE:
                    breach(rel, f"{rel}:1", f"{lines} lines (at most {MAX_FILE})")
                funcs = python_functions(text) if f.endswith(".py") else cpp_functions(text)
                for name, first, n in funcs:
                    if n > MAX_FUNCTION:
                        breach(f"{rel}:{name}", f"{rel}:{first}",
                               f"{name} is {n} lines (at most {MAX_FUNCTION})")
    readme = os.path.join(root, "README.md")
    n = open(readme, encoding="utf-8").read().count("\n")
    if n > MAX_README:
        breach("README.md", "README.md:1", f"{n} lines (at most {MAX_README}; the rest in docs/)")
    for key, line in allowed.items():
        if key not in used:
            breaches.append(f"scripts/size-allow.txt:{line}: {key} is within its limit now: remove it")
    for b in breaches:
        print(b)
    if breaches:
        print(f"size check: {len(breaches)} over the limits (docs/internals.md)")
        return 1
    print("size check: every file, function and the README within their limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
