# rule deepseek_ocr2.DeepseekOcr2TextTopkRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.deepseek_ocr2.modeling_deepseek_ocr2:DeepseekOcr2TextTopkRouter.forward
# transformers/models/deepseek_ocr2/modeling_deepseek_ocr2.py
# sites: F_linear_0

def forward(self, hidden_states):
    hidden_states = hidden_states.view(-1, self.hidden_dim)
    router_logits = __vlm_site__("F_linear_0", F.linear, hidden_states.type(torch.float32), self.weight.type(torch.float32))
    scores = router_logits.softmax(dim=-1, dtype=torch.float32)
    if self.topk_method == "greedy":
        topk_weights, topk_indices = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
    elif self.topk_method == "group_limited_greedy":
        group_scores = scores.view(-1, self.num_group, self.num_experts // self.num_group).max(dim=-1).values
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (
            group_mask.unsqueeze(-1)
            .expand(-1, self.num_group, self.num_experts // self.num_group)
            .reshape(-1, self.num_experts)
        )
        scores = scores.masked_fill(~score_mask.bool(), 0.0)
        topk_weights, topk_indices = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
    topk_weights = topk_weights * self.routed_scaling_factor
    return router_logits, topk_weights, topk_indices
