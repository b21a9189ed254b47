"""The review page in a real browser: headless Chromium (Debian's `chromium`) loads the static page
offline, takes a screenshot, and its DOM is checked for every change. Skipped where Chromium is absent."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from memupdate.agent.tools import run_tool
from memupdate.bank.review import build_review
from memupdate.bank.review_html import render_html
from memupdate.store import MemoryStore, NewMemory

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install -y chromium)")
# No network, no first-run work, no GPU: the page must render from the file alone.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    profile.mkdir()  # an empty profile per run
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120, check=True
    )


class Changes(HTMLParser):
    """Each `article.change` of the rendered DOM: its attributes and its memories' (key, text), sources first."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: dict[str, dict] = {}
        self.counts: dict[str, str] = {}
        self._change: dict | None = None
        self._memory: str | None = None
        self._count: str | None = None
        self._in_text = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "article":
            self._change = {**attrs, "texts": []}
            self.changes[attrs["id"]] = self._change
        elif tag == "div" and "data-key" in attrs and self._change is not None:
            self._memory = attrs["data-key"]
            self._change["texts"].append([self._memory, ""])
        elif tag == "div" and attrs.get("class") == "text":
            self._in_text = True
        elif tag == "div" and "data-count" in attrs:
            self._count = attrs["data-count"]
            self.counts[self._count] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "article":
            self._change = self._memory = None
        elif tag == "div":
            self._in_text = False

    def handle_data(self, data: str) -> None:
        if self._in_text and self._memory is not None and self._change is not None:
            self._change["texts"][-1][1] += data
        if self._count is not None:
            self.counts[self._count] += data
            self._count = None


def every_kind_of_change(store: MemoryStore) -> tuple[MemoryStore, MemoryStore]:
    bank = store.scoped((*store.namespace, "bank"))
    made = bank.create_many([
        NewMemory("Alice moved to Lisbon in 2021", metadata={"date": "2023-05-08"}),
        NewMemory("Alice moved to Lisbon in 2021.", metadata={"date": "2023-05-08"}),
        NewMemory("Alice went hiking yesterday", metadata={"date": "2023-05-08"}),
        NewMemory("Alice has a dog called Rex and Alice plays the violin in an orchestra"),
        NewMemory("Alice's old phone number is 555-0100 <script>alert(1)</script>"),
    ])
    fork = bank.fork((*bank.namespace, "compaction", "c1"))
    k = [m.key for m in made]
    assert run_tool(fork, "merge_memory", {"memory_ids": k[:2], "content": "Alice moved to Lisbon in 2021."}).ok
    assert run_tool(fork, "manage_memory", {"action": "update", "memory_id": k[2], "content": "Alice went hiking yesterday (7 May 2023)"}).ok
    assert run_tool(fork, "split_memory", {"memory_id": k[3], "parts": ["Alice has a dog called Rex.", "Alice plays the violin."]}).ok
    assert run_tool(fork, "delete_memory", {"memory_id": k[4], "reason": "outdated"}).ok
    assert run_tool(fork, "manage_memory", {"action": "create", "content": "Alice lives in Lisbon"}).ok
    return bank, fork


def test_review_page_renders_offline_in_chromium_with_every_change(store: MemoryStore, tmp_path: Path) -> None:
    bank, fork = every_kind_of_change(store)
    calls = [{"episode": "n00000", "tool": "delete_memory", "args": {"memory_id": bank.list()[4].key}, "result": "", "reason": "outdated"}]
    review = build_review(bank, fork, calls, qa={"questions": 3, "before": 0.25, "after": 0.5, "better": 1, "worse": 0})
    assert {c.kind for c in review.changes} == {"merge", "update", "split", "delete", "create"}
    page = tmp_path / "review.html"
    page.write_text(render_html(review), encoding="utf-8")

    shot = tmp_path / "review.png"
    chromium(tmp_path / "p1", "--window-size=1280,1800", f"--screenshot={shot}", page.as_uri())
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float32)
    assert pixels.shape == (1800, 1280, 3)
    assert pixels[:40].mean() < 80 and pixels[300:].std() > 10  # the dark header, then cards with text

    dom = chromium(tmp_path / "p2", "--dump-dom", page.as_uri()).stdout
    assert "<script>" not in dom.split("</style>", 1)[1]  # memory text is escaped, never run
    parsed = Changes()
    parsed.feed(dom)
    assert parsed.counts["memories"].strip() == "5 → 5" and parsed.counts["flagged"].strip() == str(review.counts.flagged)
    assert parsed.counts["qa"].strip() == "0.250 → 0.500"
    assert set(parsed.changes) == {c.id for c in review.changes}
    for change in review.changes:
        shown = parsed.changes[change.id]
        assert shown["data-kind"] == change.kind
        assert shown["data-sources"].split() == [m.key for m in change.sources]
        assert shown["data-results"].split() == [m.key for m in change.results]
        assert shown["data-flagged"] == str(change.coverage.flagged).lower()
        shown_memories = [(key, text.strip()) for key, text in shown["texts"]]
        assert shown_memories == [(m.key, m.content) for m in change.sources + change.results]
