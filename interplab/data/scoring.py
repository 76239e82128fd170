"""Answer parsing and scoring for the benchmarks the methods are evaluated on.

HaluEval-QA (truth_scores.md §5; TruthProbe `lmms_eval/tasks/halueval_remain/utils.py`): the reply is lower-cased and
stripped, matched against `^(yes|no)\\b[.,]?`, else "unknown". The repo then maps by substring ('yes' in pred ->
yes, elif 'no' in pred -> no, else no), so "unknown" (which contains "no") always becomes "no". interplab reports
the unknown rate separately; `unknown="no"` is the labelled repo-faithful option, `unknown="wrong"` scores
unknowns as errors and `unknown="drop"` excludes them. Positive class = "yes" (= the answer is hallucinated).

Short answers (Truth Scores' context-following, a counterfactual prompt answered by one entity): `starts_with_answer`
compares the generated *text* (never a token string, which on a BPE tokenizer is "ĠParis"), case-folded, with
punctuation turned into spaces, and matches when the reply is the answer or begins with it as whole words.

DecodeShare pool (decodeshare.md §3, §5; `decodeshare/benchmark_dataloaders.py`): the span after the last
`Final answer:` (else the last non-empty line) is parsed per task kind: numeric (GSM8K; commas dropped, the last
number, trailing zeros of decimals dropped), yes/no (StrategyQA) or a multiple-choice letter (letters of the
task), falling back to the first line of the reply when the final span gives nothing.
"""
from __future__ import annotations

import re
import string
from typing import Sequence

from interplab.core.errors import ConfigError, InputError
from interplab.core.record import Record

__all__ = ["HALUEVAL_UNKNOWN_MODES", "parse_halueval", "halueval_metrics", "final_answer_span", "parse_number",
           "parse_yes_no", "parse_choice", "parse_final_answer", "answer_correct", "accuracy", "normalise_words",
           "surface_tokens", "starts_with_answer", "HaluEvalMetrics", "Accuracy"]

HALUEVAL_UNKNOWN_MODES = ("no", "wrong", "drop")
_HALU_RE = re.compile(r"^(yes|no)\b[.,]?")


def parse_halueval(reply: str) -> str:
    """'yes', 'no' or 'unknown' (the repo's regex on the lower-cased, stripped reply; no substring rescue)."""
    m = _HALU_RE.match(str(reply or "").lower().strip())
    return m.group(1) if m else "unknown"


def _repo_map(pred: str) -> str:
    # the repo's substring step; applied to the regex output, so 'unknown' -> 'no' ("unknown" contains "no")
    return "yes" if "yes" in pred else "no"


class HaluEvalMetrics(Record):
    """`halueval_metrics`: n, n_scored, accuracy, precision, recall, f1, unknown_rate, n_unknown, unknown_mode,
    yes_ratio_pred, yes_ratio_gt_repo."""

    KEYS = ("n", "n_scored", "accuracy", "precision", "recall", "f1", "unknown_rate", "n_unknown", "unknown_mode",
            "yes_ratio_pred", "yes_ratio_gt_repo")


