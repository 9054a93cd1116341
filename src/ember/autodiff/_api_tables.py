"""Names of the array API standard (2024.12 and 2025.12), grouped by kind.

The namespace factory walks these tables. A name the backend lacks is filled
in with a portable composition of wrapper ops where ember has one
(``_wrappers.fallbacks``: e.g. ``take_along_axis`` on Dask), and is left out
of the wrapper otherwise, so ``hasattr(xp, name)`` tells the truth.
"""

UNARY = (
    "abs acos acosh asin asinh atan atanh bitwise_invert ceil conj cos cosh exp expm1 "
    "floor imag isfinite isinf isnan log log1p log2 log10 logical_not negative positive "
    "real reciprocal round sign signbit sin sinh sqrt square tan tanh trunc"
).split()

BINARY = (
    "add atan2 bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor "
    "copysign divide equal floor_divide greater greater_equal hypot less less_equal "
    "logaddexp logical_and logical_or logical_xor maximum minimum multiply nextafter "
    "not_equal pow remainder subtract"
).split()

#: Every other function of the main namespace (wrapped generically unless a
#: hand-written wrapper exists in ``_wrappers``).
OTHER = (
    "all any arange argmax argmin argsort asarray astype broadcast_arrays broadcast_shapes "
    "broadcast_to can_cast clip concat count_nonzero cumulative_prod cumulative_sum diff "
    "empty empty_like expand_dims eye finfo flip from_dlpack full full_like iinfo isdtype "
    "isin linspace matmul matrix_transpose max mean meshgrid min moveaxis nonzero ones "
    "ones_like permute_dims prod repeat reshape result_type roll searchsorted sort squeeze "
    "stack std sum take take_along_axis tensordot tile tril triu unique_all unique_counts "
    "unique_inverse unique_values unstack var vecdot where zeros zeros_like"
).split()

CONSTANTS = ("e", "inf", "nan", "newaxis", "pi")

DTYPES = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 "
    "complex64 complex128"
).split()

LINALG = (
    "cholesky cross det diagonal eig eigh eigvals eigvalsh inv matmul matrix_norm "
    "matrix_power matrix_rank matrix_transpose outer pinv qr slogdet solve svd svdvals "
    "tensordot trace vecdot vector_norm"
).split()

FFT = (
    "fft ifft fftn ifftn rfft irfft rfftn irfftn hfft ihfft fftfreq rfftfreq fftshift ifftshift"
).split()

#: Tensor operators -> namespace function. Reflected and in-place forms are
#: derived from these.
BINARY_OPERATORS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "pow", "matmul": "matmul",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}
COMPARISONS = {
    "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
    "eq": "equal", "ne": "not_equal",
}
UNARY_OPERATORS = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "bitwise_invert"}
