"""MATH / MATH-500 final answers: extraction, normalisation and equivalence.

Follows what users of lm-evaluation-harness expect from ``hendrycks_math`` (``is_equiv``
after the MATH paper's ``strip_string``) and ``minerva_math`` (``normalize_final_answer``),
with a numeric comparison and structure-aware comparison (tuples, intervals, sets,
matrices) on top. Standard library only; no sympy.

Every public function is total: any text in, a value out, never an exception.

Extraction order in :func:`extract_math_answer`:

1. the last complete ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed X`` (:func:`last_boxed`);
2. the last "final answer is X" (Minerva: ``Final Answer: The final answer is $X$. I hope it
   is correct.``), then the last "Final Answer: X";
3. the last "the answer is X";
4. the last inline math span (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``); when it
   holds an equation, its right-hand side (Minerva's ``split("=")[-1]``).

After 2 and 3, X is the first math span that follows (when there is one on that line),
else the rest of the line up to the end of its sentence.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Callable

__all__ = ["extract_math_answer", "last_boxed", "math_equal", "normalize_math_answer"]

# Relative tolerance for numeric equality; the absolute one only absorbs rounding near 0.
REL_TOL = 1e-6
ABS_TOL = 1e-12

_MAX_DEPTH = 40  # nesting guard for recursive helpers (braces, tuples, expressions)
_MAX_NUMERIC_LEN = 200  # longer strings are not evaluated numerically

# --------------------------------------------------------------------------- braces


def _brace_pairs(s: str) -> dict[int, int]:
    """Every ``{`` that is closed, mapped to its ``}``; escaped ``\\{``/``\\}`` skipped. O(n)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    j = 0
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "{":
            stack.append(j)
        elif c == "}" and stack:
            pairs[stack.pop()] = j
        j += 1
    return pairs


# --------------------------------------------------------------------------- extraction

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])[ \t]*")
_TO_DOLLAR_OR_EOL = re.compile(r"[^$\n]*")


def last_boxed(text: str) -> str | None:
    """The content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``), stripped.

    Braces nest (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``) and escaped braces do not
    count (``\\boxed{\\{1, 2\\}}``). The space form ``\\boxed 5$`` gives the text up to the
    next ``$`` or line end, as lm-evaluation-harness does. A box nested in a box belongs to the
    outer one; a box that is never closed (truncated output) is skipped, so an earlier
    complete box wins. ``None`` when there is no box.
    """
    pairs = _brace_pairs(text)
    found: str | None = None
    pos = 0
    for m in _BOX.finditer(text):
        if m.start() < pos:  # inside the box found last
            continue
        k = m.end()
        if k < len(text) and text[k] == "{":
            end = pairs.get(k)
            if end is not None:
                found = text[k + 1 : end].strip()
                pos = end + 1
            # an unclosed box is skipped; complete boxes inside it still count
        elif m.group(0)[-1] in " \t" and k < len(text):  # the space form
            rest = _TO_DOLLAR_OR_EOL.match(text, k)
            assert rest is not None  # the pattern also matches the empty string
            if rest.group(0).strip():
                found = rest.group(0).strip()
                pos = rest.end()
    return found


def _find_closer(text: str, token: str, start: int, missing: set[str]) -> int:
    """The next ``token`` from ``start`` not escaped by a backslash, or -1.

    ``missing`` remembers tokens that no longer occur, so repeated unclosed openers stay
    linear.
    """
    if token in missing:
        return -1
    j = start
    while True:
        j = text.find(token, j)
        if j == -1:
            missing.add(token)
            return -1
        if token[0] != "$" or j == 0 or text[j - 1] != "\\":
            return j
        j += 1


