"""A local Hugging Face checkpoint: the one check of its folder and the `generate` options every local
model (the hf policy, the batcher, the reader) decodes with.

    from memupdate.llm.checkpoints import checkpoint_tokenizer, stop_and_pad_ids
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHECKPOINT_HELP = (
    "expected a Hugging Face checkpoint directory with config.json, weights and tokenizer files "
    "(e.g. produced by verl's model merger: `python -m verl.model_merger merge --backend fsdp "
    "--local_dir <actor dir> --target_dir <out dir>`)"
)


def checkpoint_tokenizer(path: str | Path) -> Any:
    """The tokenizer of the Hugging Face checkpoint folder `path`, which must hold config.json and a chat
    template; ValueError naming what is missing and the fix. The one check of a checkpoint that the hf
    policy, `rl learn` (its student) and `rl export` (its output) make."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"checkpoint path {str(path)!r} does not exist or is not a directory; {CHECKPOINT_HELP}")
    if not (path / "config.json").is_file():
        raise ValueError(f"no config.json in {str(path)!r}; {CHECKPOINT_HELP}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot load the tokenizer in {str(path)!r} ({e}); {CHECKPOINT_HELP}") from e
    if not tokenizer.chat_template:
        raise ValueError(
            f"the tokenizer in {str(path)!r} has no chat template; copy chat_template.jinja (or the "
            "chat_template entry of tokenizer_config.json) from the base model, e.g. Qwen2.5-Instruct, "
            "into the checkpoint directory"
        )
    return tokenizer

def stop_and_pad_ids(model: Any, tokenizer: Any) -> dict[str, Any]:
    """`generate` options that stop at the end of an assistant turn and pad with a known token."""
    # Stop at <|im_end|> too: base-model configs often list only <|endoftext|> as EOS.
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    ids.add(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    ids = sorted(i for i in ids if isinstance(i, int) and i != tokenizer.unk_token_id)
    # Causal LMs often have no pad token; padding with EOS keeps generate() quiet.
    pad = tokenizer.pad_token_id
    if pad is None and ids:
        pad = ids[0]
    return {"eos_token_id": ids, "pad_token_id": pad}

