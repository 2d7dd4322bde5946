"""Prompts shared by the model golden-file generators (tests/gen/gen_model_golden_*.py)."""

LOGIT_PROMPTS = [
    "The President of the United States shall, from time to time, give to the Congress",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Once upon a time, in a small village by the sea, there lived",
    "The capital of France is",
    "Q: What is 17 times 23?\nA:",
    "Les droits de l'homme sont",
    "<|im_start|>user\nWrite a haiku about autumn.<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, astronauts",
]

GREEDY_PROMPTS = LOGIT_PROMPTS[:4]
GREEDY_TOKENS = 64
