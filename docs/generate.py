"""Regenerate docs/configuration.md from the config classes: python docs/generate.py"""

from __future__ import annotations

from pathlib import Path

from volley.algorithms import ALGORITHMS
from volley.config import reference_markdown

HEADER = """# Configuration

Every key, generated from the config classes by `python docs/generate.py`
(`tests/unit/test_docs.py` fails when this page and the code disagree). Set keys with
the builder method named in the table, with `config.update(key=value)`, or on the
command line with `volley train --set key=value`.

"""


def render() -> str:
    return HEADER + "\n".join(reference_markdown(cls.config_class) for cls in ALGORITHMS.values())


if __name__ == "__main__":
    Path(__file__).with_name("configuration.md").write_text(render())