def _math_spans(text: str) -> list[tuple[int, str]]:
    """Inline and display math, left to right: (start, content) for ``$..$``, ``$$..$$``,
    ``\\(..\\)`` and ``\\[..\\]``; ``\\$`` is a dollar sign, not a delimiter."""
    spans: list[tuple[int, str]] = []
    missing: set[str] = set()
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if nxt in ("(", "["):
                closer = "\\)" if nxt == "(" else "\\]"
                j = _find_closer(text, closer, i + 2, missing)
                if j != -1:
                    spans.append((i, text[i + 2 : j]))
                    i = j + 2
                    continue
            i += 2
            continue
        if c == "$":
            opener = "$$" if text.startswith("$$", i) else "$"
            j = _find_closer(text, opener, i + len(opener), missing)
            if j != -1:
                spans.append((i, text[i + len(opener) : j]))
                i = j + len(opener)
                continue
            i += len(opener)
            continue
        i += 1
    return spans


_FINAL_IS = re.compile(r"final\s+answer\s+is", re.I)
_FINAL_COLON = re.compile(r"final\s+answer\s*\**\s*:", re.I)
_ANSWER_IS = re.compile(r"\banswer\s+is", re.I)
_HOPE = re.compile(r"\s*I hope it is correct\.?\s*$", re.I)
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
_LEAD = re.compile(r"[ \t:*]*")


def _answer_after(text: str, start: int, spans: list[tuple[int, str]]) -> str | None:
    lead = _LEAD.match(text, start)
    assert lead is not None  # the pattern also matches the empty string
    start = lead.end()
    eol = text.find("\n", start)
    eol = len(text) if eol == -1 else eol
    k = bisect.bisect_left(spans, (start, ""))
    if k < len(spans) and spans[k][0] < eol and spans[k][1].strip():
        return spans[k][1].strip()
    line = _HOPE.sub("", text[start:eol])
    end = _SENTENCE_END.search(line)
    if end is not None:
        line = line[: end.start()]
    line = line.strip().strip("*").strip()
    return line or None


def _last_match_answer(
    pattern: re.Pattern[str], text: str, spans: list[tuple[int, str]]
) -> str | None:
    for m in reversed(list(pattern.finditer(text))):
        answer = _answer_after(text, m.end(), spans)
        if answer is not None:
            return answer
    return None


def _top_level_rhs(s: str) -> str:
    """The part after the last ``=`` outside braces and brackets (``s`` when none)."""
    depth = 0
    cut = -1
    for i, c in enumerate(s):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "=" and depth == 0:
            cut = i
    rhs = s[cut + 1 :].strip() if cut >= 0 else s
    return rhs or s


def extract_math_answer(text: str) -> str | None:
    """The final answer of a MATH-style solution (see the module docstring for the order)."""
    boxed = last_boxed(text)
    if boxed:
        return boxed
    spans = _math_spans(text)
    for pattern in (_FINAL_IS, _FINAL_COLON, _ANSWER_IS):
        answer = _last_match_answer(pattern, text, spans)
        if answer is not None:
            return answer
    contents = [content.strip() for _, content in spans if content.strip()]
    if contents:
        return _top_level_rhs(contents[-1])
    return None


# --------------------------------------------------------------------------- normalisation

_TEXT_COMMANDS = (
    "text",
    "textbf",
    "textit",
    "textrm",
    "textnormal",
    "textsf",
    "texttt",
    "mathrm",
    "mathbf",
    "mathit",
    "mathsf",
    "mbox",
    "hbox",
    "operatorname",
)
_TEXT_CMD = "|".join(_TEXT_COMMANDS)

