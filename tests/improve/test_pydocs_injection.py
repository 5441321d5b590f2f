"""The Python-docs source of the injected-failure set: the RST reduction keeps prose and drops
code, the derived questions are fair clozes of their own passage, and the injector builds cases
of every class from a tiny subset of the real docs (hashed embedder, seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.config import Settings
from ragloop.evaluation.datasets import DatasetError
from ragloop.evaluation.pydocs import clean_inline, load_pydocs_qa, sections
from ragloop.improve.injection import SquadInjector
from ragloop.improve.types import FailureMode
from ragloop.models.embedding import HashedEmbedder
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import HASHED

RST = """\
:mod:`json` --- JSON encoder
============================

.. module:: json

The :mod:`json` module exposes an API familiar to users of the standard :mod:`pickle` module.

Basic Usage
-----------

.. function:: dumps(obj)

   Serialize *obj* to a JSON formatted :class:`str` using this `conversion table <url>`_.

   Example::

      >>> json.dumps([1, 2])
      '[1, 2]'

.. code-block:: python

   print("never prose")

After the example, the prose goes on with ``indent`` set.
"""

PAGES = ("csv", "datetime", "sqlite3", "argparse")  # small but > 100 chunks: an embedding failure can be injected


def test_sections_keep_prose_and_drop_code() -> None:
    got = sections(RST)
    assert [h for h, _ in got] == ["json --- JSON encoder", "Basic Usage"]
    assert got[0][1] == ["The json module exposes an API familiar to users of the standard pickle module."]
    # the describing directive's body is prose; its literal block, the code block and the
    # one-word "Example:" lead-in are not
    assert got[1][1] == [
        "Serialize obj to a JSON formatted str using this conversion table.",
        "After the example, the prose goes on with indent set.",
    ]
    assert clean_inline(":meth:`~email.message.Message.get` and :func:`!len`") == "get and len"
    assert clean_inline(":ref:`the guide <guide-label>`") == "the guide"


def _data() -> Path:
    from ragloop.evaluation.datasets import default_datasets_dir

    root = default_datasets_dir() / "python311-docs-rst"
    if not root.exists():
        pytest.skip("../shared/datasets/python311-docs-rst is not here")
    return root.parent


def test_questions_are_clozes_of_their_own_passage() -> None:
    ds = load_pydocs_qa(_data(), pages=PAGES[:2])
    text = {p.doc_id: p.text for p in ds.passages}
    assert ds.questions and {q.title for q in ds.questions} == set(PAGES[:2])
    for q in ds.questions:
        answer = q.answers[0]
        assert text[q.paragraph_id].lower().count(answer.lower()) == 1
        assert q.question.endswith(" what?") and answer not in q.question
    again = load_pydocs_qa(_data(), pages=PAGES[:2])
    assert again.questions == ds.questions
    with pytest.raises(DatasetError):
        load_pydocs_qa(Path("/nonexistent-datasets"))


def test_the_docs_source_builds_cases_of_every_class(tmp_path: Path) -> None:
    ds = load_pydocs_qa(_data(), pages=PAGES)
    corpus = ds.write_corpus(tmp_path / "corpus")
    coll = Collection("pydocs-tiny", Settings(home=tmp_path / "home"))
    coll.ingest([corpus.parent], HASHED)
    assert len(coll.load().chunks) > 100
    built = SquadInjector(coll, ds, HashedEmbedder(), per_class=2, k=5, seed=12).build()
    labels = {c.label for c in built.cases}
    assert labels == set(FailureMode), labels
    assert {c.part for c in built.cases} == {"dev", "test"}
    for case in built.cases:
        assert case.ideal_answer in case.answers
        if case.label is FailureMode.KNOWLEDGE_GAP:
            assert not case.answer_chunks  # the gold section is gone and no other holds the answer
