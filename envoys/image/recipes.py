"""The experiments researchers run on vision-language models, each one function on the standard values.

Each recipe takes the model, the prompt (one string, with the processor's image
placeholders, as ``model.trace`` takes it) and its images (a list of PIL images),
runs the traces it needs, and returns a small frozen dataclass of plain tensors
that can draw itself (``result.draw("out.png")``, through `envoys.image.plots`):

- `logit_lens`: what each image token means to the text model, block by block:
  every text block's output at one image's tokens, read through the final norm
  and the head (``model.project_on_vocab``), as grids of top tokens;
- `attention_to_image`: a token's attention to one image's tokens at a block, as
  a grid, summed over heads or per head (the block's ``attention_probabilities``);
- `tower_attention`: a tower block's attention from one patch, or to it, on the
  image's grid (on a video's frames), summed over heads or per head (the tower
  block's ``attention_probabilities``, every kernel call's block on a packed tower);
- `patch_image_rows`: activation patching between a clean and a corrupted image
  of the same size: ``image_features`` and the image rows of each text block's
  ``layer_output`` taken from the clean run into the corrupted run, one at a
  time, and the effect on a logit difference;
- `knock_out_image_attention`: the text tokens' attention to the image tokens
  removed at chosen blocks (the scores at the text-query, image-key cells set to
  -inf before the softmax, ``attention_scores``), and the logits it leaves.

Values on the image's grid come from ``model.vision.token_grid`` (the family's
layout), so a recipe knows no family. A recipe that needs a value the model does
not serve (a block with no softmax attention, a load that is not eager) raises
`Unavailable` with the value's own reason before anything runs. Every trace
stops after its last read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nnsight
import torch
from PIL import Image

from ..core.values import Unavailable
from . import plots

#: A token given by id, or by its text (which must be one token).
Token = int | str


# -- shared checks -----------------------------------------------------------------------------


def image_list(images: Any, name: str = "images") -> list[Image.Image]:
    """``images`` as a non-empty list of PIL images; TypeError saying what to pass otherwise."""
    listed = [images] if isinstance(images, Image.Image) else list(images) if isinstance(images, (list, tuple)) else None
    if not listed or not all(isinstance(image, Image.Image) for image in listed):
        raise TypeError(f"{name} is a list of PIL images, as model.trace(prompt, images=...) takes; got {images!r:.80}")
    return listed


def one_prompt(prompt: Any) -> str:
    """The prompt, one string; TypeError otherwise (a recipe reads batch row 0 and runs one invoke)."""
    if not isinstance(prompt, str):
        raise TypeError(
            f"a recipe takes one prompt, a string with the processor's image placeholders "
            f"(envoys.testing.chat_prompt or processor.apply_chat_template(..., tokenize=False)); got {type(prompt).__name__}"
        )
    return prompt


def blocks(model: Any, layers: int | Sequence[int] | None) -> tuple[int, ...]:
    """The text blocks ``layers`` names (every block when None), non-negative, in forward order, each once."""
    chosen = range(model.num_layers) if layers is None else [layers] if isinstance(layers, int) else layers
    indices = tuple(sorted({model._block(layer) for layer in chosen}))
    if not indices:
        raise ValueError("layers names no block: give block indices, or None for every block")
    return indices


def token_id(model: Any, token: Token) -> int:
    """A token's id: an id is checked against the vocabulary, a text must encode to exactly one token, not the
    tokenizer's unknown token (a word it does not have)."""
    if isinstance(token, bool) or not isinstance(token, (int, str)):
        raise TypeError(f"a token is an id (int) or its text (str); got {token!r}")
    if isinstance(token, str):
        tokenizer = model.tokenizer
        ids = tokenizer.encode(token, add_special_tokens=False)
        unknown = getattr(tokenizer, "unk_token_id", None)
        if ids == [unknown] and token != tokenizer.unk_token:
            raise ValueError(
                f"{token!r} is not in the tokenizer's vocabulary: it became {ids}, the unknown token "
                f"{tokenizer.unk_token!r}; pick a word that is one token of this tokenizer, or give a token id"
            )
        if len(ids) != 1:
            pieces = ", ".join(repr(tokenizer.decode([i])) for i in ids)
            raise ValueError(
                f"{token!r} is {len(ids)} tokens, {ids} ({pieces}), not one; pick a word that is one token of this "
                f"tokenizer, or give a token id"
            )
        return ids[0]
    if not 0 <= token < model.vocab_size:
        raise ValueError(f"token id {token} is outside the vocabulary (0 to {model.vocab_size - 1})")
    return token


