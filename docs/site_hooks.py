"""The documentation site's hooks (``hooks:`` in mkdocs.yml): the files the docs link outside docs/.

The pages under docs/ are written to be read on GitHub, where ``../benchmarks/RESULTS.md``,
``../examples/pg_pong.py`` and ``../../volley/replay.py`` are files of the repository. The site
is built from docs/ alone, so that these links neither break nor fail ``mkdocs build --strict``:

- ``on_files`` adds a page for each file outside docs/ that a page links to, at the place it has
  in the repository, docs/ standing for the repository's root (``benchmarks/RESULTS.md``, the
  images it shows, ``examples/README.md`` and the links of those pages too); a source file is a
  page of its code (``volley/replay.py.md``), a folder a page of its Python files' code.
- ``LinkRewriter``, a Markdown tree processor, points every link and image of every page, those
  pages included, from where the file is in the repository to where it is on the site, before
  MkDocs checks the links (its own tree processor, priority 0). A target that exists in neither
  place is left as written, for MkDocs to name.

The Markdown files stay as they are; ``tests/unit/test_docs.py`` checks their links on disk.

``SphinxRoles``, a griffe extension (the mkdocstrings handler's ``extensions:``), is here too.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit
from xml.etree import ElementTree

import griffe
from markdown import Markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
DOCS = "docs"
STATIC = {".png", ".jpg", ".jpeg", ".gif", ".svg"}  # copied to the site as they are
LANGUAGES = {".py": "python", ".sh": "bash", ".sbatch": "bash", ".yaml": "yaml", ".yml": "yaml",
             ".json": "json", ".toml": "toml"}
LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link's target, as tests/unit/test_docs.py reads them

# The site's pages made here, {site path: repository path}, and the page being rendered
# (MkDocs renders one page at a time: on_page_markdown, then the Markdown conversion)
GENERATED: dict[str, str] = {}
RENDERING: dict[str, str] = {}


def repository_target(page: str, link: str) -> str | None:
    """The repository path (``benchmarks/RESULTS.md``) a relative link of ``page`` (a repository
    path) names, or None where it names nothing in the repository."""
    target = posixpath.normpath(posixpath.join(posixpath.dirname(page), link))
    if target == ".." or target.startswith("../") or not (ROOT / target).exists():
        return None
    return target


def site_path(target: str) -> str:
    """Where a repository file is on the site: docs/ is the site's root and the rest of the
    repository keeps its layout around it; a page of code is its file's name with ``.md``."""
    if target.startswith(f"{DOCS}/"):
        return target.removeprefix(f"{DOCS}/")
    if (ROOT / target).is_dir():
        return f"{target}/index.md"
    if target.endswith(".md") or Path(target).suffix in STATIC:
        return target
    return f"{target}.md"


def fenced(text: str, language: str) -> str:
    """``text`` as a fenced code block, its fence longer than any run of backticks in it."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def code_page(target: str) -> str:
    """The page of a source file (its code) or of a folder (the code of each of its Python files)."""
    path = ROOT / target
    if not path.is_dir():
        return f"# {target}\n\n{fenced(path.read_text(), LANGUAGES.get(path.suffix, 'text'))}\n"
    sections = [f"# {target}/", "", f"The Python files of `{target}/` in the repository.", ""]
    for source in sorted(path.glob("*.py")):
        sections += [f"## `{source.name}`", "", fenced(source.read_text(), "python"), ""]
    return "\n".join(sections)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add a page (or image) for every file outside docs/ that a page links to, transitively."""
    GENERATED.clear()
    pending = [(f"{DOCS}/{file.src_uri}", file.content_string) for file in files.documentation_pages()]
    while pending:
        page, text = pending.pop()
        for link in LINK.findall(text):
            scheme, netloc, path, _, _ = urlsplit(link)
            target = None if scheme or netloc or not path else repository_target(page, unquote(path))
            if target is None or target.startswith(f"{DOCS}/") or site_path(target) in GENERATED:
                continue
            where = site_path(target)
            if files.get_file_from_path(where) is not None:
                raise PluginError(f"docs/site_hooks.py: {page} links {target}, whose place on the site, "
                                  f"{where}, is taken by docs/{where}")
            GENERATED[where] = target
            if Path(target).suffix in STATIC:
                files.append(File.generated(config, where, abs_src_path=str(ROOT / target)))
                continue
            content = (ROOT / target).read_text() if target.endswith(".md") else code_page(target)
            files.append(File.generated(config, where, content=content))
            if target.endswith(".md"):
                pending.append((target, content))
    return files


def site_link(url: str) -> str:
    """``url``, a link of the page being rendered, pointed from the repository to the site."""
    scheme, netloc, path, query, fragment = urlsplit(url)
    if scheme or netloc or not path or path.startswith("/"):
        return url
    target = repository_target(RENDERING["repository"], unquote(path))
    if target is None:
        return url
    where = site_path(target)
    if not target.startswith(f"{DOCS}/") and where not in GENERATED:
        return url
    here = posixpath.dirname(RENDERING["site"]) or "."
    return urlunsplit(("", "", posixpath.relpath(where, here), query, fragment))


class LinkRewriter(Treeprocessor):
    """Points the links (``<a href>``) and images (``<img src>``) of the page being rendered at the site."""

    def run(self, root: ElementTree.Element) -> None:
        if not RENDERING:  # a conversion outside a page's (none in a build)
            return
        for element in root.iter():
            key = {"a": "href", "img": "src"}.get(element.tag)
            if key and element.get(key):
                element.set(key, site_link(element.get(key, "")))


class LinkRewriterExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:
        # after the inline links are made, before MkDocs' own check of them (priority 0)
        md.treeprocessors.register(LinkRewriter(md), "volley_site_links", 1.5)


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    config.markdown_extensions.append(LinkRewriterExtension())  # type: ignore[arg-type]
    return config


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Note which page is rendered next, and where it is in the repository."""
    site = page.file.src_uri
    RENDERING.update(site=site, repository=GENERATED.get(site, f"{DOCS}/{site}"))
    return markdown


TABLE_CELL = re.compile(r"<td>.*?</td>", re.S)
CODE = re.compile(r"<code>(.*?)</code>", re.S)
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def on_page_content(html: str, **kwargs: Any) -> str:
    """Let the code in a table cell break where a reader expects: a name (``num_envs_per_env_runner``)
    after its underscores, a command between its words but never inside a flag (``--batch-steps``),
    rather than between any two letters (stylesheets/extra.css keeps the browser from doing that)."""
    def code(match: re.Match) -> str:
        text = FLAG.sub(r'<span class="flag">\1</span>', match[1])
        return f"<code>{text.replace('_', '_<wbr>')}</code>"

    return TABLE_CELL.sub(lambda cell: CODE.sub(code, cell[0]), html)


ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


LITERAL = re.compile(r" ?::$", re.M)  # reStructuredText's "a paragraph ending ::" before an indented block


class SphinxRoles(griffe.Extension):
    """The docstrings' reStructuredText as Markdown, which is how mkdocstrings reads them: a role
    (``:class:`volley.config.ModelConfig```, ``:mod:`~volley.registry```) as code, named as Sphinx
    shows it (``volley.config.ModelConfig``, ``registry``); a paragraph's ``::`` before its literal
    block (Markdown's indented code already) as ``:``."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = ROLE.sub(lambda m: f"`{m[2].rpartition('.')[2] if m[1] else m[2]}`", obj.docstring.value)
            obj.docstring.value = LITERAL.sub(":", text)
