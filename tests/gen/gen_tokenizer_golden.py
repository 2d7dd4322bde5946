#!/usr/bin/env python3
"""Golden token ids of the default model (SmolLM2-135M-Instruct) for tests/unit/test_tokenizer_golden.cpp.

The reference is independent of lithe: the Hugging Face `tokenizers` library, given a tokenizer.json
that this script assembles from the GGUF's vocabulary and merges (read with the `gguf` package) and
SmolLM2's own pre-tokenizer configuration (Digits(individual_digits) + ByteLevel(use_regex), the
configuration of HuggingFaceTB/SmolLM2-135M-Instruct's tokenizer.json). When llama-cpp-python is
importable (e.g. /tmp/venv-llama), every string is also tokenized by llama.cpp from the GGUF file
itself and the two references must agree; the count is printed and stored in the output header.

Strings: SOTU paragraphs (seeded sample), code, numbers, emoji, CJK, Arabic and other scripts,
runs of spaces/newlines/tabs, contractions, special tokens (parsed and not parsed), long words,
seeded random Unicode, and the empty string.

WordPiece: the same strings (and BERT's special tokens) through tests/data/tokenizer/all-MiniLM-L6-v2/
tokenizer.json (the original file of that model) with `tokenizers`, without and with the
[CLS]/[SEP] post-processor (add_special_tokens False/True).

Pre-tokenizers: the split regexes lithe hand-codes, run by `tokenizers` (Split, Isolated) on the
strings above and 400 seeded random strings over a tricky alphabet -> pretokenizer_golden.jsonl.

Usage:
  /tmp/venv-hf/bin/python tests/gen/gen_tokenizer_golden.py MODEL.gguf SOTU_DIR [--llama-python /tmp/venv-llama/bin/python]
Writes tests/data/tokenizer/smollm2_golden.jsonl and minilm_golden.jsonl: a header line
{"model":..., ...} then one line per case {"text": str, "parse_special": bool, "ids": [int]}
(minilm: also "add_special": bool).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import tokenizers

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "tokenizer" / "smollm2_golden.jsonl"


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_ints(reader, key):
    f = reader.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def reference_tokenizer_json(model_path):
    """SmolLM2's tokenizer.json rebuilt from the GGUF: vocabulary, merges, added tokens."""
    r = gguf.GGUFReader(model_path)
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    types = field_ints(r, "tokenizer.ggml.token_type")
    merges = field_strings(r, "tokenizer.ggml.merges")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": tokens[0], "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }


def sotu_paragraphs(sotu_dir, n, seed):
    paras = []
    for p in sorted(Path(sotu_dir).glob("*.txt")):
        for line in p.read_text(encoding="utf-8").split("\n"):
            if line.strip():
                paras.append(line)
    rng = random.Random(seed)
    picked = rng.sample(paras, n)
    return [p[:700] for p in picked]


CODE = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "#include <stdio.h>\n\nint main(void) {\n\tprintf(\"hello, world\\n\");\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "const x = {a: 1, 'b': [2, 3], \"c\": null};\nconsole.log(JSON.stringify(x));",
    "SELECT name, COUNT(*) AS n FROM users WHERE age >= 18 GROUP BY name ORDER BY n DESC;",
    "<html>\n  <body>\n    <p class=\"x\">Hi &amp; bye</p>\n  </body>\n</html>",
    "$ git commit -m 'fix: handle EOF' && git push origin main",
    "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![1, 2, 3];\n    Ok(())\n}",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares",
    "{\"model\": \"smollm2\", \"temperature\": 0.7, \"max_tokens\": 256}",
    "    indented with four spaces\n        and eight\n\t\tand two tabs",
    "template <typename T>\nstruct Foo { T x; };\n",
    "if (a != b && c <= d || !e) { return -1; }",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\n",
    "# Heading\n\n* item one\n* item two\n\n```python\nprint('x')\n```\n",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.org, first.last+tag@sub.domain.co.uk",
    "C:\\Users\\name\\Documents\\file.txt",
    "a->b->c; p::q::r; x => y; i++; --j; k **= 2;",
    "\"\"\"Docstring with 'quotes' and \\\"escapes\\\".\"\"\"",
    "@decorator\nclass A(B, metaclass=M):\n    pass",
    "matrix[i][j] += alpha * (x[i] - mu) / sigma;",
    "0xDEADBEEF 0b1010 0o777 1e-10 6.02e23 -0.0",
    "while True:\n\ttry:\n\t\tbreak\n\texcept Exception as e:\n\t\traise",
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
    "echo $HOME; export PATH=\"$PATH:/usr/local/bin\"",
    "lambda x, y: x if x > y else y",
    "std::vector<std::pair<int, std::string>> v{{1, \"a\"}};",
    "// comment\n/* block\n comment */",
    "key: value\nlist:\n  - a\n  - b\n",
]

