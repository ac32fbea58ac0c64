"""Build a ~4M-parameter Llama with random weights and a trained byte-level BPE tokenizer.

No weights can be downloaded on our machines, so the engine serves this model: its outputs
are gibberish, but its timings and metrics are real. Runs in the engine's virtual environment.

    build_tiny_model.py OUT [--tokenizer words|pieces|chars]

words (the default): common words are one token each, as in most real tokenizers. The other two
have no whole-word tokens, as tokenizers of code, Chinese or small models can have, so that prompt
sizing is tested where it cannot count in words: pieces merges at most two characters (every word
of three or more letters is split), chars has no merges at all (one token per byte).
"""

import random
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus(n_lines: int, seed: int = 0):
    rng = random.Random(seed)
    words = [
        "the", "model", "serves", "tokens", "queue", "latency", "cache", "prefix", "batch", "decode",
        "prefill", "request", "gpu", "memory", "throughput", "scheduler", "kernel", "attention",
        "a", "of", "and", "to", "in", "is", "for", "on", "with", "as", "by", "at", "from", "it",
    ]
    for _ in range(n_lines):
        yield " ".join(rng.choice(words) + rng.choice(["", "s", "ed", "ing", "er"]) for _ in range(20))


# The most characters a merged token may span, and the vocabulary the trainer may fill, per kind.
TOKENIZERS = {"words": (None, 1024), "pieces": (2, 512), "chars": (1, 260)}


def main(out: Path, kind: str = "words") -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<unk>", "<pad>"]
    max_len, vocab = TOKENIZERS[kind]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=max_len,
    )
    tok.train_from_iterator(corpus(5000), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    print(f"tiny model ({kind} tokenizer, {len(fast)} tokens): {sum(p.numel() for p in model.parameters())} parameters -> {out}", file=sys.stderr)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer", choices=sorted(TOKENIZERS), default="words")
    a = ap.parse_args()
    main(a.out, a.tokenizer)
