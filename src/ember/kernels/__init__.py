"""ember.kernels: pure array-API forward math shared by ``nn`` and the autodiff rules.

Every function takes the namespace it computes with as its first argument
(or none at all), imports no array library and knows nothing of tapes, so the
same formula serves a backend's raw arrays, ember's wrapper namespace (where
it is differentiated) and the rules' backward passes.
"""

from .activations import GELU_C, GELU_K, gelu_tanh_w, in_place, neg_logistic, relu
from .erf import erf_series
from .linear import LINEAR_RELU_COMPLEX, LINEAR_SHAPES, check_linear
from .normalization import layer_norm
from .pooling import max_pool_tiles, tile_views
from .reductions import leading_rows, max_last, mean_last, sum_last, sum_leading
from .shapes import meshgrid, shapes_fit

__all__ = ["GELU_C", "GELU_K", "LINEAR_RELU_COMPLEX", "LINEAR_SHAPES", "check_linear",
           "erf_series", "gelu_tanh_w", "in_place", "layer_norm", "leading_rows", "max_last",
           "max_pool_tiles", "mean_last", "meshgrid", "neg_logistic", "relu", "shapes_fit",
           "sum_last", "sum_leading", "tile_views"]
