# rule dots3_note.Dots3NoteTextTopkRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.dots3_note.modeling_dots3_note:Dots3NoteTextTopkRouter.forward
# transformers/models/dots3_note/modeling_dots3_note.py
# sites: F_linear_0

def forward(self, hidden_states):
    hidden_states = hidden_states.view(-1, self.hidden_dim)
    router_logits = __vlm_site__("F_linear_0", F.linear, hidden_states.type(torch.float32), self.weight.type(torch.float32))
    scores = router_logits.sigmoid()
    scores_for_choice = scores + self.e_score_correction_bias
    group_scores = (
        scores_for_choice.view(-1, self.num_group, self.num_experts // self.num_group)
        .topk(2, dim=-1)[0]
        .sum(dim=-1)
    )
    group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = (
        group_mask.unsqueeze(-1)
        .expand(-1, self.num_group, self.num_experts // self.num_group)
        .reshape(-1, self.num_experts)
    )
    scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
    topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
    topk_weights = scores.gather(1, topk_indices)
    if self.norm_topk_prob:
        denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
        topk_weights /= denominator
    topk_weights = topk_weights * self.routed_scaling_factor
    return router_logits, topk_weights, topk_indices
