"""The image pathway: values on the image's grid, the recipes, and their pictures."""
