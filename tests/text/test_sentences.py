"""Strips: sentences with offsets; code blocks and list items whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ragloop.text.sentences import split_sentences, split_strips

DOC = """Normandy is a region in France. It was named after the Normans, e.g. Rollo's men.
Dr. Smith agreed with it.

- the first item, kept whole. Even with two sentences.
- the second item

```python
for root, dirs, files in os.walk("."):
    print(root)
```

Done. Ok."""


def test_kinds_offsets_and_abbreviations() -> None:
    strips = split_strips(DOC)
    kinds = [s.kind for s in strips]
    assert kinds == ["sentence", "sentence", "sentence", "list_item", "list_item", "code", "sentence"]
    assert strips[1].text == "It was named after the Normans, e.g. Rollo's men."
    assert strips[3].text == "- the first item, kept whole. Even with two sentences."
    assert "os.walk" in strips[5].text and strips[5].text.endswith("```")
    assert strips[6].text == "Done. Ok."  # a fragment shorter than min_chars joins its predecessor
    for s in strips:
        if s.kind != "sentence":
            assert DOC[s.start : s.end] == s.text
        else:
            assert " ".join(DOC[s.start : s.end].split()) == s.text


def test_indented_code_lines_group_into_one_strip() -> None:
    text = "Example:\n\n    x = 1\n    y = 2\n\nAfter the code comes prose."
    strips = split_strips(text)
    assert [s.kind for s in strips] == ["sentence", "code", "sentence"]
    assert strips[1].text == "    x = 1\n    y = 2" == text[strips[1].start : strips[1].end]


LINES = ["Alpha beta gamma.", "Delta epsilon?", "- item one", "", "Zeta eta theta!", "    code = 1"]


@given(st.lists(st.sampled_from(LINES), max_size=12))
def test_no_words_are_lost(lines: list[str]) -> None:
    text = "\n".join(lines)
    got = " ".join(split_sentences(text, min_chars=0)).split()
    assert got == text.split()
