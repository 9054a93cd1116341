"""Every function ember's namespaces know, one row each: the one table of op categories.

The namespace factory walks it (which functions exist, which fast path each
takes), ownership reads from it which ops may write into a consumed buffer and
with which kernel, forward mode which ops are linear or bilinear, the rules
which are elementwise and which are compute-bound. A name the backend lacks is
filled in with a portable composition where ember has one
(``_wrappers.fallbacks``: e.g. ``take_along_axis`` on Dask), and is left out
of the wrapper otherwise, so ``hasattr(xp, name)`` tells the truth.

Columns (``-``: none):

- **name**: the standard's name (``linalg.``/``fft.`` for the extensions) or an
  internal op's (``getitem``, ``mask_scatter``, ...);
- **kind**: ``unary`` or ``binary`` (elementwise, with the dispatcher's unary
  and binary fast paths), ``reduce`` (a reduction along axes), ``other``
  (the generic fast path), ``internal`` (not a namespace function);
- **result**: for elementwise ops, the result's dtype: ``float`` (floating
  for floating input, nothing to write for integers), ``same`` (the input's),
  ``real`` (a complex input gives its real dtype), ``promote`` (the promoted
  dtype of the operands), ``float2`` (``float`` for two operands), ``bool``;
  for reductions: ``promote`` (takes ``dtype=``), ``same``, ``bool`` (logical);
- **tangent**: ``linear`` (linear in its floating array arguments: forward
  mode applies the op to the tangents), ``bilinear`` (linear in each of two
  arguments: the product rule), ``nonholo`` (elementwise but not holomorphic:
  no complex conjugation shortcut);
- **bound**: ``compute`` where recomputing is dear (checkpointing keeps the
  output), else memory-bound;
- **ufunc**: the NumPy ufunc computing it where the name differs (``power`` for
  ``pow``), or the ufunc a reduction reduces with (``add`` for ``sum``).
"""

from __future__ import annotations

