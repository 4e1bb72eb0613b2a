"""Language identification for IFEval's language checks, without a model.

The reference implementation calls ``langdetect.detect`` (a character n-gram model over
55 languages) and counts a response it cannot classify as following the instruction.
langdetect is not a dependency here, so :func:`detect_language` is a heuristic in two
steps:

1. **Script.** Every letter (and combining mark) is assigned a Unicode script by code
   point range; the script with the most letters wins. Most scripts name one language
   (Hangul -> ``ko``, Thai -> ``th``, Tamil -> ``ta``, Gujarati -> ``gu``, ...); Han
   text is ``ja`` when it contains any kana and ``zh`` otherwise.
2. **Function words** (and a few letters peculiar to one language) separate the
   languages that share a script: Devanagari (``hi``, ``mr``, ``ne``), Arabic (``ar``,
   ``fa``, ``ur``), Cyrillic (``ru``, ``bg``, ``uk``) and Latin (``en``, ``de``, ``fr``,
   ``es``, ``pt``, ``it``, ``pl``, ``fi``, ``sw``, ``vi``). Each candidate scores the
   number of its function words in the text plus the number of its distinctive letters;
   the highest score wins, ties going to the first candidate listed (the most widely
   used language of the script), so Latin text without any evidence counts as English.
   Latin text where at least one letter in ten is a Vietnamese-specific letter
   (``ă â đ ê ô ơ ư`` or a letter with a Vietnamese tone mark) is ``vi``.

Text with no letter of a known script (empty, digits, punctuation, emoji) is
undetermined: :func:`detect_language` returns ``None``, which the checks count as
followed, as the reference does when langdetect raises. Short or mixed-language texts
can be misjudged (as they can by langdetect); the covered languages are those of the
IFEval data plus the other languages named by the reference's language list.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter

# (first code point, last code point, script) for the scripts recognised.
_SCRIPT_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x0370, 0x03FF, "Greek"),
    (0x0400, 0x052F, "Cyrillic"),
    (0x0530, 0x058F, "Armenian"),
    (0x0590, 0x05FF, "Hebrew"),
    (0x0600, 0x06FF, "Arabic"),
    (0x0750, 0x077F, "Arabic"),
    (0xFB50, 0xFDFF, "Arabic"),
    (0xFE70, 0xFEFF, "Arabic"),
    (0x0900, 0x097F, "Devanagari"),
    (0x0980, 0x09FF, "Bengali"),
    (0x0A00, 0x0A7F, "Gurmukhi"),
    (0x0A80, 0x0AFF, "Gujarati"),
    (0x0B00, 0x0B7F, "Oriya"),
    (0x0B80, 0x0BFF, "Tamil"),
    (0x0C00, 0x0C7F, "Telugu"),
    (0x0C80, 0x0CFF, "Kannada"),
    (0x0D00, 0x0D7F, "Malayalam"),
    (0x0D80, 0x0DFF, "Sinhala"),
    (0x0E00, 0x0E7F, "Thai"),
    (0x0E80, 0x0EFF, "Lao"),
    (0x0F00, 0x0FFF, "Tibetan"),
    (0x1000, 0x109F, "Myanmar"),
    (0x10A0, 0x10FF, "Georgian"),
    (0x1100, 0x11FF, "Hangul"),
    (0x1200, 0x139F, "Ethiopic"),
    (0x1780, 0x17FF, "Khmer"),
    (0x3040, 0x309F, "Kana"),
    (0x30A0, 0x30FF, "Kana"),
    (0x31F0, 0x31FF, "Kana"),
    (0x3130, 0x318F, "Hangul"),
    (0x3400, 0x4DBF, "Han"),
    (0x4E00, 0x9FFF, "Han"),
    (0xF900, 0xFAFF, "Han"),
    (0xAC00, 0xD7AF, "Hangul"),
)

# Scripts that name one language.
_SCRIPT_LANGUAGE = {
    "Greek": "el",
    "Armenian": "hy",
    "Hebrew": "he",
    "Bengali": "bn",
    "Gurmukhi": "pa",
    "Gujarati": "gu",
    "Oriya": "or",
    "Tamil": "ta",
    "Telugu": "te",
    "Kannada": "kn",
    "Malayalam": "ml",
    "Sinhala": "si",
    "Thai": "th",
    "Lao": "lo",
    "Tibetan": "bo",
    "Myanmar": "my",
    "Georgian": "ka",
    "Hangul": "ko",
    "Ethiopic": "am",
    "Khmer": "km",
}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Function words per language, per shared script (first listed wins ties). Words shared
# by two candidates of a script are left out of both, so every hit is evidence.
_FUNCTION_WORDS: dict[str, dict[str, frozenset[str]]] = {
    "Devanagari": {
        "hi": _words(
            "है हैं का की के में और यह से नहीं था थी थे हूँ हूं पर भी लिए कि जो रहा रही "
            "रहे गया गई करता करती करते होता होती वह इस उस अपने"
        ),
        "mr": _words(
            "आहे आहेत आणि हे ही या व मी नाही होते होता केले करून त्या पण म्हणून आहोत असे "
            "आम्ही तुम्ही त्याचे करत आपण"
        ),
        "ne": _words("छ छन् र यो थियो पनि गर्न हुन्छ भएको लागि गरेको तर म हामी एउटा धेरै गर्छ छु छौं हुने भने"),
    },
    "Arabic": {
        "ar": _words(
            "في من على إلى أن هذا هذه التي الذي عن مع كان ما لا هو هي ذلك كل بين قد لم لقد أو ثم"
        ),
        "fa": _words(
            "است این را که به از با می های برای شود بود هم آن نیست شده کرد کند خود ما باید"
        ),
        "ur": _words(
            "ہے ہیں کے کی کا میں اور یہ سے کو نہیں تھا تھی ایک لیے بھی ہو ہوں گا گی رہا رہی کہ"
        ),
    },
    "Cyrillic": {
        "ru": _words(
            "что это я он она так его был была для мы вы же уже бы только если есть нет было очень"
        ),
        "bg": _words(
            "е са се да това че като към съм ще със които който му ги бе тези сме сте беше има"
        ),
        "uk": _words(
            "і що це як та але для від його вона він був була вони є з або також тому який яка"
        ),
    },
    "Latin": {
        "en": _words(
            "the and of to is in that it for was on are with as be this by at from an "
            "have or not but an they which you were has their i we he she what there"
        ),
        "de": _words(
            "der die und ist das nicht ich sie es zu den mit sich des auf dem ein eine "
            "auch wir sind wird werden oder aber wie bei für noch nach in an"
        ),
        "fr": _words(
            "le la les et est des un une dans qui pas pour sur au avec ce sont du il "
            "elle je nous vous ou mais être leur cette aux"
        ),
        "es": _words(
            "el la los y es las un una del por con para su al lo como pero sus le ya "
            "este esta muy también fue han hay yo no se en hoy"
        ),
        "pt": _words(
            "o os e é as um uma do da no na dos das em por com para não se mais ao "
            "como mas foi ser são esta está eu"
        ),
        "it": _words(
            "il gli e è la le di un una del della che non per con sono anche ma come "
            "questo questa nel alla io sei in se"
        ),
        "pl": _words(
            "i w nie na się z że do jest to jak ale co tak po od być jego jej są był "
            "była przez oraz"
        ),
        "fi": _words(
            "ja on ei se että oli ovat kun mutta myös tai hän minä sinä me te he "
            "tämä tuo mikä joka niin kuin vain olla"
        ),
        "sw": _words(
            "na ya wa kwa ni za la katika hii huo kuwa au lakini pia sana wao yake "
            "yao hiyo ili kama mimi wewe sisi nini"
        ),
    },
}


def _drop_shared(table: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    counts = Counter(word for words in table.values() for word in words)
    return {lang: frozenset(w for w in words if counts[w] == 1) for lang, words in table.items()}


# Letters that point to one language of a shared script (again, shared ones are dropped).
_LETTERS: dict[str, dict[str, str]] = {
    "Devanagari": {"hi": "", "mr": "ळ", "ne": ""},
    "Arabic": {"ar": "ةيكىإأ", "fa": "ژ", "ur": "ٹڈڑںےہھ"},
    "Cyrillic": {"ru": "ыэё", "bg": "ъ", "uk": "іїєґ"},
    "Latin": {
        "en": "",
        "de": "äöüß",
        "fr": "çêèëîïôœùû",
        "es": "ñ¿¡",
        "pt": "ãõç",
        "it": "àèìòù",
        "pl": "ąęłńśźż",
        "fi": "äö",
        "sw": "",
    },
}

_DISTINCT_WORDS = {script: _drop_shared(table) for script, table in _FUNCTION_WORDS.items()}
_DISTINCT_LETTERS = {
    script: _drop_shared({lang: frozenset(chars) for lang, chars in table.items()})
    for script, table in _LETTERS.items()
}

_VIETNAMESE = frozenset("ăâđêôơư")


@functools.lru_cache(maxsize=8192)
def _script_of(char: str) -> str | None:
    code = ord(char)
    if code < 0x0250 or 0x1E00 <= code <= 0x1EFF:
        return "Latin" if char.isalpha() else None
    category = unicodedata.category(char)
    if category[0] not in "LM":
        return None
    for low, high, script in _SCRIPT_RANGES:
        if low <= code <= high:
            return script
    return None


class _WordChars(dict[int, str]):
    """A ``str.translate`` table, filled on demand: letters and marks are kept, Arabic
    vowel signs dropped, anything else becomes a space."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if char in _ARABIC_MARKS:
            kept = ""
        elif unicodedata.category(char)[0] in "LM":
            kept = char
        else:
            kept = " "
        self[code] = kept
        return kept


