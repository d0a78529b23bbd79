"""Where image features enter the text stream: the ``inputs_embeds.masked_scatter`` calls of a host's forward.

Found from the model: the host's forward (by default the wrapper's inner
model's, ``LlavaModel.forward``) is searched for its calls of
``inputs_embeds.masked_scatter``, and each becomes a site, labelled as nnsight
labels them (``inputs_embeds_masked_scatter_0``, ``_1``, ...), so a host that
also scatters videos (``_1``, the Qwen-VL hosts) and audio (``_2``, Gemma 4,
Nemotron-H Omni) has all of them exposed. A family states in a `Scatter` only
what differs from that: a host elsewhere (the root's own forward, Llama 4's and
Nemotron-H Omni's), a helper that does the scattering (Idefics 3's
``self.inputs_merger(input_ids=..., inputs_embeds=..., image_hidden_states=...)``:
the helper's call in the host's forward is the site, its keyword
``image_hidden_states`` the features), a helper that calls
``inputs_embeds.masked_scatter`` itself, once per medium (Ovis2.5's
``self._merge_visual_features``: each call of the helper in the host's forward
is a site that drills into the helper's rewritten form, whose
``inputs_embeds_masked_scatter_0`` is the scatter, at
``self__merge_visual_features_0.source.inputs_embeds_masked_scatter_0`` as
nnsight's ``.source`` drill names it), which call is the image's, what the
features are where the default purpose says too little, and the releases
whose forward differs (SmolVLM scattered through a helper before 5.21,
`SMOLVLM_BEFORE_5_21`).

The image's call's argument 1 (or the helper's keyword) is what the text
model receives there (``vision.image_features``).
"""

from __future__ import annotations

from dataclasses import dataclass

from instrument import Rule, Variant
from instrument.calls import calls, defining_class, innermost, label_stem

from .attention import model_type_of

#: The call that scatters features into the token embeddings at a mask.
SCATTER = "inputs_embeds.masked_scatter"
#: The image's scatter where a host scatters images first (every host we serve): argument 1 is the features.
IMAGE_SITE = f"{label_stem(SCATTER)}_0"
#: Idefics 3's helper that scatters the image features, called from its host's forward.
HELPER = "self.inputs_merger"
HELPER_SITE = f"{label_stem(HELPER)}_0"

#: The end of every scatter rule's name (``llava.image-scatter``).
SCATTER_SUFFIX = ".image-scatter"
#: What each call of a host's scatters carries, in the order the hosts we serve make them.
MEDIA = ("image", "video", "audio")


@dataclass(frozen=True)
class Scatter:
    """How a family's host writes its image features into the text stream, where it differs from the default.

    The default: the wrapper's inner model's forward calls
    ``inputs_embeds.masked_scatter(mask, features)``, the image's call first,
    its argument 1 the features.
    """

    in_root: bool = False  #: the root's own forward scatters (no inner host)
    host: type | None = None  #: the class whose forward scatters, where it is neither the inner model nor the root
    callee: str = SCATTER  #: the dotted callee of the call that writes the features in
    #: what each of the callee's calls carries, in the forward's order (nnsight's counter): the hosts we serve
    #: scatter images, then videos, then audio; the Qwen omni thinkers scatter audio first
    media: tuple[str, ...] = MEDIA
    argument: tuple[int, str] = (1, "source")  #: the features: that call's positional index and keyword name
    purpose: str = ""  #: what the features are at the scatter, where the default line says too little
    variants: tuple[Variant, ...] = ()  #: releases whose forward writes the features in differently
    #: a method of the host that calls ``callee`` once, called from the host's forward once per medium (Ovis2.5's
    #: ``self._merge_visual_features``), or None where the forward calls ``callee`` itself: each of the helper's calls
    #: is a site drilled into the helper's rewritten form, where ``callee``'s call is the medium's scatter
    helper: str | None = None

    @property
    def image(self) -> int:
        """Which of the callee's calls is the image's."""
        return self.media.index("image")

    @property
    def site(self) -> str:
        """The image's call's label: ``inputs_embeds_masked_scatter_0``."""
        return self.site_of("image")

    def site_of(self, medium: str) -> str:
        """The label of the call that carries ``medium`` (one of `MEDIA`): ``inputs_embeds_masked_scatter_1`` for a
        Qwen-VL host's videos; through a `helper`, its call's label and the scatter's inside it
        (``self__merge_visual_features_1.source.inputs_embeds_masked_scatter_0`` for Ovis2.5's videos)."""
        if self.helper is not None:
            return f"{label_stem(self.helper)}_{self.media.index(medium)}.source.{label_stem(self.callee)}_0"
        return f"{label_stem(self.callee)}_{self.media.index(medium)}"


