"""Which judge reads pairs: a name (or the `MEMUPDATE_JUDGE` setting) becomes a `RelationJudge`.

    from memupdate.judge.judges import make_judge
    make_judge()                      # the setting; by default "local": the model trained here
    make_judge("rule")                # the rule, the baseline
    make_judge("openai:gpt-4o-mini", base_url="http://localhost:30000/v1")   # one LLM call a pair
    make_judge("runs/judge")          # a judge checkpoint folder (`memupdate judge train`)

A local judge is loaded once per process and shared (it is read-only).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from memupdate.errors import MemupdateError
from memupdate.judge.verdict import RelationJudge

JUDGE_NAMES = ("local", "rule", "openai:<model>", "<checkpoint folder>")


def make_judge(spec: str | None = None, *, base_url: str | None = None, api_key: str | None = None, cache=None) -> RelationJudge:
    """The judge `spec` names (None: the `judge` setting); `cache`: an endpoint judge's reply cache."""
    from memupdate.settings import get_settings

    settings = get_settings()
    spec = spec or settings.judge
    if spec == "rule":
        from memupdate.judge.rule import RuleJudge

        return RuleJudge()
    if spec == "local":
        return _local(None)
    if spec.startswith("openai:"):
        from memupdate.judge.endpoint import EndpointJudge

        return EndpointJudge(spec.removeprefix("openai:"), base_url or settings.judge_base_url,
                             api_key or settings.judge_api_key, cache=cache)
    if Path(spec).is_dir():
        return _local(str(Path(spec).resolve()))
    raise MemupdateError(f"unknown judge {spec!r}: use one of {', '.join(JUDGE_NAMES)} (MEMUPDATE_JUDGE or --judge)")


@cache
def _local(path: str | None) -> RelationJudge:
    from memupdate.judge.local import LocalJudge

    return LocalJudge(path)