NUMBERS = [
    "3", "33", "333", "3333", "33333", "333333", "3333333", "33333333", "333333333",
    "12345", "3.14159", "1,000,000", "$1,234.56", "2021-01-20", "12:30:45", "+1 (555) 123-4567",
    "1234567890123456789", "-42", "½ ¼ ¾", "١٢٣٤٥ ٦٧٨٩٠", "²³ ⁴", "Ⅻ Ⅳ", "一二三 123",
    "10%", "1st 2nd 3rd 4th", "v1.2.3", "0.000001", "1/2 + 3/4 = 5/4", "9 out of 10", "CO2 H2O",
    "१२३ ৪৫৬", "𝟙𝟚𝟛", "₀₁₂",
]

EMOJI = [
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "😀😃😄😁😆", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇫🇷🇯🇵", "❤️", "🙂 hi 🙃", "I ❤ NY", "☕️ and 🍰",
    "🏳️‍🌈", "✌🏿", "🤖🦾", "👩🏻‍💻 coding", "🎉🎊 party!!!", "⚡", "©®™", "★☆✓✗", "←→↑↓",
    "🔥" * 10, "a😀b😀c",
]

SCRIPTS = [
    "中华人民共和国", "我想在apple工作1314151天～", "你好，世界！", "東京は日本の首都です。", "ひらがな カタカナ",
    "한국어 텍스트입니다", "안녕하세요 세계", "汉字和English混合", "「引用」と『二重』", "全角　スペース",
    "مرحبا بالعالم", "اللغة العربية جميلة", "السلام عليكم ورحمة الله", "שלום עולם", "नमस्ते दुनिया",
    "हिन्दी में लिखा गया पाठ", "สวัสดีชาวโลก", "Привет, мир!", "Ελληνικά γράμματα", "Tiếng Việt có dấu",
    "Äpfel über Öl ß", "façade naïve café résumé", "ñandú año", "Ærø Ølst Åland", "İstanbul ığdır",
    "Zürich Straße", "ქართული", "Հայերեն", "ភាសាខ្មែរ", "ᏣᎳᎩ", "e\u0301 vs é", "ﬁ ligature",
    "нет 'апострофа'", "日本語\n中文\n한국어",
]

WHITESPACE = [
    " ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\t\n", " \n ", "\r\n",
    "\r\n\r\n", "a  b", "a   b", "a\tb", "a\nb", "a \n b", "a\n\n\nb", " leading", "trailing ",
    "  both  ", "\n\tindented", "word \t word", "x\u00a0y", "x\u3000y", "x\u2028y", "x\u2003y",
    " \t \n \r ", "tab\tseparated\tvalues", "    Hello\n    Hello", "\n =", "end\n", "a" + " " * 20 + "b",
    " " * 50, "\n" * 20, "\t" * 8 + "x",
]

CONTRACTIONS = [
    "don't", "I'm", "you're", "we've", "they'll", "he'd", "it's", "DON'T", "I'M", "YOU'RE", "Y'ALL",
    "' era", "'s", "''", "rock 'n' roll", "Hello, y'all! How are you 😁 ?", "O'Brien's", "'tis", "’curly’ quotes",
]

