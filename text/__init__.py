"""Text mechanics the tools, the rule and the scoring share: relative dates and the deterministic merge/split strategies."""
