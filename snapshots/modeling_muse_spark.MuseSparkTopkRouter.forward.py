# rule muse_spark.MuseSparkTopkRouter: the router's logits: tokens in, one score per expert out, before the top-k choice
# transformers.models.muse_spark.modeling_muse_spark:MuseSparkTopkRouter.forward
# transformers/models/muse_spark/modeling_muse_spark.py
# sites: F_linear_0

def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hidden_states = hidden_states.view(-1, self.hidden_dim)
    # Different from MiniMaxM2: convert to float32 before linear projection and scale by output multiplier.
    router_logits = __vlm_site__("F_linear_0", F.linear, hidden_states.type(torch.float32), self.weight.type(torch.float32))
    router_logits = router_logits * self.output_multiplier
    routing_weights = self.scoring_function(router_logits)
    scores_for_choice = routing_weights + self.e_score_correction_bias
    topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
    top_k_weights = routing_weights.gather(1, topk_indices)
    # Different from MiniMaxM2: add topk prob eps and scale by routed scaling factor.
    top_k_weights = top_k_weights / (top_k_weights.sum(dim=-1, keepdim=True) + self.norm_topk_prob_eps)
    top_k_weights = top_k_weights * self.routed_scaling_factor
    return router_logits, top_k_weights, topk_indices
