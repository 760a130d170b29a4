"""wde-images: image inputs decoded safely, preprocessed exactly, and the CLIP/SigLIP vision transformer."""
