"""Searching the spool by composition and props (GET /jobs's ``composition`` and ``props``),
through the read model itself: a real spool in a temp dir, no server (the dashboard's
browser test, tests/e2e/test_dashboard_look.py, drives the same filters over HTTP and the form).
"""

from __future__ import annotations

import os
import time

import pytest
import yaml
from support.spool_jobs import drop

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.serve.api import list_jobs
from spoolrender.serve.browse import Filters, JobIndex
from spoolrender.serve.readmodel import ApiError
from spoolrender.spool.layout import SpoolLayout


def remotion(composition: str, **props: object) -> dict[str, object]:
    return {"renderer": "remotion", "composition": composition, "props": props}


def found(config: SpoolConfig, index: JobIndex, **filters: str) -> list[str]:
    page = list_jobs(config, state=None, limit=100, offset=0, filters=Filters(**filters), index=index)  # type: ignore[arg-type]
    return sorted(job["id"] for job in page["jobs"])


def test_composition_and_props_filters(spool: SpoolLayout, config: SpoolConfig) -> None:
    drop(spool, "intro-en.yaml", remotion("TitleCard", title="Hello World", lang="en"))
    drop(spool, "intro-de.yaml", remotion("TitleCard", title="Hallo Welt", lang="de"))
    drop(spool, "promo.yaml", remotion("PromoReel", product="Spool Pro"))
    drop(spool, "broken.yaml", "renderer: remotion\ncomposition: [TitleCard\n")  # does not parse
    index = JobIndex(config)
    assert found(config, index, composition="titlecard") == ["intro-de", "intro-en"]
    assert found(config, index, composition="TITLE", props="welt") == ["intro-de"]
    assert found(config, index, props='"lang": "en"') == ["intro-en"]  # the props' JSON text
    assert found(config, index, props="title") == ["intro-de", "intro-en"]  # keys are text too
    assert found(config, index, composition="Reel", props="lang") == []

    # A waiting file that changes (an upload rewritten) is searched as it is now.
    target = spool.incoming / "promo.yaml"
    target.write_text(yaml.safe_dump(remotion("TitleCard", title="Goodbye")))
    old = time.time() - 30
    os.utime(target, (old, old))
    assert found(config, index, composition="titlecard") == ["intro-de", "intro-en", "promo"]
    assert found(config, index, props="goodbye") == ["promo"]


@pytest.mark.parametrize("field", ["composition", "props"])
def test_refused_search_text(field: str) -> None:
    with pytest.raises(ApiError, match=field):
        Filters(**{field: "x" * 201})  # type: ignore[arg-type]
    with pytest.raises(ApiError, match=field):
        Filters(**{field: "tab\there"})  # type: ignore[arg-type]