PUNCT = [
    "", "a", "A", ".", "!!!!!!", "...", "?!", "--", "—", "–", "«guillemets»", "(parens)", "[brackets]",
    "{braces}", "<angle>", "a.b.c", "Hello world", " Hello world", "Hello World", " Hello World!",
    "Hello, world!", " this is 🦙.cpp", "w048 7tuijk dsdfhu", "ied 4 ½ months", "Äpfel",
    "3333333333333", "Hello", " Hello", "  Hello", " (", "U.S.A.", "e.g., i.e.,", "#hashtag @mention",
    "*bold* _italic_ ~strike~", "\\n literally", "a/b\\c|d", "100 % sure", "&&||!!", "~!@#$%^&*()_+",
    "Mr. Smith went to Washington.", "THE END", "CamelCaseWord", "snake_case_word", "kebab-case-word",
]

SPECIAL = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "text<|endoftext|>more", "<|im_start|><|im_end|>",
    " <|im_start|> spaced <|im_end|> ", "<|im_start", "<|im_end|", "<|endoftext|><|endoftext|>",
    "<repo_name>lithe<file_sep>src/main.cpp", "<filename>a.py\n<gh_stars>10", "<jupyter_code>print(1)",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "a<|im_end|>b", "<<|im_end|>>", "<|im_end|>\n\n", "<empty_output>",
]


def long_strings(rng):
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    return [
        "a" * 5000,
        "".join(rng.choice(alphabet) for _ in range(3000)),  # base64-like: one long word
        "1" * 500,
        "ab" * 1000,
        "supercalifragilisticexpialidocious" * 20,
        "x" * 100 + " " + "y" * 100,
    ]


def random_unicode(rng, n):
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
              (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1F64F), (0x2000, 0x206F),
              (0xE000, 0xE0FF), (0x10000, 0x1007F), (0x1D400, 0x1D4FF), (0x0300, 0x036F)]
    out = []
    for _ in range(n):
        length = rng.randint(1, 40)
        s = []
        for _ in range(length):
            lo, hi = rng.choice(blocks)
            s.append(chr(rng.randint(lo, hi)))
        out.append("".join(s))
    return out


BERT_SPECIAL = [
    "[CLS] hello world [SEP]", "[MASK] is a [MASK]", "[PAD][PAD]", "[UNK]", "not [cls] lowercase", "a[SEP]b",
]


def plain_cases(sotu_dir):
    rng = random.Random(20240601)
    return (sotu_paragraphs(sotu_dir, 120, 7) + CODE + NUMBERS + EMOJI + SCRIPTS + WHITESPACE + CONTRACTIONS
             + PUNCT + long_strings(rng) + random_unicode(rng, 30))


def cases(sotu_dir):
    out = [(t, True) for t in plain_cases(sotu_dir)]
    # Special tokens: parsed (HF default) and not parsed (encode_special_tokens).
    out += [(t, True) for t in SPECIAL] + [(t, False) for t in SPECIAL]
    return out