#: The helper Idefics 3's host calls to scatter the image features.
INPUTS_MERGER = Scatter(
    callee=HELPER, argument=(2, "image_hidden_states"), purpose="the helper that scatters the image features into the embeddings"
)

#: SmolVLM before 5.21: ``self.inputs_merger(input_ids=..., inputs_embeds=..., image_hidden_states=...)``.
SMOLVLM_BEFORE_5_21 = Variant(
    "<5.21",
    sites={HELPER: (HELPER_SITE,)},
    note="the features are scattered by a helper, self.inputs_merger, keyword image_hidden_states",
)


def default_purpose(count: int, in_root: bool, media: tuple[str, ...] = MEDIA) -> str:
    """One line on what ``count`` scatter calls carry (``media`` in order: images, then videos, then audio)."""
    if count <= 1:
        carried = "the image features" if in_root else "image features"
    else:
        named = [f"{medium} (_{index})" for index, medium in enumerate(media[:count])]
        carried = f"{', '.join(named[:-1])} and {named[-1]} features"
    return f"the root scatters {carried} in its own forward" if in_root else f"{carried} scattered into the embeddings"


def scatter_rule(host: type, scatter: Scatter = Scatter()) -> Rule:
    """The rule for ``host``'s forward: every call of ``scatter.callee`` in it, labelled as nnsight labels them.

    Named after the model_type of the modeling module the forward is in
    (``{model_type}.image-scatter``), so one forward has one rule whichever family
    runs it (PP-Chart2Table runs GOT-OCR 2.0's host: the rule is GOT-OCR 2.0's).

    At least the image's call is expected, so a forward without it fails to
    build with the compiler's `DriftError` (naming the rule, the class and what
    was found), and the family's image values report that reason.

    Through a `Scatter.helper`, the sites are the helper's calls, each drilling
    into `helper_rule`.
    """
    host = defining_class(host) or host
    forward = innermost(host.__dict__.get("forward"))
    called = scatter.helper or scatter.callee
    found = calls(forward, called) if forward is not None else 0
    stem = label_stem(called)
    labels = tuple(f"{stem}_{index}" for index in range(max(found, scatter.image + 1)))
    inner = helper_rule(host, scatter) if scatter.helper is not None else None
    return Rule(
        f"{model_type_of(host.__module__)}{SCATTER_SUFFIX}",
        f"{host.__module__}:{host.__qualname__}.forward",
        {called: labels},
        purpose=scatter.purpose or default_purpose(len(labels), scatter.in_root, scatter.media),
        drill={label: inner for label in labels} if inner is not None else {},
        variants=scatter.variants,
    )


def helper_rule(host: type, scatter: Scatter) -> Rule:
    """The rule for the host's helper that scatters (`Scatter.helper`, ``self._merge_visual_features``): its one
    call of ``scatter.callee`` (``inputs_embeds_masked_scatter_0``), argument 1 the medium's features
    (``{model_type}.merge-visual-features``)."""
    method = scatter.helper.rpartition(".")[2]
    owner = defining_class(host, method) or host
    return Rule(
        f"{model_type_of(owner.__module__)}.{method.strip('_').replace('_', '-')}",
        f"{owner.__module__}:{owner.__qualname__}.{method}",
        {scatter.callee: (f"{label_stem(scatter.callee)}_0",)},
        purpose="the helper the host calls once per medium: the medium's features scattered into the embeddings",
    )
