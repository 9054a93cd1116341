"""``ember info``: backends found, versions, capabilities, and a tiny gradient on each."""

from __future__ import annotations


def gather() -> list[dict]:
    """One row per known backend: version, capabilities and a checked gradient."""
    from .. import backend, grad
    from ..autodiff import namespace

    rows = []
    for name, version in backend.available().items():
        row = {"backend": name, "version": version or "not installed"}
        if version is None:
            rows.append(row)
            continue
        try:
            xp = backend.get(name)
            caps = backend.capabilities(xp)
            row.update(
                in_place=caps.in_place,
                out_param=caps.out_param,
                lazy=caps.lazy,
                devices=", ".join(str(d) for d in caps.devices) or "-",
                random=caps.random,
                fuser=getattr(backend.fuser(xp), "name", None) or "-",
            )
            ns = namespace(xp)
            x = ns.asarray([1.0, 2.0, 3.0])
            g = grad(lambda t: ns.sum(t * t))(x)
            got = [float(v) for v in g]
            row["grad of sum(x**2) at [1,2,3]"] = got
            row["gradient ok"] = got == [2.0, 4.0, 6.0]
        except Exception as e:  # report, never crash `info`
            row["error"] = f"{type(e).__name__}: {e}"
        rows.append(row)
    return rows
