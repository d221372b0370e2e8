"""Drug reviews as (text, label, domain): binary sentiment, domains from the condition.

The two TSV files of ``drugsCom.zip`` (columns ``drugName, condition, review, rating,
date, usefulCount``; rating already mapped to negative / neutral / positive) are read with
the ``csv`` module. Neutral reviews are dropped (binary task: positive = 1, negative = 0),
HTML entities are decoded, exact duplicate texts are kept once, and rows whose condition is
empty or a scraping artefact (``</span> users found this comment helpful.``) are dropped.
"""

from __future__ import annotations

import csv
import html
import io
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

__all__ = [
    "DOMAINS", "DOMAIN_WORDS", "LABELS", "OTHER", "Review", "SOURCE", "clean", "counts",
    "domain_of", "parse_rows", "read_zip",
]


LABELS = {"negative": 0, "positive": 1}
SOURCE = "contraception"
#: A condition belongs to the first domain one of whose words it contains (lower case;
#: the data truncates some names, e.g. "ibromyalgia", "Bipolar Disorde").
DOMAIN_WORDS = {
    "contraception": ("birth control", "contracepti"),
    "mental health": ("depress", "anxiety", "bipolar", "adhd", "panic", "obsessive", "schizo",
                      "personality", "post traumatic", "psychosis", "affective", "dysphoric"),
    "pain": ("pain", "migraine", "headache", "neuralgia", "arthritis", "ibromyalgia", "gout",
             "spasm", "tendonitis", "neuropathy"),
}
OTHER = "other"
DOMAINS = (*DOMAIN_WORDS, OTHER)


@dataclass(frozen=True)
class Review:
    text: str
    label: int       # 1 positive, 0 negative
    domain: str
    condition: str


def domain_of(condition: str) -> str | None:
    """The domain of a condition; ``None`` for an empty or broken condition."""
    c = condition.strip().lower()
    if not c or "</span>" in c:
        return None
    for domain, words in DOMAIN_WORDS.items():
        if any(w in c for w in words):
            return domain
    return OTHER


def clean(text: str) -> str:
    return " ".join(html.unescape(text).strip().strip('"').split())


def parse_rows(rows: Iterable[dict]) -> list[Review]:
    reviews, seen = [], set()
    for row in rows:
        label = LABELS.get(row["rating"].strip())
        domain = domain_of(row["condition"])
        text = clean(row["review"])
        if label is None or domain is None or not text or text in seen:
            continue
        seen.add(text)
        reviews.append(Review(text, label, domain, row["condition"].strip()))
    return reviews


def read_zip(path: Path) -> list[Review]:
    """Every usable review of both splits (train file first), in file order."""
    rows = []
    with zipfile.ZipFile(path) as z:
        for name in ("drugsComTrain.tsv", "drugsComTest.tsv"):
            text = z.read(name).decode("utf-8")
            rows += csv.DictReader(io.StringIO(text, newline=""), delimiter="\t")
    return parse_rows(rows)


def counts(reviews: Sequence[Review]) -> dict[str, dict[str, int]]:
    """Per domain: number of reviews, positives and negatives."""
    c = Counter((r.domain, r.label) for r in reviews)
    return {d: {"n": c[d, 0] + c[d, 1], "positive": c[d, 1], "negative": c[d, 0]}
            for d in DOMAINS if c[d, 0] + c[d, 1]}
