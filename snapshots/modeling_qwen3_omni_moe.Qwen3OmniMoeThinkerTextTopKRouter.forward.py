# rule qwen3_omni_moe.Qwen3OmniMoeThinkerTextTopKRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe:Qwen3OmniMoeThinkerTextTopKRouter.forward
# transformers/models/qwen3_omni_moe/modeling_qwen3_omni_moe.py
# sites: F_linear_0

def forward(self, hidden_states):
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = __vlm_site__("F_linear_0", F.linear, hidden_states, self.weight)  # (seq_len, num_experts)
    router_probs = torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)  # (seq_len, top_k)
    if self.norm_topk_prob:
        router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
    router_top_value = router_top_value.to(router_logits.dtype)
    router_scores = router_top_value
    return router_logits, router_scores, router_indices
