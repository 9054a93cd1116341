"""``ember train``: the digits job (data, models, training loop, checkpoint, curves).

The data are the 8x8 digits bundled with ember (1797 images, no download),
split 80/20 with a fixed key. Two models: ``mlp`` (64-128-64-10) and ``cnn``
(two 3x3 convolutions, a max-pool and an MLP head); data and models come from
:mod:`ember.data`, shared with ``examples/*_digits.py``. They are trained with :class:`ember.optim.SGD` (momentum
0.9, learning rate x0.8 per epoch) through ``ember.training.train_step``. One epoch's batch order comes from
``fold_in(key, epoch)``, so a run resumed from the checkpoint of epoch k
continues exactly as the uninterrupted run would.

The checkpoint (``OUT/checkpoint.safetensors``, written atomically by
:func:`ember.io.save`) holds the model, the optimizer state, the epoch, the
history of loss/accuracy and the run's configuration; ``OUT/curves.png``
shows the curves. Both are rewritten after every epoch, so an interrupted run
keeps its last finished epoch and its plot. Everything read back on
``--resume`` is checked (:mod:`ember.cli._resume`) before use.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .. import nn, tree
from .. import random as er
from .._errors import EmberError, FileFormatError
from ..data import DigitsCNN, accuracy, batches, digits_mlp, load_digits
from ._files import check_writable, write_atomic
from ._resume import BadCheckpointValue, check_checkpoint

__all__ = ["BACKENDS", "MODELS", "Config", "Result", "load_digits", "build_model", "train"]

#: ``--backend``'s default.
DEFAULT_BACKEND = "numpy"
BACKENDS = ("numpy", "dask", "cupy", "array_api_strict")
MODELS = ("mlp", "cnn")
CHECKPOINT = "checkpoint.safetensors"
CURVES = "curves.png"
QUICK_TRAIN, QUICK_TEST = 256, 128  # images in a --quick run's slices of the data

# Error texts (constants so tests can check them).
UNKNOWN_BACKEND = "unknown backend {name!r}; choose one of {known} (e.g. --backend numpy)"
UNKNOWN_MODEL = "unknown model {name!r}; choose one of {known} (e.g. --model cnn)"
NO_MATPLOTLIB = (
    "the training-curve PNG needs matplotlib, which is not installed; "
    'fix: pip install -e ".[cli]" in the ember checkout (or pip install matplotlib)'
)
NO_CHECKPOINT = (
    "--resume {path}: no {name} there; pass the --out directory of an earlier "
    "`ember train` run"
)
BAD_CHECKPOINT = (
    "--resume {path}: the checkpoint cannot be read ({why}); delete it and train "
    "again without --resume, or point --resume at another run"
)
MODEL_MISMATCH = (
    "--resume {path}: the checkpoint holds a {saved!r} model but --model {asked} was "
    "given; drop --model or pass --model {saved}"
)
ALREADY_DONE = (
    "--resume {path}: the checkpoint is at epoch {epoch}, which is not below "
    "--epochs {epochs}; pass a larger --epochs to train further"
)
SEED_MISMATCH = (
    "--resume {path}: the run was started with --seed {saved}, not {asked}; the seed fixes the "
    "train/test split and the batch order, so a resumed run keeps it: drop --seed (or pass --seed {saved})"
)
QUICK_MISMATCH = (
    "--resume {path}: the run was started without --quick, and --quick would train the rest on a "
    "slice of the data: drop --quick (or start a new --quick run with another --out)"
)
SETTING_MISMATCH = (
    "--resume {path}: the run was started with {key}={saved!r}, not {asked!r}; a resumed run keeps "
    "the settings it started with: use the checkpoint's value"
)
OUT_NOT_WRITABLE = (
    "--out {path}: cannot write there ({why}); pass --out a directory you can write to, "
    "e.g. --out ./ember-runs/mine"
)
QUICK_NOTE = (
    "a --quick smoke run ({n_train} training images): it checks that training runs, and its "
    "accuracy says nothing about the model (near chance, 0.1, is normal); drop --quick for a real run"
)
QUICK_RESULT = "a --quick smoke run: this accuracy says nothing about the model; drop --quick for a real run"
INTERRUPTED = "the checkpoint of epoch {epoch} is in {path}; continue with: {command}"
INTERRUPTED_EARLY = "no epoch had finished, so nothing was saved"

#: Run settings a resumed run must share with its checkpoint (the split, the batches, the steps).
_KEPT_SETTINGS = ("seed", "quick", "batch", "optimizer", "lr", "lr_decay")


class TrainError(EmberError, ValueError):
    """A problem with the arguments or files of ``ember train`` (message has the fix)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of one run; saved in the checkpoint so ``--resume`` can check them."""

    model: str = "cnn"
    backend: str = "numpy"
    epochs: int = 8
    batch: int = 64
    optimizer: str = "sgd"  # SGD + momentum 0.9 (measured: 98% at 8 epochs; Adam ~96.5%)
    lr: float = 0.1
    lr_decay: float = 0.8  # per epoch: independent of --epochs, so a resumed run matches
    seed: int = 0
    checkpointing: str = "none"
    quick: bool = False


@dataclasses.dataclass
class Result:
    """What a run returns: the model, its final test accuracy, and where files went."""

    model: Any
    test_accuracy: float
    seconds: float
    epoch: int
    history: dict[str, list[float]]
    checkpoint: Path
    curves: Path | None


# --------------------------------------------------------------------------- models
# The data (load_digits), the models (DigitsCNN, digits_mlp) and accuracy live in
# ember.data, shared with examples/mlp_digits.py and examples/cnn_digits.py.


def build_model(name: str, key: er.Key, xp: Any) -> Any:
    """The ``mlp`` or ``cnn`` digits model, with arrays of ``xp``."""
    if name == "cnn":
        return DigitsCNN.init(key, xp=xp)
    if name == "mlp":
        return digits_mlp(key, xp=xp)
    raise TrainError(UNKNOWN_MODEL.format(name=name, known=", ".join(MODELS)))


def namespace(backend: str) -> Any:
    """The differentiable ember namespace over ``backend`` (one-line errors if unknown/missing)."""
    if backend not in BACKENDS:
        raise TrainError(UNKNOWN_BACKEND.format(name=backend, known=", ".join(BACKENDS)))
    from ..autodiff import namespace as _namespace

    return _namespace(backend)


# ------------------------------------------------------------------------- training


def _to_backend(x: Any, xp: Any) -> Any:
    """Every array leaf of ``x`` as an array of ``xp`` (Python constants unchanged)."""
    return tree.map(lambda a: xp.asarray(a) if hasattr(a, "shape") else a, x)


def _restore_model(saved: Any, like: Any, xp: Any) -> Any:
    """``like`` with its arrays replaced by the saved model's (paths and shapes checked).

    ``saved`` is the model ember.io.load gave back (older checkpoints: a ``{path: array}`` dict).
    """
    if not (isinstance(saved, dict) and all(isinstance(k, str) and hasattr(v, "shape") for k, v in saved.items())):
        saved = {str(p): a for p, a in tree.flatten_with_path(saved)[0]}
    pairs, td = tree.flatten_with_path(like)
    want = {str(p): a for p, a in pairs}
    missing = sorted(set(want) - set(saved))
    extra = sorted(set(saved) - set(want))
    if missing or extra:
        raise ValueError(f"model paths differ: missing {missing}, unexpected {extra}")
    bad = [k for k, a in want.items() if tuple(saved[k].shape) != tuple(a.shape)]
    if bad:
        raise ValueError(f"model shapes differ at {bad}")
    return tree.unflatten(td, [xp.asarray(saved[str(p)]) for p, _ in pairs])


def _maybe_compute(x: Any, lazy: bool) -> Any:
    if not lazy:
        return x
    from .. import compute

    return compute(x, keep_backend=True)


def read_checkpoint(directory: Path) -> dict[str, Any]:
    """The checkpoint of an earlier run as a dict (NumPy arrays), every setting checked; one-line errors."""
    path = Path(directory) / CHECKPOINT
    if not Path(directory).is_dir() or not path.is_file():
        raise TrainError(NO_CHECKPOINT.format(path=directory, name=CHECKPOINT))
    from .. import io

    try:
        ckpt = io.load(path)
        for k in ("model", "opt_state", "epoch", "history", "config"):
            ckpt[k]
    except (FileFormatError, KeyError, TypeError, ValueError) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise TrainError(BAD_CHECKPOINT.format(path=directory, why=why)) from None
    try:
        check_checkpoint(ckpt, Path(directory), backends=BACKENDS, models=MODELS)
    except BadCheckpointValue as e:
        raise TrainError(str(e)) from None
    return ckpt


def train(
    config: Config,
    out: str | os.PathLike[str],
    *,
    resume: str | os.PathLike[str] | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    on_batch: Callable[[int, int, float], None] | None = None,
    on_checkpoint: Callable[[int, Path], None] | None = None,
) -> Result:
    """Train the digits model of ``config``, writing a checkpoint and curves into ``out``.

    With ``resume`` (a directory holding a checkpoint) the model, optimizer
    state, epoch and history come from there and training continues to
    ``config.epochs``. ``on_epoch(epoch, metrics)`` and ``on_batch(done,
    total, loss)`` report progress; ``on_checkpoint(epoch, directory)`` is
    called as soon as the checkpoint of ``epoch`` is on disk.
    """
    from .. import io, optim, training

    history: dict[str, list[float]] = {"loss": [], "train_acc": [], "test_acc": [], "seconds": []}
    ckpt = None
    if resume is not None:
        ckpt = read_checkpoint(Path(resume))
        saved = ckpt["config"]
        if saved["model"] != config.model:
            raise TrainError(MODEL_MISMATCH.format(path=resume, saved=saved["model"], asked=config.model))
        _check_kept_settings(saved, config, resume)
    xp = namespace(config.backend)
    _matplotlib_available()  # fail before training, not after the first epoch
    x_tr, y_tr, x_te, y_te = load_digits(config.seed, images=config.model == "cnn")
    if config.quick:  # a smoke run: a slice of the data
        x_tr, y_tr, x_te, y_te = x_tr[:QUICK_TRAIN], y_tr[:QUICK_TRAIN], x_te[:QUICK_TEST], y_te[:QUICK_TEST]

    key = er.key(config.seed)
    key, k_init = er.split(key)
    steps_per_epoch = -(-len(y_tr) // config.batch)
    schedule = optim.schedules.step(config.lr, steps_per_epoch, config.lr_decay)
    if config.optimizer == "sgd":
        opt = optim.SGD(schedule, momentum=0.9)
    elif config.optimizer == "adam":
        opt = optim.Adam(schedule)
    else:
        raise TrainError(f"unknown optimizer {config.optimizer!r}; choose 'sgd' or 'adam'")
    if ckpt is None:
        model = build_model(config.model, k_init, xp)
        state = opt.init(model)
        start_epoch = 0
    else:
        try:
            model = _restore_model(ckpt["model"], build_model(config.model, k_init, xp), xp)
            state = _to_backend(ckpt["opt_state"], xp)
            opt.update(model, tree.map(lambda p: p * 0, model), state)  # checks paths/shapes
        except (EmberError, ValueError, TypeError, KeyError) as e:
            raise TrainError(BAD_CHECKPOINT.format(path=resume, why=" ".join(str(e).split()))) from None
        start_epoch = int(ckpt["epoch"])
        history = {k: [float(v) for v in ckpt["history"][k]] for k in history}
        if start_epoch >= config.epochs:
            raise TrainError(ALREADY_DONE.format(path=resume, epoch=start_epoch, epochs=config.epochs))

    from ..backend import capabilities

    lazy = bool(capabilities(xp._backend).lazy)
    # gradient and update in one call: SGD writes the new parameters into the gradients' buffers
    step = training.train_step(lambda m, xb, yb: nn.cross_entropy(m(xb), yb), opt,
                            checkpointing=config.checkpointing)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    title = f"ember train: {config.model} on digits ({config.backend})"
    n = len(y_tr)
    base_seconds = history["seconds"][-1] if history["seconds"] else 0.0
    t0 = time.perf_counter()
    for epoch in range(start_epoch, config.epochs):
        total, done = 0.0, 0
        for idx in batches(key, epoch, n, config.batch):
            loss, model, state = step(model, state, xp.asarray(x_tr[idx]), xp.asarray(y_tr[idx]))
            model, state = _maybe_compute((model, state), lazy)
            lv = float(loss)
            total += lv * len(idx)
            done += len(idx)
            if on_batch is not None:
                on_batch(done, n, lv)
        history["loss"].append(total / n)
        history["train_acc"].append(accuracy(model, x_tr, y_tr, xp=xp))
        history["test_acc"].append(accuracy(model, x_te, y_te, xp=xp))
        history["seconds"].append(base_seconds + time.perf_counter() - t0)
        ckpt_path = out / CHECKPOINT
        io.save(ckpt_path, {
            "model": model,
            "opt_state": state,
            "epoch": epoch + 1,
            "history": history,
            "config": dataclasses.asdict(config),
        })
        if on_checkpoint is not None:
            on_checkpoint(epoch + 1, out)
        curves = plot_curves(history, out / CURVES, title=title)  # every epoch: an interrupted run has one
        if on_epoch is not None:
            on_epoch(epoch + 1, {k: v[-1] for k, v in history.items()})
    seconds = time.perf_counter() - t0
    return Result(model, history["test_acc"][-1], seconds, config.epochs, history, out / CHECKPOINT, curves)


def _check_kept_settings(saved: dict[str, Any], config: Config, resume: Any) -> None:
    """Refuse a resume whose settings differ from the checkpoint's where that changes the run."""
    for key in _KEPT_SETTINGS:
        asked = getattr(config, key)
        if saved[key] == asked:
            continue
        if key == "seed":
            raise TrainError(SEED_MISMATCH.format(path=resume, saved=saved[key], asked=asked))
        if key == "quick":
            raise TrainError(QUICK_MISMATCH.format(path=resume))
        raise TrainError(SETTING_MISMATCH.format(path=resume, key=key, saved=saved[key], asked=asked))


