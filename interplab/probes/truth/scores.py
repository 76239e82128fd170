"""Truth Scores (TruthProbe, "The Truth Stays in the Family", ICML 2026): per-head cross-validated linear-probe
accuracy for separating context-supported (gold) answers from hallucinated ones.

S_{l,h} = (1/F) * sum_f accuracy_val_f(l, h), where each (fold, layer, head) has its own zero-initialised logistic
probe on head (l,h)'s output z (attn_z, before W_O) at the answer's last token, trained with AdamW exactly as the
authors' code does (spec truth_scores.md §2.2). All probes train together as one batched tensor program
(`interplab.probes.truth.probe_core.fit_head_probes`).

    >>> from interplab.probes.truth.scores import truth_scores_from_activations
    >>> ts = truth_scores_from_activations(X, y)        # X [N, L, H, D], y [N] in {0,1}
    >>> ts.scores.shape                                  # (L, H), mean held-out accuracy
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from interplab.core.shapes import check_score_shape
from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.truth.probe_core import FOLD_KINDS, SOLVERS, fit_head_probes

SITES = ("attn_z",)
PROBE_POSITIONS = ("last_nonpad",)


@dataclass
class TruthScoresConfig:
    """How a Truth-Score map was (or will be) computed.

    site: activation read by the probes; "attn_z" = each query head's output z before W_O, [n_heads, d_head].
    probe_position: which token is probed. "last_nonpad" = each row's last real token (the repo's choice; equal to
        the answer's last token when the text ends with the answer, as in the HaluEval/CtxMem prompts).
    folds: number of cross-validation folds.
    fold_kind: "kfold" (scikit-learn KFold, shuffle=True, random_state=seed, not stratified: faithful) or
        "stratified" (class-balanced folds, interplab's option).
    epochs: passes over each fold's training set.
    lr, weight_decay: AdamW learning rate and decoupled weight decay (default betas 0.9/0.999, eps 1e-8).
    batch_size: mini-batch size; batches are taken in fold order without reshuffling (N <= batch_size is full batch).
    seed: fold-shuffle seed (the repo's random_state=42). Probes are zero-initialised, so nothing else is random.
    capture_batch_size: prompts per forward pass when collecting activations from a model.
    dtype: probe training precision ("float32" as the repo; "float64" for tests).
    solver: "adamw" (faithful: the authors' recipe, spec §2.2; epochs/lr/weight_decay/batch_size apply) or "lbfgs"
        (fast: the optimum of scikit-learn's `LogisticRegression(C=C)` on the same features, an L2-regularised logistic
        regression solved by a batched L-BFGS to `tol`, at most `max_iter` iterations; ~20-30x scikit-learn, see
        BENCHMARKS.md). Experiments default to "adamw"; the app defaults to "lbfgs". Every result records its solver.
    C: inverse L2 strength of the "lbfgs" objective (scikit-learn's C). tol, max_iter: its stopping rule.
    """

    site: str = "attn_z"
    probe_position: str = "last_nonpad"
    folds: int = 5
    fold_kind: str = "kfold"
    epochs: int = 200
    lr: float = 1e-2
    weight_decay: float = 1e-3
    batch_size: int = 512
    seed: int = 42
    capture_batch_size: int = 32
    dtype: str = "float32"
    solver: str = "adamw"
    C: float = 1.0
    tol: float = 1e-4
    max_iter: int = 100

    def validate(self) -> "TruthScoresConfig":
        if self.site not in SITES:
            raise ConfigError(f"site must be one of {SITES} (per-head output before W_O), got {self.site!r}")
        if self.probe_position not in PROBE_POSITIONS:
            raise ConfigError(f"probe_position must be one of {PROBE_POSITIONS}, got {self.probe_position!r}")
        if self.fold_kind not in FOLD_KINDS:
            raise ConfigError(f"fold_kind must be one of {FOLD_KINDS}, got {self.fold_kind!r}")
        if self.folds < 2 or self.epochs < 1 or self.batch_size < 1 or self.capture_batch_size < 1:
            raise ConfigError("need folds >= 2, epochs >= 1, batch_size >= 1, capture_batch_size >= 1")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ConfigError(f"need lr > 0 and weight_decay >= 0, got lr={self.lr}, weight_decay={self.weight_decay}")
        if self.solver not in SOLVERS:
            raise ConfigError(f"solver must be one of {SOLVERS} ('adamw' = the authors' recipe, 'lbfgs' = fast "
                              f"scikit-learn-equivalent optimum), got {self.solver!r}")
        if self.C <= 0 or self.tol <= 0 or self.max_iter < 1:
            raise ConfigError(f"need C > 0, tol > 0 and max_iter >= 1, got C={self.C}, tol={self.tol}, "
                              f"max_iter={self.max_iter}")
        if self.dtype not in ("float32", "float64"):
            raise ConfigError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        return self


@dataclass
class TruthScores(Result):
    """A Truth-Score map and its cross-validation details.

    scores: [n_layers, n_heads] mean held-out accuracy (query heads), float64.
    fold_accuracy / fold_precision / fold_recall / fold_f1: [folds, n_layers, n_heads] per-fold metrics
        (positive class = gold, label 1). Released maps loaded with `from_array` have a single pseudo-fold.
    n_val: [folds] validation-set size per fold (the accuracy step is 1/n_val).
    config: the TruthScoresConfig that produced it (None for imported maps).
    model: model name or path; n_samples, n_positive: dataset size and number of gold labels.
    provenance: free-form record (data source, recipe, timings, ...).
    loss_curve: mean training loss per optimisation step (may be empty).
    fold_auroc / fold_balanced_accuracy: [folds, n_layers, n_heads] held-out ROC AUC of the probe's margins and
        balanced accuracy (mean of TPR and TNR); both are 0.5 for an uninformative probe at any class ratio, where
        accuracy's chance level is the majority rate (NaN: not computed, e.g. released maps).
    heldout_margin: [N, n_layers, n_heads] each row's probe margin in the fold that held it out (float32; empty when
        not kept), so intervals can resample the data's own unit (`facts_map`: the fact).
    """

    scores: np.ndarray
    fold_accuracy: np.ndarray
    fold_precision: np.ndarray
    fold_recall: np.ndarray
    fold_f1: np.ndarray
    n_val: np.ndarray
    config: TruthScoresConfig | None = None
    model: str = ""
    n_samples: int = 0
    n_positive: int = 0
    provenance: dict = field(default_factory=dict)
    loss_curve: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fold_auroc: np.ndarray | None = None
    fold_balanced_accuracy: np.ndarray | None = None
    heldout_margin: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))

    def __post_init__(self):
        self.scores = np.asarray(self.scores, dtype=np.float64)
        if self.scores.ndim != 2:
            raise ShapeError(f"scores must be [n_layers, n_heads], got shape {self.scores.shape}")
        for name in ("fold_auroc", "fold_balanced_accuracy"):   # older saved maps have neither
            if getattr(self, name) is None:
                setattr(self, name, np.full(np.shape(self.fold_accuracy), np.nan))
        m = np.asarray(self.heldout_margin, dtype=np.float32)
        if m.size and (m.ndim != 3 or m.shape[1:] != self.scores.shape):
            raise ShapeError(f"heldout_margin must be [N, {self.scores.shape[0]}, {self.scores.shape[1]}], got "
                             f"{m.shape}")
        self.heldout_margin = m
        for name in ("fold_accuracy", "fold_precision", "fold_recall", "fold_f1", "fold_auroc",
                     "fold_balanced_accuracy"):
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            if arr.ndim != 3 or arr.shape[1:] != self.scores.shape:
                raise ShapeError(f"{name} must be [folds, {self.scores.shape[0]}, {self.scores.shape[1]}], "
                                 f"got {arr.shape}")
            setattr(self, name, arr)
        self.n_val = np.asarray(self.n_val, dtype=np.int64).reshape(-1)

    # ----- derived quantities -----
    @property
    def n_layers(self) -> int:
        return self.scores.shape[0]

    @property
    def n_heads(self) -> int:
        return self.scores.shape[1]

    @property
    def precision(self) -> np.ndarray:
        return self.fold_precision.mean(0)

    @property
    def recall(self) -> np.ndarray:
        return self.fold_recall.mean(0)

    @property
    def f1(self) -> np.ndarray:
        return self.fold_f1.mean(0)

    @property
    def auroc(self) -> np.ndarray:
        """[L, H] mean over folds of the held-out ROC AUC (chance 0.5 at any class ratio; NaN where not computed)."""
        return _fold_mean(self.fold_auroc)

    @property
    def balanced_accuracy(self) -> np.ndarray:
        """[L, H] mean over folds of the held-out balanced accuracy (chance 0.5; NaN where not computed)."""
        return _fold_mean(self.fold_balanced_accuracy)

    @property
    def majority_rate(self) -> float:
        """Accuracy's chance level: the share of the larger class (NaN without labels)."""
        if not self.n_samples:
            return float("nan")
        return max(self.n_positive, self.n_samples - self.n_positive) / self.n_samples

    @property
    def fold_std(self) -> np.ndarray:
        """[L, H] standard deviation of accuracy across folds (0 for a single pseudo-fold)."""
        return self.fold_accuracy.std(0)

    @property
    def accuracy_step(self) -> float:
        """Granularity of one fold's accuracy, 1 / (smallest validation fold)."""
        return float(1.0 / self.n_val.min()) if self.n_val.size and self.n_val.min() > 0 else float("nan")

    def rank(self) -> np.ndarray:
        """[L, H] rank of each head by score (1 = best; ties broken by flat index)."""
        order = np.argsort(-self.scores.ravel(), kind="stable")
        ranks = np.empty(order.size, dtype=np.int64)
        ranks[order] = np.arange(1, order.size + 1)
        return ranks.reshape(self.scores.shape)

    def top_heads(self, k: int = 10) -> list[tuple[int, int, float]]:
        """The k best heads as (layer, head, score), best first."""
        order = np.argsort(-self.scores.ravel(), kind="stable")[:k]
        return [(int(i // self.n_heads), int(i % self.n_heads), float(self.scores.ravel()[i])) for i in order]

    def check_shape(self, n_layers: int, n_heads: int) -> "TruthScores":
        """Raise ShapeError unless the map is [n_layers, n_heads] (catches transposed maps when L != H)."""
        check_score_shape(self.scores, n_layers, n_heads)
        return self

    def to_frame(self):
        """Tidy table: one row per (layer, head) with score, fold std, rank, precision, recall, f1, acc_fold{i}."""
        import pandas as pd

        L, H = self.scores.shape
        layer, head = np.meshgrid(np.arange(L), np.arange(H), indexing="ij")
        data = {"layer": layer.ravel(), "head": head.ravel(), "score": self.scores.ravel(),
                "auroc": self.auroc.ravel(), "balanced_accuracy": self.balanced_accuracy.ravel(),
                "fold_std": self.fold_std.ravel(), "rank": self.rank().ravel(),
                "precision": self.precision.ravel(), "recall": self.recall.ravel(), "f1": self.f1.ravel()}
        for f in range(self.fold_accuracy.shape[0]):
            data[f"acc_fold{f}"] = self.fold_accuracy[f].ravel()
        df = pd.DataFrame(data)
        df.attrs["model"] = self.model
        return df

    @classmethod
    def from_array(cls, scores, model: str = "", n_layers: int | None = None, n_heads: int | None = None,
                   provenance: dict | None = None) -> "TruthScores":
        """Wrap a bare [L, H] accuracy map (e.g. a released .npy). Fold metrics become one pseudo-fold holding the
        map itself (precision/recall/F1 NaN). Give n_layers/n_heads to assert orientation."""
        try:
            s = np.asarray(scores, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ShapeError(f"a Truth-Score map must be numeric [n_layers, n_heads]; {exc}") from None
        if s.ndim != 2:
            raise ShapeError(f"a Truth-Score map must be 2-D [n_layers, n_heads], got shape {s.shape}")
        if n_layers is not None or n_heads is not None:
            check_score_shape(s, n_layers if n_layers is not None else s.shape[0],
                              n_heads if n_heads is not None else s.shape[1])
        nan = np.full((1, *s.shape), np.nan)
        return cls(scores=s, fold_accuracy=s[None].copy(), fold_precision=nan, fold_recall=nan.copy(),
                   fold_f1=nan.copy(), n_val=np.zeros(1, dtype=np.int64), model=model,
                   provenance=dict(provenance or {}))

    @classmethod
    def from_npy(cls, path, model: str | None = None, n_layers: int | None = None,
                 n_heads: int | None = None) -> "TruthScores":
        """Load a TruthProbe `converted_score_cv5_head_metrics_<model>_<data>.npy` (float64 [layer, query head])."""
        p = Path(path)
        if not p.exists():
            raise DataError(f"score file {p} does not exist")
        try:
            arr = np.load(p, allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:
            raise DataError(f"{p} is not a readable .npy score map ({type(exc).__name__}: {exc}); released maps are "
                            "float64 [layer, query head] arrays saved with numpy.save (pickled arrays are refused)") \
                from None
        name = model or p.stem.replace("converted_score_cv5_head_metrics_", "")
        return cls.from_array(arr, model=name, n_layers=n_layers, n_heads=n_heads,
                              provenance={"source": str(p), "kind": "released TruthProbe map (raw accuracies)"})

    def __repr__(self):
        return (f"TruthScores(model={self.model!r}, shape={self.scores.shape}, mean={self.scores.mean():.3f}, "
                f"max={self.scores.max():.3f}, folds={self.fold_accuracy.shape[0]}, n_samples={self.n_samples})")


def truth_scores_from_activations(X, y, config: TruthScoresConfig | None = None, *, model: str = "",
                                  device=None, provenance: dict | None = None, splits=None,
                                  **overrides) -> TruthScores:
    """Truth Scores from already-collected activations.

    X: [N, n_layers, n_heads, d_head] head outputs at the probed token; y: [N] labels (1 = gold/context-supported).
    config: TruthScoresConfig; keyword overrides (folds=, epochs=, lr=, ...) replace its fields.
    splits: explicit [(train_idx, test_idx)] folds instead of config.folds / fold_kind (e.g. grouped folds that keep
    paired texts together, `facts_map.group_folds`).
    """
    cfg = dataclasses.replace(config or TruthScoresConfig(), **overrides).validate()
    y = np.asarray(y)
    t0 = time.perf_counter()
    fit = fit_head_probes(X, y, folds=cfg.folds if splits is None else splits, fold_kind=cfg.fold_kind,
                          epochs=cfg.epochs, lr=cfg.lr,
                          weight_decay=cfg.weight_decay, batch_size=cfg.batch_size, seed=cfg.seed, device=device,
                          dtype=getattr(torch, cfg.dtype), solver=cfg.solver, C=cfg.C, tol=cfg.tol,
                          max_iter=cfg.max_iter)
    recipe = ("TruthProbe cv5 AdamW zero-init (spec §2.2)" if cfg.solver == "adamw" else
              f"L2 logistic optimum (scikit-learn LogisticRegression C={cfg.C}), batched L-BFGS tol={cfg.tol}")
    prov = {"recipe": recipe, "solver": cfg.solver, "probe_seconds": time.perf_counter() - t0,
            "fold_test_indices": [te.tolist() for _, te in fit.folds]}
    prov.update(provenance or {})
    return TruthScores(scores=fit.accuracy.mean(0), fold_accuracy=fit.accuracy, fold_precision=fit.precision,
                       fold_recall=fit.recall, fold_f1=fit.f1, n_val=fit.n_val, config=cfg, model=model,
                       n_samples=int(len(y)), n_positive=int(np.sum(y)), provenance=prov, loss_curve=fit.loss_curve,
                       fold_auroc=fit.auroc, fold_balanced_accuracy=fit.balanced_accuracy,
                       heldout_margin=fit.heldout_margin)


def _fold_mean(a: np.ndarray) -> np.ndarray:
    """Mean over the folds axis ignoring NaN folds (a fold without both classes); NaN where every fold is NaN."""
    a = np.asarray(a, dtype=np.float64)
    ok = np.isfinite(a)
    n = ok.sum(0)
    return np.divide(np.where(ok, a, 0.0).sum(0), n, out=np.full(a.shape[1:], np.nan), where=n > 0)


# ----------------------------------------------------------------------------------------------------------
# Model-facing part
# ----------------------------------------------------------------------------------------------------------
def _as_pairs(dataset) -> tuple[list[str], np.ndarray]:
    """Normalise a dataset into (texts, labels). Accepts (text, label) pairs, dicts with text/label, objects with
    .text/.label attributes, or a DataFrame with text/label columns. A text may be a list of token ids."""
    try:
        import pandas as pd

        if isinstance(dataset, pd.DataFrame):
            if not {"text", "label"} <= set(dataset.columns):
                raise DataError(f"a DataFrame dataset needs 'text' and 'label' columns, has {list(dataset.columns)}")
            return [str(t) for t in dataset["text"]], np.asarray(dataset["label"]).astype(np.int64)
    except ImportError:  # pragma: no cover
        pass
    texts, labels = [], []
    for i, item in enumerate(dataset):
        if isinstance(item, dict):
            t, lab = item.get("text"), item.get("label")
        elif hasattr(item, "text") and hasattr(item, "label"):
            t, lab = item.text, item.label
        elif isinstance(item, (tuple, list)) and len(item) >= 2:
            t, lab = item[0], item[1]
        else:
            raise DataError(f"dataset item {i} is {type(item).__name__}; expected a (text, label) pair")
        if isinstance(lab, str):
            if lab not in ("gold", "hallucinated"):
                raise DataError(f"item {i}: string label {lab!r} must be 'gold' or 'hallucinated'")
            lab = int(lab == "gold")
        if isinstance(t, (list, tuple)) and t and all(isinstance(v, (int, np.integer)) for v in t):
            t = [int(v) for v in t]  # pre-tokenised prompt (token ids, used as given: no special tokens added)
        elif not isinstance(t, str) or not t:
            raise DataError(f"item {i}: text must be a non-empty string or a list of token ids")
        texts.append(t)
        labels.append(int(lab))
    if not texts:
        raise InputError("the dataset is empty")
    y = np.asarray(labels, dtype=np.int64)
    if not np.isin(y, (0, 1)).all():
        raise DataError("labels must be 0/1 (1 = gold/context-supported, 0 = hallucinated) or 'gold'/'hallucinated'")
    return texts, y


def capture_head_outputs(model, texts: Sequence[str], *, batch_size: int = 32, dtype=torch.float32,
                         layers: Sequence[int] | None = None, progress=None, edits=None, out_dir=None) -> torch.Tensor:
    """[N, n_layers, n_heads, d_head] per-head outputs z (attn_z, before W_O) at each text's last real token.

    Collected with `interplab.harvest` (positions="last"): one forward per batch, stopped after the deepest captured
    layer; in RAM, or with `out_dir` as resumable safetensors shards on disk (re-running skips finished batches).
    `progress(done, total)` is called after each batch.
    edits: Edits applied during capture (e.g. a HeadGate), or a callable (row_indices) -> list of Edits for
    per-batch edits (e.g. a planted signal that depends on each row's label)."""
    from interplab.models.harvest import harvest

    layers = list(range(model.n_layers)) if layers is None else list(layers)
    sites = [f"attn_z.{layer}" for layer in layers]
    store = harvest(model, list(texts), sites, out_dir, batch_size=batch_size, positions="last", dtype=dtype,
                    edits=edits, progress=progress, chat=False)
    out = torch.empty(store.n_rows, len(layers), model.n_heads, model.d_head, dtype=dtype)
    for i, site in enumerate(sites):  # one site at a time: the store never holds two copies in RAM
        out[:, i] = store.read(site)
    return out


def truth_scores(model, dataset, *, site: str = "attn_z", folds: int = 5, epochs: int = 200, lr: float = 1e-2,
                 weight_decay: float = 1e-3, batch_size: int = 512, seed: int = 42, fold_kind: str = "kfold",
                 capture_batch_size: int = 32, dtype: str = "float32", device=None, progress=None,
                 edits=None, return_activations: bool = False, solver: str = "adamw", C: float = 1.0,
                 tol: float = 1e-4, max_iter: int = 100, out_dir=None):
    """Truth-Score map of `model` on `dataset` ((text, label) pairs, label 1 = gold / context-supported).

    Collects each head's z at each text's last real token (one forward per batch), then trains all
    folds x layers x heads logistic probes at once. Returns TruthScores ([n_layers, n_heads] mean held-out accuracy);
    with return_activations=True returns (TruthScores, X [N, L, H, d_head], y).
    edits: Edits active while collecting activations (see `capture_head_outputs`), e.g. to score a gated model.
    solver / C / tol / max_iter: see `TruthScoresConfig` ("adamw" = faithful recipe, "lbfgs" = fast optimum).
    out_dir: harvest the activations to this folder (resumable safetensors shards, `interplab.harvest`) instead of RAM."""
    cfg = TruthScoresConfig(site=site, folds=folds, fold_kind=fold_kind, epochs=epochs, lr=lr,
                            weight_decay=weight_decay, batch_size=batch_size, seed=seed,
                            capture_batch_size=capture_batch_size, dtype=dtype, solver=solver, C=C, tol=tol,
                            max_iter=max_iter).validate()
    texts, y = _as_pairs(dataset)
    if len(texts) < folds:
        raise InputError(f"need at least folds={folds} examples, got {len(texts)}")
    t0 = time.perf_counter()
    X = capture_head_outputs(model, texts, batch_size=cfg.capture_batch_size, dtype=getattr(torch, cfg.dtype),
                             progress=progress, edits=edits, out_dir=out_dir)
    cap_s = time.perf_counter() - t0
    name = str(getattr(model, "name", "") or "")
    ts = truth_scores_from_activations(X, y, cfg, model=name, device=device, provenance={
        "capture_seconds": cap_s, "n_layers": model.n_layers, "n_heads": model.n_heads, "d_head": model.d_head,
        "backend": str(getattr(model, "backend", "")), "site": cfg.site, "probe_position": cfg.probe_position})
    ts.check_shape(model.n_layers, model.n_heads)
    return (ts, X, y) if return_activations else ts


def evidence_attention(model, dataset, *, evidence=None, batch_size: int = 32, reduce: str = "mean") -> np.ndarray:
    """[n_layers, n_heads] attention mass from the scored position onto the evidence tokens:
    EM_{l,h} = sum_{k in evidence} A_{l,h}(t, k), t = each row's last real token, averaged over examples.

    dataset items carry their evidence as token positions (0 = the row's first real token, BOS included when the
    tokenizer adds one): a dict with "text" and "evidence" (list of ints), a (text, label, evidence) triple, or an
    object with .text and .evidence. Or pass `evidence(text, token_ids) -> list[int]` to compute them.
    reduce: "mean" (over examples) or "none" ([N, L, H])."""
    texts, evid = [], []
    for i, item in enumerate(dataset):
        if isinstance(item, dict):
            t, e = item.get("text"), item.get("evidence")
        elif hasattr(item, "text"):
            t, e = item.text, getattr(item, "evidence", None)
        elif isinstance(item, (tuple, list)):
            t, e = item[0], (item[2] if len(item) > 2 else None)
        else:
            raise DataError(f"dataset item {i} is {type(item).__name__}; expected text with evidence positions")
        texts.append(t)
        evid.append(e)
    if not texts:
        raise InputError("the dataset is empty")
    sites = [f"attn_pattern.{layer}" for layer in range(model.n_layers)]
    out = []
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            chunk = texts[s:s + batch_size]
            res = model.run(chunk, capture=sites, logits=False, chat=False)
            batch = res.batch
            ids, lengths = batch.input_ids, batch.lengths
            b, p = ids.shape
            pad = p - lengths                                   # left padding per row
            mask = torch.zeros(b, p, dtype=torch.float64)
            for r in range(b):
                e = evid[s + r]
                if evidence is not None:
                    real_ids = ids[r, int(pad[r]):].tolist()
                    e = evidence(chunk[r], real_ids)
                if e is None:
                    raise DataError(f"example {s + r} has no evidence positions; pass evidence=callable or give "
                                    "each item an 'evidence' list of token positions")
                e = torch.as_tensor(list(e), dtype=torch.long)
                if e.numel() and (e.min() < 0 or e.max() >= int(lengths[r])):
                    raise DataError(f"example {s + r}: evidence positions {e.tolist()} outside its "
                                    f"{int(lengths[r])} tokens")
                mask[r, e + int(pad[r])] = 1.0
            # the scored query row only (left padding: each row's last real token is the last column)
            rows = torch.stack([res.cache.last(site) for site in sites], 1).to(torch.float64).cpu()  # [b, L, H, k]
            out.append(torch.einsum("blhk,bk->blh", rows, mask))
    em = torch.cat(out).numpy()
    return em.mean(0) if reduce == "mean" else em