def require(model: Any, value: str, layers: Sequence[int]) -> None:
    """`Unavailable`, with the reason, when a block of ``layers`` lacks the block value ``value`` (``self_attn....``)."""
    reasons = model.support().get(value)
    if isinstance(reasons, str):
        raise Unavailable(f"{value} is unavailable: {reasons}")
    for layer in layers:
        if reasons and layer in reasons:
            raise Unavailable(f"layers[{layer}].{value} is unavailable: {reasons[layer]}")


def position_in(length: int, position: int, name: str = "position") -> int:
    """A sequence position, negative ones counted from the end; IndexError naming the sequence's length otherwise."""
    if not -length <= position < length:
        raise IndexError(f"{name} {position} is outside the sequence of {length} tokens")
    return position % length


# -- the logit lens at the image tokens --------------------------------------------------------


@dataclass(frozen=True)
class LogitLens:
    """The logit lens at one image's tokens: each block's output there, through the final norm and the head.

    ``token_ids``: long ``[layers, grid_rows, grid_columns, k]``, each cell's
    top-``k`` tokens, -1 in cells no image token covers. ``probabilities``:
    ``[layers, grid_rows, grid_columns, k]``, their probabilities (NaN where no
    token covers the cell). ``tokens``: the top token of each cell decoded,
    ``[layers][grid_rows][grid_columns]`` ("" where no token covers it).
    """

    layers: tuple[int, ...]
    token_ids: torch.Tensor
    probabilities: torch.Tensor
    tokens: tuple[tuple[tuple[str, ...], ...], ...]
    image: Image.Image = field(repr=False)

    def draw(self, path: str | Path, layers: Sequence[int] | None = None) -> Path:
        """The chosen blocks (all by default, else some of `layers`) side by side: the top token in each cell, its
        probability as the heatmap."""
        chosen = self.layers if layers is None else tuple(layers)
        missing = [layer for layer in chosen if layer not in self.layers]
        if missing:
            raise ValueError(f"this lens holds blocks {list(self.layers)}, not {missing}; draw some of those, "
                             "or compute the lens with layers= naming the blocks to draw")
        rows = [self.layers.index(layer) for layer in chosen]
        return plots.side_by_side(
            [self.probabilities[row, ..., 0] for row in rows], self.image, path,
            titles=[f"layers[{self.layers[row]}] top token" for row in rows], labels=[self.tokens[row] for row in rows],
            scale="the top token's probability",
        )


def logit_lens(
    model: Any,
    prompt: str,
    images: Sequence[Image.Image],
    *,
    image: int = 0,
    layers: int | Sequence[int] | None = None,
    k: int = 1,
) -> LogitLens:
    """The logit lens at image ``image``'s tokens: ``project_on_vocab(layers[i].layer_output)`` there, top ``k`` per cell.

    One trace; ``layers`` are text block indices (every block by default).
    """
    prompt, images, chosen = one_prompt(prompt), image_list(images), blocks(model, layers)
    if not isinstance(k, int) or not 1 <= k <= model.vocab_size:
        raise ValueError(f"k is how many top tokens to keep per cell, 1 to {model.vocab_size}; got {k!r}")
    with model.trace(prompt, images=images) as tracer:
        mask = model.vision.image_token_mask
        tops = nnsight.save([])
        for layer in chosen:
            top = model.project_on_vocab(model.layers[layer].layer_output[mask]).softmax(-1).topk(k, dim=-1)
            tops.append((top.values.save(), top.indices.save()))
        tracer.stop()
    probabilities = torch.stack([model.vision.token_grid(values.detach(), image=image) for values, _ in tops])
    ids = torch.stack([model.vision.token_grid(indices, image=image) for _, indices in tops])
    covered = probabilities.isfinite()
    ids = torch.where(covered, ids, torch.full_like(ids, -1))
    decode = model.tokenizer.decode
    tokens = tuple(
        tuple(tuple(decode([int(i)]) if i >= 0 else "" for i in row) for row in grid[..., 0])
        for grid in ids
    )
    return LogitLens(chosen, ids, probabilities, tokens, images[image])


