"""`hgplan bench`: time the kernels and collectives the cost model prices, on this machine's devices.

`kernels` and `collectives` run them (PyTorch, an optional dependency only they import); `fit` turns a report into
cost-model constants (pure, used by `hgplan calibrate --bench`). Planning never needs any of this.
"""

from __future__ import annotations

import re

SIZE_RE = re.compile(r"(\d+)\s*GB", re.IGNORECASE)


def match_gpu(device_name: str, catalog_ids: list[str]) -> list[str]:
    """Catalog ids the device's own name can be (torch.cuda.get_device_name, e.g. 'NVIDIA H100 80GB HBM3'): the id's
    model token (H100, A100, RTX-4090's 4090, ...) is in the name, and so is its memory size when the name gives one
    and so is its form factor when the id names SXM, PCIe or NVL and the name names any (a name naming none is
    an SXM part where one matches). Several ids: ambiguous."""
    name = device_name.upper().replace("-", " ")
    words = set(name.split())
    size = SIZE_RE.search(name)
    forms = {w for w in ("SXM", "PCIE", "NVL") if any(x.startswith(w) for x in words)}
    out = []
    for gid in catalog_ids:
        tokens = gid.upper().split("-")
        model = next((t for t in tokens if any(ch.isdigit() for ch in t) and not t.endswith("GB")), tokens[0])
        if model not in words:
            continue
        gid_size = next((t for t in tokens if t.endswith("GB")), None)
        if size and gid_size and gid_size != f"{size.group(1)}GB":
            continue
        gid_forms = {w for w in ("SXM", "PCIE", "NVL") if any(t.startswith(w) for t in tokens)}
        if forms and gid_forms and not (forms & gid_forms):
            continue
        out.append(gid)
    if len(out) > 1 and not forms:  # NVIDIA names PCIe and NVL parts as such; an SXM part's name may not say so
        out = [gid for gid in out if "SXM" in gid.upper()] or out
    return out