LLAMA_SCRIPT = r"""
import json, sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
res = []
for c in json.load(open(sys.argv[2])):
    res.append(llm.tokenize(c["text"].encode("utf-8"), add_bos=False, special=c["parse_special"]))
json.dump(res, open(sys.argv[3], "w"))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("sotu_dir")
    ap.add_argument("--llama-python", default="/tmp/venv-llama/bin/python",
                    help="a Python with llama-cpp-python for the cross-check (skipped when missing)")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()

    tok = tokenizers.Tokenizer.from_str(json.dumps(reference_tokenizer_json(a.model)))
    all_cases = cases(a.sotu_dir)
    results = []
    for text, parse_special in all_cases:
        tok.encode_special_tokens = not parse_special
        ids = tok.encode(text, add_special_tokens=False).ids
        results.append({"text": text, "parse_special": parse_special, "ids": ids})
    tok.encode_special_tokens = False

    llama_agree = None
    if os.path.exists(a.llama_python):
        with tempfile.TemporaryDirectory() as d:
            inp, outp = Path(d) / "in.json", Path(d) / "out.json"
            inp.write_text(json.dumps(results))
            p = subprocess.run([a.llama_python, "-c", LLAMA_SCRIPT, a.model, str(inp), str(outp)],
                               capture_output=True, text=True)
            if p.returncode == 0:
                ll = json.loads(outp.read_text())
                llama_agree = sum(1 for r, l in zip(results, ll) if r["ids"] == l)
                for r, l in zip(results, ll):
                    if r["ids"] != l:
                        print(f"llama.cpp differs on {r['text'][:60]!r} (parse_special={r['parse_special']})",
                              file=sys.stderr)
            else:
                print("llama-cpp-python cross-check failed to run:\n" + p.stderr[-2000:], file=sys.stderr)

    header = {"model": Path(a.model).name, "reference": f"tokenizers {tokenizers.__version__}",
              "cases": len(results), "llama_cpp_agree": llama_agree,
              "generator": "tests/gen/gen_tokenizer_golden.py"}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(a.out, header, results)
    print(f"wrote {a.out}: {len(results)} cases; llama.cpp agrees on {llama_agree} of them"
          if llama_agree is not None else f"wrote {a.out}: {len(results)} cases (no llama.cpp cross-check)")
    bert_golden(a.sotu_dir, Path(a.out).parent / "minilm_golden.jsonl")
    pretokenizer_golden(Path(a.out).parent / "pretokenizer_golden.jsonl")


def write_jsonl(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


# The pre-tokenizers lithe implements by hand, as Hugging Face runs them (Oniguruma regexes).
GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")
PRESETS = {"gpt-2": [GPT2_RE], "llama-bpe": [LLAMA3_RE], "qwen2": [QWEN2_RE], "smollm": [r"\p{N}", GPT2_RE]}
ALPHABET = (list("aAbzZsStTmMdDrReEvVlL") + list("0123456789") + [" "] * 8 + ["\t", "\n", "\r", "'", "'"] * 2
            + list(".,!?-_()[]{}<>/\\\"#$%&*+=:;@^`|~") + ["\u00a0", "\u2028", "\u3000", "\u0085", "\u000b",
            "\u00e9", "\u00df", "\u0130", "\u4e2d", "\u0661", "\u00bd", "\u00b2", "\u2167", "\u0301", "\u200b",
            "\U0001f600", "\u05d0", "\u0915", "\u093f", "\u2019", "\u00ab", "\u2014", "\ud7a3"])


def pretokenizer_golden(out_path):
    rng = random.Random(99)
    texts = CONTRACTIONS + WHITESPACE + NUMBERS + PUNCT + SCRIPTS + EMOJI
    for _ in range(400):
        texts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24))))
    rows = []
    for name, regexes in PRESETS.items():
        pre = tokenizers.pre_tokenizers.Sequence(
            [tokenizers.pre_tokenizers.Split(tokenizers.Regex(r), behavior="isolated") for r in regexes])
        for t in texts:
            rows.append({"pre": name, "text": t, "words": [w for w, _ in pre.pre_tokenize_str(t)]})
    header = {"reference": f"tokenizers {tokenizers.__version__} pre_tokenizers.Split (Oniguruma)",
              "cases": len(rows), "generator": "tests/gen/gen_tokenizer_golden.py"}
    write_jsonl(out_path, header, rows)
    print(f"wrote {out_path}: {len(rows)} cases")


def bert_golden(sotu_dir, out_path):
    tok = tokenizers.Tokenizer.from_file(str(ROOT / "tests/data/tokenizer/all-MiniLM-L6-v2/tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    rows = []
    texts = plain_cases(sotu_dir) + BERT_SPECIAL
    for i, text in enumerate(texts):
        add_special = i % 3 == 0  # a third with [CLS] ... [SEP]
        rows.append({"text": text, "parse_special": True, "add_special": add_special,
                     "ids": tok.encode(text, add_special_tokens=add_special).ids})
    header = {"model": "all-MiniLM-L6-v2 tokenizer.json", "reference": f"tokenizers {tokenizers.__version__}",
              "cases": len(rows), "generator": "tests/gen/gen_tokenizer_golden.py"}
    write_jsonl(out_path, header, rows)
    print(f"wrote {out_path}: {len(rows)} cases")


if __name__ == "__main__":
    main()
