# rule step3p7.Step3p7TopKRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.step3p7.modeling_step3p7:Step3p7TopKRouter.forward
# transformers/models/step3p7/modeling_step3p7.py
# sites: F_linear_0

def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = __vlm_site__("F_linear_0", F.linear, hidden_states.to(self.weight.dtype), self.weight)
    # Sigmoid scoring (not softmax), as in M2.
    routing_weights = F.sigmoid(router_logits.float())
    scores_for_choice = routing_weights + self.e_score_correction_bias
    _, top_k_index = torch.topk(scores_for_choice, self.top_k, dim=-1, sorted=False)
    top_k_weights = routing_weights.gather(1, top_k_index)
    top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True)
    return router_logits, top_k_weights, top_k_index
