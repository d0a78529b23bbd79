# rule muse_spark.residual-gate: a residual gate's per-channel scales: of the sublayer's output (beta), and of the stream entering it (alpha)
# transformers.models.muse_spark.modeling_muse_spark:MuseSparkResidualGate.forward
# transformers/models/muse_spark/modeling_muse_spark.py
# sites: torch_sigmoid_0, torch_sigmoid_1, torch_sqrt_0

def forward(self, residual: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
    w = self.gate / self.temperature
    beta = __vlm_site__("torch_sigmoid_0", torch.sigmoid, w)
    alpha = __vlm_site__("torch_sqrt_0", torch.sqrt, torch.clamp(__vlm_site__("torch_sigmoid_1", torch.sigmoid, -w) * (1.0 + beta), min=self.eps))
    return (alpha * residual + beta * hidden_states).to(residual.dtype)