_TABLE = """
# name                 kind      result   tangent   bound     ufunc
abs                    unary     real     nonholo   -         -
acos                   unary     float    -         -         arccos
acosh                  unary     float    -         -         arccosh
asin                   unary     float    -         -         arcsin
asinh                  unary     float    -         -         arcsinh
atan                   unary     float    -         -         arctan
atanh                  unary     float    -         -         arctanh
bitwise_invert         unary     same     -         -         invert
ceil                   unary     float    -         -         -
conj                   unary     same     linear    -         conjugate
cos                    unary     float    -         -         -
cosh                   unary     float    -         -         -
exp                    unary     float    -         -         -
expm1                  unary     float    -         -         -
floor                  unary     float    -         -         -
imag                   unary     -        linear    -         -
isfinite               unary     bool     -         -         -
isinf                  unary     bool     -         -         -
isnan                  unary     bool     -         -         -
log                    unary     float    -         -         -
log1p                  unary     float    -         -         -
log2                   unary     float    -         -         -
log10                  unary     float    -         -         -
logical_not            unary     same     -         -         -
negative               unary     same     linear    -         -
positive               unary     same     linear    -         -
real                   unary     -        linear    -         -
reciprocal             unary     float    -         -         -
round                  unary     float    -         -         rint
sign                   unary     same     nonholo   -         -
signbit                unary     bool     -         -         -
sin                    unary     float    -         -         -
sinh                   unary     float    -         -         -
sqrt                   unary     float    -         -         -
square                 unary     same     -         -         -
tan                    unary     float    -         -         -
tanh                   unary     float    -         -         -
trunc                  unary     float    -         -         -
add                    binary    promote  linear    -         -
atan2                  binary    float2   -         -         arctan2
bitwise_and            binary    promote  -         -         -
bitwise_left_shift     binary    promote  -         -         left_shift
bitwise_or             binary    promote  -         -         -
bitwise_right_shift    binary    promote  -         -         right_shift
bitwise_xor            binary    promote  -         -         -
copysign               binary    float2   -         -         -
divide                 binary    float2   -         -         -
equal                  binary    bool     -         -         -
floor_divide           binary    promote  -         -         -
greater                binary    bool     -         -         -
greater_equal          binary    bool     -         -         -
hypot                  binary    float2   -         -         -
less                   binary    bool     -         -         -
less_equal             binary    bool     -         -         -
logaddexp              binary    float2   -         -         -
logical_and            binary    promote  -         -         -
logical_or             binary    promote  -         -         -
logical_xor            binary    promote  -         -         -
maximum                binary    promote  -         -         -
minimum                binary    promote  -         -         -
multiply               binary    promote  -         -         -
nextafter              binary    float2   -         -         -
not_equal              binary    bool     -         -         -
pow                    binary    promote  -         -         power
remainder              binary    promote  -         -         -
subtract               binary    promote  linear    -         -
all                    reduce    bool       -         -         logical_and
any                    reduce    bool       -         -         logical_or
max                    reduce    same       -         -         maximum
min                    reduce    same       -         -         minimum
prod                   reduce    promote      -         -         multiply
sum                    reduce    promote      linear    -         add
arange                 other     -        -         -         -
argmax                 other     -        -         -         -
argmin                 other     -        -         -         -
argsort                other     -        -         -         -
asarray                other     -        -         -         -
astype                 other     -        linear    -         -
broadcast_arrays       other     -        -         -         -
broadcast_shapes       other     -        -         -         -
broadcast_to           other     -        linear    -         -
can_cast               other     -        -         -         -
clip                   other     -        -         -         -
concat                 other     -        linear    -         -
count_nonzero          other     -        -         -         -
cumulative_prod        other     -        -         -         -
cumulative_sum         other     -        linear    -         -
diff                   other     -        -         -         -
empty                  other     -        -         -         -
empty_like             other     -        -         -         -
expand_dims            other     -        linear    -         -
eye                    other     -        -         -         -
finfo                  other     -        -         -         -
flip                   other     -        linear    -         -
from_dlpack            other     -        -         -         -
full                   other     -        -         -         -
full_like              other     -        -         -         -
iinfo                  other     -        -         -         -
isdtype                other     -        -         -         -
isin                   other     -        -         -         -
linspace               other     -        -         -         -
matmul                 other     -        bilinear  compute   -
matrix_transpose       other     -        linear    -         -
mean                   other     -        linear    -         -
meshgrid               other     -        -         -         -
moveaxis               other     -        -         -         -
nonzero                other     -        -         -         -
ones                   other     -        -         -         -
ones_like              other     -        -         -         -
permute_dims           other     -        linear    -         -
repeat                 other     -        linear    -         -
reshape                other     -        linear    -         -
result_type            other     -        -         -         -
roll                   other     -        linear    -         -
searchsorted           other     -        -         -         -
sort                   other     -        -         compute   -
squeeze                other     -        linear    -         -
stack                  other     -        linear    -         -
std                    other     -        -         -         -
take                   other     -        linear    -         -
take_along_axis        other     -        linear    -         -
tensordot              other     -        bilinear  compute   -
tile                   other     -        linear    -         -
tril                   other     -        linear    -         -
triu                   other     -        linear    -         -
unique_all             other     -        -         -         -
unique_counts          other     -        -         -         -
unique_inverse         other     -        -         -         -
unique_values          other     -        -         -         -
unstack                other     -        -         -         -
var                    other     -        -         -         -
vecdot                 other     -        bilinear  compute   -
where                  other     -        linear    -         -
zeros                  other     -        -         -         -
zeros_like             other     -        -         -         -
linalg.cholesky        other     -        -         compute   -
linalg.cross           other     -        bilinear  -         -
linalg.det             other     -        -         compute   -
linalg.diagonal        other     -        linear    -         -
linalg.eig             other     -        -         -         -
linalg.eigh            other     -        -         compute   -
linalg.eigvals         other     -        -         -         -
linalg.eigvalsh        other     -        -         compute   -
linalg.inv             other     -        -         compute   -
linalg.matmul          other     -        bilinear  compute   -
linalg.matrix_norm     other     -        -         compute   -
linalg.matrix_power    other     -        -         compute   -
linalg.matrix_rank     other     -        -         -         -
linalg.matrix_transpose other    -        linear    -         -
linalg.outer           other     -        bilinear  -         -
linalg.pinv            other     -        -         compute   -
linalg.qr              other     -        -         compute   -
linalg.slogdet         other     -        -         compute   -
linalg.solve           other     -        -         compute   -
linalg.svd             other     -        -         compute   -
linalg.svdvals         other     -        -         compute   -
linalg.tensordot       other     -        bilinear  compute   -
linalg.trace           other     -        linear    -         -
linalg.vecdot          other     -        bilinear  compute   -
linalg.vector_norm     other     -        -         -         -
fft.fft                other     -        linear    compute   -
fft.ifft               other     -        linear    compute   -
fft.fftn               other     -        linear    compute   -
fft.ifftn              other     -        linear    compute   -
fft.rfft               other     -        linear    compute   -
fft.irfft              other     -        linear    compute   -
fft.rfftn              other     -        linear    compute   -
fft.irfftn             other     -        linear    compute   -
fft.hfft               other     -        linear    compute   -
fft.ihfft              other     -        linear    compute   -
fft.fftfreq            other     -        -         -         -
fft.rfftfreq           other     -        -         -         -
fft.fftshift           other     -        linear    -         -
fft.ifftshift          other     -        linear    -         -
copy                   internal  -        linear    -         -
_select                internal  -        linear    -         -
getitem                internal  -        linear    -         -
setitem                internal  -        linear    -         -
index_add              internal  -        linear    -         -
mask_scatter           internal  -        linear    -         -
mask_gather            internal  -        linear    -         -
with_sharding          internal  -        linear    -         -
_to_device             internal  -        linear    -         -
"""


