"""Rules found from the model: the rules of a forward's shape, the attention kernel of every other class on the shared
interface, the routers' logits, the host's scatters.

Synthetic modules (written to files, so their forwards have source) stand in
for a transformers modeling module where the point is what the finder does
with a forward it has not seen; the tiny checkpoints check that what it finds
on real models is every attention class and every scatter they hold.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from synthetic import write_module

import envoys
from envoys import testing
from envoys.catalog import catalog
from envoys.families import family_for
from envoys.rules import rules_for_model
from envoys.testing import NAMES, build
from envoys.vision.scatter_host import ImageScatter
from instrument import DriftError, compile_rule, install_all
from instrument.calls import assigned_call, bound_default, calls, filled_in_place
from instrument.decorators import UnknownDecorator, peel
from instrument.install import INSTALLED
from instrument.versions import for_installed
from rewrites import FOUND, deltanet, qwen_vit_attention, qwen_vit_windows, rules_for_classes
from rewrites.attention import INTERFACE, KERNEL_SITE, SOFTMAX_SITE, attention_rules
from rewrites.deepstack import DEEPSTACK
from rewrites.found import found_rules
from rewrites.image_scatter import IMAGE_SITE, Scatter, scatter_rule
from rewrites.router import logits_site, router_rules

ATTENTION = '''
import functools

import torch
from torch import nn


def eager_attention_forward(module, query, key, value, attention_mask, **kwargs):
    weights = nn.functional.softmax(query @ key.transpose(-1, -2), dim=-1)
    return weights @ value, weights


def other_kernel(module, query, key, value, attention_mask, **kwargs):
    return value, None


class Lookup:
    def get_interface(self, implementation, default):
        return default


FUNCTIONS = Lookup()


class Attention(nn.Module):
    def forward(self, hidden_states):
        attention_interface = FUNCTIONS.get_interface("eager", eager_attention_forward)
        output, weights = attention_interface(self, hidden_states, hidden_states, hidden_states, None)
        return output


class PlainDefault(nn.Module):
    def forward(self, hidden_states):
        attention_interface: object = eager_attention_forward
        output, weights = attention_interface(self, hidden_states, hidden_states, hidden_states, None)
        return output


class Inherits(Attention):
    pass


class CalledTwice(nn.Module):
    def forward(self, hidden_states):
        attention_interface = FUNCTIONS.get_interface("eager", eager_attention_forward)
        first, _ = attention_interface(self, hidden_states, hidden_states, hidden_states, None)
        second, _ = attention_interface(self, first, first, first, None)
        return second


class TwoDefaults(nn.Module):
    def forward(self, hidden_states):
        attention_interface = pick(eager_attention_forward, other_kernel)
        output, _ = attention_interface(self, hidden_states, hidden_states, hidden_states, None)
        return output


def pick(first, second):
    return first


class NotAttention(nn.Module):
    def forward(self, hidden_states):
        return hidden_states * 2


def route_through_a_hub(cls):
    """A class decorator no one told the compiler about, wrapping the forward as kernels' use_kernelized_func does."""
    original = cls.forward

    @functools.wraps(original)
    def routed(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    cls.forward = routed
    return cls


@route_through_a_hub
class Wrapped(nn.Module):
    def forward(self, hidden_states):
        attention_interface: object = eager_attention_forward
        output, weights = attention_interface(self, hidden_states, hidden_states, hidden_states, None)
        return output


def opaque(cls):
    """A wrapper that does not say which function it calls."""
    original, spare = cls.forward, cls.forward

    def routed(self, *args, **kwargs):
        return (original if args else spare)(self, *args, **kwargs)

    cls.forward = routed
    return cls


@opaque
class Unreadable(nn.Module):
    def forward(self, hidden_states):
        attention_interface: object = eager_attention_forward
        return attention_interface(self, hidden_states, hidden_states, hidden_states, None)[0]
'''

HOSTS = '''
import torch
from torch import nn


class Host(nn.Module):
    def forward(self, inputs_embeds, mask, images, videos=None):
        inputs_embeds = inputs_embeds.masked_scatter(mask, images)
        if videos is not None:
            inputs_embeds = inputs_embeds.masked_scatter(mask, videos)
        return inputs_embeds


class NoScatter(nn.Module):
    def forward(self, inputs_embeds, mask, images):
        return torch.where(mask, images, inputs_embeds)


class Merger(nn.Module):
    def forward(self, inputs_embeds, mask, images):
        return self.inputs_merger(inputs_embeds=inputs_embeds, mask=mask, image_hidden_states=images)

    def inputs_merger(self, inputs_embeds, mask, image_hidden_states):
        return inputs_embeds.masked_scatter(mask, image_hidden_states)
'''


ROUTERS = '''
import torch
from torch import nn
from torch.nn import functional as F


class Router(nn.Module):
    def forward(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, 4)
        router_logits = F.linear(hidden_states, self.weight)
        router_top_value, router_indices = torch.topk(router_logits.softmax(-1), 2, dim=-1)
        return router_logits, router_top_value, router_indices


class LinearRouter(nn.Linear):
    def forward(self, hidden_states):
        router_logits = super().forward(hidden_states)
        return torch.topk(router_logits, 1, dim=1), router_logits


class SparseBlock(nn.Module):
    def forward(self, hidden_states):
        router_logits, weights, chosen = self.gate(hidden_states)
        return self.experts(hidden_states, chosen, weights)


class LinearTwice(nn.Module):
    def forward(self, hidden_states):
        router_logits = F.linear(hidden_states, self.weight)
        return router_logits, F.linear(hidden_states, self.bias)


class SplitBlock(nn.Module):
    def forward(self, hidden_states, vision):
        router_logits = torch.zeros(hidden_states.shape[0], 4)
        out, router_logits[~vision] = self.text_moe(hidden_states[~vision])
        return out, router_logits
'''


SHAPES = '''
import torch
from torch import nn


def eager_attention_forward(module, query, key, value, attention_mask, **kwargs):
    weights = nn.functional.softmax(query @ key.transpose(-1, -2), dim=-1)
    return weights @ value, weights


def flash_requested(module):
    return False


class PackedVisionAttention(nn.Module):
    """The per-image shape: the kernel over every image, else once per image between a split and a join."""

    def forward(self, hidden_states, cu_seqlens):
        query, key, value = hidden_states, hidden_states, hidden_states
        attention_interface = eager_attention_forward
        if flash_requested(self):
            output, _ = attention_interface(self, query, key, value, None, cu_seq_lens_q=cu_seqlens)
        else:
            lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
            splits = [torch.split(tensor, lengths, dim=2) for tensor in (query, key, value)]
            output = torch.cat([attention_interface(self, q, k, v, None)[0] for q, k, v in zip(*splits)], dim=1)
        return output


class PackedAudioAttention(PackedVisionAttention):
    def forward(self, hidden_states, cu_seqlens):
        query, key, value = hidden_states, hidden_states, hidden_states
        attention_interface = eager_attention_forward
        if flash_requested(self):
            output, _ = attention_interface(self, query, key, value, None, cu_seq_lens_q=cu_seqlens)
        else:
            lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
            splits = [torch.split(tensor, lengths, dim=2) for tensor in (query, key, value)]
            output = torch.cat([attention_interface(self, q, k, v, None)[0] for q, k, v in zip(*splits)], dim=1)
        return output


class InheritsPacked(PackedVisionAttention):
    pass


class OneKernelCall(nn.Module):
    """A near miss: the split and the join, but the kernel called once."""

    def forward(self, hidden_states, cu_seqlens):
        query, key, value = hidden_states, hidden_states, hidden_states
        attention_interface = eager_attention_forward
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        joined = torch.cat(torch.split(value, lengths, dim=2), dim=2)
        output, _ = attention_interface(self, query, key, joined, None)
        return output


class NoSplit(nn.Module):
    """A near miss: the kernel called twice (two branches of a differential attention), joined, nothing split."""

    def forward(self, hidden_states):
        attention_interface = eager_attention_forward
        first, _ = attention_interface(self, hidden_states, hidden_states, hidden_states, None)
        second, _ = attention_interface(self, hidden_states, hidden_states, hidden_states, None)
        return torch.cat([first, second], dim=-1)


def get_vision_window_index(grid_thw, window_size):
    return torch.arange(int(grid_thw.prod())), None


class PermutingTower(nn.Module):
    def forward(self, hidden_states, grid_thw):
        window_index, _ = get_vision_window_index(grid_thw, 4)
        hidden_states = self.permute_input_for_window_attn(hidden_states, window_index, seq_len=4)
        cos, sin = (self.permute_input_for_window_attn(f, window_index, seq_len=4) for f in (hidden_states, hidden_states))
        return hidden_states[torch.argsort(window_index)]

    def permute_input_for_window_attn(self, tensor, window_index, seq_len):
        return tensor[window_index]


class IndexingTower(nn.Module):
    def forward(self, hidden_states, grid_thw):
        window_index, _ = get_vision_window_index(grid_thw, 4)
        hidden_states = hidden_states[window_index, :]
        return hidden_states[torch.argsort(window_index)]


class MethodTower(nn.Module):
    def forward(self, hidden_states, grid_thw):
        window_index, _ = self.get_window_index(grid_thw)
        hidden_states = hidden_states[window_index, :]
        return hidden_states[torch.argsort(window_index)]

    def get_window_index(self, grid_thw):
        return get_vision_window_index(grid_thw, 4)


class WindowMerger(nn.Module):
    """Windows read in window order and pooled: the order is never restored."""

    def forward(self, hidden_states, grid_thw):
        window_index, _ = self.get_window_index(grid_thw)
        return hidden_states[window_index, :].mean(0)

    def get_window_index(self, grid_thw):
        return get_vision_window_index(grid_thw, 4)


class TextModel(nn.Module):
    def forward(self, hidden_states, visual_pos_masks, deepstack_visual_embeds):
        for index, layer in enumerate(self.layers):
            hidden_states = layer(hidden_states)
            if index < len(deepstack_visual_embeds):
                hidden_states = self._deepstack_process(hidden_states, visual_pos_masks, deepstack_visual_embeds[index])
        return hidden_states


class TalkerModel(TextModel):
    def forward(self, hidden_states, visual_pos_masks, deepstack_visual_embeds):
        for index, layer in enumerate(self.layers):
            hidden_states = layer(hidden_states)
            if index < len(deepstack_visual_embeds):
                hidden_states = self._deepstack_process(hidden_states, visual_pos_masks, deepstack_visual_embeds[index])
        return hidden_states


class OldDeltaNet(nn.Module):
    """The gated DeltaNet as releases before 5.15 read it: the kernels through the block's attributes."""

    def forward(self, query, key, value, g, beta, cache=None):
        if cache is None:
            output, state = self.chunk_gated_delta_rule(query, key, value, g=g, beta=beta)
        else:
            output, state = self.recurrent_gated_delta_rule(query, key, value, g=g, beta=beta)
        return output
'''


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory):
    return write_module(tmp_path_factory.mktemp("shapes"), "modeling_shapes", SHAPES)


@pytest.fixture(scope="module")
def routers(tmp_path_factory: pytest.TempPathFactory):
    return write_module(tmp_path_factory.mktemp("routers"), "modeling_routers", ROUTERS)


@pytest.fixture(scope="module")
def attention(tmp_path_factory: pytest.TempPathFactory):
    return write_module(tmp_path_factory.mktemp("found"), "modeling_found", ATTENTION)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory):
    return write_module(tmp_path_factory.mktemp("hosts"), "modeling_hosts", HOSTS)


# -- the attention rule ------------------------------------------------------------------------------------


def test_a_class_on_the_shared_interface_gets_a_kernel_rule_drilling_into_its_eager_kernel(attention):
    eager, rule = attention_rules([attention.Attention])
    assert rule.name == "found.Attention" and rule.target == "modeling_found:Attention.forward"
    assert rule.sites == {INTERFACE: (KERNEL_SITE,)}
    assert eager.target == "modeling_found:eager_attention_forward" and rule.drill == {KERNEL_SITE: eager}
    compiled = compile_rule(rule)
    assert compiled.site_names == (KERNEL_SITE,) and compiled.drills[KERNEL_SITE].site_names == (SOFTMAX_SITE,)


def test_the_default_kernel_is_read_from_a_plain_binding_or_the_lookup_it_is_passed_to(attention):
    assert bound_default(attention.Attention.forward, INTERFACE) is attention.eager_attention_forward
    assert bound_default(attention.PlainDefault.forward, INTERFACE) is attention.eager_attention_forward
    assert bound_default(attention.TwoDefaults.forward, INTERFACE) is None  # two candidates: none is guessed
    assert bound_default(attention.NotAttention.forward, INTERFACE) is None


def test_an_inherited_forward_gets_one_rule_on_the_class_that_defines_it(attention):
    rules = attention_rules([attention.Inherits, attention.Attention])
    assert [rule.name for rule in rules] == ["found.eager-attention", "found.Attention"]


def test_classes_off_the_interface_and_forwards_another_rule_claims_get_none(attention):
    assert attention_rules([attention.NotAttention]) == ()
    assert attention_rules([attention.Attention], claimed=["modeling_found:Attention.forward"]) == ()


def test_a_kernel_without_a_default_is_served_without_the_softmax_drill(attention):
    (rule,) = attention_rules([attention.TwoDefaults])
    assert rule.drill == {} and compile_rule(rule).site_names == (KERNEL_SITE,)


def test_a_forward_that_calls_the_kernel_twice_is_reported_by_name_not_guessed(attention):
    _, rule = attention_rules([attention.CalledTwice])
    with pytest.raises(DriftError, match=r"rule 'found\.CalledTwice': CalledTwice\.forward .*expected call sites "
                                         r"\['attention_interface_1'\] of `attention_interface`, found "
                                         r"\['attention_interface_1', 'attention_interface_2'\]"):
        compile_rule(rule)


def test_an_attention_class_under_a_wrapper_the_compiler_does_not_know_keeps_its_rule_whose_build_names_it(attention):
    """The finder looks through the unknown wrapper and gives the class its rule; building it fails naming the class,
    the wrapper's factory and what to do, so the class's values say why instead of vanishing."""
    _, rule = attention_rules([attention.Wrapped])
    assert rule.name == "found.Wrapped"
    with pytest.raises(DriftError) as raised:
        compile_rule(rule)
    message = str(raised.value)
    for part in ("rule 'found.Wrapped'", "Wrapped.forward", "made by modeling_found:route_through_a_hub",
                 "add 'modeling_found:route_through_a_hub' to instrument.decorators.KNOWN with the closure cell "
                 "'original'"):
        assert part in message


def test_a_wrapper_that_hides_what_it_calls_is_an_error_not_a_class_left_out(attention):
    with pytest.raises(UnknownDecorator, match=r"opaque\.<locals>\.routed .*made by modeling_found:opaque.*closure "
                                               r"cell that holds the function it wraps"):
        attention_rules([attention.Unreadable])


def test_kernels_use_kernelized_func_is_peeled_and_rebuilt_around_the_rewritten_forward():
    """transformers' attention classes under kernels' wrapper (installed with transformers from 5.25 on) get their
    rules, and the rebuilt forward still routes through the wrapper."""
    kernels = pytest.importorskip("kernels")
    from transformers.models.qwen2 import modeling_qwen2

    outer = modeling_qwen2.Qwen2Attention.forward
    wrappers = [layer.wrapper.__code__.co_qualname for layer in peel(outer)[1]]
    if not any("use_kernelized_func" in name for name in wrappers):
        pytest.skip(f"this transformers does not wrap Qwen2Attention with kernels {kernels.__version__}")
    eager, rule = attention_rules([modeling_qwen2.Qwen2Attention])
    assert (eager.name, rule.name) == ("qwen2.eager-attention", "qwen2.Qwen2Attention")
    compiled = compile_rule(rule)
    assert compiled.site_names == (KERNEL_SITE,)
    rebuilt = compiled.build(lambda label, function, *args, **kwargs: function(*args, **kwargs))
    assert rebuilt.__code__ is outer.__code__ and rebuilt is not outer  # a copy of kernels' wrapper, around ours


def test_the_rules_of_a_shape_claim_their_forwards_from_the_attention_finder():
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLAttention, Qwen2_5_VLVisionAttention

    names = [rule.name for rule in rules_for_classes([Qwen2_5_VLVisionAttention, Qwen2_5_VLAttention])]
    # the per-image rule drills into the eager kernel, listed before it, as the attention finder lists it
    assert names == ["qwen2_5_vl.eager-attention", "qwen2_5_vl.vision-attention", "qwen2_5_vl.Qwen2_5_VLAttention"]


# -- the rules of a forward's shape -----------------------------------------------------------------------


def test_a_packed_attention_forward_gets_the_per_image_rule_and_an_audio_class_the_audio_one(shapes):
    eager, vision, audio = found_rules([shapes.PackedVisionAttention, shapes.InheritsPacked,
                                        shapes.PackedAudioAttention], FOUND)
    assert eager.name == "shapes.eager-attention"
    assert vision.drill == {qwen_vit_attention.PER_IMAGE_SITE: eager} and audio.drill == {}  # each call's softmax
    assert (vision.name, vision.target) == ("shapes.vision-attention", "modeling_shapes:PackedVisionAttention.forward")
    assert (audio.name, audio.target) == ("shapes.audio-attention", "modeling_shapes:PackedAudioAttention.forward")
    assert vision.sites == audio.sites == qwen_vit_attention.SITES
    assert vision.variants == audio.variants == (qwen_vit_attention.BEFORE_5_1,)
    assert compile_rule(vision).site_names == (qwen_vit_attention.FLASH_SITE, qwen_vit_attention.SPLIT_SITE,
                                               qwen_vit_attention.PER_IMAGE_SITE, qwen_vit_attention.JOIN_SITE)


def test_a_near_miss_of_the_per_image_shape_gets_the_shared_attention_rule(shapes):
    """One kernel call between a split and a join is an ordinary attention forward: the shared finder's kernel rule,
    drilling into its eager kernel. Two calls with nothing split are no per-image attention either: they are left to
    the shared finder, whose rule then reports the second call by name (`DriftError`)."""
    assert found_rules([shapes.OneKernelCall, shapes.NoSplit], FOUND) == ()
    rules = rules_for_classes([shapes.OneKernelCall, shapes.NoSplit])
    assert [rule.name for rule in rules] == ["shapes.eager-attention", "shapes.OneKernelCall", "shapes.NoSplit"]
    assert compile_rule(rules[1]).site_names == (KERNEL_SITE,)
    with pytest.raises(DriftError, match=r"rule 'shapes\.NoSplit'"):
        compile_rule(rules[2])


def test_a_rule_of_a_shape_is_left_out_where_another_rule_claims_its_forward(shapes):
    assert [rule.name for rule in rules_for_classes([shapes.PackedVisionAttention])] == ["shapes.eager-attention",
                                                                                         "shapes.vision-attention"]
    assert found_rules([shapes.PackedVisionAttention], FOUND,
                       claimed=["modeling_shapes:PackedVisionAttention.forward"]) == ()


@pytest.mark.parametrize(("owner", "template", "served"), [
    ("PermutingTower", qwen_vit_windows.PERMUTED,
     (qwen_vit_windows.WINDOW_SITE, "self_permute_input_for_window_attn_1")),
    ("IndexingTower", qwen_vit_windows.INDEXED, (qwen_vit_windows.INDEX_SITE,)),
    ("MethodTower", qwen_vit_windows.BY_METHOD, (qwen_vit_windows.INDEX_SITE,)),
])
def test_a_windowed_tower_gets_the_window_rule_its_reordering_decides(shapes, owner, template, served):
    """A tower calling both the permutation and get_vision_window_index gets the permutation's sites (Qwen2.5-VL from
    5.17); one permuting inline, the index call's (5.9 to 5.16); one computing the index with self.get_window_index,
    that call served as the index call (before 5.9): the sites the release variants of the written rule gave."""
    (rule,) = found_rules([getattr(shapes, owner)], FOUND)
    assert (rule.name, rule.sites, rule.serve_as) == ("shapes.vision-windows", template.sites, template.serve_as)
    assert compile_rule(rule).site_names == served


def test_a_window_merger_that_never_restores_the_order_gets_no_window_rule(shapes):
    assert found_rules([shapes.WindowMerger], FOUND) == ()


def test_two_classes_of_one_module_with_one_shape_each_get_the_rule_the_second_named_by_its_class(shapes):
    first, second = found_rules([shapes.TextModel, shapes.TalkerModel], FOUND)
    assert (first.name, first.target) == ("shapes.deepstack", "modeling_shapes:TextModel.forward")
    assert (second.name, second.target) == ("shapes.TalkerModel.deepstack", "modeling_shapes:TalkerModel.forward")
    for rule in (first, second):
        assert compile_rule(rule).site_names == DEEPSTACK.sites["self._deepstack_process"]


def test_a_forward_fits_the_form_the_installed_release_reads(shapes, monkeypatch):
    """The gated DeltaNet calling the kernels through the block's attributes fits only where the installed release's
    form of the rule (its variant before 5.15) calls them so."""
    assert found_rules([shapes.OldDeltaNet], FOUND) == ()  # no release known: the rule's own form
    monkeypatch.setattr("rewrites.found.for_installed", lambda rule: rule.at("5.10.0"))
    (rule,) = found_rules([shapes.OldDeltaNet], FOUND)
    assert rule.name == "shapes.gated-deltanet" and rule.variants == deltanet.DELTANET.variants
    assert compile_rule(rule.at("5.10.0")).site_names == (deltanet.CHUNK_SITE, deltanet.RECURRENT_SITE)


# -- the router rule --------------------------------------------------------------------------------------


def test_a_router_assigning_its_logits_from_one_call_gets_a_rule_on_that_call(routers):
    rule, linear = router_rules([routers.Router, routers.LinearRouter])
    assert rule.name == "routers.Router" and rule.target == "modeling_routers:Router.forward"
    assert rule.sites == {"F.linear": ("F_linear_0",)} and compile_rule(rule).site_names == ("F_linear_0",)
    assert linear.sites == {"forward": ("forward_0",)} and compile_rule(linear).site_names == ("forward_0",)
    assert (logits_site(routers.Router), logits_site(routers.LinearRouter)) == ("F_linear_0", "forward_0")


def test_a_block_unpacking_its_routers_output_and_a_twice_called_callee_get_none(routers):
    assert router_rules([routers.SparseBlock, routers.LinearTwice]) == ()
    assert assigned_call(routers.SparseBlock.forward, "router_logits") is None  # a tuple target
    assert assigned_call(routers.LinearTwice.forward, "router_logits") == "F.linear"  # but called twice: no rule
    assert router_rules([routers.Router], claimed=["modeling_routers:Router.forward"]) == ()


def test_a_block_filling_a_buffer_with_its_routers_logits_gets_none(routers):
    # ERNIE-4.5-VL's modality-split block: the zeros it fills are no router's logits
    assert assigned_call(routers.SplitBlock.forward, "router_logits") == "torch.zeros"
    assert filled_in_place(routers.SplitBlock.forward, "router_logits")
    assert router_rules([routers.SplitBlock]) == ()


# -- the scatter rule --------------------------------------------------------------------------------------


def test_every_scatter_call_of_the_host_is_a_site_labelled_as_nnsight_labels_it(hosts):
    rule = scatter_rule(hosts.Host)
    assert rule.name == "hosts.image-scatter" and rule.target == "modeling_hosts:Host.forward"
    assert rule.sites == {"inputs_embeds.masked_scatter": (IMAGE_SITE, "inputs_embeds_masked_scatter_1")}
    assert rule.purpose == "image (_0) and video (_1) features scattered into the embeddings"
    assert compile_rule(rule).site_names == (IMAGE_SITE, "inputs_embeds_masked_scatter_1")


def test_a_host_without_the_scatter_fails_to_build_saying_what_it_found(hosts):
    rule = scatter_rule(hosts.NoScatter)
    with pytest.raises(DriftError, match=r"rule 'hosts\.image-scatter': NoScatter\.forward .*expected call sites "
                                         r"\['inputs_embeds_masked_scatter_0'\] of `inputs_embeds\.masked_scatter`, found none"):
        compile_rule(rule)


def test_a_family_states_only_what_differs_a_helper_or_the_images_call(hosts):
    merger = scatter_rule(hosts.Merger, Scatter(callee="self.inputs_merger", argument=(2, "image_hidden_states")))
    assert merger.sites == {"self.inputs_merger": ("self_inputs_merger_0",)}
    audio_first = Scatter(media=("audio", "image", "video"))  # the Qwen omni thinkers' order
    assert audio_first.site == "inputs_embeds_masked_scatter_1" and audio_first.image == 1
    assert audio_first.site_of("audio") == "inputs_embeds_masked_scatter_0"
    assert scatter_rule(hosts.Host, audio_first).sites["inputs_embeds.masked_scatter"][-1] == (
        "inputs_embeds_masked_scatter_1")


def test_a_scatter_counted_on_the_tree_is_one_the_rewriter_finds(hosts):
    assert calls(hosts.Host.forward, "inputs_embeds.masked_scatter") == 2
    assert calls(hosts.Merger.forward, "inputs_embeds.masked_scatter") == 0  # the helper's own forward is not read
    assert calls(hosts.Merger.forward, "self.inputs_merger") == 1


# -- on the tiny checkpoints -------------------------------------------------------------------------------


def _chain(func: ast.expr) -> str:
    """A callee's attribute chain as nnsight names it: subscripts skipped, cut where a call's result (or any other
    expression) begins (``inputs_embeds.to(device).masked_scatter`` -> ``masked_scatter``)."""
    parts = []
    while isinstance(func, ast.Attribute | ast.Subscript):
        if isinstance(func, ast.Attribute):
            parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _rewritten(source: str) -> set[str]:
    """The callees a forward's source calls, dotted (a check independent of the finder's own reader)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            found.add(ast.unparse(node.func))
            found.add(_chain(node.func))
    return found


@pytest.mark.parametrize("name", NAMES)
def test_every_attention_class_a_checkpoint_holds_is_found(name):
    import inspect

    model, _ = build(name)
    rules = rules_for_model(model, family_for(model.config.model_type))
    targets = {rule.target for rule in rules}
    for module in model.modules():
        owner = next(base for base in type(module).__mro__ if "forward" in base.__dict__)
        target = f"{owner.__module__}:{owner.__qualname__}.forward"
        if INTERFACE + "(" in inspect.getsource(owner.forward).replace(" ", ""):
            assert target in targets, f"{name}: {owner.__qualname__} calls the attention interface and has no rule"


@pytest.mark.parametrize("name", NAMES)
def test_every_router_a_checkpoint_holds_is_found(name):
    """Every module whose own forward assigns ``router_logits = <call>`` (read here with ``ast.unparse``, not the
    finder's reader) has a router rule on that call, unless the forward then fills it in place
    (``router_logits[mask] = ...``: ERNIE-4.5-VL's block, whose call allocates a buffer for its routers' logits)."""
    import inspect

    model, _ = build(name)
    rules = {rule.target: rule for rule in rules_for_model(model, family_for(model.config.model_type))}
    for module in model.modules():
        owner = next(base for base in type(module).__mro__ if "forward" in base.__dict__)
        tree = ast.parse(textwrap.dedent(inspect.getsource(owner.forward)))
        assigned = [ast.unparse(node.value.func) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and [ast.unparse(t) for t in node.targets] == ["router_logits"] and isinstance(node.value, ast.Call)]
        filled = any(isinstance(part, ast.Subscript) and ast.unparse(part.value) == "router_logits"
                     for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets
                     for part in (target.elts if isinstance(target, ast.Tuple) else [target]))
        if assigned and not filled:
            rule = rules.get(f"{owner.__module__}:{owner.__qualname__}.forward")
            assert rule is not None, f"{name}: {owner.__qualname__} computes router logits and has no rule"
            callee = assigned[0].replace("super().", "")
            assert list(rule.sites) == [callee], (name, owner.__qualname__)


@pytest.mark.parametrize("name", NAMES)
def test_the_host_found_holds_the_scatter_and_gets_the_scatter_envoy(name):
    import inspect

    model, _ = build(name)
    family = family_for(model.config.model_type)
    host = family.host_class(model)
    scatter = for_installed(rules_for_model(model, family)[0])  # a release's variant may scatter through a helper
    assert set(scatter.sites) <= _rewritten(textwrap.dedent(inspect.getsource(host.forward)))
    if not family.scatter.in_root:
        assert family.envoys_for(model)[host] is not None and issubclass(family.envoys_for(model)[host], ImageScatter)
        assert any(type(child) is host for child in model.children())  # the wrapper's inner model


@pytest.mark.parametrize("name", NAMES)
def test_every_rule_a_checkpoint_runs_is_installed_and_in_the_catalogue(name):
    model, _ = build(name)
    rules = rules_for_model(model, family_for(model.config.model_type))
    catalogued = {rule.name: rule for rule in catalog()}
    assert {rule.name for rule in rules} <= set(catalogued)
    assert all(model.config.model_type in catalogued[rule.name].model_types for rule in rules)
    installed = install_all(model, [rule for rule in rules if rule.owner_name is not None])
    assert all(paths for paths in installed.values()), {name: paths for name, paths in installed.items() if not paths}


def test_the_catalogue_names_each_rule_once_with_the_families_that_run_it():
    names = [rule.name for rule in catalog()]
    assert len(names) == len(set(names)) and all(rule.model_types for rule in catalog())


def test_site_labels_are_written_once_in_the_rules_and_imported_by_the_envoys():
    """No string constant in envoys/ (docstrings and messages aside) is a label some rule defines."""
    labels = {label for rule in catalog() for labels in rule.sites.values() for label in labels}
    labels |= {label for rule in catalog() for inner in rule.drill.values() for ls in inner.sites.values() for label in ls}
    restated = []
    for path in Path(envoys.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in labels:
                restated.append(f"{path.name}:{node.lineno} {node.value!r}")
    assert restated == []


def test_finding_the_rules_changes_nothing_on_the_model():
    model, _ = build("llava-siglip")
    before = {name: sorted(vars(module)) for name, module in model.named_modules()}
    rules_for_model(model, family_for("llava"))
    assert {name: sorted(vars(module)) for name, module in model.named_modules()} == before
    assert not any("forward" in vars(module) or INSTALLED in vars(module) for module in model.modules())


def test_a_checkpoint_the_catalogue_cannot_build_is_named_with_what_to_install(monkeypatch):
    def missing_backend(name):
        raise ImportError("ParakeetFeatureExtractor requires the librosa library")

    monkeypatch.setattr(testing, "build_empty", missing_backend)
    catalog.cache_clear()
    try:
        with pytest.raises(ImportError, match=rf"the rule catalogue builds every tiny checkpoint, and '{NAMES[0]}' "
                                              r"cannot be built here: .*librosa.*pip install -e '\.\[test\]'"):
            catalog()
    finally:
        catalog.cache_clear()