def halueval_metrics(replies: Sequence[str], ground_truth: Sequence[str], *, unknown: str = "no"
                     ) -> HaluEvalMetrics:
    """Accuracy (headline), precision/recall/F1 with "yes" (hallucinated) positive, the unknown rate, and the
    predicted and ground-truth yes ratios (the repo's `yes_ratio` counts ground truth; both are given).

    replies: raw model outputs; ground_truth: 'yes'/'no' per item (case-insensitive).
    unknown: 'no' (repo-faithful: unparsable replies count as "no"), 'wrong' (always scored incorrect, never a
    positive) or 'drop' (excluded from every metric except unknown_rate)."""
    if unknown not in HALUEVAL_UNKNOWN_MODES:
        raise ConfigError(f"unknown must be one of {HALUEVAL_UNKNOWN_MODES}, got {unknown!r}")
    replies, gts = list(replies), [str(g).strip().lower() for g in ground_truth]
    if len(replies) != len(gts):
        raise InputError(f"{len(replies)} replies but {len(gts)} ground-truth labels")
    if not replies:
        raise InputError("no replies to score")
    bad = sorted({g for g in gts if g not in ("yes", "no")})
    if bad:
        raise InputError(f"ground truth must be 'yes' or 'no', got {bad}")
    parsed = [parse_halueval(r) for r in replies]
    n_unknown = sum(p == "unknown" for p in parsed)
    pairs = []
    for p, g in zip(parsed, gts):
        if p == "unknown":
            if unknown == "drop":
                continue
            p = _repo_map(p) if unknown == "no" else "unknown"
        pairs.append((p, g))
    tp = sum(p == "yes" and g == "yes" for p, g in pairs)
    fp = sum(p == "yes" and g == "no" for p, g in pairs)
    fn = sum(p != "yes" and g == "yes" for p, g in pairs)
    n = len(pairs)
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    return HaluEvalMetrics({
        "n": len(replies), "n_scored": n, "accuracy": (sum(p == g for p, g in pairs) / n) if n else float("nan"),
        "precision": prec, "recall": rec, "f1": (2 * prec * rec / (prec + rec)) if prec + rec else 0.0,
        "unknown_rate": n_unknown / len(replies), "n_unknown": n_unknown, "unknown_mode": unknown,
        "yes_ratio_pred": (sum(p == "yes" for p, _ in pairs) / n) if n else float("nan"),
        "yes_ratio_gt_repo": sum(g == "yes" for g in gts) / len(gts)})


# --------------------------------------------------------------------------------------------- Final answer
_FINAL_RE = re.compile(r"final\s*answer\s*:\s*(.*)", re.IGNORECASE)


_SURFACE = re.compile(r"[^\s.,;:!?\"'()\[\]{}]+")


def surface_tokens(text: str) -> list[str]:
    """Whitespace / punctuation-separated tokens of `text`, as written (the CRH concept judge's and the offline pair
    builder's notion of "a word of the reply"; keeps '-', '/', '+', '#', so "c++" and "for-loop" stay whole)."""
    return _SURFACE.findall(str(text or ""))


def normalise_words(text: str) -> str:
    """Case-folded words of `text`: punctuation becomes a space, whitespace runs collapse ("Paris." -> "paris")."""
    return " ".join(re.sub(r"[^\w\s]", " ", str(text or "").casefold()).split())


def starts_with_answer(reply: str, answer: str) -> bool:
    """Whether `reply` is `answer` or begins with it as whole words (" Buenos Aires, of course" matches "Buenos
    Aires"; "Parisian" does not match "Paris"). An empty answer never matches."""
    r, a = normalise_words(reply), normalise_words(answer)
    return bool(a) and (r == a or r.startswith(a + " "))


def _first_line(text: str) -> str:
    for ln in str(text or "").splitlines():
        if ln.strip():
            return ln.strip()
    return str(text or "").strip()


