"""Write tiny random-weight llama GGUF models that real inference servers load in a blink.

The model is a valid ``llama`` architecture with f32 weights from a seeded RNG and a ``gpt2``
(byte-level BPE) tokenizer of exactly the 256 byte tokens plus three ChatML control tokens, so one
ASCII character is one token and token counts are easy to reason about. llama.cpp insists on at
least one BPE merge, so there is one (two spaces), whose token the model never generates.

Random weights would sample EOS (or a non-ASCII byte that the server holds back until a UTF-8
sequence completes) early and unpredictably. To make every request run to ``max_tokens`` with one
chunk per token, residual dimension 0 is held constant through the network (embeddings set it,
no layer writes to it) and the output head turns it into a large positive logit for "safe"
printable ASCII tokens and a large negative one for everything else. ``<`` is not safe: servers
hold it back because it could start the ``<|im_end|>`` stop string.

Needs the ``gguf`` package (a dev dependency). Usable by hand too:
``python -m tests.realservers.tinymodel medium /tmp/medium.gguf``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The safe printable ASCII bytes the model generates: space to tilde, without "<" (see above).
SAFE_BYTES = tuple(b for b in range(0x20, 0x7F) if b != ord("<"))
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
BOS_ID = 256
EOS_ID = 258
# The single merge llama.cpp requires, and the token it makes (id 259).
MERGE = "\u0120 \u0120"
MERGED_TOKEN = "\u0120\u0120"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Value of the constant residual dimension and the output-head weight on it: with RMS-normed
# activations of order 1 the safe/unsafe logit gap is in the hundreds, so nothing else is sampled.
_ANCHOR = 10.0
_HEAD_BIAS = 10.0


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a generated model.

    Attributes:
        name: Label (also the GGUF ``general.name``).
        n_embd: Residual width.
        n_layer: Transformer blocks.
        n_head: Attention heads (as many KV heads).
        n_ff: Feed-forward width.
        context_tokens: Training context written to ``llama.context_length`` (what
            ``/v1/models`` reports as ``n_ctx_train``; deliberately not what the tests run with).
        seed: RNG seed for the weights.
    """

    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_ff: int
    context_tokens: int = 8192
    seed: int = 0


# ~0.3 M parameters: hundreds of tokens per second on one core; for protocol checks.
TINY = ModelSpec(name="tiny", n_embd=64, n_layer=2, n_head=4, n_ff=128)
# ~85 M parameters (340 MB f32): tens of tokens per second on two cores; for timing checks.
MEDIUM = ModelSpec(name="medium", n_embd=768, n_layer=12, n_head=12, n_ff=2048)
SPECS = {s.name: s for s in (TINY, MEDIUM)}


def byte_token_texts() -> list[str]:
    """GPT-2's byte-to-unicode table: the token text of each byte 0..255, in byte order."""
    visible = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table: dict[int, str] = {b: chr(b) for b in visible}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def chatml_prompt_tokens(user_text: str) -> int:
    """Prompt tokens of one user message rendered by :data:`CHATML_TEMPLATE` (one byte = one
    token, one control token each for the three ChatML markers).

    Raises:
        ValueError: The text is not ASCII or holds two spaces in a row (the one merge).
    """
    if not user_text.isascii() or "  " in user_text:
        raise ValueError("only ASCII text without double spaces counts one token per character")
    rendered = f"user\n{user_text}\nassistant\n"
    return len(rendered) + 3


def vocab_size() -> int:
    """Tokens in the generated vocabulary (256 bytes, the control tokens, the merged token)."""
    return 256 + len(CONTROL_TOKENS) + 1


def write_model(path: Path, spec: ModelSpec = TINY) -> Path:
    """Write a model to ``path`` (overwritten) and return it.

    Args:
        path: Destination ``.gguf`` file.
        spec: Model shape.

    Returns:
        ``path``.

    Raises:
        ValueError: ``n_embd`` not divisible by ``n_head``.
    """
    import gguf  # dev dependency, imported here so that importing this module never needs it

    if spec.n_embd % spec.n_head:
        raise ValueError(f"n_embd {spec.n_embd} is not divisible by n_head {spec.n_head}")
    rng = np.random.default_rng(spec.seed)
    n_vocab = vocab_size()
    d, f = spec.n_embd, spec.n_ff

    def normal(rows: int, cols: int, std: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)).astype(
            np.float32, copy=False
        )

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"powersweep-{spec.name}")
    writer.add_context_length(spec.context_tokens)
    writer.add_embedding_length(d)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(f)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head)
    writer.add_rope_dimension_count(d // spec.n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(n_vocab)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([*byte_token_texts(), *CONTROL_TOKENS, MERGED_TOKEN])
    writer.add_token_types(
        [gguf.TokenType.NORMAL] * 256
        + [gguf.TokenType.CONTROL] * len(CONTROL_TOKENS)
        + [gguf.TokenType.NORMAL]
    )
    writer.add_token_merges([MERGE])
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_eot_token_id(EOS_ID)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    embd = normal(n_vocab, d, 1.0)
    embd[:, 0] = _ANCHOR
    head = normal(n_vocab, d, 1.0 / np.sqrt(d))
    head[:, 0] = -_HEAD_BIAS
    head[list(SAFE_BYTES), 0] = _HEAD_BIAS
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    writer.add_tensor("output.weight", head)
    for i in range(spec.n_layer):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(d, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(d, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v"):
            writer.add_tensor(f"{blk}.{name}.weight", normal(d, d, 1.0 / np.sqrt(d)))
        # Small output projections keep the residual near its input scale; row 0 stays zero so
        # the anchor dimension is never written to.
        out = normal(d, d, 0.5 / np.sqrt(d))
        out[0, :] = 0.0
        writer.add_tensor(f"{blk}.attn_output.weight", out)
        writer.add_tensor(f"{blk}.ffn_gate.weight", normal(f, d, 1.0 / np.sqrt(d)))
        writer.add_tensor(f"{blk}.ffn_up.weight", normal(f, d, 1.0 / np.sqrt(d)))
        down = normal(d, f, 0.5 / np.sqrt(f))
        down[0, :] = 0.0
        writer.add_tensor(f"{blk}.ffn_down.weight", down)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str]) -> int:
    """``python -m tests.realservers.tinymodel {tiny|medium} PATH``."""
    if len(argv) != 2 or argv[0] not in SPECS:
        print(f"usage: python -m tests.realservers.tinymodel {{{'|'.join(SPECS)}}} PATH")
        return 2
    print(write_model(Path(argv[1]), SPECS[argv[0]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
