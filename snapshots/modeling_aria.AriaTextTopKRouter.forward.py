# rule aria.AriaTextTopKRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.aria.modeling_aria:AriaTextTopKRouter.forward
# transformers/models/aria/modeling_aria.py
# sites: nn_functional_linear_0

def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    router_logits = __vlm_site__("nn_functional_linear_0", nn.functional.linear, hidden_states, self.weight)  # (num_tokens, num_experts)
    top_k_logits, top_k_index = torch.topk(router_logits, self.top_k, dim=-1)  # (num_tokens, top_k)
    top_k_weights = nn.functional.softmax(top_k_logits, dim=-1)  # (num_tokens, top_k)
    return router_logits, top_k_weights, top_k_index
