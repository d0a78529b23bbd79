# rule mistral_large4.MistralLarge4TextTopkRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.mistral_large4.modeling_mistral_large4:MistralLarge4TextTopkRouter.forward
# transformers/models/mistral_large4/modeling_mistral_large4.py
# sites: F_linear_0

def forward(self, hidden_states):
    hidden_states = hidden_states.view(-1, self.hidden_dim)
    # weight.float() should be a no-op because the weight is in _keep_in_fp32_modules_strict, but if a user changed
    # the dtype of the model after loading, it will prevent an error
    router_logits = __vlm_site__("F_linear_0", F.linear, hidden_states.float(), self.weight.float())
    scores = router_logits.softmax(-1)
    group_scores = (
        scores.view(-1, self.num_group, self.num_experts // self.num_group).topk(2, dim=-1)[0].sum(dim=-1)
    )
    group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = (
        group_mask.unsqueeze(-1)
        .expand(-1, self.num_group, self.num_experts // self.num_group)
        .reshape(-1, self.num_experts)
    )
    scores_for_choice = scores.masked_fill(~score_mask.bool(), 0.0)
    topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
    topk_weights = scores.gather(1, topk_indices)
    denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
    topk_weights /= denominator
    topk_weights = topk_weights * self.routed_scaling_factor
    return router_logits, topk_weights, topk_indices
