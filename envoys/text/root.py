"""The text model's surface on the root, under the names nnterp's ``StandardizedTransformer`` gives it.

A researcher who opens a vision-language model brings their text-model code
along; this is what it reaches on ``model``:

- sizes, off the text model's config: ``num_layers``, ``hidden_size``,
  ``num_heads``, ``num_kv_heads``, ``head_dim``, ``intermediate_size``,
  ``vocab_size`` (``model.vision`` has the tower's own, which shadow these there);
- the inputs, inside a trace: ``input_ids`` and ``attention_mask`` (the root's
  arguments), ``input_size`` (``(batch, seq)``), ``token_embeddings`` (the
  embedding's output, before any image feature is scattered in; writable);
- the outputs: ``logits`` and ``next_token_probs``;
- the blocks' values by index: ``layers_input[i]``, ``layers_output[i]``,
  ``attentions_output[i]``, ``mlps_output[i]``, the same values as
  ``layers[i].layer_input`` and so on, readable and writable;
- interventions: ``skip_layer``, ``skip_layers``, ``steer``; and
  ``project_on_vocab`` / ``get_topk_closest_tokens`` for a hidden state.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

import torch

from ..core.layouts import Hidden, Logits, TokenIds, TokenMask
from ..core.standard import NoSuchValue
from ..core.values import Argument, Field, value


def parameter(name: str) -> Any:
    """A selector for the root forward's parameter ``name``, by keyword or by its position in the signature."""

    def select(root: Any) -> Argument:
        parameters = [p for p in inspect.signature(root._module.forward).parameters if p != "self"]
        return Argument(parameters.index(name) if name in parameters else len(parameters), name)

    return select


