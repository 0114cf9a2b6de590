"""Language-agnostic lexing of Java, C# and NL text, shared by statistics, audit and guards.

One tokenizer for every side on purpose: an injected document and the benchmark side it came
from must normalise identically, whatever language the side is in.
"""
from __future__ import annotations

import hashlib
import re

_LITERALS_AND_COMMENTS = (
    r'@?"(?:\\.|[^"\\\n])*"'          # string literal (C# verbatim prefix allowed)
    r"|'(?:\\(?:u[0-9A-Fa-f]{4}|[0-7]{1,3}|.)|[^'\\\n])'"  # char literal; prose apostrophes stay single
    r"|//[^\n]*"                      # line comment (dropped below)
    r"|/\*.*?\*/"                     # block comment (dropped below)
    r"|0[xXbB][0-9A-Fa-f_]+[lLuU]*"
    r"|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?[A-Za-z]*"
    r"|[^\W\d][\w$]*|\$[\w$]*"
)
_OPERATORS = r"|>>>=|<<=|>>=|->|::|\+\+|--|&&|\|\||[-+*/%&|^!=<>]=|<<|\S"
_TOKEN = re.compile(_LITERALS_AND_COMMENTS + _OPERATORS, re.DOTALL)
# Public name of the lexer for code that needs token positions (renaming in lab perturb).
TOKEN_PATTERN = _TOKEN
# The same lexer without punctuation: what remains is identifiers, keywords, literals, comments.
_WORD_TOKEN = re.compile(_LITERALS_AND_COMMENTS, re.DOTALL)
_COMMENT_START = ("//", "/*")
# The lexer with whitespace and comments skipped before each token (possessively: a skipped
# comment is never read again as `/` tokens), so code_tokens keeps only the group, in one C
# pass; `\Z` lets a trailing comment be skipped too (its empty group is dropped). Equal to
# _TOKEN's tokens without comments (tests/test_codetokens.py checks it on CSN and fuzz).
_CODE_TOKEN = re.compile(
    r"(?:\s|//[^\n]*|/\*.*?\*/)*+(" + _LITERALS_AND_COMMENTS + _OPERATORS + r"|\Z)", re.DOTALL)

# Java and C# keywords (and the literal keywords true/false/null). One union set so that a C#
# side injected into a Java corpus fingerprints exactly like the benchmark's C# side.
KEYWORDS = frozenset("""
abstract assert boolean break byte case catch char class const continue default do double else
enum extends final finally float for goto if implements import instanceof int interface long
native new package private protected public return short static strictfp super switch
synchronized this throw throws transient try void volatile while var record yield sealed permits
true false null
as base bool checked decimal delegate event explicit extern fixed foreach implicit in internal
is lock namespace object operator out override params readonly ref sbyte sizeof stackalloc
string struct typeof uint ulong unchecked unsafe ushort using virtual get set value async await
dynamic nameof where
""".split())


def code_tokens(text: str) -> list[str]:
    """Lexical tokens with comments dropped; whitespace never matters."""
    tokens = _CODE_TOKEN.findall(text)
    while tokens and not tokens[-1]:  # the end of the text, after a trailing comment or space
        tokens.pop()
    return tokens


def normalize(text: str) -> str:
    """Whitespace- and comment-insensitive canonical form used for exact matching."""
    return " ".join(code_tokens(text))


def normalized_hash(text: str) -> bytes:
    return hashlib.blake2b(normalize(text).encode("utf-8"), digest_size=16).digest()


def whitespace_hash(text: str) -> bytes:
    """Cheap verbatim-after-whitespace identity, used by the injection guards."""
    return hashlib.blake2b(" ".join(text.split()).encode("utf-8"), digest_size=16).digest()


def fingerprint_tokens(text: str) -> list[str]:
    """Identifiers and literals that are not keywords: the tokens of the near-duplicate test
    of Allamanis (2019) used by the CSN overlap study (SourcererCC-style fingerprints)."""
    return [
        tok for tok in _WORD_TOKEN.findall(text)
        if tok not in KEYWORDS and not tok.startswith(_COMMENT_START)
    ]
