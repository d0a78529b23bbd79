"""The text surface: the text model's blocks and the root's names, as nnterp gives them."""
