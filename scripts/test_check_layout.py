"""Tests for check_layout.py: plants small crates in a temporary directory and
runs the check on them. Run: `python3 scripts/test_check_layout.py` (as
scripts/test.sh does) or `python3 -m unittest discover -s scripts -p 'test_*.py'`."""

import contextlib
import io
import os
import sys
import tempfile
import unittest
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import check_layout as cl  # noqa: E402

# A crate whose `b` imports `Thing` through `a`'s re-export while a child of
# `a` imports `b`: no two files import each other (b.rs -> a/leaf.rs,
# a/other.rs -> b.rs), but the modules `a` and `b` do.
REEXPORT_CIRCLE = {
    "src/lib.rs": "//! root\npub mod a;\npub mod b;\n",
    "src/a/mod.rs": "//! a\nmod leaf;\nmod other;\n\npub use self::leaf::Thing;\n",
    "src/a/leaf.rs": "//! leaf\npub struct Thing;\n",
    "src/a/other.rs": "//! other\nuse crate::b::Y;\n\npub fn f(_: Y) {}\n",
    "src/b.rs": "//! b\nuse crate::a::Thing;\n\npub struct Y(pub Thing);\n",
}

# A mod.rs that names its child's item in code (no `use`) while the child
# imports the mod.rs's own item: issue 40's http/mod.rs and leases.rs.
BARE_CHILD_CIRCLE = {
    "src/lib.rs": "//! root\npub mod web;\n",
    "src/web/mod.rs": (
        "//! web\npub mod leases;\n\npub struct AppState;\n\n"
        "pub fn routes() -> &'static str {\n    leases::ROUTE\n}\n"
    ),
    "src/web/leases.rs": (
        "//! leases\nuse super::AppState;\n\npub const ROUTE: &str = \"/x\";\n"
        "pub fn handle(_: AppState) {}\n"
    ),
}


def run(tree: dict[str, str]) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as d:
        for rel, text in tree.items():
            p = Path(d) / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cl.main(["--root", d])
        return code, out.getvalue()


class Circles(unittest.TestCase):
    def setUp(self) -> None:
        self.known = dict(cl.KNOWN_CIRCLES)
        cl.KNOWN_CIRCLES.clear()

    def tearDown(self) -> None:
        cl.KNOWN_CIRCLES.clear()
        cl.KNOWN_CIRCLES.update(self.known)

    def test_a_circle_through_a_reexport_fails(self) -> None:
        code, out = run(REEXPORT_CIRCLE)
        self.assertEqual(code, 1, out)
        self.assertIn("import circle in src/: a/, b.rs", out)
        self.assertIn("b.rs -> a/  (src/b.rs:2 crate::a::Thing)", out)
        self.assertIn("a/ -> b.rs  (src/a/other.rs:2 crate::b::Y)", out)

    def test_a_reexport_of_its_own_child_is_no_import(self) -> None:
        tree = dict(REEXPORT_CIRCLE)
        tree["src/a/other.rs"] = "//! other\npub fn f() {}\n"
        code, out = run(tree)
        self.assertEqual(code, 0, out)
        self.assertIn("0 problem(s)", out)

    def test_a_bare_child_path_in_a_mod_rs_is_an_import(self) -> None:
        code, out = run(BARE_CHILD_CIRCLE)
        self.assertEqual(code, 1, out)
        self.assertIn("import circle in src/web/: leases.rs, mod.rs", out)
        self.assertIn("mod.rs -> leases.rs  (src/web/mod.rs:7 leases::ROUTE)", out)

    def test_a_known_circle_is_let_through_and_a_larger_one_is_not(self) -> None:
        cl.KNOWN_CIRCLES["src/web/"] = ("issue 0", {"leases.rs", "mod.rs"})
        code, out = run(BARE_CHILD_CIRCLE)
        self.assertEqual(code, 0, out)
        self.assertIn("known circle in src/web/ (allowed: issue 0)", out)
        tree = dict(BARE_CHILD_CIRCLE)
        tree["src/web/mod.rs"] = tree["src/web/mod.rs"].replace(
            "pub mod leases;", "pub mod leases;\npub mod list;"
        )
        tree["src/web/list.rs"] = "//! list\npub use super::leases::ROUTE;\n"
        tree["src/web/leases.rs"] += "pub fn g() { let _ = super::list::ROUTE; }\n"
        code, out = run(tree)
        self.assertEqual(code, 1, out)
        self.assertIn("import circle in src/web/: leases.rs, list.rs, mod.rs", out)

    def test_test_modules_are_no_imports(self) -> None:
        tree = dict(BARE_CHILD_CIRCLE)
        tree["src/web/leases.rs"] = (
            "//! leases\npub const ROUTE: &str = \"/x\";\n\n"
            "#[cfg(test)]\nmod tests {\n    use super::super::AppState;\n}\n"
        )
        code, out = run(tree)
        self.assertEqual(code, 0, out)


class Lengths(unittest.TestCase):
    def test_a_client_file_over_600_lines_fails(self) -> None:
        tree = dict(BARE_CHILD_CIRCLE)
        tree["src/web/mod.rs"] = "//! web\n"
        tree["clients/typescript/src/big.ts"] = "x;\n" * 601
        tree["clients/typescript/package-lock.json"] = "{}\n" * 700
        code, out = run(tree)
        self.assertEqual(code, 1, out)
        self.assertIn("too long: clients/typescript/src/big.ts has 601 lines", out)
        self.assertNotIn("package-lock.json", out)

    def test_a_lua_file_over_400_lines_fails_includes_too(self) -> None:
        tree = {
            "src/lib.rs": "//! root\n",
            "lua/long.lua": "-- x\n" * 401,
            "lua/lib/long.lua": "-- x\n" * 401,
            "lua/acquire/long.lua": "-- x\n" * 401,
            "lua/fits.lua": "-- x\n" * 400,
        }
        code, out = run(tree)
        self.assertEqual(code, 1, out)
        for rel in ("lua/long.lua", "lua/lib/long.lua", "lua/acquire/long.lua"):
            self.assertIn(f"too long: {rel} has 401 lines (at most 400)", out)
        self.assertNotIn("lua/fits.lua", out)


if __name__ == "__main__":
    unittest.main()
