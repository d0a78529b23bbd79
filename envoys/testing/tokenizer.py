"""Small tokenizers for tiny checkpoints, built offline with the `tokenizers` library.

Two kinds:

* :func:`word_level_tokenizer`: a `WordLevel` model over a fixed English word
  list with whitespace pre-tokenization. Every special and image token is an
  *added special token*, so processors can expand image placeholders into runs
  of copies with no spaces between them (``<image><image>...``) and each copy
  is still one token. The attribute names processors read (``image_token``,
  ``vision_start_token``, ...) are given through ``extra_special_tokens``, so
  the loaded tokenizer has ``tokenizer.image_token`` and
  ``tokenizer.image_token_id``.
* :func:`byte_level_tokenizer`: a byte-level BPE (the 256 byte symbols plus
  merges trained on a word list) with exactly the structure of Qwen3.5's
  tokenizer class. For Qwen3.5's model type, transformers ignores the saved
  ``tokenizer_class`` and rebuilds a byte-level BPE from the saved vocabulary
  and merges; a tokenizer that already *is* that byte-level BPE survives the
  rebuild unchanged.

Both save with ``save_pretrained`` and load back with ``AutoTokenizer`` /
``AutoProcessor``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

try:
    from transformers import TokenizersBackend
except ImportError:  # transformers 4.x: the same fast tokenizer under its old name
    from transformers import PreTrainedTokenizerFast as TokenizersBackend

UNK = "<unk>"

#: What the tokenizer returns, as the fast tokenizers of the imitated checkpoints do (Llama's, Qwen2's): no
#: ``token_type_ids``, which 4.x's generic fast tokenizer would add and the models' ``generate`` refuses.
MODEL_INPUT_NAMES = ("input_ids", "attention_mask")

#: Plain words every tiny vocabulary knows; anything else becomes ``UNK``.
WORDS: tuple[str, ...] = (
    # roles and chat words
    "system", "user", "assistant", "USER", "ASSISTANT", "SYSTEM",
    # prompt vocabulary
    "Describe", "describe", "What", "what", "Which", "How", "many", "is", "are", "in", "on",
    "this", "these", "that", "the", "The", "a", "an", "and", "or", "of", "to", "with",
    "image", "images", "picture", "photo", "first", "second", "both", "two", "Compare",
    "compare", "colour", "color", "shape", "left", "right", "top", "bottom", "it", "there",
    "you", "see", "I", "A", "cat", "dog", "red", "green", "blue", "noise", "random", "Answer",
    "briefly", "yes", "no", "Yes", "No", "seconds", "Picture", "Image",
    # punctuation and digits
    ".", ",", "?", "!", ":", ";", "'", "\"", "(", ")", "-", "/", "<", ">",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
)  # fmt: skip


def _added(tokens: Sequence[str]) -> list[AddedToken]:
    return [AddedToken(t, special=True, normalized=False, single_word=False) for t in tokens]


def word_level_tokenizer(
    *,
    special_tokens: Sequence[str],
    named_tokens: Mapping[str, str],
    chat_template: str,
    eos_token: str,
    pad_token: str,
    bos_token: str | None = None,
    add_bos_token: bool = False,
    words: Sequence[str] = WORDS,
) -> TokenizersBackend:
    """A word-level tokenizer: ids ``0..len(words)`` are ``UNK`` and `words`, then the added tokens.

    `special_tokens` are the structural tokens (``<|im_start|>``, ``</s>``, ...),
    added first in that order; `named_tokens` maps processor attribute names to
    tokens (``{"image_token": "<image>"}``) and is added after them (a token in
    both lists is added once). `add_bos_token` prepends `bos_token` to every
    encoding, as Llama tokenizers do.
    """
    vocab = {UNK: 0}
    for word in words:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    ordered = list(dict.fromkeys([*special_tokens, *named_tokens.values()]))
    backend.add_special_tokens(_added(ordered))
    kwargs: dict[str, object] = {}
    if bos_token is not None:
        kwargs["bos_token"] = bos_token
        kwargs["add_bos_token"] = add_bos_token
    return TokenizersBackend(
        tokenizer_object=backend,
        unk_token=UNK,
        eos_token=eos_token,
        pad_token=pad_token,
        extra_special_tokens=dict(named_tokens),
        chat_template=chat_template,
        model_input_names=list(MODEL_INPUT_NAMES),
        **kwargs,
    )


def _train_byte_level_bpe(words: Sequence[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges of a byte-level BPE trained on `words` (alone and as one sentence).

    The pre-tokenizer is the one transformers gives Qwen3.5 (its split regex,
    then byte-level symbols without a prefix space). The trainer's result is
    deterministic: same words, same vocabulary and merge ranks.
    """
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([" ".join(words), *words], trainer)
    model = json.loads(backend.to_str())["model"]
    return dict(model["vocab"]), [tuple(pair) for pair in model["merges"]]


def byte_level_tokenizer(
    *,
    special_tokens: Sequence[str],
    named_tokens: Mapping[str, str],
    chat_template: str,
    eos_token: str,
    pad_token: str,
    words: Sequence[str] = WORDS,
    tokenizer_class: type | None = None,
) -> TokenizersBackend:
    """A byte-level BPE in the form Qwen3.5 checkpoints ship (and transformers rebuilds).

    The vocabulary is the 256 byte-level symbols plus the merges a BPE
    trainer learns from `words` (about 500 entries for :data:`WORDS`), then the
    added tokens as in :func:`word_level_tokenizer`. Any text encodes (there is
    no unknown token); the words of :data:`WORDS` mostly encode as one token.
    ``tokenizer_class`` is the class built from the vocabulary and merges
    (``Qwen3_5Tokenizer`` by default; ``GPT2Tokenizer`` for a checkpoint whose
    model_type transformers loads with it).
    """
    if tokenizer_class is None:
        from transformers.models.qwen3_5.tokenization_qwen3_5 import Qwen3_5Tokenizer as tokenizer_class

    vocab, merges = _train_byte_level_bpe(words)
    tokenizer = tokenizer_class(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token=eos_token,
        pad_token=pad_token,
        extra_special_tokens=dict(named_tokens),
        chat_template=chat_template,
    )
    ordered = list(dict.fromkeys([*special_tokens, *named_tokens.values()]))
    tokenizer.add_tokens(_added(ordered), special_tokens=True)
    return tokenizer


def as_the_processor_takes(tokenizer: TokenizersBackend, processor_class: type) -> TokenizersBackend:
    """``tokenizer`` as the installed release's ``processor_class`` takes it.

    transformers 5 processors take any tokenizer. Some of 4.x's name one fast
    class (``tokenizer_class``: ``"LlamaTokenizerFast"``, or a tuple whose
    fast member is taken): there, the same backend under that class, which a
    saved checkpoint then names.
    """
    import transformers

    named = getattr(processor_class, "tokenizer_class", None)
    names = named if isinstance(named, tuple) else (named,)
    fast = next((name for name in names if isinstance(name, str) and name.endswith("Fast")), None)
    if fast is None or isinstance(tokenizer, getattr(transformers, fast)):
        return tokenizer
    settings = {name: value for name, value in tokenizer.init_kwargs.items() if name not in ("tokenizer_object", "name_or_path")}
    return getattr(transformers, fast)(tokenizer_object=tokenizer.backend_tokenizer, **settings)