# -- a token's attention to the image ----------------------------------------------------------


@dataclass(frozen=True)
class ImageAttention:
    """A token's attention to one image's tokens at a text block, on the image's grid.

    ``grid``: ``[grid_rows, grid_columns]`` summed over the heads, or
    ``[heads, grid_rows, grid_columns]`` per head (NaN where no token covers a
    cell). ``position``: the attending token's position in the sequence.
    """

    layer: int
    position: int
    grid: torch.Tensor
    image: Image.Image = field(repr=False)

    def draw(self, path: str | Path) -> Path:
        """The grid over the image (one panel per head when per head)."""
        where = f"layers[{self.layer}], token {self.position}"
        if self.grid.dim() == 2:
            return plots.overlay(self.grid, self.image, path, title=f"attention to the image, {where}",
                                 scale="attention, summed over heads")
        return plots.side_by_side(list(self.grid), self.image, path,
                                  titles=[f"head {head}, {where}" for head in range(len(self.grid))], scale="attention")


def attention_to_image(
    model: Any,
    prompt: str,
    images: Sequence[Image.Image],
    *,
    layer: int,
    position: int = -1,
    image: int = 0,
    per_head: bool = False,
) -> ImageAttention:
    """Token ``position``'s attention to image ``image``'s tokens at text block ``layer``, as a grid.

    Read from the block's ``self_attn.attention_probabilities`` (batch row 0),
    so the model must be loaded with ``attn_implementation="eager"`` and the
    block must have softmax attention; `Unavailable` with the reason otherwise.
    On a block that cross-attends to the image (Mllama's cross-attention
    layers), it is the token's cross-attention over the image's rows
    (``cross_attn.attention_probabilities``), on the image's patch grid.
    """
    prompt, images = one_prompt(prompt), image_list(images)
    (block,) = blocks(model, layer)
    crossed = getattr(model.layers[block], "parts", ())[:1] == ("cross_attn",)
    attending = "cross_attn" if crossed else "self_attn"
    require(model, f"{attending}.attention_probabilities", [block])
    with model.trace(prompt, images=images) as tracer:
        mask = model.vision.image_token_mask.save()
        probabilities = getattr(model.layers[block], attending).attention_probabilities
        attention = probabilities[0, :, position_in(mask.shape[1], position)].save()  # [heads, keys]
        tracer.stop()
    query = position_in(mask.shape[1], position)
    if crossed:  # the keys are the image's rows, as the cross-attention's layout places them
        keys = attention.detach().transpose(0, 1)
        grid = model.vision.patch_grid(keys, image=image, **model.layers[block].cross_attn.key_layout)
    else:
        keys = attention.detach()[:, mask[0]].transpose(0, 1)  # [image_tokens, heads]
        grid = model.vision.token_grid(keys, image=image)
    grid = grid.permute(2, 0, 1)  # [heads, grid_rows, grid_columns]
    return ImageAttention(block, query, grid if per_head else grid.sum(0), images[image])


# -- the tower's attention from a patch, or to it -----------------------------------------------

#: Which way a tower attention map reads a patch's attention: what it attends to, or what attends to it.
DIRECTIONS = ("from", "to")


@dataclass(frozen=True)
class TowerAttention:
    """A tower block's attention from one patch (``direction`` "from": over the keys it attends to) or to it ("to":
    from every query), on the patch grid of the image or video it is in.

    ``grid``: ``[grid_rows, grid_columns]`` (a video: ``[frames, grid_rows,
    grid_columns]``) summed over the heads, or with the heads first per head;
    0 on the patches the block's attention never relates to this one (another
    image, window or frame: the calls of a packed tower), NaN where no patch
    covers a cell. ``patch``: ``(row, column)``, or ``(frame, row, column)`` on
    a video.
    """

    layer: int
    patch: tuple[int, ...]
    direction: str
    grid: torch.Tensor
    frames: tuple[Image.Image, ...] = field(repr=False)

    def draw(self, path: str | Path) -> Path:
        """The grid over the image (a video: one panel per frame, each over its frame; per head: the heads summed)."""
        where = f"vision.layers[{self.layer}], {self.direction} patch {self.patch}"
        video = len(self.patch) == 3
        cells = self.grid if self.grid.dim() == (3 if video else 2) else self.grid.sum(0)
        if video:
            return plots.per_frame(cells, list(self.frames), path, title=f"tower attention, {where}",
                                   scale="attention, summed over heads")
        return plots.overlay(cells, self.frames[0], path, title=f"tower attention, {where}",
                             scale="attention, summed over heads")