def final_answer_span(text: str) -> str:
    """The rest of the line after the last `Final answer:` (case-insensitive), else the last non-empty line."""
    t = str(text or "")
    ms = list(_FINAL_RE.finditer(t))
    if ms:
        return ms[-1].group(1).strip()
    lines = [ln.strip() for ln in t.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def parse_number(span: str) -> str:
    """The last number in `span` with thousands commas removed and trailing decimal zeros dropped ('' if none)."""
    nums = re.findall(r"[-+]?\d+(?:\.\d+)?", str(span or "").replace(",", ""))
    if not nums:
        return ""
    num = nums[-1]
    if "." in num:
        num = num.rstrip("0").rstrip(".")
    return num


def parse_yes_no(span: str) -> str:
    """'YES', 'NO' or '' ('true'/'false' count; a lone A/B letter maps to YES/NO as in the reference parser)."""
    s = str(span or "").strip().lower()
    if re.search(r"\byes\b", s) or "true" in s:
        return "YES"
    if re.search(r"\bno\b", s) or "false" in s:
        return "NO"
    m = re.search(r"\b([AB])\b", s.upper())
    if m:
        return "YES" if m.group(1) == "A" else "NO"
    return ""


def _digit_letter(n: int, letters: str) -> str:
    if 1 <= n <= len(letters):
        return letters[n - 1]
    return letters[n] if 0 <= n < len(letters) else ""


def parse_choice(span: str, letters: str) -> str:
    """A choice letter among `letters` ('' if none): a standalone letter, a letter before `)`/`.`/`:`,
    'option X', a letter in the first 32 characters, or a 1-based choice number."""
    s = str(span or "").strip().upper()
    if not s:
        return ""
    for pat in (rf"\b([{letters}])\b", rf"([{letters}])\s*[\)\]\.\:\,;]",
                rf"(?:OPTION|CHOICE|ANSWER|ANS)\s*:?\s*([{letters}])"):
        m = re.search(pat, s)
        if m:
            return m.group(1)
    m = re.search(rf"([{letters}])", s[:32])
    if m:
        return m.group(1)
    md = re.search(r"\b(\d{1,2})\b", s)
    return _digit_letter(int(md.group(1)), letters) if md else ""


def parse_final_answer(text: str, kind: str, letters: str = "ABCDE") -> str:
    """Parse a generated reply of a task of `kind` ('numeric', 'yesno' or 'mc' with `letters`).
    Tries the `Final answer:` span first, then the reply's first line (a model that answers right after a
    teacher-forced "Final answer:" prefix puts the answer there); mc also tries the first 128 characters."""
    if kind not in ("numeric", "yesno", "mc"):
        raise ConfigError(f"kind must be 'numeric', 'yesno' or 'mc', got {kind!r}")
    parse = {"numeric": parse_number, "yesno": parse_yes_no, "mc": lambda s: parse_choice(s, letters)}[kind]
    tries = [final_answer_span(text), _first_line(text)] + ([str(text or "")[:128]] if kind == "mc" else [])
    for span in tries:
        out = parse(span)
        if out:
            return out
    return ""


def _normalise_gold(gold, kind: str, letters: str) -> str:
    if kind == "numeric":
        return parse_number(str(gold))
    if kind == "yesno":
        s = str(gold).strip().lower()
        return {"yes": "YES", "true": "YES", "1": "YES", "no": "NO", "false": "NO", "0": "NO"}.get(s, "")
    s = str(gold).strip().upper().strip(string.punctuation + " ")
    return s if len(s) == 1 and s in letters else ""


def answer_correct(text: str, gold, kind: str, letters: str = "ABCDE") -> bool:
    """Is the parsed reply equal to the gold answer? An unparsable reply or gold is never correct."""
    p = parse_final_answer(text, kind, letters)
    g = _normalise_gold(gold, kind, letters)
    return bool(p) and bool(g) and p == g


class Accuracy(Record):
    """`accuracy`: accuracy, extraction_rate (share of replies with a parsable answer), n."""

    KEYS = ("accuracy", "extraction_rate", "n")


def accuracy(texts: Sequence[str], golds: Sequence, kind: str, letters: str = "ABCDE") -> Accuracy:
    """{'accuracy', 'extraction_rate', 'n'} of replies against golds (extraction = a parsable answer)."""
    texts, golds = list(texts), list(golds)
    if len(texts) != len(golds):
        raise InputError(f"{len(texts)} replies but {len(golds)} golds")
    if not texts:
        raise InputError("no replies to score")
    ok = [answer_correct(t, g, kind, letters) for t, g in zip(texts, golds)]
    ext = [bool(parse_final_answer(t, kind, letters)) for t in texts]
    return Accuracy(accuracy=sum(ok) / len(ok), extraction_rate=sum(ext) / len(ext), n=len(ok))
