"""What the pages say stays true: links resolve, every env id, environment variable and shipped
data file the code knows is documented, and every id the pages name exists. Offline, no mkdocs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.docs.mdpages import DOCS, ROOT, anchors, links, pages, prose

CODE_DIRS = ("coa_envs", "agents", "trainers", "sandbox", "coa_cli", "coa_verifiers")


def _internal_links() -> list[tuple[Path, str]]:
    return [(page, target) for page in pages() for target in links(page)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


@pytest.mark.parametrize(("page", "target"), _internal_links(),
                         ids=[f"{p.relative_to(ROOT)}->{t}" for p, t in _internal_links()])
def test_internal_links_resolve(page, target):
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    assert resolved.exists(), f"{page.relative_to(ROOT)}: link {target!r}: {resolved} does not exist"
    if page.is_relative_to(DOCS):
        assert resolved.is_relative_to(DOCS), (
            f"{page.relative_to(ROOT)}: link {target!r} leaves docs/ (the site cannot serve it)")
    if anchor and resolved.suffix == ".md":
        assert anchor in anchors(resolved), (
            f"{page.relative_to(ROOT)}: link {target!r}: no heading #{anchor} in {resolved.name} "
            f"(has: {sorted(anchors(resolved))})")


def _variables_read_by_the_code() -> set[str]:
    """Names read with os.environ / os.getenv, and the defaults of ``api_key_env`` options."""
    pattern = re.compile(r"""(?:environ(?:\.get|\.setdefault)?\s*[\(\[]\s*|getenv\(\s*|api_key_env\b[^=\n]*=\s*|"""
                         r"""_(?:VAR|ENV_VAR)\s*=\s*)["']([A-Z][A-Z0-9_]+)["']""")
    found: set[str] = set()
    for directory in CODE_DIRS:
        for source in (ROOT / directory).rglob("*.py"):
            found |= set(pattern.findall(source.read_text(encoding="utf-8")))
    return found - {"HOME", "PATH", "TRANSFORMERS_OFFLINE", "PYTHONPATH"}


def _assert_documented(found: set[str], known: set[str], page: str, cell: str) -> None:
    """Every name ``found`` in the code appears in ``docs/<page>`` as ``cell.format(name)``."""
    assert known <= found, f"the scan of the code missed {sorted(known - found)}: it is broken"
    text = (DOCS / page).read_text(encoding="utf-8")
    missing = sorted(name for name in found if cell.format(name) not in text)
    assert not missing, f"in the code but not in docs/{page}: {missing}"


def test_every_environment_variable_the_code_reads_is_documented():
    _assert_documented(_variables_read_by_the_code(), {"COA_DATA_DIR", "COA_WIKI_INDEX", "SERPER_API_KEY",
                                                        "COA_JUDGE_MODEL"}, "environment-variables.md", "`{}`")


def test_every_registered_id_is_in_the_readme_table_and_every_id_named_exists():
    from coa_envs.registry import REMOTE_ID, ids

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not [i for i in ids() if f"`{i}`" not in readme], "an id is missing from the README env table"
    registered = {*ids(), REMOTE_ID}
    named = {m for page in pages() for m in re.findall(r"coa/[A-Za-z0-9]+-v\d+", prose(page))}
    assert named - registered == set(), f"pages name ids that are not registered: {sorted(named - registered)}"


def test_every_shipped_data_file_has_a_licence_row():
    table = (DOCS / "data.md").read_text(encoding="utf-8")
    shipped = [p for p in (ROOT / "coa_envs" / "data").rglob("*") if p.is_file() and p.suffix != ".md"]
    assert shipped
    for path in shipped:
        relative = path.relative_to(ROOT / "coa_envs" / "data").as_posix()
        parent_glob = f"{path.parent.relative_to(ROOT / 'coa_envs' / 'data').as_posix()}/*{path.suffix}"
        assert f"`{relative}`" in table or f"`{parent_glob}`" in table, f"no licence row for {relative}"


def test_citation_cites_the_software_and_the_paper():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    for key in ("cff-version", "message", "title", "authors", "version", "license"):
        assert citation.get(key), f"CITATION.cff lacks {key}"
    assert citation["type"] == "software" and citation["license"] == "Apache-2.0"
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert str(citation["version"]) == project["version"], "CITATION.cff version != pyproject version"
    paper = next(r for r in citation["references"] if "2508.13167" in str(r))
    assert paper["title"].startswith("Chain-of-Agents") and paper["authors"][0]["family-names"] == "Li"


def test_changelog_states_the_env_version_policy():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## Env-version policy" in text and "LiveCodeBench" in text and "-v4" in text


def _info_keys_set_by_the_env() -> set[str]:
    """Keys of every ``info`` dict literal and ``info["key"] = ...`` in ``coa_envs/env.py``."""
    import ast

    tree = ast.parse((ROOT / "coa_envs" / "env.py").read_text(encoding="utf-8"))
    keys: set[str] = set()
    for node in ast.walk(tree):
        target = getattr(node, "target", None) or (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(target, ast.Name) and target.id == "info" \
                and isinstance(node.value, ast.Dict):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "info" \
                and isinstance(node.ctx, ast.Store) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
    return keys


def test_every_info_key_the_env_sets_is_documented():
    _assert_documented(_info_keys_set_by_the_env(), {"task_id", "tool", "reward_details", "protocol_error"},
                       "concepts.md", "| `{}` |")
