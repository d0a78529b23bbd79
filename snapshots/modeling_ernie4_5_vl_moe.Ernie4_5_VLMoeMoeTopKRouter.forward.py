# rule ernie4_5_vl_moe.Ernie4_5_VLMoeMoeTopKRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe:Ernie4_5_VLMoeMoeTopKRouter.forward
# transformers/models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py
# sites: F_linear_0

def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    device_type = hidden_states.device.type if isinstance(hidden_states.device.type, str) else "cpu"

    with maybe_autocast(device_type=device_type, enabled=False):  # Force float32
        router_logits = __vlm_site__("F_linear_0", F.linear, hidden_states.float(), self.weight.float())
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        _, selected_experts = torch.topk(self.moe_statics(routing_weights), self.top_k, dim=-1)
        routing_weights = torch.gather(routing_weights, dim=-1, index=selected_experts)
        routing_weights = routing_weights / torch.clamp(
            routing_weights.sum(dim=-1, keepdim=True), min=self.norm_min
        )
    routing_weights = routing_weights.to(hidden_states.dtype)
    return router_logits, routing_weights, selected_experts
