"""scorers.py's labelled pairs from SQuAD 2.0 dev (what each set holds: scorers.py's docstring):
hard negatives by BM25 + MiniLM rank fusion, perturbed clauses, swapped QA claims."""

import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragloop.models.scoring import lexical as lexmod
from ragloop.text.sentences import split_strips
from ragloop.text.tokenize import Tokenizer

SETS = {
    "relevance": "relevance",
    "answerability": "relevance",
    "support-swap": "support",
    "support-perturbed": "support",
    "support-qa": "support",
    "refine": "relevance",
}
SEED = 13


@dataclass(frozen=True)
class Pair:
    a: str  # query or claim
    b: str  # passage or context
    label: int
    kind: str  # own / hardneg / unanswerable / swap / number / entity / negation
    article: int


# --- label sets -------------------------------------------------------------------------------------

_tok = Tokenizer()


def bm25(query: list[str], docs: list[list[str]], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / max(n, 1)
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(d))
    tfs = [Counter(d) for d in docs]
    out = np.zeros(n)
    for t in set(query):
        if t not in df:
            continue
        idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
        for i, tf in enumerate(tfs):
            f = tf.get(t, 0)
            if f:
                out[i] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(docs[i]) / avgdl))
    return out


def hardest_other(
    text_terms: list[str],
    text_vec: np.ndarray,
    own: int,
    doc_terms: list[list[str]],
    doc_vecs: np.ndarray,
    skip: set[int],
) -> int | None:
    """The other paragraph ranked best by RRF(BM25 rank, cosine rank), excluding `own` and `skip`."""
    lex = bm25(text_terms, doc_terms)
    cos = doc_vecs @ text_vec
    rank_lex = np.argsort(np.argsort(-lex, kind="stable"), kind="stable")
    rank_cos = np.argsort(np.argsort(-cos, kind="stable"), kind="stable")
    rrf = 1.0 / (60 + rank_lex) + 1.0 / (60 + rank_cos)
    for j in np.argsort(-rrf, kind="stable"):
        if int(j) != own and int(j) not in skip:
            return int(j)
    return None


_NUM = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_CAP = re.compile(r"(?<=[\s(\"'])[A-Z][a-z]{2,}\b")
_AUX = re.compile(r"\b(is|was|are|were|has|had|can|will)\b")


def _new_number(old: str, paragraph_numbers: set[str], rng: random.Random) -> str | None:
    raw = old.replace(",", "")
    for _ in range(20):
        if "." in raw:
            new_val = f"{float(raw) + rng.choice([0.5, 1.5, 2.0, 3.0]):g}"
        else:
            v = int(raw)
            if 1000 <= v <= 2100 and len(raw) == 4:
                delta = rng.choice([d for d in range(-12, 13) if d != 0])
            else:
                delta = max(1, round(v * rng.choice([0.25, 0.5, 1.0]))) if v >= 8 else rng.randint(1, 5)
            new_val = str(v + delta)
            if "," in old:
                new_val = f"{int(new_val):,}"
        if new_val.replace(",", "") not in paragraph_numbers and new_val != old:
            return new_val
    return None


def perturb(sentence: str, paragraph: str, article_caps: list[str], rng: random.Random) -> tuple[str, str] | None:
    """(perturbed sentence, kind) or None when nothing can be changed."""
    options = []
    nums = list(_NUM.finditer(sentence))
    if nums:
        options.append("number")
    low_par = paragraph.lower()
    caps = [m for m in _CAP.finditer(sentence) if m.group(0).lower() not in lexmod.ENGLISH_STOPWORDS]
    candidates = [c for c in article_caps if c.lower() not in low_par]
    if caps and candidates:
        options.append("entity")
    if _AUX.search(sentence) and not lexmod.negated(sentence):
        options.append("negation")
    rng.shuffle(options)
    for kind in options:
        if kind == "number":
            m = rng.choice(nums)
            par_nums = {n.replace(",", "") for n in _NUM.findall(paragraph)}
            new = _new_number(m.group(0), par_nums, rng)
            if new is not None:
                return sentence[: m.start()] + new + sentence[m.end() :], kind
        elif kind == "entity":
            m = rng.choice(caps)
            return sentence[: m.start()] + rng.choice(candidates) + sentence[m.end() :], kind
        else:
            m2 = _AUX.search(sentence)
            assert m2 is not None
            return sentence[: m2.end()] + " not" + sentence[m2.end() :], kind
    return None


_CLAUSE_BREAK = re.compile(r"(?<=[,;:])\s+|\s+[-–—]\s+")


def answer_clause(sentence: str, offset: int, min_words: int = 8) -> str:
    """The clause(s) of `sentence` around character `offset`: comma/semicolon/dash separated
    segments, widened until at least `min_words` words, as a sentence of its own."""
    cuts = [0, *(m.end() for m in _CLAUSE_BREAK.finditer(sentence)), len(sentence) + 1]
    segs = [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]
    k = next((i for i, (a, b) in enumerate(segs) if a <= offset < b), 0)
    lo = hi = k
    while len(sentence[segs[lo][0] : segs[hi][1]].split()) < min_words and (lo > 0 or hi < len(segs) - 1):
        if hi < len(segs) - 1:
            hi += 1
        if len(sentence[segs[lo][0] : segs[hi][1]].split()) < min_words and lo > 0:
            lo -= 1
    text = sentence[segs[lo][0] : segs[hi][1]].strip().strip(",;:-–— ").strip()
    if not text:
        return sentence
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def qa_claim(question: str, answer: str) -> str:
    return f'The answer to "{question.strip()}" is {answer.strip().rstrip(".")}.'


