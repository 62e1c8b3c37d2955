"""What methods share: the method base (one loss assembly), the two families (prompt pool on a frozen ViT,
whole network) and the penalties composed around the loss. Imports torch; declarations never import it."""
