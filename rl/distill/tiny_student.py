"""A tiny Qwen2-architecture student built from a config, with a tokenizer trained locally.

    from memupdate.rl.distill.tiny_student import build_tiny_checkpoint
    build_tiny_checkpoint("out/tiny", texts=rendered_transcripts, vocab_size=4000, hidden_size=128, layers=4)

No pretrained weights are downloaded: the tokenizer (byte-level BPE, Qwen2.5's special tokens and chat
template, `<tool_call>` as added tokens) is trained on the given texts and the model is randomly
initialised. The directory looks like what verl's model merger produces (config.json, weights,
tokenizer files with the chat template), so `make_policy("hf", model=...)` and verl load it unchanged.
`memupdate rl learn --student tiny` trains one on the rendered teacher trajectories; tests use the
defaults (a 2-layer model on a small synthetic text) to exercise checkpoint loading.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2.5 registers these as added but *not* special tokens, so decoding with
# skip_special_tokens=True keeps them and the tool-call parser can see them.
TOOL_CALL_TOKENS = ["<tool_call>", "</tool_call>"]

# The Qwen2.5-Instruct chat template (tools in the system turn, hermes tool calls, tool responses).
QWEN25_CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

_TOOL_NAMES = [
    "search_memory",
    "create_memory",
    "update_memory",
    "delete_memory",
    "merge_memories",
    "split_memory",
]
_WORDS = "the user likes lives in works at moved to Paris Berlin coffee tea dog cat memory fact date 2023 May".split()


def _training_text(n: int = 400, seed: int = 0) -> list[str]:
    """Chat-shaped lines mixing prose, JSON tool calls and tool responses."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12)))
        call = {"name": rng.choice(_TOOL_NAMES), "arguments": {"query": words, "memory_id": i, "limit": 5}}
        lines.append(f"<|im_start|>user\n{words}<|im_end|>")
        lines.append(f"<|im_start|>assistant\n<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>")
        lines.append(
            f'<tool_response>\n{{"results": [{{"id": {i}, "content": "{words}"}}]}}\n</tool_response>'
        )
    return lines


def train_tokenizer(texts: Iterable[str] | None = None, vocab_size: int = 800):
    """A byte-level BPE tokenizer trained on `texts` (default: a small synthetic chat text), with
    Qwen2.5's special tokens, `<tool_call>` tags and chat template."""
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_training_text() if texts is None else texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=QWEN25_CHAT_TEMPLATE,
    )
    tokenizer.add_tokens(TOOL_CALL_TOKENS, special_tokens=False)
    return tokenizer


def build_tiny_checkpoint(
    path: str | Path,
    vocab_size: int = 800,
    *,
    texts: Iterable[str] | None = None,
    hidden_size: int = 64,
    layers: int = 2,
    max_positions: int = 4096,
) -> Path:
    """Write a tokenizer trained on `texts` and a randomly initialised Qwen2 to `path`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(texts, vocab_size)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