def _rows() -> dict[str, tuple[str, str, str, str, str]]:
    rows: dict[str, tuple[str, str, str, str, str]] = {}
    for line in _TABLE.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, kind, result, tangent, bound, ufunc = line.split()
        rows[name] = (kind, result, tangent, bound, ufunc)
    return rows


ROWS = _rows()


def _names(pred) -> tuple[str, ...]:
    return tuple(n for n, row in ROWS.items() if pred(n, *row))


def _in_main(name: str) -> bool:
    return "." not in name


UNARY = list(_names(lambda n, k, *_: k == "unary"))
BINARY = list(_names(lambda n, k, *_: k == "binary"))
#: Every other function of the main namespace (wrapped generically unless a
#: hand-written wrapper exists in ``_wrappers``).
OTHER = list(_names(lambda n, k, *_: k in ("reduce", "other") and _in_main(n)))
LINALG = [n[len("linalg."):] for n in _names(lambda n, *_: n.startswith("linalg."))]
FFT = [n[len("fft."):] for n in _names(lambda n, *_: n.startswith("fft."))]

#: Ops whose output element depends only on the same element of each (broadcast) input
#: (``Primitive(elementwise=True)`` adds a user's).
ELEMENTWISE = frozenset(UNARY + BINARY + ["where", "clip", "astype", "copy", "_select"])
#: Ops linear in their floating array arguments (other arguments pass unchanged).
LINEAR = frozenset(_names(lambda n, k, r, t, *_: t == "linear"))
#: Ops linear in each of their two array arguments separately.
BILINEAR = frozenset(_names(lambda n, k, r, t, *_: t == "bilinear"))
#: Elementwise ops whose complex derivative is not a complex number (not holomorphic).
NOT_HOLOMORPHIC = frozenset(_names(lambda n, k, r, t, *_: t == "nonholo")) | {"angle"}
#: Ops worth keeping rather than recomputing (checkpointing).
COMPUTE_BOUND = frozenset(_names(lambda n, k, r, t, b, *_: b == "compute"))
#: Elementwise ops by result dtype (ownership: which may write into an operand's buffer).
RESULT = {n: row[1] for n, row in ROWS.items() if row[0] in ("unary", "binary")}
#: Reductions by result: ``promote`` (they take ``dtype=``), ``same``, ``bool`` (logical).
REDUCTION_RESULT = {n: row[1] for n, row in ROWS.items() if row[0] == "reduce"}
#: NumPy's ufunc for an op where its name differs, and a reduction's ufunc.
UFUNC = {n: row[4] for n, row in ROWS.items() if row[4] != "-"}
#: Reductions and the ufunc each reduces with.
REDUCTIONS = {n: UFUNC[n] for n, row in ROWS.items() if row[0] == "reduce"}

CONSTANTS = ("e", "inf", "nan", "newaxis", "pi")

DTYPES = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 "
    "complex64 complex128"
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
