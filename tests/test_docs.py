"""The docs name only files that exist: every relative markdown link, and every backticked path to a source file."""
import pathlib
import re
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs/internals.md", ROOT / "docs/plugins.md",
        ROOT / "examples/tiny-example-plugin/README.md"]
LINK = re.compile(r"\]\(([^)#\s]+)")
CODE_PATH = re.compile(r"`([\w./-]+/[\w.-]+\.(?:py|md|toml|ini|sh))`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_only_existing_files(doc):
  text = doc.read_text()
  missing = [target for target in LINK.findall(text)
             if "://" not in target and not (doc.parent / target).exists()]
  # a backticked path may be relative to the repository, the doc, or the core package (`device/buffers.py`)
  missing += [path for path in CODE_PATH.findall(text)
              if not any((base / path).exists() for base in (ROOT, doc.parent, ROOT / "tinycore"))]
  assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"
