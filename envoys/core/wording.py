"""The indefinite article of a word a sentence is built around: "an image token", "a video token"."""

from __future__ import annotations

#: Words that begin with a vowel letter and a consonant sound ("a one-row tower", "a unit"), by their first letters.
CONSONANT_SOUNDS = ("one", "once", "uni", "use", "usu", "uti", "eu", "ure")
#: Words that begin with a consonant letter and a vowel sound ("an hour").
VOWEL_SOUNDS = ("hour", "honest", "heir")
#: Capitals whose names begin with a vowel sound, for a word spelled letter by letter ("an MLP", "an SDPA kernel").
VOWEL_LETTERS = frozenset("AEFHILMNORSX")


def article(word: str) -> str:
    """"a" or "an", as ``word`` is said: by its first sound; a short acronym (``MLP``) by its first letter's name, a
    number as it is read ("an 8x8 grid", "an 11", "a 16")."""
    if 1 < len(word) <= 4 and word.isupper():
        return "an" if word[0] in VOWEL_LETTERS else "a"
    if word[:1].isdigit():
        digits = word[:len(word) - len(word.lstrip("0123456789"))]
        return "an" if digits.startswith("8") or digits in ("11", "18") else "a"
    lower = word.lower()
    if lower.startswith(VOWEL_SOUNDS):
        return "an"
    if lower.startswith(CONSONANT_SOUNDS):
        return "a"
    return "an" if lower[:1] in "aeiou" and lower[:1] != "" else "a"


def a(word: str) -> str:
    """``word`` after its indefinite article: ``a("image")`` is "an image", ``a("video")`` "a video"."""
    return f"{article(word)} {word}"
