# rule llama4.Llama4Router: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.llama4.modeling_llama4:Llama4Router.forward
# transformers/models/llama4/modeling_llama4.py
# sites: forward_0

def forward(self, hidden_states):
    router_logits = __vlm_site__("forward_0", super().forward, hidden_states)
    router_top_value, router_indices = torch.topk(router_logits, self.top_k, dim=1)
    router_scores = torch.full_like(router_logits, float("-inf")).scatter_(1, router_indices, router_top_value)
    router_scores = torch.nn.functional.sigmoid(router_scores.float()).to(router_scores.dtype)
    return router_scores, router_logits
