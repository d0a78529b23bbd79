# rule ovis2_5.merge-visual-features: the helper the host calls once per medium: the medium's features scattered into the embeddings
# transformers.models.ovis2_5.modeling_ovis2_5:Ovis2_5Model._merge_visual_features
# transformers/models/ovis2_5/modeling_ovis2_5.py
# sites: inputs_embeds_masked_scatter_0

def _merge_visual_features(
    self,
    input_ids: torch.LongTensor | None,
    inputs_embeds: torch.Tensor,
    visual_features: torch.Tensor,
    is_video: bool,
) -> torch.Tensor:
    """Replace visual placeholders and start/end tokens with their visual embeddings."""
    if is_video:
        boundary_token_ids = (self.config.video_start_token_id, self.config.video_end_token_id)
        first_indicator_index = 2
    else:
        boundary_token_ids = (self.config.image_start_token_id, self.config.image_end_token_id)
        first_indicator_index = 0

    num_visual_inputs = len(visual_features)
    visual_features = torch.cat(visual_features, dim=0).to(inputs_embeds.device, inputs_embeds.dtype)
    image_mask, video_mask = self.get_placeholder_mask(
        input_ids,
        inputs_embeds=inputs_embeds,
        image_features=None if is_video else visual_features,
        video_features=visual_features if is_video else None,
    )
    visual_mask = video_mask if is_video else image_mask
    merged_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, visual_mask, visual_features)

    visual_indicator_features = self.multi_modal_projector.get_visual_indicator_features(visual_features.device)
    visual_indicator_features = visual_indicator_features.to(inputs_embeds.device, inputs_embeds.dtype)

    for indicator_index, boundary_token_id in enumerate(boundary_token_ids, start=first_indicator_index):
        if input_ids is None:
            boundary_embedding = self.get_input_embeddings()(
                torch.full((), boundary_token_id, dtype=torch.long, device=inputs_embeds.device)
            )
            boundary_mask = (inputs_embeds == boundary_embedding).all(dim=-1)
        else:
            boundary_mask = input_ids == boundary_token_id
        num_boundary_tokens = boundary_mask.sum()
        torch_compilable_check(
            num_boundary_tokens == num_visual_inputs,
            lambda: (
                f"Expected {num_visual_inputs} visual boundary tokens with id {boundary_token_id}, but found "
                f"{num_boundary_tokens}."
            ),
        )
        merged_embeds = torch.where(
            boundary_mask.unsqueeze(-1),
            visual_indicator_features[indicator_index],
            merged_embeds,
        )

    return merged_embeds
