"""One statement in other forms: first or third person, other names, the past tense. A relation between two
memories does not depend on how they are written, so the judge trains on every form and is measured on each.

    from memupdate.text.forms import to_third, to_first, to_past, swap_names, subject_of
    to_third("I drive a mini van.", "Ana")               # "Ana drives a mini van."
    to_first("Ana drives a mini van.", "Ana")            # "I drive a mini van."
    to_past("Alex lives in Seattle.")                    # "Alex lived in Seattle."
    swap_names("Nora Fishel met Joren.", {"Nora Fishel": "Ines Varga"})   # "Ines Varga met Joren."
    subject_of(["Nora Fishel is a violinist.", "Nora Fishel met Joren."])  # "Nora Fishel"

Rewriting is by rule, for the short statements a memory holds ("I have two dogs", "Sam moved to Berlin");
on a long or unusual sentence it can leave a word as it was, never drop one. Which form a pair is in says
nothing of its label: every label is written in every form.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

FORMS = ("given", "first", "third", "names", "past")  # "past": the older statement of a pair in the past tense

# Words between a subject and its verb that do not change with it ("I also like", "Sam recently moved").
_ADVERBS = ("also", "just", "really", "still", "never", "always", "recently", "now", "currently", "usually", "often",
            "sometimes", "mostly", "actually", "only", "even", "finally", "already", "rarely", "mainly", "primarily")
_MODALS = ("can", "could", "will", "would", "should", "must", "might", "may", "did", "had", "was", "used", "cannot")
_IRREGULAR_THIRD = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is"}
_IRREGULAR_PAST = {
    "is": "was", "am": "was", "are": "were", "has": "had", "have": "had", "does": "did", "do": "did", "goes": "went",
    "go": "went", "drives": "drove", "drive": "drove", "eats": "ate", "eat": "ate", "runs": "ran", "run": "ran",
    "speaks": "spoke", "speak": "spoke", "teaches": "taught", "teach": "taught", "writes": "wrote", "write": "wrote",
    "leads": "led", "lead": "led", "sees": "saw", "see": "saw", "gets": "got", "get": "got", "makes": "made",
    "make": "made", "takes": "took", "take": "took", "keeps": "kept", "keep": "kept", "knows": "knew", "know": "knew",
    "feels": "felt", "feel": "felt", "spends": "spent", "spend": "spent", "buys": "bought", "buy": "bought",
    "thinks": "thought", "think": "thought", "sings": "sang", "sing": "sang", "swims": "swam", "swim": "swam",
    "rides": "rode", "ride": "rode", "reads": "read", "read": "read", "grows": "grew", "grow": "grew",
    "holds": "held", "hold": "held", "wears": "wore", "wear": "wore", "sleeps": "slept", "sleep": "slept",
    "can": "could", "will": "would", "don't": "didn't", "doesn't": "didn't", "isn't": "wasn't", "aren't": "weren't",
    "won't": "wouldn't", "dont": "didn't", "can't": "couldn't", "i'm": "I was", "owns": "owned", "loves": "loved",
}
_NOT_VERBS = {"a", "an", "the", "and", "or", "to", "of", "in", "on", "at", "for", "with", "my", "me", "i", "not", "so",
              "very", "too", "from", "that", "this", "who", "whose", "which", "as", "by", "&", "-"}


_PAST_FORMS = {"was", "were", "had", "did", "said", "went", "got", "made", "took", "saw", "ran", "ate", "drove", "wrote",
               "grew", "knew", "thought", "felt", "found", "left", "met", "sent", "spent", "told", "won", "lost", "bought",
               "brought", "came", "became", "began", "gave", "kept", "heard", "held", "paid", "sat", "stood", "wore", "flew",
               "threw", "drew", "slept", "taught", "led", "read", "put", "set", "let", "cut", "hit", "quit", "built", "sold"}


def _third_s(verb: str) -> str:
    low = verb.lower()
    if low in _IRREGULAR_THIRD:
        return _IRREGULAR_THIRD[low]
    if low.endswith(("ed", "s")) or low in _MODALS or low in _PAST_FORMS or "'" in low or "’" in low:
        return verb
    if low.endswith(("sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(low) > 2 and low.endswith("y") and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _base(verb: str) -> str:
    low = verb.lower()
    special = {"has": "have", "does": "do", "goes": "go", "is": "am", "doesn't": "don't", "isn't": "am not", "was": "was"}
    if low in special:
        return special[low]
    if low in _MODALS or low.endswith("ed") or not low.endswith("s") or low.endswith("ss"):
        return verb
    if low.endswith("ies") and len(low) > 4:
        return verb[:-3] + "y"
    if low.endswith(("ches", "shes", "xes", "zes", "oes", "sses")):
        return verb[:-2]
    return verb[:-1]


_FIRST_CONTRACTIONS = [
    (r"\b[iI]\s*['’]m\b", "{n} is"), (r"\b[iI]\s*['’]ve\b", "{n} has"), (r"\b[iI]\s*['’]d\b", "{n} would"),
    (r"\b[iI]\s*['’]ll\b", "{n} will"), (r"\b[iI]m\b", "{n} is"), (r"\b[iI]ve\b", "{n} has"),
    (r"\b[iI] am\b", "{n} is"), (r"\b[iI] do not\b", "{n} does not"), (r"\b[iI] (?:don['’]t|dont)\b", "{n} doesn't"),
]
_ADVERB_GROUP = r"((?:\s+(?:" + "|".join(_ADVERBS) + r"))*)"


def is_first_person(text: str) -> bool:
    return re.search(r"\b(?:[iI]|[iI]['’](?:m|ve|d|ll)|[mM]y|[mM]e|[mM]yself|[mM]ine|[iI]m)\b", text) is not None


def to_third(text: str, name: str) -> str:
    """A first-person statement about `name` ("I have two dogs" -> "Ana has two dogs")."""
    out = text
    for pattern, repl in _FIRST_CONTRACTIONS:
        out = re.sub(pattern, repl.format(n=name), out)

    def verb(match: re.Match) -> str:
        word = match.group(2)
        if word.lower() in _NOT_VERBS:
            return f"{name}{match.group(1)} {word}"
        return f"{name}{match.group(1)} {_third_s(word)}"

    out = re.sub(r"\b[iI]\b" + _ADVERB_GROUP + r"\s+([A-Za-z'’]+)", verb, out)
    out = re.sub(r"\b[iI]\b", name, out)
    out = re.sub(r"\b[mM]y\b", f"{name}'s", out, count=1)  # the first "my" names the person, later ones "their"
    out = re.sub(r"\b[mM]y\b", "their", out)
    out = re.sub(r"\b[mM]yself\b", "themselves", out)
    out = re.sub(r"\b[mM]ine\b", "theirs", out)
    out = re.sub(r"\bme\b", "them", out)
    return out[:1].upper() + out[1:]


def to_first(text: str, name: str) -> str:
    """A statement about `name` in the first person ("Ana drives a mini van" -> "I drive a mini van");
    other people stay as they are."""
    n = re.escape(name)
    out = re.sub(rf"^{n} and ((?:[A-Z][a-z]+ ?)+) ", r"\1 and I ", text)
    out = re.sub(rf"\b{n}['’]s\b", "my", out)
    out = re.sub(rf"\b{n} is\b", "I am", out)
    out = re.sub(rf"\b{n} isn['’]t\b", "I am not", out)
    out = re.sub(rf"\b{n} has\b", "I have", out)
    out = re.sub(rf"\b{n} does\b", "I do", out)
    out = re.sub(rf"\b{n} doesn['’]t\b", "I don't", out)

    def verb(match: re.Match) -> str:
        word = match.group(2)
        return f"I{match.group(1)} {word if word.lower() in _NOT_VERBS else _base(word)}"

    out = re.sub(rf"\b{n}\b" + _ADVERB_GROUP + r"\s+([A-Za-z'’]+)", verb, out)
    out = re.sub(rf"\b{n}\b", "me", out)
    out = re.sub(r"(^|[.!?]\s+)my\b", lambda m: m.group(1) + "My", out)
    return out[:1].upper() + out[1:]


_SUBJECT = re.compile(r"^(\W*(?:[iI]|He|She|They|We|The user|User|(?:Dr\. )?[A-Z][a-z]+(?: [A-Z][a-z]+){0,2}))"
                      + _ADVERB_GROUP + r"\s+([A-Za-z'’]+)")


def to_past(text: str) -> str:
    """The statement's verb after its subject in the past tense ("Alex lives in Seattle" -> "Alex lived
    in Seattle", "I am a nurse" -> "I was a nurse", "Sam's car is red" -> "Sam's car was red"); a
    statement already in the past, or whose verb it cannot find, stays as it is."""
    match = _SUBJECT.match(text)
    if match and match.group(1).strip() not in _NOT_NAMES and match.group(3).lower() not in _NOT_VERBS:
        verb = match.group(3)
        low = verb.lower()
        if low in _IRREGULAR_PAST:
            changed = _IRREGULAR_PAST[low]
        elif low.endswith(("ed", "ss")) or low in _MODALS or low == "and":
            return text
        else:
            changed = _regular_past(verb)
        return text[: match.start(3)] + changed + text[match.end(3) :]
    # A possessive or a noun phrase first ("Sam's favourite colour is blue", "My car is red"): its first "is"/"has".
    found = re.search(r"\b(is|are|has|have|does|isn't|doesn't)\b", text)
    if found and found.start() < 40:
        return text[: found.start()] + _IRREGULAR_PAST[found.group(1).lower()] + text[found.end() :]
    return text


def _regular_past(verb: str) -> str:
    low = verb.lower()
    if low.endswith("ies"):
        return verb[:-3] + "ied"
    if low.endswith(("ches", "shes", "xes", "sses")):
        return verb[:-2] + "ed"
    stem = verb[:-1] if low.endswith("s") and not low.endswith("ss") else verb
    if stem.lower().endswith("e"):
        return stem + "d"
    if stem.lower().endswith("y") and len(stem) > 2 and stem[-2].lower() not in "aeiou":
        return stem[:-1] + "ied"
    return stem + "ed"


def swap_names(text: str, mapping: Mapping[str, str]) -> str:
    """`text` with each name of `mapping` (longest first, whole words) replaced by its other name."""
    for old in sorted(mapping, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(old)}\b", mapping[old], text)
    return text


_LEADING_NAME = re.compile(r"^((?:Dr\. )?[A-Z][a-z]+(?: [A-Z][a-z]+){0,2})(?=['’]s\b| [a-z])")
# "Lives in Paris", "Works at Acme": a terse memory with no subject, not a name
_TERSE_VERB = re.compile(r"^[A-Z][a-z]+s (?:in|at|on|a|an|the|for|to|with|from|as|by|[A-Z0-9])\b")
_NOT_NAMES = {"The", "This", "That", "These", "Those", "My", "His", "Her", "Their", "Our", "It", "In", "On", "At", "After",
              "Before", "When", "While", "Since", "During", "Every", "Each", "Some", "Most", "All", "Both", "There",
              "He", "She", "They", "We", "You", "Yes", "No", "Information", "Recently", "Now", "Last", "Next"}


def subject_of(texts: Sequence[str]) -> str | None:
    """The name most of `texts` begin with ("Nora Fishel is ...", "Sam's car ..."), or None."""
    found = Counter()
    for text in texts:
        match = _LEADING_NAME.match(text.strip())
        if match and match.group(1).split()[0] not in _NOT_NAMES and not _TERSE_VERB.match(text.strip()):
            found[match.group(1)] += 1
    return found.most_common(1)[0][0] if found else None


def names_in_text(text: str) -> set[str]:
    """The capitalised words of `text` that name someone or somewhere ("Gina's" -> "Gina"), sentence
    openers such as "The" or "My" left out."""
    words = (w.strip(".,;:!?()\"'").removesuffix("'s").removesuffix("’s") for w in text.split())
    return {w for w in words if w[:1].isupper() and w[1:].islower() and w not in _NOT_NAMES and w != "I"}


def names_in(texts: Sequence[str]) -> list[str]:
    """The names `texts` begin with, most frequent first."""
    found = Counter()
    for text in texts:
        match = _LEADING_NAME.match(text.strip())
        if match and match.group(1).split()[0] not in _NOT_NAMES and not _TERSE_VERB.match(text.strip()):
            found[match.group(1)] += 1
    return [name for name, _ in found.most_common()]
