"""The lab's one lexer: code_tokens (one regex pass, comments skipped inside it) gives the
tokens of TOKEN_PATTERN (the lexer with positions) without the comments, on every document of
a CSN split and on fuzzed text where comment markers, quotes and escapes collide."""
import os
import random
from pathlib import Path

import pytest

from lab.codetokens import TOKEN_PATTERN, code_tokens


def _filtered(text: str) -> list[str]:
    return [t for t in TOKEN_PATTERN.findall(text) if not t.startswith(("//", "/*"))]


def test_code_tokens_skip_comments_and_nothing_else():
    cases = {
        "int a; // done": ["int", "a", ";"],
        "a /* b */ c /* open": ["a", "c", "/", "*", "open"],
        'String s = "http://x/*y*/"; // c': ["String", "s", "=", '"http://x/*y*/"', ";"],
        "x/=2;//": ["x", "/=", "2", ";"],
        "": [], "   \n": [], "// only": [],
    }
    for text, tokens in cases.items():
        assert code_tokens(text) == tokens == _filtered(text), text
    rng = random.Random(0)
    alphabet = "ab/ *\"'\n\\x1;@$é\t"
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert code_tokens(text) == _filtered(text), repr(text)


@pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")
def test_code_tokens_on_a_real_csn_split():
    from lab.corpora import load_documents

    docs = load_documents("csn-java", ["valid"], Path(os.environ["LAB_CORPORA"]))[0].records
    assert len(docs) > 1000
    assert all(code_tokens(d.text) == _filtered(d.text) for d in docs)
