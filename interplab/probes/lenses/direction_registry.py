"""Every direction interplab has computed for a model at one residual site, gathered for the direction dashboard's
cosine neighbours (issue 18 item 3): SAE decoder rows (shipped with the checkpoint, or trained into
`<interplab home>/saes`), saved runs (the atlas's decode-shared basis and CRH axis / plane; `decodeshare` runs'
shared subspaces; `crh-spiral` runs' optimised steering vectors and Δ), optionally token unembedding columns, and
any vectors the caller adds (a steering vector, a probe weight, an atlas still in memory).

    >>> from interplab.probes.lenses import collect_directions
    >>> reg = collect_directions(model, "resid_post.1")
    >>> reg.to_frame()                          # name, source, origin
    >>> reg.neighbours(v, k=10)                 # the closest collected directions to v by |cos|
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from interplab.core.errors import InputError, InterplabError, ShapeError
from interplab.core.result import Result

SOURCES = ("sae", "atlas", "decodeshare", "steering", "unembedding", "user")


@dataclass
class DirectionRegistry(Result):
    """Named unit directions [n, d_model] at `site`: names[i] is vectors[i]; sources[i] one of SOURCES; origins[i]
    the SAE folder or run it came from."""

    site: str
    names: list
    sources: list
    origins: list
    vectors: np.ndarray
    model: str = ""
    skipped: dict = field(default_factory=dict)

    def __post_init__(self):
        self.vectors = np.asarray(self.vectors, np.float64)
        if self.vectors.ndim != 2 or not len(self.names) == len(self.sources) == len(self.origins) == len(self.vectors):
            raise ShapeError("vectors must be [n, d_model] with one name, source and origin per row")

    def __len__(self) -> int:
        return len(self.names)

    def as_dict(self, *, exclude: str | None = None) -> dict[str, np.ndarray]:
        return {n: v for n, v in zip(self.names, self.vectors) if n != exclude}

    def vector(self, name: str) -> np.ndarray:
        if name not in self.names:
            raise InputError(f"no direction named {name!r}; {len(self.names)} are collected at {self.site}")
        return self.vectors[self.names.index(name)]

    def neighbours(self, v, k: int = 10, *, exclude: str | None = None) -> pd.DataFrame:
        """The k collected directions with the largest |cos| to v (name, source, cosine)."""
        v = np.asarray(v, np.float64).reshape(-1)
        if v.shape[0] != self.vectors.shape[1] or not np.linalg.norm(v):
            raise ShapeError(f"need a non-zero [{self.vectors.shape[1]}] vector, got {v.shape}")
        cos = self.vectors @ (v / np.linalg.norm(v))
        df = pd.DataFrame({"name": self.names, "source": self.sources, "cosine": cos})
        if exclude is not None:
            df = df[df["name"] != exclude]
        return df.reindex(df["cosine"].abs().sort_values(ascending=False).index).head(k).reset_index(drop=True)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"name": self.names, "source": self.sources, "origin": self.origins})


def read_sae_decoder(path) -> tuple[np.ndarray, str]:
    """(W_dec [d_sae, d_in], interplab site) of a SAELens-format folder, read from its files (the probes layer
    does not import `interplab.sae`)."""
    from safetensors.numpy import load_file

    p = Path(path)
    cfg = json.loads((p / "cfg.json").read_text())
    site = (cfg.get("metadata") or {}).get("interplab_site") or ""
    return load_file(str(p / "sae_weights.safetensors"))["W_dec"].astype(np.float64), site


def same_point(a: str, b: str) -> bool:
    """Whether two residual sites are the same point of the stream: resid_pre.L is resid_post.(L-1)."""
    def canon(s: str) -> str:
        kind, _, layer = str(s).partition(".")
        if kind == "resid_pre" and layer.isdigit() and int(layer) > 0:
            return f"resid_post.{int(layer) - 1}"
        return str(s)
    return canon(a) == canon(b)


def _same_model(a: str, b: str) -> bool:
    norm = lambda s: str(s).removeprefix("zoo:").rstrip("/")  # noqa: E731
    return bool(a) and (norm(a) == norm(b) or Path(norm(a)).name == Path(norm(b)).name)


def _sae_dirs(model) -> list[Path]:
    from interplab.results.runs import interplab_home
    from interplab.zoo import shipped_saes

    dirs = list(shipped_saes(str(getattr(model, "path", "") or model.name)))
    user = interplab_home() / "saes"
    if user.is_dir():
        for d in sorted(user.iterdir()):
            if (d / "cfg.json").is_file():
                md = json.loads((d / "cfg.json").read_text()).get("metadata") or {}
                if _same_model(md.get("model_name", ""), model.name):
                    dirs.append(d)
    return dirs


def _from_runs(model, site: str, add, skipped: dict, root=None) -> None:
    """Atlas results of this model at `site` (decodeshare basis, CRH axis and plane) and `decodeshare` runs'
    shared subspaces read at the same layer."""
    from interplab.core.result import Result as R
    from interplab.results import list_runs

    runs = list_runs(root=root)
    for r in runs.itertuples():
        path = Path(r.path)
        try:
            cfg = json.loads((path / "config.json").read_text()) if (path / "config.json").exists() else {}
        except ValueError:
            continue
        cfg = cfg.get("config", cfg)  # run folders nest the experiment's config under "config"
        if r.kind == "crh-spiral" and _same_model(cfg.get("model", ""), model.name):
            _spiral_vectors(path, f"{r.kind}/{r.name}", site, add, skipped)
        for res in sorted(p for p in path.iterdir() if (p / "result.json").is_file()):
            kind = json.loads((res / "result.json").read_text()).get("kind")
            tag = f"{r.kind}/{r.name}"
            try:
                if kind == "Atlas":
                    a = R.load_any(res)
                    if _same_model(a.model, model.name) and same_point(a.site, site):
                        for key, basis in a.directions.items():
                            if key != "sae":  # SAE rows come from the SAE folders themselves
                                for j in range(basis.shape[1]):
                                    add(f"{key}[{j}] ({tag})", "atlas", str(res), basis[:, j])
                elif kind == "SharedSubspace" and _same_model(cfg.get("model", ""), model.name) \
                        and same_point(f"resid_post.{_study_layer(cfg, model)}", site) \
                        and res.name == "subspace_decode":
                    basis = R.load_any(res).basis
                    for j in range(basis.shape[1]):
                        add(f"decodeshare[{j}] ({tag})", "decodeshare", str(res), basis[:, j])
            except (InterplabError, OSError, KeyError, ValueError) as exc:
                skipped[str(res)] = str(exc).split("\n")[0]


def _study_layer(cfg: dict, model) -> int:
    """The block a decodeshare study read (its config's `layer`; -1 = the middle layer, as the study resolves it)."""
    layer = int(cfg.get("layer", -1))
    return model.n_layers // 2 if layer < 0 else layer


def _spiral_vectors(path: Path, tag: str, site: str, add, skipped: dict) -> None:
    """The optimised steering vectors of a `crh-spiral` run (one per norm budget w) and its Δ, when the run
    steered at the same point of the stream."""
    from interplab.core.io import read_arrays

    try:
        summary = json.loads((path / "json" / "summary.json").read_text())
        if not same_point(summary.get("site", ""), site):
            return
        arr = read_arrays(path / "arrays" / "spiral.safetensors")
        add(f"CRH spiral Δ ({tag})", "steering", str(path), arr["delta"])
        for w, v in zip(np.asarray(arr["ws"]).ravel(), np.asarray(arr["vectors"])):
            add(f"CRH spiral steering w={float(w):g} ({tag})", "steering", str(path), v)
    except (OSError, KeyError, ValueError) as exc:
        skipped[str(path)] = str(exc).split("\n")[0]


def collect_directions(model, site: str, *, runs: bool = True, saes: bool = True, unembedding=0,
                       extra: dict | None = None, root=None) -> DirectionRegistry:
    """Gather the named directions of `model` at `site` (see the module docstring). unembedding: also add the
    unembedding columns of the first that many token ids, or of the given token ids (a real vocabulary's first ids
    are special and byte tokens whose unembeddings are near-identical: give words, e.g. `fact_token_ids`). extra:
    {name: [d_model] vector} added as "user". root: the results root of the runs (default $INTERPLAB_HOME). Folders
    that cannot be read are listed in `skipped` with the reason, never raised."""
    names, sources, origins, vecs, skipped = [], [], [], [], {}
    d = model.d_model

    def add(name, source, origin, v):
        v = np.asarray(v, np.float64).reshape(-1)
        n = float(np.linalg.norm(v))
        if v.shape[0] != d or n == 0 or name in names:
            return
        names.append(name), sources.append(source), origins.append(origin), vecs.append(v / n)

    if saes:
        for sd in _sae_dirs(model):
            try:
                W, s = read_sae_decoder(sd)
            except (OSError, KeyError, ValueError) as exc:
                skipped[str(sd)] = str(exc)
                continue
            if same_point(s, site):
                for i, row in enumerate(W):
                    add(f"SAE {sd.name} #{i}", "sae", str(sd), row)
    if runs:
        _from_runs(model, site, add, skipped, root)
    if unembedding is not None and (not isinstance(unembedding, int) or unembedding > 0):
        W_U, _ = model.unembedding()
        W_U = W_U.detach().double().cpu().numpy()
        ids = (range(min(int(unembedding), W_U.shape[1])) if isinstance(unembedding, int)
               else [int(t) for t in unembedding if 0 <= int(t) < W_U.shape[1]])
        for t in ids:
            add(f"unembed {t}:{model.tokenizer.decode([t]).strip()}", "unembedding", "model", W_U[:, t])
    for name, v in (extra or {}).items():
        add(str(name), "user", "caller", v)
    return DirectionRegistry(site, names, sources, origins, np.array(vecs).reshape(len(vecs), d),
                             str(model.name), skipped)
