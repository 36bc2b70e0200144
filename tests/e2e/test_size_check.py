"""The size check (scripts/check_size.py) on trees made for it: what it must
catch, what it must let through, and the project's own tree."""
import os
import subprocess
import sys

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHECK = os.path.join(SOURCE, "scripts", "check_size.py")


def run(root):
    r = subprocess.run([sys.executable, CHECK, str(root)], capture_output=True, text=True)
    return r.returncode, r.stdout


def function(name, body_lines, extra=""):
    body = "".join(f"  x += {i}; // {{ not a brace\n" for i in range(body_lines - 3))
    return f"int {name}(int x) {{\n{extra}{body}  return x;\n}}\n"


def tree(tmp_path, files, readme_lines=10, allow=""):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "README.md").write_text("line\n" * readme_lines)
    (tmp_path / "scripts").mkdir(exist_ok=True)
    (tmp_path / "scripts" / "size-allow.txt").write_text(allow)
    return tmp_path


def test_it_names_a_long_function_a_long_file_and_a_long_readme(tmp_path):
    lambda_inside = '  auto f = [] { return "}}}"; };\n'
    root = tree(tmp_path, {
        "lib/src/a.cc": function("fits", 80) + "namespace n {\nstruct S {\n" +
                        function("Inline", 80, lambda_inside) + "};\n}\n",
        "exporter/src/big.h": "// x\n" * 501,
        "python/gym_metrics/m.py": "def long():\n" + "    x = 1\n" * 80,
    }, readme_lines=351)
    rc, out = run(root)
    assert rc == 1, out
    assert "lib/src/a.cc:" in out and "Inline is 81 lines" in out, out
    assert "fits" not in out, "80 lines is within the limit"
    assert "exporter/src/big.h:1: 501 lines" in out, out
    assert "long is 81 lines" in out, out
    assert "README.md:1: 351 lines" in out, out


def test_an_allowed_entry_passes_and_a_stale_one_fails(tmp_path):
    root = tree(tmp_path, {"stat/s.cc": function("Long", 90)},
                allow="# why\nstat/s.cc:Long the table it fills is one screen of data\n")
    assert run(root) == (0, "size check: every file, function and the README within their "
                            "limits\n")
    (root / "stat" / "s.cc").write_text(function("Long", 20))
    rc, out = run(root)
    assert rc == 1 and "stat/s.cc:Long is within its limit now" in out, out


def test_an_entry_without_its_reason_is_refused(tmp_path):
    root = tree(tmp_path, {"stat/s.cc": function("Long", 90)}, allow="stat/s.cc:Long\n")
    rc, out = run(root)
    assert rc != 0


def test_the_projects_own_tree_is_within_its_limits():
    rc, out = run(SOURCE)
    assert rc == 0, out
