# rule dots3_note.Dots3NoteVisionTopKRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.dots3_note.modeling_dots3_note:Dots3NoteVisionTopKRouter.forward
# transformers/models/dots3_note/modeling_dots3_note.py
# sites: F_linear_0

def forward(
    self,
    hidden_states: torch.Tensor,
    e_score_correction_bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = __vlm_site__("F_linear_0", F.linear, hidden_states.float(), self.weight.float())
    routing_weights = torch.sigmoid(router_logits)

    scores_for_choice = routing_weights + e_score_correction_bias
    _, top_k_index = torch.topk(scores_for_choice, self.top_k, dim=-1, sorted=False)
    top_k_weights = routing_weights.gather(1, top_k_index)

    top_k_weights = top_k_weights / (top_k_weights.sum(dim=-1, keepdim=True) + 1e-20)
    # Key difference: extra scaling factor
    top_k_weights = top_k_weights * self.router_scaling_factor

    return router_logits, top_k_weights, top_k_index