def tower_attention(
    model: Any,
    prompt: str,
    images: Sequence[Image.Image] | None = None,
    *,
    layer: int,
    patch: tuple[int, ...],
    image: int = 0,
    direction: str = "from",
    per_head: bool = False,
    videos: Sequence[Sequence[Image.Image]] | None = None,
    video: int = 0,
) -> TowerAttention:
    """Tower block ``layer``'s attention from patch ``patch`` of image ``image`` (or to it), on that image's grid.

    ``patch`` is ``(row, column)`` on the image's patch grid (as
    ``vision.patch_grid`` lays it out), or, with ``videos=`` instead of
    images, ``(frame, row, column)`` on video ``video``'s frames (as
    ``vision.video_patch_grid`` does; a frame is what the tower encodes as
    one). Read from the block's ``self_attn.attention_probabilities``, so the
    model is loaded with ``attn_implementation="eager"``; on a packed tower
    that calls its kernel once per image or window it is the calls' blocks
    laid on the diagonal, so a patch attends within its own image (window,
    frame) only. `Unavailable` with the reason where the block has no
    pattern.
    """
    prompt = one_prompt(prompt)
    if (images is None) == (videos is None):
        raise TypeError("tower_attention takes images= or videos= (one medium: the tower's run on it is read)")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction is 'from' (what the patch attends to) or 'to' (what attends to it); got {direction!r}")
    images = image_list(images) if images is not None else None
    frames = [image_list(list(clip), "a video's frames") for clip in videos] if videos is not None else None
    tower = model.vision
    attention = tower.layers[layer].self_attn  # an IndexError saying how many blocks the tower has
    index = layer % len(tower.layers)
    reason = attention.support()["attention_probabilities"]
    if reason is not None:
        raise Unavailable(f"vision.layers[{index}].self_attn.attention_probabilities is unavailable: {reason}")
    media = {"images": images} if images is not None else {"videos": frames}
    with torch.no_grad(), model.trace(prompt, **media) as tracer:
        pattern = attention.attention_probabilities.save()  # [rows_or_1, heads, queries, keys]
        tracer.stop()
    pattern = pattern.as_subclass(torch.Tensor)
    batch, heads, rows = pattern.shape[0], pattern.shape[1], pattern.shape[-1]

    def on_grid(value: torch.Tensor) -> torch.Tensor:
        return tower.patch_grid(value, image=image) if videos is None else tower.video_patch_grid(value, video=video)

    where = on_grid(torch.arange(batch * rows, dtype=torch.float32).reshape(batch, rows))  # each cell's stream row
    cell = tuple(patch)
    if len(cell) != where.dim() or any(not isinstance(i, int) or not 0 <= i < n for i, n in zip(cell, where.shape)):
        axes = "(row, column)" if videos is None else "(frame, row, column)"
        raise IndexError(f"patch is {axes} on a grid of shape {tuple(where.shape)}; got {patch!r}")
    flat = where[cell]
    if torch.isnan(flat):
        raise ValueError(f"no patch of the tower covers cell {patch!r} of the grid (padding): pick a covered cell")
    row, query = divmod(int(flat), rows)
    weights = pattern[row, :, query, :] if direction == "from" else pattern[row, :, :, query]  # [heads, rows]
    stream = pattern.new_zeros(batch, rows, heads)
    stream[row] = weights.transpose(0, 1)
    grid = on_grid(stream).movedim(-1, 0)  # [heads, ...grid]
    shown = tuple(images[image:image + 1]) if videos is None else tuple(frames[video])
    return TowerAttention(index, cell, direction, grid if per_head else grid.sum(0), shown)


# -- activation patching between a clean and a corrupted image ---------------------------------

