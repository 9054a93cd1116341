"""ember.training: training steps built on the transforms and the optimizers.

:func:`train_step` fuses ``value_and_grad`` and ``optimizer.update`` into one
call that hands the gradients' buffers straight to the update, so an optimizer
with an in-place form (``SGD``) writes the new parameters into them.
"""

from .step import train_step

__all__ = ["train_step"]
