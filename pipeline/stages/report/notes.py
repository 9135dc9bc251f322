"""Which knowledge notes explain a finding: BM25 (bm25s) over each note's title, finding types and
body, queried with the finding's type and summary. A note that names the finding type is always
first; another note only where it matches the finding at least as well as that note does
(rules: note_relevance_min_ratio)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from npuprof import knowledge

if TYPE_CHECKING:
    import bm25s

EXCERPT_CHARS = 240
TOP_REFS = 3


def _words(text: str) -> str:
    # finding types and kernel names are snake / camel case: split them into words BM25 can match
    return re.sub(r"[_:./-]+", " ", text)


def _tokens(texts: list[str]) -> bm25s.tokenization.Tokenized:
    """The texts as BM25 tokens, the same way for the notes and for a query."""
    import bm25s  # here, not at the top: it loads scipy (0.3 s), and a run without findings never asks

    return bm25s.tokenize([_words(text) for text in texts], stopwords="en", show_progress=False)


@lru_cache(maxsize=1)
def _index() -> tuple[bm25s.BM25, tuple[dict, ...]]:
    import bm25s

    notes = knowledge.notes()
    retriever = bm25s.BM25()
    corpus = [" ".join([n["title"], *n["finding_types"], n["body"]]) for n in notes]
    retriever.index(_tokens(corpus), show_progress=False)
    return retriever, notes


def _excerpt(body: str) -> str:
    first = " ".join(re.sub(r"^\*\*[^*]+\*\*\s*", "", body.split("\n\n")[0]).split())  # drop the bold lead-in
    return first if len(first) <= EXCERPT_CHARS else first[: EXCERPT_CHARS - 1].rstrip() + "…"


def knowledge_refs(finding_type: str, summary: str, top: int = TOP_REFS) -> list[dict]:
    """The ``top`` notes for a finding: ref, title, excerpt and BM25 score (notes written for the
    finding type first)."""
    retriever, notes = _index()
    ranked, scores = retriever.retrieve(_tokens([f"{finding_type} {summary}"]), k=len(notes), show_progress=False)
    order = sorted(
        zip(ranked[0].tolist(), scores[0].tolist()),
        key=lambda pair: (finding_type not in notes[pair[0]]["finding_types"], -pair[1]),
    )
    own = [score for i, score in order if finding_type in notes[i]["finding_types"]]
    bar = (max(own) if own else max((s for _, s in order), default=0.0)) * knowledge.load("diagnosis_rules")[
        "note_relevance_min_ratio"
    ]
    order = [(i, s) for i, s in order if finding_type in notes[i]["finding_types"] or (s >= bar and s > 0)]
    return [
        {
            "ref": notes[i]["ref"],
            "title": notes[i]["title"],
            "excerpt": _excerpt(notes[i]["body"]),
            "score": round(float(np.float64(score)), 4),
        }
        for i, score in order[:top]
    ]


REMEDY_CHARS = 420  # two or three lines of a report: the note holds the rest
_TRY = "**What to try.**"


def remedy(finding_type: str) -> dict | None:
    """What to try for a finding type, from the "What to try" paragraph of the note written for it (its
    bullet, where the note's ``remedy_bullets`` names one, in whichever of the note's sections holds it:
    ``*Label:*`` or a bullet opening with the label's words): {"text", "ref"}, the text cut at a sentence
    or clause end near ``REMEDY_CHARS`` with "…" where the note says more; None without such a note."""
    for note in knowledge.notes():
        if finding_type not in note["finding_types"]:
            continue
        paragraphs = [p[len(_TRY) :] for p in note["body"].split("\n\n") if p.startswith(_TRY)]
        if not paragraphs:
            continue
        text = paragraphs[0]
        label = note["remedy_bullets"].get(finding_type)
        if label:
            bullets = [b for p in paragraphs for b in re.split(r"\n- ", "\n" + p.strip())]
            marked = next((b.removeprefix(f"*{label}:*") for b in bullets if b.startswith(f"*{label}:*")), None)
            text = marked or next((b for b in bullets if b.startswith(label)), text)
        text = " ".join(text.split()).removeprefix("- ")  # a paragraph of bullets: its first opens the text
        return {"text": _cut(text[:1].upper() + text[1:]), "ref": note["ref"]}
    return None


def _cut(text: str) -> str:
    """``text`` cut near REMEDY_CHARS after a sentence, else a clause, never inside parentheses or code."""
    if len(text) <= REMEDY_CHARS:
        return text
    depth, code, ends = 0, False, {".": [], ";": [], ",": []}
    for position, char in enumerate(text[: REMEDY_CHARS + 1]):
        code ^= char == "`"
        depth += (char == "(") - (char == ")")
        if char in ends and not depth and not code and text[position + 1 : position + 2] == " ":
            ends[char].append(position)
    for mark in ".;,":
        usable = [p for p in ends[mark] if p > REMEDY_CHARS // 3]
        if usable:
            return text[: usable[-1] + (mark == ".")] + " …"
    return text[:REMEDY_CHARS].rstrip() + " …"