@cache
def returns_tuple(block_class: type) -> bool:
    """Whether a block class's forward returns a tuple (``(hidden_states, ...)``) rather than the tensor itself.

    Read off its source: a ``return`` of a tuple display, or of a name the
    forward binds to one (``outputs = (hidden_states,)``). transformers 5
    blocks return the tensor; 4.x blocks returned a tuple.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(block_class.forward)))
    except (OSError, TypeError):
        return False
    tuples = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign)) and isinstance(node.value, ast.Tuple)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    returned = [node.value for node in ast.walk(tree) if isinstance(node, ast.Return) and node.value is not None]
    return any(isinstance(v, ast.Tuple) or (isinstance(v, ast.Name) and v.id in tuples) for v in returned)


@cache
def softcaps_logits(head_owner: type) -> bool:
    """Whether the forward of ``head_owner`` (the module whose output holds the logits) squashes them after the head.

    Gemma's causal LMs and Gemma 4's and PaliGemma's wrappers compute
    ``tanh(logits / cap) * cap`` with the text config's
    ``final_logit_softcapping``; Gemma 3's wrapper does not. Read off the forward's source, so it holds on every release.
    """
    try:
        return "final_logit_softcapping" in inspect.getsource(head_owner.forward)
    except (OSError, TypeError):
        return False


#: A factor the head's output is multiplied or divided by: the operator (group 1) and where the forward reads the
#: factor (group 2): the module's own ``logit_scale`` (Cohere's causal LMs, Cohere Compass's wrapper), or the config's
#: ``logit_scale`` (Aya Vision's wrapper from transformers 5.25), ``output_multiplier`` (the Muse wrappers, before their
#: soft cap) or ``logits_scaling`` (divided on Granite's causal LM and Granite-Docling's wrapper, multiplied on
#: HyperCLOVAX's), read from the text config.
_LOGIT_FACTOR = re.compile(r"([*/])\s*self\.((?:config\.(?:text_config\.)?)?(?:logit_scale|output_multiplier|logits_scaling))\b")


@cache
def logit_factors(head_owner: type) -> tuple[tuple[str, str], ...]:
    """The factors the forward of ``head_owner`` applies to the head's output before any soft cap, in its order:
    ``(operator, where)`` pairs, ``("*", "logit_scale")`` (the module's attribute) or ``("/", "config.logits_scaling")``
    (the config's). Read off the forward's source, as `softcaps_logits`."""
    try:
        source = inspect.getsource(head_owner.forward)
    except (OSError, TypeError):
        return ()
    return tuple(dict.fromkeys(match.groups() for match in _LOGIT_FACTOR.finditer(source)))


def logits_location(root: Any) -> str:
    """Where the logits are served: the root's output, or the output of the module the family names (``logits_at``)."""
    module = root.family.quirks.logits_at
    return f"{root.path}.{module}.output" if module else f"{root.path}.output"


class BlockValues:
    """One standard value of every text block by index: ``model.layers_output[i]`` is ``model.layers[i].layer_output``.

    Read it, assign it (``model.layers_output[i] = tensor``) or edit it in place,
    inside a trace, in forward order, as the block value itself.
    """

    def __init__(self, root: Any, name: str) -> None:
        self._root = root
        self._name = name

    def __getitem__(self, layer: int) -> Any:
        return getattr(self._root.layers[layer], self._name)

    def __setitem__(self, layer: int, value: Any) -> None:
        setattr(self._root.layers[layer], self._name, value)

    def __len__(self) -> int:
        return len(self._root.layers)

    def __iter__(self) -> Iterator[Any]:
        return (self[layer] for layer in range(len(self)))

    def __repr__(self) -> str:
        return f"<layers[i].{self._name} for i in range({len(self)})>"


class TextRoot:
    """The text model's names on the root (see the module docstring); mixed into `StandardizedTransformer`."""

    def __getattr__(self, name: str) -> Any:
        """nnsight's lookup; a name the model has neither as a value nor as a module says did-you-mean
        (`envoys.core.standard.NoSuchValue`)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_"):
                raise
            raise NoSuchValue(self, name) from None

    # -- sizes, off the text model's config -----------------------------------------------------

    @property
    def text_config(self) -> Any:
        """The text model's config (the wrapper's ``text_config``; the config itself on a text-only checkpoint)."""
        return self.config.get_text_config()

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def hidden_size(self) -> int:
        return self.text_config.hidden_size

    @property
    def num_heads(self) -> int:
        """Query heads of the text model's attention."""
        return self.text_config.num_attention_heads

    @property
    def num_kv_heads(self) -> int:
        """Key-value heads of the text model's attention (as many as query heads without grouped keys)."""
        return getattr(self.text_config, "num_key_value_heads", None) or self.num_heads

    @property
    def head_dim(self) -> int:
        """Width of one head: the config's head_dim when it says, else hidden_size // num_heads."""
        return getattr(self.text_config, "head_dim", None) or self.hidden_size // self.num_heads

    @property
    def intermediate_size(self) -> int:
        """The MLP's width: the config's intermediate_size (``ffn_dim``, OPT's spelling)."""
        return getattr(self.text_config, "intermediate_size", None) or self.text_config.ffn_dim

    @property
    def vocab_size(self) -> int:
        return self.text_config.vocab_size

    # -- inputs and outputs ---------------------------------------------------------------------

    input_ids = value(
        "input_ids", TokenIds, description="the token ids the forward receives", shape="[batch, seq]",
        key=lambda root: f"{root.path}.input", select=parameter("input_ids"),
        doc="The token ids the forward receives, ``[batch, seq]`` (one new token per row on a decode step).",
    )
    attention_mask = value(
        "attention_mask", TokenMask, description="which positions are real tokens",
        key=lambda root: f"{root.path}.input", select=parameter("attention_mask"),
        doc="The attention mask the forward receives, ``[batch, seq]``, 1 at real tokens and 0 at padding (None if "
        "none was passed).",
    )

    @property
    def input_size(self) -> torch.Size:
        """``(batch, seq)`` of the forward's input ids; inside a trace."""
        return self.input_ids.shape

    token_embeddings = value(
        "token_embeddings", Hidden, description="the token embedding's output",
        key=lambda root: f"{root.embed_tokens.path}.output",
        doc="The token embedding's output, ``[batch, seq, hidden_size]`` (scaled, on a text model that scales its "
        "embeddings), before any image feature is scattered in; assign or edit in place.",
    )
    logits = value("logits", Logits, description="the language-model head's output", key=logits_location, select=Field("logits"))

    @property
    def next_token_probs(self) -> torch.Tensor:
        """The next-token distribution at each row's last position, ``[batch, vocab]``: ``logits[:, -1].softmax(-1)``
        (the last position is the last token when the tokenizer pads on the left)."""
        return self.logits[:, -1, :].softmax(-1)

    # -- the blocks' values by index ------------------------------------------------------------

    @property
    def layers_input(self) -> BlockValues:
        """``layers_input[i]`` is ``layers[i].layer_input``."""
        return BlockValues(self, "layer_input")

    @property
    def layers_output(self) -> BlockValues:
        """``layers_output[i]`` is ``layers[i].layer_output``."""
        return BlockValues(self, "layer_output")

    @property
    def attentions_output(self) -> BlockValues:
        """``attentions_output[i]`` is ``layers[i].attention_output``."""
        return BlockValues(self, "attention_output")

    @property
    def mlps_output(self) -> BlockValues:
        """``mlps_output[i]`` is ``layers[i].mlp_output``."""
        return BlockValues(self, "mlp_output")

    # -- interventions --------------------------------------------------------------------------

    def skip_layers(self, start: int, end: int, skip_with: Any = None) -> None:
        """Skip blocks ``start`` to ``end`` (inclusive): none of them runs, and each one's output is ``skip_with``.

        ``skip_with`` defaults to block ``start``'s input, so the stream passes
        through unchanged. It is the block's output tensor, ``[batch, seq,
        hidden_size]`` (each block gets a copy); a block that returns a tuple
        gets ``(skip_with,)``, or what its envoy's ``skipped_output`` makes of it
        (`envoys.blocks.indexed`: the indexer's choice it received, passed on).
        Inside a trace, before anything of block ``start`` is read.
        """
        if not 0 <= self._block(start) <= self._block(end):
            raise ValueError(f"skip_layers takes start <= end within the {self.num_layers} blocks; got {start}, {end}")
        if skip_with is None:
            skip_with = self.layers[start].layer_input
        for index in range(self._block(start), self._block(end) + 1):
            block = self.layers[index]
            # each block its own copy: a forward that edits a block's output in place (Qwen3-VL's DeepStack add on
            # 4.x) must not reach skip_with or the other blocks' outputs
            output = skip_with.clone() if isinstance(skip_with, torch.Tensor) else skip_with
            skipped = getattr(block, "skipped_output", None)  # a block envoy that says what a skipped block returns
            if skipped is not None:
                block.skip(skipped(output))
            else:
                block.skip((output,) if returns_tuple(type(block._module)) else output)

    def skip_layer(self, layer: int, skip_with: Any = None) -> None:
        """Skip block ``layer``: it does not run, and its output is ``skip_with`` (its input by default)."""
        self.skip_layers(layer, layer, skip_with)

    def steer(
        self,
        layers: int | Sequence[int],
        steering_vector: torch.Tensor,
        factor: float = 1,
        token_positions: int | Sequence[int] | torch.Tensor | None = None,
        batch_index: int | Sequence[int] | torch.Tensor | None = None,
    ) -> None:
        """Add ``factor * steering_vector`` to each block's ``layer_output``, in place, inside a trace.

        ``steering_vector`` is ``[hidden_size]`` (or anything that broadcasts to
        the selected rows); ``token_positions`` and ``batch_index`` restrict the
        edit to those positions and batch rows (all when None). The blocks are
        steered in forward order whatever order they are given in.
        """
        for layer in sorted({self._block(layer) for layer in ([layers] if isinstance(layers, int) else layers)}):
            output = self.layers[layer].layer_output
            rows = slice(None) if batch_index is None else batch_index
            positions = slice(None) if token_positions is None else token_positions
            output[rows, positions] += factor * steering_vector.to(device=output.device, dtype=output.dtype)

    def _block(self, layer: int) -> int:
        """A block index, negative ones counted from the end; IndexError naming the range otherwise."""
        if not -self.num_layers <= layer < self.num_layers:
            raise IndexError(f"the text model has {self.num_layers} blocks (0 to {self.num_layers - 1}); got {layer}")
        return layer % self.num_layers

    # -- reading a hidden state as tokens -------------------------------------------------------

    def project_on_vocab(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits a hidden state would give at the end of the text model: ``lm_head(norm(hidden))``, ``[..., vocab]``.

        Where the model multiplies its logits after the head (Cohere's ``logit_scale``, Muse's ``output_multiplier``),
        scales them by ``logits_scaling`` (divided on Granite's, multiplied on HyperCLOVAX's) or squashes them
        (``final_logit_softcapping``), so does this: on the last block's output it is the model's own logits.
        """
        logits = self.lm_head(self.norm(hidden))
        owner = self._module.get_submodule(self.family.quirks.logits_at) if self.family.quirks.logits_at else self._module
        for operator, where in logit_factors(type(owner)):
            on_config, _, name = where.rpartition(".")
            factor = getattr(self.text_config, name) if on_config else getattr(owner, name)
            logits = logits * factor if operator == "*" else logits / factor
        cap = getattr(self.text_config, "final_logit_softcapping", None)
        if cap is not None and softcaps_logits(type(owner)):
            logits = torch.tanh(logits / cap) * cap
        return logits

    def get_topk_closest_tokens(self, hidden: torch.Tensor, k: int = 5) -> dict[str, float] | list[dict[str, float]]:
        """The ``k`` tokens a hidden state is closest to, through the final norm and the head, with their probabilities.

        ``hidden`` is ``[hidden_size]`` (one dict) or ``[n, hidden_size]`` (one dict per row).
        """
        if hidden.shape[-1] != self.hidden_size or hidden.dim() not in (1, 2):
            raise ValueError(
                f"get_topk_closest_tokens takes a hidden state of shape [hidden_size] or [n, hidden_size] with "
                f"hidden_size {self.hidden_size}; got {tuple(hidden.shape)}"
            )
        probabilities = self.project_on_vocab(hidden).softmax(-1)
        if hidden.dim() == 1:
            return self.probs_to_dict(probabilities, k)
        return [self.probs_to_dict(row, k) for row in probabilities]

    def probs_to_dict(self, probs: torch.Tensor, k: int = 5) -> dict[str, float]:
        """The ``k`` most probable tokens of a probability vector over the vocabulary, decoded, with their probabilities."""
        if probs.dim() != 1:
            raise ValueError(f"probs_to_dict takes one distribution, shape [vocab]; got shape {tuple(probs.shape)}")
        values, indices = probs.detach().topk(k)
        return {self.tokenizer.decode([int(i)]): float(v) for v, i in zip(values, indices)}
