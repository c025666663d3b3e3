"""MkDocs hook: leave out nav entries whose page is not in docs/.

mkdocs.yml lists every page, including pages other changes are still writing. A nav entry for
a page that does not exist yet would fail the strict build (`validation.nav.not_found`); this
hook drops such entries before the nav is built and logs each one at INFO, so the build passes
while the page is missing and shows the page as soon as it exists. Pages that exist but are
not in the nav still fail the build (`validation.nav.omitted_files: warn` under `strict`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.nav_present")


def _present(item: Any, docs_dir: Path) -> Any:
    """The nav item without entries naming missing pages, or None when nothing is left."""
    if isinstance(item, str):
        if "://" in item or (docs_dir / item).is_file():
            return item
        log.info("nav: %s is not in docs/ (yet); left out of this build", item)
        return None
    if isinstance(item, list):
        kept = [k for k in (_present(i, docs_dir) for i in item) if k is not None]
        return kept or None
    if isinstance(item, dict):
        kept_dict = {t: v for t, v in ((t, _present(v, docs_dir)) for t, v in item.items()) if v is not None}
        return kept_dict or None
    return item


def on_config(config: Any, **kwargs: Any) -> Any:
    if config["nav"]:
        config["nav"] = _present(config["nav"], Path(config["docs_dir"])) or []
    return config