# Arabic vowel signs and tatweel, ignored when matching function words.
_ARABIC_MARKS = frozenset(chr(c) for c in (*range(0x064B, 0x0660), 0x0670, 0x0640))
_WORD_CHARS = _WordChars()


def _tokens(text: str) -> list[str]:
    """Runs of letters and combining marks (``\\w`` would cut Indic words at their marks)."""
    return text.casefold().translate(_WORD_CHARS).split()


def _pick(script: str, text: str) -> str:
    words = _DISTINCT_WORDS[script]
    letters = _DISTINCT_LETTERS[script]
    tokens = _tokens(text)
    lowered = text.lower()  # not casefold: it would turn ß into ss
    best, best_score = next(iter(words)), 0
    for lang, vocabulary in words.items():
        score = sum(1 for t in tokens if t in vocabulary)
        score += sum(lowered.count(ch) for ch in letters[lang])
        if score > best_score:
            best, best_score = lang, score
    return best


def detect_language(text: str) -> str | None:
    """ISO 639-1 code of the language of ``text``, or ``None`` when undetermined.

    See the module docstring for the heuristic and its limits.
    """
    scripts: Counter[str] = Counter()
    vietnamese = 0
    for char, count in Counter(text).items():
        script = _script_of(char)
        if script is not None:
            scripts[script] += count
            if script == "Latin" and (
                0x1EA0 <= ord(char) <= 0x1EF9 or char.casefold() in _VIETNAMESE
            ):
                vietnamese += count
    if not scripts:
        return None
    script = scripts.most_common(1)[0][0]
    if script in ("Han", "Kana"):
        return "ja" if scripts["Kana"] else "zh"
    if script in _SCRIPT_LANGUAGE:
        return _SCRIPT_LANGUAGE[script]
    if script == "Latin" and vietnamese * 10 >= scripts["Latin"]:
        return "vi"
    return _pick(script, text)