def other_answer(q: dict[str, Any], qas: list[dict[str, Any]], rng: random.Random) -> str | None:
    """A gold answer of another question on the same paragraph that does not overlap q's
    answers: a fact the context does contain, attached to the wrong question. Same kind
    (number / name / other) when possible."""
    golds = {a["text"].strip().lower() for a in q["answers"] if a["text"].strip()}

    def kind(t: str) -> str:
        return "num" if re.search(r"\d", t) else "name" if t[:1].isupper() else "other"

    cands = []
    for other in qas:
        if other is q or other["is_impossible"] or not other["answers"]:
            continue
        text = other["answers"][0]["text"].strip()
        low = text.lower()
        if text and not any(low in g or g in low for g in golds):
            cands.append(text)
    if not cands:
        return None
    want = kind(q["answers"][0]["text"].strip())
    same = sorted({c for c in cands if kind(c) == want}) or sorted(set(cands))
    return rng.choice(same)


def build_sets(articles: list[dict[str, Any]], indices: range, embedder: Any) -> dict[str, list[Pair]]:
    sets: dict[str, list[Pair]] = {name: [] for name in SETS}
    for ai in indices:
        art = articles[ai]
        rng = random.Random(f"{SEED}-{ai}")
        paras = [p["context"] for p in art["paragraphs"]]
        para_terms = [_tok.tokenize(p) for p in paras]
        para_vecs = embedder.embed(paras)
        # capitalised words not at a sentence start: names, not ordinary words
        caps = sorted(
            {m.group(0) for p in paras for m in _CAP.finditer(p) if not re.search(r"[.!?]\W*$", p[: m.start()])}
            - set(map(str.capitalize, lexmod.ENGLISH_STOPWORDS))
        )
        questions = [(pi, q) for pi, p in enumerate(art["paragraphs"]) for q in p["qas"]]
        q_vecs = embedder.embed([q["question"] for _, q in questions])
        sentences: dict[tuple[int, int], tuple[str, int]] = {}
        strip_cache: dict[int, tuple[list[Any], list[list[str]], np.ndarray]] = {}
        for (pi, q), qv in zip(questions, q_vecs, strict=True):
            own = paras[pi]
            answerable = not q["is_impossible"]
            sets["answerability"].append(
                Pair(q["question"], own, int(answerable), "own" if answerable else "unanswerable", ai)
            )
            if not answerable:
                continue
            golds = {a["text"].lower() for a in q["answers"] if a["text"].strip()}
            skip = {j for j, p in enumerate(paras) if any(g in p.lower() for g in golds)}
            neg = hardest_other(_tok.tokenize(q["question"]), qv, pi, para_terms, para_vecs, skip)
            if neg is None:
                continue
            sets["relevance"].append(Pair(q["question"], own, 1, "own", ai))
            sets["relevance"].append(Pair(q["question"], paras[neg], 0, "hardneg", ai))
            start = q["answers"][0]["answer_start"]
            if pi not in strip_cache:
                texts = [st.text for st in split_strips(own)]
                strip_cache[pi] = (split_strips(own), [_tok.tokenize(t) for t in texts], embedder.embed(texts))
            strips, strip_terms, strip_vecs = strip_cache[pi]
            gold_strip = next((k for k, st in enumerate(strips) if st.start <= start < st.end), None)
            if gold_strip is not None and len(strips) > 1:
                skip = {k for k, st in enumerate(strips) if any(g in st.text.lower() for g in golds)}
                other = hardest_other(_tok.tokenize(q["question"]), qv, gold_strip, strip_terms, strip_vecs, skip)
                if other is not None:
                    sets["refine"].append(Pair(q["question"], strips[gold_strip].text, 1, "answer-strip", ai))
                    sets["refine"].append(Pair(q["question"], strips[other].text, 0, "other-strip", ai))
            for si, strip in enumerate(split_strips(own)):
                if strip.start <= start < strip.end and len(strip.text) >= 30:
                    sentences.setdefault((pi, si), (strip.text, start - strip.start))
            wrong = other_answer(q, art["paragraphs"][pi]["qas"], rng)
            if wrong is not None:
                sets["support-qa"].append(Pair(qa_claim(q["question"], q["answers"][0]["text"]), own, 1, "own", ai))
                sets["support-qa"].append(Pair(qa_claim(q["question"], wrong), own, 0, "other-answer", ai))
        keys = sorted(sentences)
        s_vecs = embedder.embed([sentences[k][0] for k in keys]) if keys else np.zeros((0, 384))
        for (pi, si), sv in zip(keys, s_vecs, strict=True):
            sent, offset = sentences[(pi, si)]
            own = paras[pi]
            skip = {j for j, p in enumerate(paras) if sent in p}
            neg = hardest_other(_tok.tokenize(sent), sv, pi, para_terms, para_vecs, skip)
            if neg is not None:
                sets["support-swap"].append(Pair(sent, own, 1, "own", ai))
                sets["support-swap"].append(Pair(sent, paras[neg], 0, "swap", ai))
            clause = answer_clause(sent, offset)
            changed = perturb(clause, own, caps, rng)
            if changed is not None:
                sets["support-perturbed"].append(Pair(clause, own, 1, "own", ai))
                sets["support-perturbed"].append(Pair(changed[0], own, 0, changed[1], ai))
    return sets
