"""The generated docs match the code, every page is reachable, and every link resolves."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

import volley
from volley.algorithms import ALGORITHMS, rllib_table
from volley.algorithms.ppo import PPO

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"


def load_generator():
    spec = importlib.util.spec_from_file_location("generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_match_the_config_classes():
    for path, text in load_generator().pages().items():
        assert path.exists(), f"{path.relative_to(ROOT)} is missing: run python docs/generate.py"
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale: run python docs/generate.py"
    page = (DOCS / "configuration.md").read_text()
    assert "| `num_workers` (also `num_rollout_workers`, `num_env_runners`) |" in page


def test_rllib_page_says_what_volley_does_with_every_rllib_key():
    page = (DOCS / "rllib.md").read_text()
    for entry in rllib_table():
        assert f"| `{entry.name.removeprefix('model.')}` | {entry.volley} |" in page, entry.name
    assert "| `num_rollout_workers` | `num_workers` | all |" in page  # the config classes' aliases
    assert "| `lambda_` | `gae_lambda` | PPO, TRPO, A2C |" in page
    assert ("| `num_gpus_per_worker` | not supported (accepted: `0`): rollout workers act on the CPU; "
            "num_gpus gives the learner a GPU | all |") in page
    assert "| `env_runners/episode_return_mean` | `episode_reward_mean` |" in page  # result keys


def test_every_algorithm_has_a_page_with_its_own_keys():
    for name, algorithm in ALGORITHMS.items():
        page = (DOCS / "algorithms" / f"{name}.md").read_text()
        assert f"## {algorithm.config_class.__name__}" in page
        assert f"volley train --algo {name}" in page
    ppo = (DOCS / "algorithms" / "ppo.md").read_text()
    assert "| `clip_param` | float | `0.2` | `.training()` | PPO's ratio clip epsilon |" in ppo
    assert "| `lr` | float or list[list[float]] | `0.002` |" in ppo  # a shared key whose default PPO changes
    assert "| `env` |" not in ppo  # shared keys with shared defaults live in configuration.md
    pg = (DOCS / "algorithms" / "pg.md").read_text()
    assert "| `fcnet_hiddens` | list[int] | `[200]` |" in pg  # the algorithm's model defaults


def test_a_new_algorithm_gets_a_page_and_a_broken_page_is_named():
    generate = load_generator()
    stub = generate.render_page("ppo", PPO, None)
    assert stub.startswith("# PPO\n\n" + generate.STUB_NOTE + "\n\nProximal Policy Optimization")
    assert generate.BEGIN in stub and stub.rstrip().endswith(generate.END)
    with pytest.raises(SystemExit, match=r"docs/algorithms/ppo.md lacks the generated-block markers"):
        generate.render_page("ppo", PPO, "# PPO\n\nan intro without the markers\n")
    edited = (DOCS / "algorithms" / "ppo.md").read_text().replace("| `clip_param` | float | `0.2`",
                                                                  "| `clip_param` | float | `0.3`")
    assert generate.render_page("ppo", PPO, edited) != edited  # a hand edit of the table is undone


def links(page: Path) -> list[str]:
    """Relative link targets of a markdown page, without their #anchors."""
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_page_is_linked_from_the_index_and_every_link_resolves():
    index = DOCS / "index.md"
    reachable = {(DOCS / t).resolve() for t in links(index)}
    for page in [*DOCS.glob("*.md"), *DOCS.glob("algorithms/*.md"), *DOCS.glob("slurm/*")]:
        if page != index:
            assert page.resolve() in reachable, f"docs/index.md does not link {page.relative_to(ROOT)}"
    for page in [*DOCS.rglob("*.md"), ROOT / "examples" / "README.md"]:
        for target in links(page):
            resolved = (page.parent / target).resolve()
            assert resolved.exists(), f"{page.relative_to(ROOT)} -> {target}"


def test_the_readmes_links_resolve():
    for target in links(ROOT / "README.md"):
        assert (ROOT / target).exists(), f"README.md -> {target}"


def test_api_page_documents_every_public_name():
    """docs/api.md has a mkdocstrings block per public name, at the module that defines it."""
    page = (DOCS / "api.md").read_text()
    for name in volley.__all__:
        if name != "__version__":
            assert f"\n::: {volley._HOMES[name]}.{name}\n" in page, name


class _IgnoringTags(yaml.SafeLoader):
    """mkdocs.yml's own tags (``!!python/object/apply:`` for the slugify) read as None."""


_IgnoringTags.add_multi_constructor("", lambda loader, suffix, node: None)


def nav_pages(entries: list) -> set[str]:
    """Every page of mkdocs.yml's nav (``title: page.md`` entries, sections of them, or bare pages)."""
    pages: set[str] = set()
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages |= nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_page_is_in_the_sites_nav():
    """The site (mkdocs.yml) reaches every page: a page missing from its nav fails the strict build too."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_IgnoringTags)
    pages = nav_pages(config["nav"])
    for page in DOCS.rglob("*.md"):
        assert page.relative_to(DOCS).as_posix() in pages, f"mkdocs.yml's nav lacks {page.relative_to(ROOT)}"


def heading_anchors(page: Path) -> set[str]:
    """The #anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    to hyphens, and -1, -2, ... on repeats."""
    seen: Counter[str] = Counter()
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return anchors


def test_every_link_to_a_section_names_a_heading_of_its_page():
    for page in [*DOCS.rglob("*.md"), ROOT / "README.md", ROOT / "examples" / "README.md"]:
        for target, anchor in re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            linked = (page.parent / target).resolve() if target else page
            assert anchor in heading_anchors(linked), f"{page.relative_to(ROOT)} -> {target}#{anchor}"


@pytest.mark.parametrize("script", sorted((DOCS / "slurm").glob("*.sbatch")), ids=lambda p: p.name)
def test_slurm_scripts_parse_and_start_volley(script):
    """No Slurm here: bash parses each script, and each really starts a volley run."""
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n") and "#SBATCH --nodes=" in text
    assert re.search(r"^(mpiexec -n \"\$SLURM_NTASKS\" )?volley train ", text, re.M)
