"""The configuration page is generated from the config classes and must match them."""

import importlib.util
from pathlib import Path

DOCS = Path(__file__).parents[2] / "docs"


def test_configuration_page_matches_the_config_classes():
    spec = importlib.util.spec_from_file_location("generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (DOCS / "configuration.md").read_text()
    assert page == module.render(), "docs/configuration.md is stale: run python docs/generate.py"
    assert "| `num_workers` (also `num_rollout_workers`, `num_env_runners`) |" in page