def _matplotlib_available() -> None:
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError as e:
        raise ImportError(NO_MATPLOTLIB) from e


def plot_curves(history: dict[str, list[float]], path: Path, title: str = "") -> Path:
    """Write loss and accuracy per epoch as a PNG, atomically (matplotlib's Agg canvas).

    A ``Figure`` made directly (not through pyplot) keeps no global state and
    needs no GUI backend; the file is written by :func:`write_atomic`, so a
    planted symlink in a shared output directory is never followed.
    """
    _matplotlib_available()
    from matplotlib.figure import Figure

    epochs = list(range(1, len(history["loss"]) + 1))
    fig = Figure(figsize=(9, 3.5))
    a1, a2 = fig.subplots(1, 2)
    a1.plot(epochs, history["loss"], marker="o")
    a1.set_xlabel("epoch")
    a1.set_ylabel("training loss")
    a1.set_yscale("log")
    a2.plot(epochs, history["train_acc"], marker="o", label="train")
    a2.plot(epochs, history["test_acc"], marker="o", label="test")
    a2.set_xlabel("epoch")
    a2.set_ylabel("accuracy")
    a2.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))


# ------------------------------------------------------------------------ the command


class TrainInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``ember train``; its message says where the last checkpoint is and how to resume."""


class _CtrlC:
    """While open, Ctrl-C raises KeyboardInterrupt as Python's own handler does, and is also
    remembered: one raised inside a callback Python runs for its side effects (a weakref's or
    ``__del__``: ember's traces end in weakref callbacks every step; matplotlib's while the
    curves are drawn), which Python ignores, is raised again by :meth:`check` at the next
    batch. Python would also print it as "Exception ignored in ..." with a traceback; while
    open, that report of a KeyboardInterrupt is dropped (``sys.unraisablehook``: any other
    exception is reported as before), so the user sees only the one-line message."""

    def __init__(self) -> None:
        self.hit = False
        self._old: Any = None
        self._old_hook: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        self.hit = True
        raise KeyboardInterrupt

    def _unraisable(self, unraisable: Any) -> None:
        if not (self.hit and unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt)):
            self._old_hook(unraisable)

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt

    def __enter__(self) -> _CtrlC:
        try:
            self._old = signal.signal(signal.SIGINT, self._handler)
        except ValueError:  # (not the main thread: Python's handler stays)
            self._old = None
            return self
        self._old_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            sys.unraisablehook = self._old_hook


def _resume_command(directory: Path, *, backend: str, checkpointing: str, epochs: int) -> str:
    """The ``ember train --resume`` line that continues this run with its own options."""
    parts = ["ember", "train", "--resume", shlex.quote(str(directory)), "--epochs", str(epochs)]
    if backend != DEFAULT_BACKEND:  # (the option's default: said only when it differs)
        parts += ["--backend", backend]
    if checkpointing != "none":
        parts += ["--checkpointing", checkpointing]
    return " ".join(parts)


def _train_with_progress(console: Any, config: Config, out: Path, resume: Path | None,
                         state: dict[str, Any]) -> Result:
    """Check ``out``, print the run's header, train under a rich progress bar; ``state`` tracks it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    try:
        check_writable(out)
    except OSError as e:
        raise TrainError(OUT_NOT_WRITABLE.format(path=out, why=e.strerror or type(e).__name__)) from None

    epochs = config.epochs
    console.print(f"ember train: {config.model} on digits, backend {config.backend}, {epochs} epochs, "
                  f"{config.optimizer} lr {config.lr} (x{config.lr_decay} per epoch)"
                  + (f", resuming from {resume}" if resume is not None else ""))
    if config.quick:
        console.print("note: " + QUICK_NOTE.format(n_train=QUICK_TRAIN))
    progress = Progress(
        TextColumn("epoch {task.fields[epoch]}/{task.fields[epochs]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )

    ctrl_c = _CtrlC()

    def on_batch(done: int, total: int, loss: float) -> None:
        ctrl_c.check()
        if state["task"] is None:
            state["task"] = progress.add_task("train", total=total, epoch=state["epoch"] + 1,
                                              epochs=epochs, loss=loss)
        progress.update(state["task"], completed=done, loss=loss)

    def on_epoch(epoch: int, m: dict[str, float]) -> None:
        if state["task"] is not None:
            progress.remove_task(state["task"])
        state["task"], state["epoch"] = None, epoch
        console.print(f"epoch {epoch:3d}/{epochs}  loss {m['loss']:.4f}  train acc {m['train_acc']:.4f}  "
                      f"test acc {m['test_acc']:.4f}  ({m['seconds']:.1f}s)")

    with progress, ctrl_c:
        return train(config, out, resume=resume, on_epoch=on_epoch, on_batch=on_batch,
                     on_checkpoint=lambda epoch, where: state.update(saved=(epoch, where)))


def run_train(
    *,
    backend: str = "numpy",
    model: str | None = None,
    epochs: int | None = None,
    checkpointing: str = "none",
    out: Path | None = None,
    resume: Path | None = None,
    seed: int | None = None,
    quick: bool = False,
) -> Result:
    """``ember train``: check the arguments, train with a rich progress bar, print the result.

    ``seed=None`` means 0 for a new run and the checkpoint's seed for a
    resumed one; a different seed (or ``--quick`` on a full run) is refused,
    since either would change the data of a run half done. Ctrl-C raises
    :class:`TrainInterrupted` naming the ``--resume`` command.
    """
    from ._console import make_console

    console = make_console()
    if backend not in BACKENDS:
        raise TrainError(UNKNOWN_BACKEND.format(name=backend, known=", ".join(BACKENDS)))
    if model is not None and model not in MODELS:
        raise TrainError(UNKNOWN_MODEL.format(name=model, known=", ".join(MODELS)))
    namespace(backend)  # a missing backend fails here, before any output
    saved: dict[str, Any] = {}
    start_epoch = 0
    if resume is not None:
        ckpt = read_checkpoint(resume)
        saved, start_epoch = ckpt["config"], ckpt["epoch"]
        model = model or saved["model"]
        if quick and not saved["quick"]:
            raise TrainError(QUICK_MISMATCH.format(path=resume))
        quick = saved["quick"]
        if seed is not None and seed != saved["seed"]:
            raise TrainError(SEED_MISMATCH.format(path=resume, saved=saved["seed"], asked=seed))
        seed = saved["seed"]
    seed = 0 if seed is None else seed
    model = model or "cnn"
    if epochs is None:
        epochs = 2 if quick else Config.epochs
    config = Config(model=model, backend=backend, epochs=epochs, seed=seed,
                    checkpointing=checkpointing, quick=quick,
                    **({k: saved[k] for k in ("optimizer", "lr", "lr_decay", "batch") if k in saved}))
    if out is None:
        out = resume if resume is not None else Path("ember-runs") / f"{model}-{backend}"
    if out.exists() and not out.is_dir():
        raise TrainError(f"--out {out}: exists and is not a directory; pass a directory path")
    # "saved": (epoch, directory) of the newest checkpoint, for the Ctrl-C hint
    state: dict[str, Any] = {"task": None, "epoch": start_epoch,
                             "saved": (start_epoch, resume) if resume is not None else None}
    try:  # from the moment --out may be made, Ctrl-C says what is saved
        res = _train_with_progress(console, config, out, resume, state)
    except KeyboardInterrupt:
        if state["saved"] is None:
            raise TrainInterrupted(INTERRUPTED_EARLY) from None
        epoch, where = state["saved"]
        command = _resume_command(where, backend=backend, checkpointing=checkpointing, epochs=epochs)
        raise TrainInterrupted(INTERRUPTED.format(epoch=epoch, path=where, command=command)) from None
    console.print(f"checkpoint: {res.checkpoint}")
    console.print(f"curves:     {res.curves}")
    console.print(f"test accuracy {res.test_accuracy:.4f} after {res.seconds:.1f}s of training"
                  + (f" ({QUICK_RESULT})" if quick else ""))
    return res
