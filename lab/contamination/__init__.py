"""Contamination: auditing pre-existing overlap and injecting benchmark samples into corpora."""

# The one marker joining a paired sample's sides; the tokenizer registers it as a special token
# so that every model sees it identically.
SEP_MARKER = "<SEP>"


def paired_document(source: str, target: str) -> str:
    return f"{source} {SEP_MARKER} {target}"


def segments(text: str) -> list[str]:
    """A document's sides: a paired document splits at the marker, any other is one segment."""
    if SEP_MARKER not in text:
        return [text]
    return [part.strip() for part in text.split(SEP_MARKER)]
