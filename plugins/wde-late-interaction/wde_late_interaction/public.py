"""What users and other plugins may use of wde-late-interaction: ``maxsim``, late-interaction scores between token
vectors (``encode(..., output="multi_vector")`` results), and ``OUTPUTS``, the model output late-interaction
workflows ask for. A multi-vector model's workflow names this plugin's ``multi-vector`` output processor, and its
``late_interaction`` task serves the model."""

from wde_late_interaction.multi_vector import OUTPUTS, maxsim

__all__ = ["OUTPUTS", "maxsim"]