#: The site name of the image features, patched before the text blocks.
FEATURES = "image_features"


@dataclass(frozen=True)
class Patching:
    """Activation patching of the image rows from a clean run into a corrupted run, one site at a time.

    ``sites``: ``"image_features"`` then ``"layers[i]"`` for each block, in
    forward order. ``patched``: ``[sites]``, the logit difference
    ``logits[good] - logits[bad]`` (at ``position``) of the corrupted run with
    that site's image rows taken from the clean run. ``clean`` and
    ``corrupted``: the difference in the two unpatched runs (scalars).
    ``target``: the ids ``(good, bad)``, ``target_text`` the tokens decoded.
    """

    sites: tuple[str, ...]
    patched: torch.Tensor
    clean: torch.Tensor
    corrupted: torch.Tensor
    target: tuple[int, int]
    target_text: tuple[str, str]
    position: int

    @property
    def recovered(self) -> torch.Tensor:
        """``[sites]``: how much of the clean difference each patch restores, ``(patched - corrupted) / (clean - corrupted)``.

        ValueError where the two runs give the same difference (there is nothing to recover).
        """
        gap = self.clean - self.corrupted
        if not bool(gap != 0):
            raise ValueError(f"the clean and corrupted runs give the same logit difference ({float(self.clean)}), so "
                             "no patch has anything to recover; choose target tokens or images the two runs tell apart")
        return (self.patched - self.corrupted) / gap

    def draw(self, path: str | Path) -> Path:
        """The patched difference per site, against the clean and corrupted runs' (flat lines)."""
        n = len(self.sites)
        return plots.curves(
            {"patched from clean": self.patched, "clean": self.clean.expand(n), "corrupted": self.corrupted.expand(n)},
            path, ticks=self.sites, xlabel="image rows patched at", ylabel="logit difference",
            title=f"logit[{self.target_text[0]!r}] - logit[{self.target_text[1]!r}] at token {self.position}",
        )


def patch_image_rows(
    model: Any,
    prompt: str,
    clean: Sequence[Image.Image],
    corrupted: Sequence[Image.Image],
    *,
    target: tuple[Token, Token],
    layers: int | Sequence[int] | None = None,
    position: int = -1,
) -> Patching:
    """Patch the image rows of ``image_features`` and of each block's ``layer_output`` from ``clean`` into ``corrupted``.

    ``clean`` and ``corrupted`` are the prompt's images in two versions, each
    image the same size in both, so that both runs have the same image tokens.
    ``target`` is ``(good, bad)``: the logit difference measured at
    ``position``. Runs one trace of ``2 + 1 + len(layers)`` invokes (clean,
    corrupted, one patched run per site: `envoys.invokes`), each as its prompt
    alone gives it.
    """
    prompt, clean, corrupted = one_prompt(prompt), image_list(clean, "clean"), image_list(corrupted, "corrupted")
    if [image.size for image in clean] != [image.size for image in corrupted]:
        raise ValueError(
            f"the clean and corrupted images must have the same sizes, image by image (so their image tokens are "
            f"the same); got {[image.size for image in clean]} and {[image.size for image in corrupted]}"
        )
    chosen = blocks(model, layers)
    good, bad = (token_id(model, token) for token in target)
    if good == bad:
        raise ValueError(
            f"the target's two tokens are one token, {good} ({model.tokenizer.decode([good])!r}): the logit "
            f"difference would be 0 in every run; pick two different tokens"
        )

    def difference(logits: torch.Tensor) -> torch.Tensor:
        return logits[good] - logits[bad]

    runs = patching_in_one_trace if in_one_trace(model) else patching_trace_by_trace
    mask, corrupted_mask, clean_logits, corrupted_logits, patched = runs(model, prompt, clean, corrupted, chosen, position)
    if not torch.equal(corrupted_mask, mask):
        raise ValueError("the clean and corrupted images give different image tokens: give images the processor "
                         "turns into the same number of tokens (the same sizes)")
    where = position_in(mask.shape[1], position)
    patched = [difference(logits) for logits in patched]
    return Patching(
        (FEATURES, *(f"layers[{layer}]" for layer in chosen)), torch.stack(patched).detach(),
        difference(clean_logits).detach(), difference(corrupted_logits).detach(), (good, bad),
        (model.tokenizer.decode([good]), model.tokenizer.decode([bad])), where,
    )


