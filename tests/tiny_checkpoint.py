"""Tests build their tiny Qwen2 checkpoint with the package's builder (one definition): see
`memupdate.rl.distill.tiny_student`. No pretrained LLM weights can be downloaded here."""

from memupdate.rl.distill.tiny_student import QWEN25_CHAT_TEMPLATE, build_tiny_checkpoint

__all__ = ["QWEN25_CHAT_TEMPLATE", "build_tiny_checkpoint"]
