"""wde-clip: CLIP and SigLIP image-text dual encoders; images and texts embedded into one space."""