def in_one_trace(model: Any) -> bool:
    """Whether a recipe's runs can be invokes of one trace, each as its prompt alone gives it: unless the family's
    forward makes a prompt batched beside others differ from it alone (``Batching.invokes_differ``), or its invokes
    cannot share a batch with images (``Batching.image_invokes``)."""
    batching = model.family.batching
    return batching.invokes_differ is None and batching.image_invokes is None


def patching_in_one_trace(model: Any, prompt: str, clean: list, corrupted: list, chosen: tuple[int, ...],
                          position: int) -> tuple:
    """`patch_image_rows`' runs as invokes of one trace: the clean prompt, the corrupted one, then one corrupted
    invoke per site, each waiting at a barrier for the clean invoke to have read its site (a value carried to a
    later invoke at the same location). The clean and corrupted masks, their logits at ``position``, and each
    patched run's."""
    with model.trace() as tracer:
        handed = [tracer.barrier(2) for _ in range(1 + len(chosen))]
        with tracer.invoke(prompt, images=clean):
            mask = model.vision.image_token_mask.save()
            features = model.vision.image_features.clone().save()
            handed[0]()
            rows = nnsight.save([])
            for index, layer in enumerate(chosen):
                rows.append(model.layers[layer].layer_output[mask].clone())
                handed[1 + index]()
            clean_logits = model.logits[0, position_in(mask.shape[1], position)].save()
        with tracer.invoke(prompt, images=corrupted):
            corrupted_mask = model.vision.image_token_mask.save()
            corrupted_logits = model.logits[0, position_in(corrupted_mask.shape[1], position)].save()
        patched = nnsight.save([])
        for site in range(1 + len(chosen)):
            with tracer.invoke(prompt, images=corrupted):
                own = model.vision.image_token_mask
                handed[site]()
                if site == 0:
                    model.vision.image_features = features
                else:
                    model.layers[chosen[site - 1]].layer_output[own] = rows[site - 1]
                patched.append(model.logits[0, position_in(own.shape[1], position)].save())
                if site == len(chosen):
                    tracer.stop()
    return mask, corrupted_mask, clean_logits, corrupted_logits, list(patched)


def patching_trace_by_trace(model: Any, prompt: str, clean: list, corrupted: list, chosen: tuple[int, ...],
                            position: int) -> tuple:
    """`patching_in_one_trace`'s runs, one trace each (where invokes of one trace would differ from alone)."""
    with model.trace(prompt, images=clean) as tracer:
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features.clone().save()
        rows = nnsight.save([model.layers[layer].layer_output[mask].save() for layer in chosen])
        clean_logits = model.logits[0, position_in(mask.shape[1], position)].save()
        tracer.stop()
    with model.trace(prompt, images=corrupted) as tracer:
        corrupted_mask = model.vision.image_token_mask.save()
        corrupted_logits = model.logits[0, position_in(corrupted_mask.shape[1], position)].save()
        tracer.stop()
    patched = []
    for site in range(1 + len(chosen)):
        with model.trace(prompt, images=corrupted) as tracer:
            if site == 0:
                model.vision.image_features = features
            else:
                model.layers[chosen[site - 1]].layer_output[mask] = rows[site - 1]
            patched.append(model.logits[0, position_in(mask.shape[1], position)].save())
            tracer.stop()
    return mask, corrupted_mask, clean_logits, corrupted_logits, patched


# -- knocking out the text's attention to the image --------------------------------------------


@dataclass(frozen=True)
class KnockOut:
    """The logits at ``position`` with and without the text tokens' attention to the image tokens at ``layers``.

    ``clean`` and ``knocked``: ``[vocab]``. ``top``: for each run, the
    probabilities of the tokens among either run's ``k`` most probable, by
    the token decoded (with its id where two tokens decode alike: what `draw`
    shows).
    """

    layers: tuple[int, ...]
    position: int
    clean: torch.Tensor
    knocked: torch.Tensor
    top: dict[str, dict[str, float]]

    def draw(self, path: str | Path) -> Path:
        """The top tokens' probabilities, before and after the knockout, as grouped bars."""
        return plots.bars(self.top, path, title=f"text-to-image attention knocked out at layers {list(self.layers)}")


