"""The user layer: standard names for a vision-language model's values, over the rewritten sites.

``envoys.tiny`` builds tiny random checkpoints (model and processor) locally,
for the tests and the demo.
"""
