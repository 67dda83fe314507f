"""Whether a math answer states one value: hedges and relations never match a plain gold.

math-verify reads ``41 \\lor 42`` as its last part (42), ``\\ge 42`` as 42, and an equation by
its right side (``x + 1 = 41`` as 41, ``42 = 43`` as 43), so a prediction that names several
values, or states a relation, used to match a gold answer that is one value, in evaluation and
in the RL reward alike. :func:`read_answer` reads the LaTeX of a prediction (and
:func:`gold_shape` that of its gold) and says either why the prediction cannot equal the gold,
or which value(s) math-verify must find equal to it.

The rule, for a gold that is no equation or relation (``42``, ``\\frac{1}{2}``, ``(1, 2)``,
``\\{1, 2\\}``, ``\\text{Monday}``): credit an answer only when it states one value.

- Alternatives (``41 \\lor 42``, ``42 \\text{ or } 43``, ``42, 43``, ``41 \\quad 42``,
  ``41 \\\\ 42``, two boxes side by side) are each compared with the gold, and all must equal it:
  ``\\frac{1}{2} \\text{ or } 0.5`` is one value written twice, ``41 \\lor 42`` is two. At most
  :data:`MAX_ALTERNATIVES`. When the gold itself holds several values (``1, 2``), "or", "and"
  and commas are its list, compared as a whole (``x = 1 \\text{ or } x = 2``).
- No other connective (``\\to``, ``\\implies``, ``\\iff``, ``\\neg``, ...) and no relation
  (``\\ge``, ``\\le``, ``<``, ``>``, ``\\neq``, ``\\mid``, an unpaired ``|``, ``\\equiv``,
  ``\\subset``, ...) anywhere outside sub- and superscripts (``\\lim_{x \\to 0}`` and
  ``\\sum_{k=1}`` are fine). One exception: a trailing pointer to an option
  (``\\frac{11}{27} \\implies \\textbf{(C)}``) is dropped and the value before it read.
- No hedge word: ``nor``, ``either``, ``not``, ``to``, ``than``, ``least``, ``most``,
  ``between``, ``if``, ``unless``, ``otherwise``, ``except``, ``maybe``, ``perhaps``,
  ``possibly``, and "or" followed by a bound (``or more``, ``or less``, ...).
- Set operators (``\\cup``, ``\\cap``, ``\\setminus``) only when the gold is a set.
- An equation (``=``; ``\\approx`` and ``\\in`` count as ``=``) counts only when its left side
  names the value: empty (``= 42``), a bare variable (a letter or Greek letter, optionally primed
  or subscripted: ``x``, ``n_0``, ``a_{n+1}``, ``\\theta'``), capital point names (``AB``,
  ``\\angle ABC``), a letter applied to arguments (``f(3)``, ``P(X = 3)``), a ``\\text{}`` word,
  a tuple of variables (``(x, y)``), an option label (``(D)``, ``\\textbf{(E)}\\ m``), or a
  computation without unknowns (``3 \\times 4``, ``\\frac{84}{2}``, ``\\sum_{k=1}^{3} k``: the
  right side of arithmetic, as the answer-phrase extraction reads it). In a chain
  (``a = b = c``) every middle part must be a computation, so ``x = 41 = 42`` and ``42 = 43``
  fail. ``x + 1 = 41``, ``2x = 42``, ``x^2 = 42``, ``|x - 1| = 41`` and ``\\frac{R}{r} = 2``
  state no value of a variable: wrong.

A gold that is itself an equation or relation (it holds ``=``, a relation, or parses to one) is
compared as relations by math-verify, as before; connectives and hedge words in the prediction
still need one in the gold.

Guarantees: :func:`scan` and :func:`read_answer` are linear in the length of their input (one
pass to pair braces, one to read tokens, then fixed-shape checks on disjoint parts; no regex
with two runs that can trade characters); they never raise on a str.

Not guaranteed: that every spelling of a hedge is recognised (a hedge in words this module does
not list, or in a language other than English, passes to math-verify unchanged); that a left
side accepted as a computation is true arithmetic (``40 + 1 = 42`` is read as 42, like the
answer-phrase extraction reads it); that a chain is caught against a gold that is itself an
equation (``x = 4 = 5`` against ``x = 5`` is left to math-verify).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

# Logical connectives: several claims joined into one answer.
CONNECTIVES = frozenset({
    "lor", "vee", "land", "wedge", "to", "implies", "impliedby", "iff", "Rightarrow",
    "Leftarrow", "Leftrightarrow", "rightarrow", "leftarrow", "leftrightarrow", "longrightarrow",
    "Longrightarrow", "longleftarrow", "Longleftarrow", "longleftrightarrow",
    "Longleftrightarrow", "mapsto", "longmapsto", "therefore", "because", "lnot", "neg",
    "vdash", "models", "bigvee", "bigwedge",
})
# Relations other than equality: a condition, not a value.
RELATIONS = frozenset({
    "ge", "geq", "geqq", "geqslant", "le", "leq", "leqq", "leqslant", "gt", "lt", "ne", "neq",
    "not", "nmid", "mid", "equiv", "cong", "sim", "simeq", "propto", "parallel", "perp",
    "subset", "subseteq", "subsetneq", "supset", "supseteq", "supsetneq", "ni", "notin", "ll",
    "gg", "prec", "succ", "preceq", "succeq", "gtrsim", "lesssim", "gtrless", "lessgtr", "ngtr",
    "nless", "nleq", "ngeq",
})
# Read like "=": the left side must name the value.
EQUALITY_LIKE = frozenset({"approx", "in", "coloneqq", "doteq", "approxeq", "eqsim"})
SET_OPERATORS = frozenset({"cup", "cap", "setminus", "bigcup", "bigcap", "sqcup", "smallsetminus"})
HEDGE_WORDS = frozenset({
    "or", "and", "nor", "either", "neither", "not", "to", "than", "least", "most", "between",
    "if", "unless", "otherwise", "except", "maybe", "perhaps", "possibly",
})
# Words that join the values of a list: allowed when the gold holds several values.
LIST_WORDS = frozenset({"or", "and"})
# "or more", "or less", ...: after "or", a bound, never a second value
QUALIFIERS = frozenset({"more", "less", "fewer", "greater", "higher", "lower", "larger",
                        "smaller", "above", "below", "over", "under", "so", "later", "earlier",
                        "better", "worse", "longer", "shorter"})
_BETWEEN_WORDS_RE = re.compile(r"(?:\s|[{}]|\\(?:text|textrm|textit|textbf|mbox|mathrm)\b)*+")
# connectives that join alternatives: each alternative is read, and must equal the gold
ALTERNATIVE_CONNECTIVES = frozenset({"\\lor", "\\vee", "\\land", "\\wedge", "∨", "∧"})
MAX_ALTERNATIVES = 4
_UNICODE = {
    "∨": ("connective", "∨"), "∧": ("connective", "∧"), "→": ("connective", "→"),
    "⇒": ("connective", "⇒"), "⇔": ("connective", "⇔"), "↔": ("connective", "↔"),
    "←": ("connective", "←"), "⇐": ("connective", "⇐"), "¬": ("connective", "¬"),
    "∴": ("connective", "∴"), "⟹": ("connective", "⟹"), "⟺": ("connective", "⟺"),
    "≤": ("relation", "≤"), "≥": ("relation", "≥"), "≠": ("relation", "≠"),
    "≡": ("relation", "≡"), "≅": ("relation", "≅"), "∼": ("relation", "∼"),
    "∝": ("relation", "∝"), "∣": ("relation", "∣"), "⊂": ("relation", "⊂"),
    "⊆": ("relation", "⊆"), "⊃": ("relation", "⊃"), "⊇": ("relation", "⊇"),
    "∉": ("relation", "∉"), "≪": ("relation", "≪"), "≫": ("relation", "≫"),
    "⩽": ("relation", "⩽"), "⩾": ("relation", "⩾"),
    "≈": ("sign", "≈"), "∈": ("sign", "∈"), "≐": ("sign", "≐"),
    "∪": ("set", "∪"), "∩": ("set", "∩"), "∖": ("set", "∖"),
}
# \left( and friends: the delimiter after them is a bracket, never a relation.
_DELIMITER_PREFIXES = frozenset({
    "left", "right", "middle", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr",
    "biggl", "biggr", "Biggl", "Biggr",
})
_OPEN_COMMANDS = frozenset({"langle", "lbrace", "lbrack", "lceil", "lfloor"})
_CLOSE_COMMANDS = frozenset({"rangle", "rbrace", "rbrack", "rceil", "rfloor"})
# Spacing: what they take (a length, a phantom) is no part of the answer.
_SPACING_COMMANDS = frozenset({"quad", "qquad", "enspace", "thinspace", "medspace",
                               "thickspace", "negthinspace", "space"})
_SPACING_GROUP_COMMANDS = frozenset({"hspace", "vspace", "kern", "mkern", "hskip", "phantom",
                                     "hphantom", "vphantom"})
# A group after these is text: its braces do not nest the answer, its words are read.
_TEXT_COMMANDS = frozenset({
    "text", "textbf", "textit", "textrm", "textsf", "texttt", "textnormal", "mbox", "hbox",
    "mathrm", "mathit", "mathbf", "mathsf", "operatorname",
})


@dataclass(frozen=True)
class Token:
    """One token that matters: ``kind`` is ``connective``, ``relation``, ``sign`` (``=`` and
    the like), ``set``, ``word`` (a hedge word, lower case) or ``sep`` (a list separator at the
    top level: ``,``, ``;``, or the word ``or`` / ``and``); ``depth`` counts the brackets
    around it (text groups and sub/superscripts do not count; tokens inside scripts are not
    reported at all)."""

    kind: str
    text: str
    start: int
    end: int
    depth: int


@dataclass(frozen=True)
class GoldShape:
    """What a gold answer allows in a prediction (see :func:`gold_shape`)."""

    relational: bool  # an equation or relation: compared as relations, as math-verify does
    connectives: bool  # holds a connective itself
    hedge_words: frozenset[str]  # the hedge words it holds
    several: bool  # holds several values (a list, tuple, set, interval)
    is_set: bool  # a set or interval, or it holds a set operator: set operators are fine


def _brace_pairs(latex: str) -> dict[int, int]:
    """Index of each ``{`` that opens a group -> index of its ``}`` (escaped braces ``\\{`` are
    brackets, not groups). One pass with a stack."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(latex)
    while i < n:
        c = latex[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def scan(latex: str) -> list[Token]:
    """The tokens of ``latex`` that decide whether it states one value, in order (linear)."""
    pairs = _brace_pairs(latex)
    tokens: list[Token] = []
    depth = 0
    counts: list[bool] = []  # per open "{": does it nest (False for a text group's braces)
    text_group_next = False
    text_span = (-1, -1)  # the \\text{...} being read, command included: a word's separator
    text_alone = ""  # that group's content when it is one short word
    bars: list[int] = []  # "|" and "\\vert": absolute values come in pairs, "41 | 42" does not
    number_end = -1  # where the last number ended, while only spacing has followed it
    spaced = False  # spacing (not just nothing) since that number
    or_start, or_end, or_tokens = -100, -100, 0  # the last word "or", and its first token
    i, n = 0, len(latex)

    def add(kind: str, text: str, start: int, end: int) -> None:
        tokens.append(Token(kind, text, start, end, depth))

    while i < n:
        c = latex[i]
        if c.isspace():
            spaced = True
            i += 1
            continue
        if c.isdigit():  # "41 \\quad 42": two numbers side by side are two values
            j = i + 1
            while j < n and latex[j].isdigit():
                j += 1
            thousands = j - i == 3 and not latex[j:j + 1].isdigit()  # "1\\,000", "1 000"
            if number_end >= 0 and spaced and not thousands and depth == 0:
                add("sep", latex[number_end:i], number_end, i)
            number_end, spaced, i = j, False, j
            continue
        if c == "\\" and (latex.startswith(("\\,", "\\;", "\\:", "\\!", "\\ "), i)):
            spaced, i = True, i + 2
            continue
        if c == "~":
            spaced, i = True, i + 1
            continue
        if c == "\\":
            j = i + 1
            while j < n and latex[j].isalpha() and latex[j].isascii():
                j += 1
            name = latex[i + 1:j]
            if name in _SPACING_COMMANDS or name in _SPACING_GROUP_COMMANDS:
                k = j
                while k < n and latex[k] == " ":
                    k += 1
                i = pairs[k] + 1 if name in _SPACING_GROUP_COMMANDS and k in pairs else j
                spaced = True
                continue
            number_end = -1
            if name == "vert":
                bars.append(i)
            if not name:  # \{ \} \% \\ \& ...
                nxt = latex[i + 1:i + 2]
                if nxt == "{":
                    depth += 1
                elif nxt == "}":
                    depth = max(0, depth - 1)
                elif nxt == "\\" and depth == 0:  # a new line: another value
                    add("sep", "\\\\", i, i + 2)
                elif nxt == "&":  # "41 \\& 42"
                    add("word", "and", i, i + 2)
                    if depth == 0:
                        add("sep", "and", i, i + 2)
                i += 2
                continue
            if name in _DELIMITER_PREFIXES:
                k = j
                while k < n and latex[k] == " ":
                    k += 1
                if latex.startswith("\\{", k) or latex.startswith("\\}", k):
                    depth = depth + 1 if latex[k + 1] == "{" else max(0, depth - 1)
                    i = k + 2
                elif k < n and latex[k] in "([<|.":
                    depth += latex[k] in "([<"
                    i = k + 1
                elif k < n and latex[k] in ")]>":
                    depth = max(0, depth - 1)
                    i = k + 1
                else:  # \left\langle and the like: read the command next
                    i = k
                continue
            if name in CONNECTIVES:
                add("connective", "\\" + name, i, j)
            elif name in RELATIONS:
                add("relation", "\\" + name, i, j)
            elif name in EQUALITY_LIKE:
                add("sign", "\\" + name, i, j)
            elif name in SET_OPERATORS:
                add("set", "\\" + name, i, j)
            elif name in _OPEN_COMMANDS:
                depth += 1
            elif name in _CLOSE_COMMANDS:
                depth = max(0, depth - 1)
            elif name in _TEXT_COMMANDS:
                text_group_next = True
                k = j
                while k < n and latex[k] == " ":
                    k += 1
                if k in pairs:
                    text_span = (i, pairs[k] + 1)
                    content = latex[k + 1:pairs[k]] if pairs[k] - k <= 12 else ""
                    text_alone = content.strip().lower()  # "\\text{ or }" -> "or"
            i = j
            continue
        number_end = -1
        if c in "_^":  # a sub/superscript: skip its group or its one token
            k = i + 1
            while k < n and latex[k] == " ":
                k += 1
            if k < n and latex[k] == "{" and k in pairs:
                i = pairs[k] + 1
            elif k < n and latex[k] == "\\":
                m = k + 1
                while m < n and latex[m].isalpha() and latex[m].isascii():
                    m += 1
                i = max(m, k + 2)
            else:
                i = k + 1
            continue
        if c == "{":
            counts.append(not text_group_next)
            depth += not text_group_next
            text_group_next = False
        elif c == "}":
            if counts and counts.pop():
                depth = max(0, depth - 1)
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth = max(0, depth - 1)
        elif c == "=":
            end = i + 2 if latex.startswith("==", i) else i + 1
            start = i - 1 if i > 0 and latex[i - 1] == ":" else i
            add("sign", latex[start:end], start, end)
            i = end
            continue
        elif c == "!" and latex.startswith("!=", i):
            add("relation", "!=", i, i + 2)
            i += 2
            continue
        elif c in "<>":
            add("relation", c, i, i + 1)
        elif c == "|":
            bars.append(i)
        elif c in ",;" and depth == 0:
            # "1,000": a comma between a digit and exactly three digits separates thousands
            digits = latex[i + 1:i + 5]
            if not (c == "," and i > 0 and latex[i - 1].isdigit() and digits[:3].isdigit()
                    and len(digits) >= 3 and not digits[3:].isdigit()):
                add("sep", c, i, i + 1)
        elif c in _UNICODE:
            kind, text = _UNICODE[c]
            add(kind, text, i, i + 1)
        elif c.isascii() and c.isalpha():
            j = i + 1
            while j < n and latex[j].isascii() and latex[j].isalpha():
                j += 1
            word = latex[i:j].lower()
            if word in HEDGE_WORDS:
                if word == "or":
                    or_start, or_tokens = i, len(tokens)
                add("word", word, i, j)
                in_text = text_span[0] < i < text_span[1]
                if word in LIST_WORDS and depth == 0 and (not in_text or text_alone == word):
                    # "\\text{ or }" as a whole separates the items; in "\\text{ or more}" and
                    # "\\text{Monday or Tuesday}" the word is part of the text
                    add("sep", word, *(text_span if in_text else (i, j)))
                if word == "or":
                    or_end = j
            elif word in QUALIFIERS and 0 <= i - or_end <= 40 \
                    and _BETWEEN_WORDS_RE.fullmatch(latex, or_end, i):
                del tokens[or_tokens:]  # the "or" is no separator: "or more" is one hedge
                add("word", "or " + word, or_start, j)  # "or more", "\\text{or} \\text{less}"
            i = j
            continue
        i += 1
    if len(bars) % 2:  # an odd bar divides or separates ("41 | 42", "x \\vert x > 0")
        add("relation", "|", bars[-1], bars[-1] + 1)
    return tokens


# ---------------------------------------------------------------------------------------------
# The left side of an equation

_GREEK = ("alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|"
          "mu|nu|xi|pi|varpi|rho|varrho|sigma|varsigma|tau|upsilon|phi|varphi|chi|psi|omega|"
          "Gamma|Delta|Theta|Lambda|Xi|Pi|Sigma|Upsilon|Phi|Psi|Omega|ell")
_LETTER = rf"(?:[A-Za-z]|\\(?:{_GREEK})(?![A-Za-z]))"
_SUB = r"(?:_(?:\{[^{}]*\}|[A-Za-z0-9]|\\[A-Za-z]+))"
_PRIME = r"(?:'+|\^\{?\\prime\}?|\^\{?\*\}?)"
_DECORATED = (r"\\(?:bar|hat|vec|tilde|dot|ddot|overline|widehat|widetilde|overrightarrow|"
              r"mathbf|boldsymbol|mathit|mathrm)\{[^{}]*\}")
_VARIABLE = rf"(?:{_LETTER}|{_DECORATED}){_PRIME}?{_SUB}?{_PRIME}?"
_TEXT_NAME = r"\\(?:text|textrm|textit|textbf|mathrm|operatorname|mbox)\{[A-Za-z]+\}"
_NAME_RE = re.compile(
    rf"{_VARIABLE}"
    rf"|[A-Z]{{2,4}}|(?:m?\\(?:angle|measuredangle)|\\triangle)[A-Za-z]{{1,4}}"  # AB, \angle ABC
    rf"|\\overline\{{[A-Z]{{2,4}}\}}"
    rf"|{_TEXT_NAME}{_SUB}?"
    rf"|(?:{_LETTER}{_SUB}?|{_TEXT_NAME})\((?:[^()]|\([^()]*\))*\)"  # f(3), P(X=3)
    rf"|\({_VARIABLE}(?:,{_VARIABLE})+\)"  # (x, y)
)
_OPTION_LABEL_RE = re.compile(r"\\(?:textbf|text|mathrm|mathbf|textrm)\{\([A-Z]\)\}|\([A-Z]\)")
# closed computations: a big operator with its limits, or numbers and operators only
_BIG_OPERATOR_RE = re.compile(r"\\(?:lim|sum|prod|int|iint|iiint|oint|max|min|sup|inf|limsup|"
                              r"liminf)(?![A-Za-z])")
_NUMERIC_COMMAND_RE = re.compile(
    r"\\(?:d|t|c)?frac(?![A-Za-z])|\\sqrt(?![A-Za-z])|\\times(?![A-Za-z])|\\cdot(?![A-Za-z])"
    r"|\\div(?![A-Za-z])|\\d?binom(?![A-Za-z])|\\(?:gcd|log|ln|exp|sin|cos|tan)(?![A-Za-z])"
    r"|\\(?:operatorname|text|mathrm)\{(?:lcm|gcd)\}")
_QUIET_COMMAND_RE = re.compile(r"\\(?:left|right|big|Big|bigl|bigr|Bigl|Bigr)(?![A-Za-z])"
                               r"|\\[,;:! ]")
_PI_RE = re.compile(r"\\pi(?![A-Za-z])")  # a number: "2\pi" is a computation
_NUMERIC_CHARS_RE = re.compile(r"[\d.,+\-*/^!(){}\[\]|$×÷·−]*")
_BINARY_OPERATOR_RE = re.compile(r"[+\-*/^!×÷·−]")


def is_computation(text: str) -> bool:
    """True for arithmetic without unknowns that shows an operation: ``3 \\times 4``,
    ``25 + 50``, ``\\frac{84}{2}``, ``5!``, ``\\sum_{k=1}^{3} k`` (a big operator with its
    limits); False for a bare number (``42``, ``-42``) and for anything with a letter
    (``x + 1``, ``2x``)."""
    s = "".join(text.split())
    if not s:
        return False
    if _BIG_OPERATOR_RE.match(s):
        return True
    marked, operations = _NUMERIC_COMMAND_RE.subn("*", s)
    plain = _PI_RE.sub("*1", _QUIET_COMMAND_RE.sub("", marked)) if "\\" in marked else marked
    if not any(ch.isdigit() for ch in plain) or not _NUMERIC_CHARS_RE.fullmatch(plain):
        return False
    body = plain[1:] if plain[0] in "+-−" else plain
    return operations > 0 or _BINARY_OPERATOR_RE.search(body) is not None


def is_name(text: str) -> bool:
    """True for a left side that names a value (see the module docstring): ``x``, ``n_0``,
    ``AB``, ``f(3)``, ``P(X=3)``, ``(x, y)``, ``\\text{Area}``; also an option label, alone or
    before a name (``(D)``, ``\\textbf{(E)}\\ m``)."""
    s = _SPACING_RE.sub("", text)
    option = _OPTION_LABEL_RE.match(s)
    if option is not None:
        s = s[option.end():]
        if not s:
            return True
    return _NAME_RE.fullmatch(s) is not None


def _left_side_ok(text: str) -> bool:
    return not text.strip() or is_name(text) or is_computation(text)


# ---------------------------------------------------------------------------------------------
# The rule


def gold_shape(gold_latex: str, *, relational: bool = False, several: bool = False,
               is_set: bool = False) -> GoldShape:
    """What ``gold_latex`` allows; the keyword flags add what only its parsed form shows (a
    relation, several values, a set), e.g. from math-verify's sympy object."""
    tokens = scan(gold_latex)
    kinds = {t.kind for t in tokens}
    return GoldShape(
        relational=relational or bool(kinds & {"relation", "sign"}),
        connectives="connective" in kinds,
        hedge_words=frozenset(t.text for t in tokens if t.kind == "word"),
        several=several or is_set or bool(kinds & {"sep", "set"}),
        is_set=is_set or "set" in kinds,
    )


def _equation_problem(latex: str, tokens: list[Token]) -> str | None:
    """Why the equations of ``latex`` do not state one value each, or None. Each list item is
    checked on its own slice, so the work stays linear however many items there are."""
    item_start, signs = 0, []
    for token in [*tokens, Token("sep", "", len(latex), len(latex), 0)]:
        if token.kind == "sep" and token.depth == 0:
            if signs:
                why = _item_problem(latex[item_start:token.start],
                                    [(t.start - item_start, t.end - item_start, t.depth, t.text)
                                     for t in signs])
                if why:
                    return why
            item_start, signs = token.end, []
        elif token.kind == "sign":
            signs.append(token)
    return None


def _item_problem(item: str, signs: list[tuple[int, int, int, str]]) -> str | None:
    """Why one list item, with its ``(start, end, depth, text)`` equality signs, does not state
    one value, or None."""
    top = [(a, b) for a, b, depth, _ in signs if depth == 0]
    if not top:
        return f"a relation inside the answer ({signs[0][3]})"
    left = item[:top[0][0]]
    if not _left_side_ok(left):
        return f"an equation whose left side is no name ({left.strip()[:40]})"
    for (_, a), (b, _) in pairwise(top):
        if not is_computation(item[a:b]):
            return f"a chain of equations ({item.strip()[:60]})"
    for a, _, depth, text in signs:
        if depth > 0 and a >= len(left):
            return f"a relation inside the answer ({text})"
    return None


def _problem(latex: str, tokens: list[Token], gold: GoldShape) -> str | None:
    """Why ``latex`` (with its ``tokens``) cannot equal a gold of shape ``gold``, or None."""
    for token in tokens:
        if token.kind == "connective" and not gold.connectives:
            return f"a connective ({token.text})"
        if token.kind == "word" and token.text not in gold.hedge_words \
                and not (gold.several and token.text in LIST_WORDS):
            return f"a hedge ({token.text!r})"
        if token.kind == "set" and not gold.is_set:
            return f"a set operation ({token.text})"
        if token.kind == "relation" and not gold.relational:
            return f"a relation ({token.text})"
    if gold.relational:
        return None
    if not gold.several:
        for token in tokens:
            if token.kind == "sep" and token.depth == 0:
                return f"several values ({token.text})"
    return _equation_problem(latex, tokens)


@dataclass(frozen=True)
class Reading:
    """How to compare a prediction with its gold: ``problem`` says why it cannot equal the gold
    (then ``values`` is empty); otherwise each of ``values`` (LaTeX) must equal the gold. One
    value normally; the alternatives of ``41 \\lor 42`` or ``\\frac{1}{2} \\text{ or } 0.5``
    each (so several values are right only when they are all the gold's value)."""

    problem: str | None
    values: tuple[str, ...]


def _splits(token: Token, gold: GoldShape) -> bool:
    """True for a top-level token that joins alternatives the gold does not have."""
    if token.depth > 0:
        return False
    if token.kind == "sep":
        return not gold.several
    return token.kind == "connective" and token.text in ALTERNATIVE_CONNECTIVES \
        and not gold.connectives


def read_answer(prediction_latex: str, gold: GoldShape) -> Reading:
    """Read a prediction against a gold of shape ``gold`` (see :class:`Reading` and the module
    docstring). A trailing pointer to an option (``\\frac{11}{27} \\implies \\textbf{(C)}``) is
    dropped: the value before it is the answer. Linear in the length of the prediction."""
    latex = prediction_latex
    tokens = scan(latex)
    pointer = _option_pointer(latex, tokens)
    if pointer is not None:
        latex, tokens = latex[:pointer], [t for t in tokens if t.end <= pointer]
    cuts = [t for t in tokens if _splits(t, gold)]
    if not cuts:
        why = _problem(latex, tokens, gold)
        return Reading(why, () if why else (latex.strip(),))
    values, start, k = [], 0, 0
    for cut in [*cuts, Token("sep", "", len(latex), len(latex), 0)]:
        part, inside = latex[start:cut.start], []
        while k < len(tokens) and tokens[k].start < cut.start:
            if tokens[k].start >= start:
                inside.append(Token(tokens[k].kind, tokens[k].text, tokens[k].start - start,
                                    tokens[k].end - start, tokens[k].depth))
            k += 1
        if part.strip():
            why = _problem(part, inside, gold)
            if why:
                return Reading(why, ())
            values.append(part.strip())
        start = max(start, cut.end)
    if len(values) > MAX_ALTERNATIVES:
        return Reading(f"more than {MAX_ALTERNATIVES} values ({cuts[0].text})", ())
    return Reading(None, tuple(values)) if values else Reading("no value", ())


_OPTION_RE = re.compile(r"\\(?:textbf|text|mathrm|mathbf|textrm)\{\(?[A-Z]\)?\}|\(?[A-Z]\)?")
_SPACING_RE = re.compile(r"\\[,;:! ]|~|\\q?quad(?![A-Za-z])|\s")
_POINTERS = frozenset({"\\implies", "\\Rightarrow", "\\Longrightarrow", "\\to", "\\rightarrow",
                       "\\longrightarrow", "⇒", "→", "⟹"})


def _option_pointer(latex: str, tokens: list[Token]) -> int | None:
    """Where ``VALUE \\implies (C)`` starts pointing at an option, or None."""
    last = next((t for t in reversed(tokens) if t.kind == "connective"), None)
    if last is None or last.text not in _POINTERS or last.depth > 0 or not latex[:last.start].strip():
        return None
    rest = _SPACING_RE.sub("", latex[last.end:])
    return last.start if _OPTION_RE.fullmatch(rest) else None


def not_one_value(prediction_latex: str, gold: GoldShape) -> str | None:
    """Why ``prediction_latex`` cannot equal a gold of shape ``gold`` (it states a relation, or
    a hedge math-verify would misread), or None: :func:`read_answer` without the values."""
    return read_answer(prediction_latex, gold).problem