def image_key_cells(mask: torch.Tensor) -> torch.Tensor:
    """bool ``[batch, 1, seq, seq]``: the cells where a text token (query) attends to an image token (key)."""
    return ((~mask)[:, :, None] & mask[:, None, :])[:, None]


def knock_out_image_attention(
    model: Any,
    prompt: str,
    images: Sequence[Image.Image],
    *,
    layers: int | Sequence[int],
    position: int = -1,
    k: int = 5,
) -> KnockOut:
    """Remove the text tokens' attention to the image tokens at ``layers``, and read the logits at ``position``.

    At each chosen block, the attention scores entering the softmax
    (``self_attn.attention_scores``) are set to -inf where the query is a text
    token and the key an image token, so the text tokens attend to the text
    alone, renormalised (image tokens still attend to each other). Needs a
    block with softmax attention under ``attn_implementation="eager"``;
    `Unavailable` with the reason otherwise. Two runs, without and with: invokes
    of one trace where the family allows (`in_one_trace`), else two traces.
    """
    prompt, images, chosen = one_prompt(prompt), image_list(images), blocks(model, layers)
    require(model, "self_attn.attention_scores", chosen)
    runs = knock_out_in_one_trace if in_one_trace(model) else knock_out_trace_by_trace
    mask, clean, knocked = runs(model, prompt, images, chosen, position)
    where = position_in(mask.shape[1], position)
    clean, knocked = clean.detach(), knocked.detach()
    runs = {"clean": clean.softmax(-1), "knocked out": knocked.softmax(-1)}
    ids = list(dict.fromkeys(int(i) for probabilities in runs.values() for i in probabilities.topk(k).indices))
    labels = token_labels(model.tokenizer, ids)
    top = {run: {labels[i]: float(probabilities[i]) for i in ids} for run, probabilities in runs.items()}
    return KnockOut(chosen, where, clean, knocked, top)


def knock_out_in_one_trace(model: Any, prompt: str, images: list, chosen: tuple[int, ...], position: int) -> tuple:
    """`knock_out_image_attention`'s two runs as invokes of one trace: the mask, the clean and knocked-out logits."""
    with model.trace() as tracer:
        with tracer.invoke(prompt, images=images):
            mask = model.vision.image_token_mask.save()
            clean = model.logits[0, position_in(mask.shape[1], position)].save()
        with tracer.invoke(prompt, images=images):
            knocked = knocked_out(model, model.vision.image_token_mask, chosen, position)
            tracer.stop()
    return mask, clean, knocked


def knock_out_trace_by_trace(model: Any, prompt: str, images: list, chosen: tuple[int, ...], position: int) -> tuple:
    """`knock_out_in_one_trace`'s runs, one trace each (where invokes of one trace would differ from alone)."""
    with model.trace(prompt, images=images) as tracer:
        mask = model.vision.image_token_mask.save()
        clean = model.logits[0, position_in(mask.shape[1], position)].save()
        tracer.stop()
    with model.trace(prompt, images=images) as tracer:
        knocked = knocked_out(model, model.vision.image_token_mask, chosen, position)
        tracer.stop()
    return mask, clean, knocked


def knocked_out(model: Any, mask: torch.Tensor, chosen: tuple[int, ...], position: int) -> torch.Tensor:
    """Inside a run: the text queries' attention to the image keys (``mask``'s) removed at ``chosen``; the logits
    at ``position``, saved."""
    cells = image_key_cells(mask)
    for layer in chosen:
        attention = model.layers[layer].self_attn
        attention.attention_scores = attention.attention_scores.masked_fill(cells, float("-inf"))
    return model.logits[0, position_in(mask.shape[1], position)].save()


def token_labels(tokenizer: Any, ids: Sequence[int]) -> dict[int, str]:
    """Each id's token decoded, with the id added where two of ``ids`` decode alike (byte tokens, "�")."""
    decoded = {i: tokenizer.decode([i]) for i in ids}
    texts = list(decoded.values())
    return {i: text if texts.count(text) == 1 else f"{text} (id {i})" for i, text in decoded.items()}