# Unit words (Minerva's removed expressions plus common units), removed at the end of an
# answer when they follow a number.
_UNIT_WORDS = (
    "units?|square\\s+units?|sq\\.?\\s*units?|cents?|dollars?|pounds?|lbs?|ounces?|oz|"
    "degrees?|radians?|percent|"
    "inch(?:es)?|feet|foot|ft|yards?|yds?|miles?|mi|mph|kph|km/h|m/s|"
    "millimeters?|centimeters?|meters?|kilometers?|mm|cm|km|m|"
    "grams?|kilograms?|gm|g|kg|liters?|litres?|ml|l|"
    "seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?|"
    "ways|integers|points|digits|students|people|meals|edges|multiples|sue|"
    "childrentickets|tickets|times|steps|numbers|values|solutions|terms"
)
_UNIT_PHRASE = re.compile(rf"(?:(?:square|sq\.?|cubic)\s+)?(?:{_UNIT_WORDS})\.?", re.I)
_POWER_23 = r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?"
_TRAILING_TEXT = re.compile(
    rf"\\(?:{_TEXT_CMD})\s*\{{(?P<lead>\s*)(?P<body>[^{{}}]*)\}}{_POWER_23}\s*\.?\s*$"
)
# A bare unit word of two letters or more, after whitespace that follows a number ("2 m" is
# left alone: m may be a variable).
_TRAILING_WORD = re.compile(
    rf"(?<=[\d}})\].])\s+(?=[A-Za-z]{{2}})(?:(?:square|sq\.?|cubic)\s+)?"
    rf"(?:{_UNIT_WORDS}){_POWER_23}\s*\.?\s*$",
    re.I,
)
_TEXT_AND = re.compile(r"(?:,\s*)?\\(?:text|mbox)\s*\{\s*and\s*\}(?:\s*,)?")
_ARTICLE = re.compile(r"^(?:a|an|the)\s+(?=[A-Za-z]{3,}(?:\s+[A-Za-z]+)*$)", re.I)
_CHOICE = re.compile(r"^\(([A-Z])\)$")
_LHS_VAR = re.compile(r"^(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?'?(?:=|\\in(?![A-Za-z]))")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SIMPLE_SLASH = re.compile(r"(?<![\w./^_])(\d+)/(\d+)(?![\w.{/])")
_LEADING_DOT = re.compile(r"(?<![\w.}\\])\.(?=\d)")
_SINGLE_SCRIPT = re.compile(r"([\^_])\{(\w)\}")
_BOX_UNWRAP = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*(?=\{)")
_TEXT_UNWRAP = re.compile(rf"\\(?:{_TEXT_CMD})(?![A-Za-z])\s*(?=\{{)")
_FRAC_SQRT = re.compile(r"\\(frac|sqrt)")
_COMMAND = re.compile(r"\\(?:[A-Za-z]+|.)", re.S)


# Escapes, scanned left to right so that a matrix row break (two backslashes) stays whole:
# a backslash-space is a space; \! \, \; \: and the math delimiters \( \) \[ \] go.
_ESCAPES = re.compile(r"\\\\|\\[!,;: ()\[\]]")


def _escape_replacement(m: re.Match[str]) -> str:
    token = m.group(0)
    if token == "\\\\":
        return token
    return " " if token == "\\ " else ""


def _unwrap(s: str, pattern: re.Pattern[str]) -> str:
    """Replace every ``\\name{X}`` matched by ``pattern`` (up to the brace) by ``X``.

    An unclosed ``\\name{`` loses only its name. One pass, linear in ``len(s)``.
    """
    pairs = _brace_pairs(s)
    keep = bytearray(b"\x01") * len(s)
    for m in pattern.finditer(s):
        close = pairs.get(m.end())
        end = m.end() if close is None else m.end() + 1
        keep[m.start() : end] = bytes(end - m.start())
        if close is not None:
            keep[close] = 0
    return "".join(c for c, k in zip(s, keep, strict=True) if k)


def _strip_units(s: str) -> str:
    for _ in range(3):
        m = _TRAILING_TEXT.search(s)
        if m is not None and s[: m.start()].strip():
            body = m.group("body").strip()
            if m.group("lead") or _UNIT_PHRASE.fullmatch(body):
                s = s[: m.start()].rstrip()
                continue
        m2 = _TRAILING_WORD.search(s)
        if m2 is not None and s[: m2.start()].strip():
            s = s[: m2.start()].rstrip()
            continue
        break
    return s


def _fix_args(s: str) -> str:
    """Brace the arguments of ``\\frac`` and ``\\sqrt``: ``\\frac12`` -> ``\\frac{1}{2}``."""
    if "\\" not in s:
        return s
    out: list[str] = []
    _fix_range(s, 0, len(s), _brace_pairs(s), 0, out)
    return "".join(out)


def _fix_range(s: str, lo: int, hi: int, pairs: dict[int, int], depth: int, out: list[str]) -> None:
    if depth > _MAX_DEPTH:
        out.append(s[lo:hi])
        return
    i = lo
    while i < hi:
        m = _FRAC_SQRT.search(s, i, hi)
        if m is None:
            out.append(s[i:hi])
            return
        out.append(s[i : m.end()])
        i = m.end()
        if m.group(1) == "sqrt" and i < hi and s[i] == "[":
            close = s.find("]", i, hi)
            if close == -1:
                continue
            out.append(s[i : close + 1])
            i = close + 1
        for _ in range(2 if m.group(1) == "frac" else 1):
            i, ok = _fix_arg(s, i, hi, pairs, depth, out)
            if not ok:
                break


def _fix_arg(
    s: str, i: int, hi: int, pairs: dict[int, int], depth: int, out: list[str]
) -> tuple[int, bool]:
    """Append one argument at ``s[i]`` in braces; (next index, whether there was one)."""
    if i >= hi:
        return i, False
    c = s[i]
    if c == "{":
        end = pairs.get(i)
        if end is None or end >= hi:
            return i, False
        out.append("{")
        _fix_range(s, i + 1, end, pairs, depth + 1, out)
        out.append("}")
        return end + 1, True
    if c == "\\":
        m = _COMMAND.match(s, i, hi)
        if m is None:
            return i, False
        out.append("{" + m.group(0) + "}")
        return m.end(), True
    if c in "}^_&":
        return i, False
    out.append("{" + c + "}")
    return i + 1, True


def _strip_outer_braces(s: str) -> str:
    pairs = _brace_pairs(s)
    n = len(s)
    k = 0
    while n - 2 * k >= 2 and pairs.get(k) == n - 1 - k:
        k += 1
    return s[k : n - k]


def _normalize(s: str) -> str:
    # Escapes: \( \) \[ \] \! \, \; \: go, "\ " is a space; \boxed{X} / \fbox{X} -> X.
    s = _ESCAPES.sub(_escape_replacement, s.strip())
    s = _unwrap(s, _BOX_UNWRAP)
    s = re.sub(r"\\(?:boxed|fbox)(?![A-Za-z])", "", s)
    # Unicode forms of minus, pi, infinity, degrees, times.
    s = s.replace("\u2212", "-").replace("\u03c0", "\\pi ").replace("\u221e", "\\infty ")
    s = s.replace("\u00b0", "^\\circ").replace("\u00d7", "\\times ")
    # Layout: line breaks and ~ are spaces; \displaystyle and \textstyle go.
    s = s.replace("\n", " ").replace("~", " ")
    s = re.sub(r"\\(?:displaystyle|textstyle)(?![A-Za-z])", "", s)
    # \tfrac, \dfrac, \cfrac -> \frac.
    s = re.sub(r"\\[tdc]frac(?![A-Za-z])", r"\\frac", s)
    # \left / \right (and \big-style sizes) go; \left. and \right. are invisible delimiters.
    s = re.sub(r"\\(?:left|right)\.", "", s)
    s = re.sub(r"\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])", "", s)
    # Degrees: ^\circ, ^{\circ}, \degree.
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|\\degree(?![A-Za-z])", "", s)
    # Money, math delimiters and percent: \$ and $, \% and %.
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    # Minerva: "\text{and}" separates list items.
    s = _TEXT_AND.sub(",", s)
    # Units at the end: \text{ cm}^2 (a \text whose content starts with a space: the MATH
    # rule) or a unit word (\text{cm}, " inches", " square units") after a number.
    s = _strip_units(s)
    # \text{X}, \mbox{X}, \mathrm{X}, \textbf{X}, ... -> X.
    s = _unwrap(s, _TEXT_UNWRAP)
    # A leading article in a word answer: "an ellipse" -> "ellipse".
    s = _ARTICLE.sub("", s.strip())
    # All whitespace goes.
    s = re.sub(r"\s+", "", s)
    # Trailing full stops.
    s = s.rstrip(".")
    # "x = 5", "k=5", "\theta = 5", "x \in [a, b]": a short variable on the left goes.
    m = _LHS_VAR.match(s)
    if m is not None and s.count("=") <= 1 and m.end() < len(s):
        s = s[m.end() :]
    # "(B)" -> "B" (multiple-choice letters).
    s = _CHOICE.sub(r"\1", s)
    # Thousands separators in a plain number: 1{,}000 and 1,000 -> 1000.
    s = s.replace("{,}", ",")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    # \frac12 -> \frac{1}{2}, \frac\pi2 -> \frac{\pi}{2}, \sqrt2 -> \sqrt{2}.
    s = _fix_args(s)
    # x^{2} -> x^2, 4210_{5} -> 4210_5 (one-character scripts).
    s = _SINGLE_SCRIPT.sub(r"\1\2", s)
    # .5 -> 0.5 (also after a sign, a brace, a comma or a bracket).
    s = _LEADING_DOT.sub("0.", s)
    # 1/2 -> \frac{1}{2} for integer fractions.
    s = _SIMPLE_SLASH.sub(r"\\frac{\1}{\2}", s)
    # Infinity: "infinity", "inf", "+\infty" -> \infty.
    s = re.sub(r"(?<![A-Za-z\\])(?:[Ii]nfinity|inf)(?![A-Za-z])", r"\\infty", s)
    s = re.sub(r"(^|[(\[,])\+\\infty", r"\1\\infty", s)
    # Redundant outer braces: {5} -> 5.
    return _strip_outer_braces(s)


def normalize_math_answer(s: str) -> str:
    """Normalise a MATH final answer (the MATH paper's rules plus Minerva's), in this order.

    1. ``$``, ``\\(``/``\\)``, ``\\[``/``\\]`` delimiters go; ``\\boxed{X}``/``\\fbox{X}`` -> X.
    2. Unicode ``−``, ``π``, ``∞``, ``°``, ``×`` -> their LaTeX forms.
    3. Line breaks, ``~`` and ``\\ `` become spaces; ``\\!``, ``\\,``, ``\\;``, ``\\:``,
       ``\\displaystyle`` go.
    4. ``\\tfrac``, ``\\dfrac``, ``\\cfrac`` -> ``\\frac``.
    5. ``\\left``, ``\\right`` (and ``\\big`` sizes) go; ``\\left.``/``\\right.`` entirely.
    6. Degrees go: ``^\\circ``, ``^{\\circ}``, ``\\degree``.
    7. ``\\$``, ``$``, ``\\%``, ``%`` go.
    8. Minerva: ``\\text{and}`` -> ``,``.
    9. Units at the end go: a ``\\text{ ...}``/``\\mbox{ ...}`` whose content starts with a
       space (the MATH rule: ``15\\mbox{ cm}^2`` -> ``15``), a ``\\text{cm}`` whose content is
       a unit word, or a bare unit word after a number (``30 degrees``, ``5 square units``).
       Never the whole answer.
    10. ``\\text{X}``, ``\\mbox{X}``, ``\\textbf{X}``, ``\\mathrm{X}``, ... -> ``X``.
    11. A leading article in a word answer goes (``an ellipse`` -> ``ellipse``).
    12. All whitespace goes.
    13. Trailing ``.`` go.
    14. A short variable on the left goes: ``x = 5``, ``\\theta=5``, ``x_1 = 5`` -> ``5``,
        ``x \\in [a,b]`` -> ``[a,b]`` (only with at most one ``=``).
    15. ``(B)`` -> ``B``.
    16. Thousands separators in a plain number: ``1{,}000``, ``1,000``, ``10,\\!080`` -> digits.
    17. ``\\frac`` and ``\\sqrt`` arguments are braced: ``\\frac12`` -> ``\\frac{1}{2}``,
        ``\\frac\\pi2`` -> ``\\frac{\\pi}{2}``, ``\\frac{270}7`` -> ``\\frac{270}{7}``,
        ``\\sqrt2`` -> ``\\sqrt{2}``.
    18. One-character scripts lose their braces: ``x^{2}`` -> ``x^2``.
    19. A leading zero is added: ``.5`` -> ``0.5``, ``-.5`` -> ``-0.5``.
    20. Integer fractions: ``1/2`` -> ``\\frac{1}{2}``.
    21. ``infinity``/``inf``/``+\\infty`` -> ``\\infty``.
    22. Redundant outer braces go: ``{5}`` -> ``5``.

    Case is kept (``R`` and ``r`` are different variables). Double backslashes are kept
    (they separate matrix rows). Never raises; on an internal error the stripped input is
    returned.
    """
    try:
        return _normalize(s)
    except Exception:  # totality: a normaliser must never take a test run down
        return s.strip()


# --------------------------------------------------------------------------- numbers


class _NotNumeric(Exception):
    pass


_INTEGER = re.compile(r"-?\d{1,4000}")
_NUM = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_INT_FRAC = re.compile(r"\\frac\{(\d+)\}\{(\d+)\}")
_CONSTANTS = {"\\pi": math.pi, "\\infty": math.inf}
# What may follow a factor with an implicit product: 2\pi, 3\sqrt{2}, 2(3), never 2 3.
_IMPLICIT_START = re.compile(r"\(|\\(?:frac|sqrt|pi|infty)(?![A-Za-z])")


class _Evaluator:
    """A tiny recursive-descent evaluator for numeric LaTeX: + - * / ^, \\frac, \\sqrt, \\pi."""

    def __init__(self, s: str) -> None:
        self.s = s
        self.i = 0
        self.depth = 0

    def value(self) -> float:
        v = self.expr()
        if self.i != len(self.s):
            raise _NotNumeric
        return v

    def _peek(self, token: str) -> bool:
        if not self.s.startswith(token, self.i):
            return False
        end = self.i + len(token)
        return not (token[-1].isalpha() and end < len(self.s) and self.s[end].isalpha())

    def _take(self, token: str) -> bool:
        if self._peek(token):
            self.i += len(token)
            return True
        return False

    def _expect(self, token: str) -> None:
        if not self._take(token):
            raise _NotNumeric

    def expr(self) -> float:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _NotNumeric
        v = self.term()
        while True:
            if self._take("+"):
                v += self.term()
            elif self._take("-"):
                v -= self.term()
            else:
                break
        self.depth -= 1
        return v

    def term(self) -> float:
        v, plain_int = self.unary()
        while True:
            if self._take("*") or self._take("\\cdot") or self._take("\\times"):
                v *= self.unary()[0]
            elif self._take("/") or self._take("\\div"):
                d = self.unary()[0]
                if d == 0:
                    raise _NotNumeric
                v /= d
            elif plain_int and (m := _INT_FRAC.match(self.s, self.i)) is not None:
                # A mixed number: 1\frac{4}{5} is 1 + 4/5, -1\frac{4}{5} is -(1 + 4/5).
                den = int(m.group(2))
                if den == 0:
                    raise _NotNumeric
                v += math.copysign(int(m.group(1)) / den, v)
                self.i = m.end()
            elif _IMPLICIT_START.match(self.s, self.i):
                v *= self.power()  # implicit multiplication: 2\pi, 3\sqrt{2}, (1)(2)
            else:
                break
            plain_int = False
        return v

    def unary(self) -> tuple[float, bool]:
        if self._take("-"):
            v, plain_int = self.unary()
            return -v, plain_int
        if self._take("+"):
            return self.unary()
        start = self.i
        v = self.power()
        text = self.s[start : self.i]
        return v, text.isdigit()

    def power(self) -> float:
        base = self.atom()
        if self._take("^"):
            if self.i < len(self.s) and self.s[self.i] == "{":
                exponent = self.group("{", "}")
            elif self._take("-"):
                exponent = -self.atom()
            else:
                exponent = self.atom()
            if base < 0 and not float(exponent).is_integer():
                raise _NotNumeric
            if base == 0 and exponent < 0:
                raise _NotNumeric
            try:
                result = base**exponent
            except OverflowError:
                raise _NotNumeric from None
            if isinstance(result, complex):
                raise _NotNumeric
            return float(result)
        return base

    def group(self, open_: str, close: str) -> float:
        self._expect(open_)
        v = self.expr()
        self._expect(close)
        return v

    def atom(self) -> float:
        m = _NUM.match(self.s, self.i)
        if m is not None:
            self.i = m.end()
            value = float(m.group(0))
            if math.isinf(value):  # a literal too long for a float
                raise _NotNumeric
            return value
        for name, value in _CONSTANTS.items():
            if self._take(name):
                return value
        if self._take("\\frac"):
            num = self.group("{", "}")
            den = self.group("{", "}")
            if den == 0:
                raise _NotNumeric
            return num / den
        if self._take("\\sqrt"):
            index = 2.0
            if self.i < len(self.s) and self.s[self.i] == "[":
                index = self.group("[", "]")
                if index == 0:
                    raise _NotNumeric
            radicand = self.group("{", "}")
            if radicand < 0:
                raise _NotNumeric
            return float(radicand ** (1.0 / index))
        if self.i < len(self.s) and self.s[self.i] == "(":
            return self.group("(", ")")
        if self.i < len(self.s) and self.s[self.i] == "{":
            return self.group("{", "}")
        raise _NotNumeric


def _numeric_value(s: str) -> float | None:
    """The value of a normalised numeric answer, or None when it is not a plain number."""
    if not s or len(s) > _MAX_NUMERIC_LEN:
        return None
    try:
        value = _Evaluator(s).value()
    except (_NotNumeric, OverflowError, ZeroDivisionError, ValueError, RecursionError):
        return None
    if math.isnan(value) or (math.isinf(value) and "\\infty" not in s):
        return None  # overflow is not a value
    return value


def _numbers_close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


# --------------------------------------------------------------------------- structure


def _split_top(s: str, sep: str) -> list[str]:
    """Split at ``sep`` outside (), [], {} and \\{ \\}."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    n = len(s)
    while i < n:
        if s.startswith(sep, i) and depth == 0:
            parts.append(s[start:i])
            i += len(sep)
            start = i
            continue
        c = s[i]
        if c == "\\" and i + 1 < n:
            if s[i + 1] == "{":
                depth += 1
            elif s[i + 1] == "}":
                depth -= 1
            i += 2 if not s[i + 1].isalpha() else 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        i += 1
    parts.append(s[start:])
    return parts


def _closing_index(s: str) -> int | None:
    """Where the bracket opened at ``s[0]`` closes (any of ) ] } may close it)."""
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _bracketed(s: str) -> tuple[str, str, list[str]] | None:
    """``(a,b]`` -> ("(", "]", [a, b]): a tuple or an interval of two or more elements."""
    if len(s) < 2 or s[0] not in "([" or s[-1] not in ")]" or _closing_index(s) != len(s) - 1:
        return None
    parts = _split_top(s[1:-1], ",")
    return (s[0], s[-1], parts) if len(parts) >= 2 else None


def _set_elements(s: str) -> list[str] | None:
    """``\\{a,b\\}`` or a bare top-level list ``a,b``: the elements (None for one element)."""
    if s.startswith("\\{") and s.endswith("\\}"):
        parts = _split_top(s[2:-2], ",")
    else:
        parts = _split_top(s, ",")
    expanded: list[str] = []
    for part in parts:
        pm = _split_top(part, "\\pm")
        if len(pm) == 2 and pm[0] and pm[1]:
            expanded += [f"{pm[0]}+{pm[1]}", f"{pm[0]}-{pm[1]}"]
        else:
            expanded.append(part)
    return expanded if len(expanded) >= 2 else None


_MATRIX = re.compile(r"^\\begin\{([pbvBV]?matrix)\}(.*)\\end\{\1\}$", re.S)


def _matrix_cells(s: str) -> list[list[str]] | None:
    m = _MATRIX.match(s)
    if m is None:
        return None
    rows = [r for r in m.group(2).split("\\\\") if r != ""]
    return [row.split("&") for row in rows]


_MAX_UNMATCHED = 64  # elements left after exact matching that are compared pairwise


def _multiset_equal(a: list[str], b: list[str], depth: int) -> bool:
    """Same elements in any order: exact matches first, then pairwise equivalence."""
    if len(a) != len(b) or not all(x.strip() for x in a) or not all(y.strip() for y in b):
        return False
    na, nb = [_normalize(x) for x in a], [_normalize(y) for y in b]
    if not all(na) or not all(nb):
        return False
    unused = Counter(nb)
    left: list[str] = []
    for x in na:
        if unused[x] > 0:
            unused[x] -= 1
        else:
            left.append(x)
    rest = list(unused.elements())
    if len(left) > _MAX_UNMATCHED:
        return False
    for x in left:
        for k, y in enumerate(rest):
            if _equal(x, y, depth + 1):
                del rest[k]
                break
        else:
            return False
    return True


def _sequence_equal(a: list[str], b: list[str], depth: int) -> bool:
    """Same length and equivalent elements in order."""
    return len(a) == len(b) and all(
        _equal(_normalize(x), _normalize(y), depth + 1) for x, y in zip(a, b, strict=True)
    )


def _equal(a: str, b: str, depth: int) -> bool:
    """Equivalence of two normalised answers; ``depth`` counts enclosing structures."""
    if a == b:
        return bool(a)
    if not a or not b or depth > _MAX_DEPTH:
        return False
    checks: list[Callable[[], bool | None]] = [
        lambda: _compare_union(a, b, depth),
        lambda: _compare_matrix(a, b, depth),
        lambda: _compare_bracketed(a, b, depth),
        lambda: _compare_set(a, b, depth),
    ]
    for check in checks:
        verdict = check()
        if verdict is not None:
            return verdict
    if _INTEGER.fullmatch(a) and _INTEGER.fullmatch(b):
        return int(a) == int(b)  # integers compare exactly, however long
    x, y = _numeric_value(a), _numeric_value(b)
    if x is not None and y is not None:
        return _numbers_close(x, y)
    # Word answers compare without case: "East" and "east".
    if a.isalpha() and b.isalpha() and len(a) >= 3:
        return a.casefold() == b.casefold()
    return False


def _compare_union(a: str, b: str, depth: int) -> bool | None:
    pa, pb = _split_top(a, "\\cup"), _split_top(b, "\\cup")
    if len(pa) == 1 and len(pb) == 1:
        return None
    return _multiset_equal(pa, pb, depth)


def _compare_matrix(a: str, b: str, depth: int) -> bool | None:
    ma, mb = _matrix_cells(a), _matrix_cells(b)
    if ma is None and mb is None:
        return None
    if ma is None or mb is None or len(ma) != len(mb):
        return False
    return all(_sequence_equal(ra, rb, depth) for ra, rb in zip(ma, mb, strict=True))


def _compare_bracketed(a: str, b: str, depth: int) -> bool | None:
    ta, tb = _bracketed(a), _bracketed(b)
    if ta is None and tb is None:
        return None
    if ta is None or tb is None or ta[:2] != tb[:2]:
        return False
    return _sequence_equal(ta[2], tb[2], depth)


def _compare_set(a: str, b: str, depth: int) -> bool | None:
    sa, sb = _set_elements(a), _set_elements(b)
    if sa is None and sb is None:
        return None
    return _multiset_equal(sa or [a], sb or [b], depth)


def math_equal(predicted: str | None, target: str) -> bool:
    """Whether a predicted MATH answer is equivalent to the target answer.

    True when, after :func:`normalize_math_answer`, the two are

    - the same string;
    - unions (``\\cup``) of the same parts, in any order;
    - matrices (``pmatrix``, ``bmatrix``, ...) of the same shape with equivalent cells;
    - tuples or intervals with the same brackets and equivalent elements in order
      (``(1,2)`` vs ``\\left( 1, 2 \\right)``; ``(1,2]`` is not ``(1,2)``);
    - sets (``\\{a, b\\}``) or bare comma lists with equivalent elements in any order, where
      ``a \\pm b`` counts as the two elements ``a+b`` and ``a-b``;
    - numbers within 1e-6 relative (integers, decimals, ``\\frac{a}{b}``, ``a/b``, mixed
      numbers ``1\\frac{4}{5}``, ``\\sqrt{n}``, ``\\sqrt[k]{n}``, ``\\pi``, ``\\infty``,
      ``+ - * / ^`` and implicit products such as ``2\\pi``);
    - words that differ only in case (three letters or more).

    ``predicted`` None (no answer extracted) is never equal. Never raises.
    """
    if predicted is None:
        return False
    try:
        return _equal(_normalize(predicted), _normalize(target), 0)
    except Exception:  # totality: a comparison must never take a test run down
        return False
