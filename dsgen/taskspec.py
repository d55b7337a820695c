"""Task specifications in DINO's JSON format, read unchanged and validated on load.

A spec names a task and, for each label, an instruction (with the ``<X1>`` placeholder
when the task continues given inputs) that ends with an opening quotation mark, and the
counter labels whose instructions the self-debiasing step pushes away from::

    {"task_name": "sts",
     "labels": {"1":   {"instruction": "Task: ... Sentence 2: \\"", "counter_labels": []},
                "0.5": {"instruction": "...", "counter_labels": ["1"]}}}

Built-in specs (``dsgen/task_specs/``): ``sts-x2`` and ``sts-x1`` (DINO), ``gense`` (GenSE's
``entailment`` / ``contradiction`` pair, each the other's counter label) and ``sts-x2-chat`` (DINO's
instructions through a chat template).

**Structured outputs.** An optional ``"output"`` object asks for more than one text per call:
``{"format": "json", "fields": ["S1", "S2", "S3"], "anchor": "S1", "pairs": {"S2": "entailment",
"S3": "contradiction"}}`` (instructions end with ``{``, an output ends at ``}`` and must parse as a JSON
object with string values for every field: E5's STS triplets) or ``{"format": "numbered", "fields":
["similar", "dissimilar"], "pairs": {...}}`` (instructions end with ``1. ``, an output is one line per
field, ``2. ...``, ended by a blank line: Sim-GPT's answers). ``pairs`` names the label of the pair (x1,
field), where x1 is the input or, with ``anchor``, a field of the same output. Without ``"output"``, an
output is DINO's: the text before the closing quote.

**Masked inputs.** ``<X1:mask=0.3>`` holds x1 with 30% of its words replaced by ``<mask>`` (CLAIF's
corruption: ``ceil(0.3 * words)`` words, adjacent masks merged with probability 0.5), drawn from a seed
of the sentence and the rate, so the same input gets the same prompt in any run.

**Chat models.** An optional top-level ``"chat": true`` (and an optional ``"system"`` message) asks
for the tokenizer's chat template: each instruction is split at its last line break, the text before
becomes the user's turn and the last line (``Sentence 2: "``) opens the assistant's turn, so the
model continues the quotation inside its own answer. Counter-instructions go through the same
template, so self-debiasing applies unchanged. Specs without the field are DINO's, read as before::

    {"task_name": "sts-chat", "chat": true, "system": "You write sentences.",
     "labels": {"1": {"instruction": "Write a sentence that means the same as \"<X1>\".\nSentence: \""}}}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError

PLACEHOLDER = "<X1>"
MASKED = re.compile(r"<X1:mask=(0(?:\.\d+)?|1(?:\.0+)?)>")  # x1 with a share of its words masked (CLAIF)
CLOSING_QUOTES = {'"': '"', "\u201c": "\u201d"}  # an instruction's opening mark -> the mark that ends an output
OPENING_QUOTES = tuple(CLOSING_QUOTES)
FORMATS = {"quoted": None, "json": ("{", "}"), "numbered": ("1. ", "\n\n")}  # format -> (instruction end, output end)


@dataclass(frozen=True)
class OutputFormat:
    """What one output holds and where it ends (a spec's ``"output"``; the module docstring).

    Args:
        kind: ``quoted`` (DINO's: the text before the closing quote), ``json`` or ``numbered``.
        end: the mark that ends an output.
        fields: the texts a structured output holds, in order.
        anchor: the field that is x1 (a spec that makes x1 in the same call).
        pairs: field -> the label of the pair (x1, that field).
    """

    kind: str = "quoted"
    end: str = '"'
    fields: tuple[str, ...] = ()
    anchor: str | None = None
    pairs: tuple[tuple[str, str], ...] = ()

    @property
    def structured(self) -> bool:
        return self.kind != "quoted"

    def judge(self, raw: str, allow_newlines: bool = False, keep_unclosed: bool = False) -> tuple[str | None, str | None]:
        """(the text of an output, why it is rejected or None): the text before the end mark; rejected when
        never ended (``unclosed``; or ``newline`` when a line ended first), empty, holding a newline in a
        quoted output, or a structured one that does not parse (``unparsed``). One rule for every generator."""
        if self.end in raw:
            text: str | None = raw.split(self.end, 1)[0]
        else:
            text = raw if keep_unclosed else None
        if text is None:
            return None, "newline" if not self.structured and not allow_newlines and "\n" in raw else "unclosed"
        if not text.strip() if self.structured else not text:
            return text, "empty"
        if not self.structured:
            return text, "newline" if not allow_newlines and "\n" in text else None
        return text, None if self.parse(text) is not None else "unparsed"

    def parse(self, text: str) -> dict[str, str] | None:
        """The fields of a structured output's text (None when it does not hold them all)."""
        if self.kind == "json":
            try:
                obj = json.loads("{" + text + "}")
            except json.JSONDecodeError:
                return None
            values = {f: obj.get(f) for f in self.fields} if isinstance(obj, dict) else {}
        else:
            lines = [line.strip() for line in text.strip().split("\n")]
            values = {}
            for i, f in enumerate(self.fields):
                line = lines[i] if i < len(lines) else ""
                values[f] = line if i == 0 else line[len(f"{i + 1}."):].strip() if line.startswith(f"{i + 1}.") else None
        if not all(isinstance(v, str) and v.strip() and "\n" not in v for v in values.values()):
            return None
        return {f: v.strip() for f, v in values.items()}

    def pair_texts(self, x1: str | None, text: str) -> list[tuple[str, str, str]]:
        """(x1, x2, label) of every pair an accepted output makes."""
        values = self.parse(text) or {}
        a = values.get(self.anchor) if self.anchor else x1
        return [(a, values[f], label) for f, label in self.pairs if a and values.get(f)]

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.kind, "fields": list(self.fields), "anchor": self.anchor, "pairs": dict(self.pairs)}


def mask_words(x1: str, rate: float) -> str:
    """CLAIF's corruption (``modeling.py#L34-L55``): ``ceil(rate * words)`` whitespace words become ``<mask>``,
    and with probability 0.5 adjacent masks are merged into one; seeded by the sentence and the rate."""
    import math
    import random

    from dsgen.identity import texts_key

    words = x1.split()
    rng = random.Random(int(texts_key([x1, f"{rate:g}"]), 16))
    n = min(len(words), math.ceil(len(words) * rate))
    for i in rng.sample(range(len(words)), n):
        words[i] = "<mask>"
    if rng.random() < 0.5:
        merged: list[str] = []
        for w in words:
            if not (w == "<mask>" and merged and merged[-1] == "<mask>"):
                merged.append(w)
        words = merged
    return " ".join(words)
BUILTIN_SPECS = ("sts-x2", "sts-x1", "gense", "sts-x2-chat", "syncse", "syncse-scratch", "sim-gpt", "claif", "e5-sts",
                 "multicsr")


@dataclass(frozen=True)
class TaskSpec:
    """A validated task specification.

    Args:
        name: the spec's ``task_name``.
        instructions: label -> instruction template.
        counter_labels: label -> its counter labels CL(y).
        source: where the spec was read from (a built-in name or a path).
    """

    name: str
    instructions: dict[str, str]
    counter_labels: dict[str, tuple[str, ...]]
    source: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    chat: bool = False          # render through the tokenizer's chat template (module docstring)
    system: str | None = None   # the system message of a chat spec
    output: OutputFormat = field(default_factory=OutputFormat)

    @property
    def labels(self) -> list[str]:
        return list(self.instructions)

    @property
    def close_quote(self) -> str:
        """The mark that ends a generated text: the partner of the instructions' opening quote, or a
        structured output's end (``}``, a blank line)."""
        return self.output.end

    @property
    def needs_inputs(self) -> bool:
        """True when the instructions continue an input x1 (they hold ``<X1>`` or ``<X1:mask=r>``)."""
        ins = next(iter(self.instructions.values()))
        return PLACEHOLDER in ins or bool(MASKED.search(ins))

    def instruction(self, label: str, x1: str | None) -> str:
        """The instruction of ``label`` with ``x1`` in its placeholder (DINO's prompt), or masked (CLAIF's)."""
        template = self.instructions[label]
        if x1 is None:
            return template
        return MASKED.sub(lambda m: mask_words(x1, float(m.group(1))), template).replace(PLACEHOLDER, x1)

    def turns(self, label: str, x1: str | None) -> tuple[list[dict[str, str]], str]:
        """The chat messages (the system message, the user's turn) and the text that opens the assistant's
        turn: the instruction split at its last line break (without one, all of it is the user's turn)."""
        instruction = self.instruction(label, x1)
        user, sep, opening = instruction.rpartition("\n")
        user, opening = (user, opening) if sep else (instruction, "")
        messages = ([{"role": "system", "content": self.system}] if self.system else [])
        return messages + [{"role": "user", "content": user}], opening

    def render(self, tokenizer: Any, messages: list[dict[str, str]], opening: str) -> str:
        """Chat ``messages`` through ``tokenizer``'s template, the assistant's turn opened with ``opening`` (a
        BOS the template writes is dropped where the tokenizer adds its own): what a chat model continues."""
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise DsgenError(f"task spec {self.source or self.name} asks for a chat template, which the model's "
                             "tokenizer does not have; use an instruction-tuned model, or no chat template")
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        bos = getattr(tokenizer, "bos_token", None)
        if bos and text.startswith(bos) and _adds_bos(tokenizer):
            text = text[len(bos):]  # the tokenizer adds it again when the prompt is tokenised
        return text + opening

    def prompt(self, label: str, x1: str | None, tokenizer: Any = None) -> str:
        """The text the model continues: the instruction, or for a chat spec the tokenizer's chat template
        of its turns followed by the opening of the assistant's answer."""
        if not self.chat:
            return self.instruction(label, x1)
        return self.render(tokenizer, *self.turns(label, x1))

    def without_counter_labels(self) -> "TaskSpec":
        return TaskSpec(self.name, dict(self.instructions), {k: () for k in self.instructions},
                        self.source, self.raw, self.chat, self.system, self.output)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"task_name": self.name,
                               "labels": {lab: {"instruction": ins, "counter_labels": list(self.counter_labels[lab])}
                                          for lab, ins in self.instructions.items()}}
        if self.chat:
            out["chat"] = True
            if self.system:
                out["system"] = self.system
        if self.output.structured:
            out["output"] = self.output.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: object, source: str = "<dict>", with_inputs: bool | None = None) -> "TaskSpec":
        """Validate a parsed spec. ``with_inputs`` checks the placeholder against the inputs given."""

        def bad(msg: str) -> DsgenError:
            return DsgenError(f"task spec {source}: {msg}")

        if not isinstance(data, dict):
            raise bad("expected a JSON object with 'task_name' and 'labels'")
        labels = data.get("labels")
        if not isinstance(labels, dict) or not labels:
            raise bad("no labels: add a 'labels' object mapping each label to its instruction")
        name = str(data.get("task_name", Path(source).stem))
        instructions: dict[str, str] = {}
        counters: dict[str, tuple[str, ...]] = {}
        output = _output_format(data.get("output"), bad)
        for label, entry in labels.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("instruction"), str):
                raise bad(f"label '{label}' needs an 'instruction' string")
            ins = entry["instruction"]
            if output.structured:
                opening = FORMATS[output.kind][0]
                if not ins.endswith(opening):
                    raise bad(f"the instruction of label '{label}' must end with {opening!r} (a {output.kind} output)")
            # the last quote must open a quotation: it ends the text and leaves an odd count of '"'
            elif not ins.endswith(OPENING_QUOTES) or (ins.endswith('"') and ins.count('"') % 2 == 0):
                raise bad(f"the instruction of label '{label}' must end with an opening quotation mark (\")")
            n_placeholders = ins.count(PLACEHOLDER) + len(MASKED.findall(ins))
            if n_placeholders > 1:
                raise bad(f"the instruction of label '{label}' has {n_placeholders} {PLACEHOLDER} placeholders; use one")
            cl = entry.get("counter_labels", [])
            if not isinstance(cl, list):
                raise bad(f"'counter_labels' of label '{label}' must be a list")
            instructions[str(label)] = ins
            counters[str(label)] = tuple(str(c) for c in cl)
        for label, cl in counters.items():
            for c in cl:
                if c not in instructions:
                    raise bad(f"counter label '{c}' of label '{label}' is not a label (labels: {', '.join(instructions)})")
        if not output.structured:
            if len({ins[-1] for ins in instructions.values()}) > 1:
                raise bad("every instruction must end with the same opening quotation mark (\" or \u201c)")
            output = OutputFormat(end=CLOSING_QUOTES[next(iter(instructions.values()))[-1]])
        has = {lab: PLACEHOLDER in ins or bool(MASKED.search(ins)) for lab, ins in instructions.items()}
        if len(set(has.values())) > 1:
            raise bad(f"either every instruction holds {PLACEHOLDER} or none does")
        chat = data.get("chat", False)
        if not isinstance(chat, bool):
            raise bad("'chat' must be true or false")
        system = data.get("system")
        if system is not None and (not isinstance(system, str) or not chat):
            raise bad("'system' must be a string, and only a chat spec (\"chat\": true) has one")
        if chat:
            for label, ins in instructions.items():
                if "\n" not in ins:
                    raise bad(f"a chat spec's instruction is split at its last line break (the last line opens the "
                              f"assistant's answer); the instruction of label '{label}' has none")
        if output.structured and not output.anchor and not all(has.values()):
            raise bad("a structured output without inputs must name its 'anchor' field (the x1 of its pairs)")
        spec = cls(name, instructions, counters, source, data, chat, system, output)
        if with_inputs is True and not spec.needs_inputs:
            raise bad(f"inputs were given but the instructions have no {PLACEHOLDER} placeholder; drop --inputs or add the placeholder")
        if with_inputs is False and spec.needs_inputs:
            raise bad(f"the instructions hold {PLACEHOLDER} but no inputs were given; pass --inputs")
        return spec


def _output_format(data: Any, bad: Any) -> OutputFormat:
    """A spec's ``"output"`` object, validated (absent: DINO's quoted output, its end set by the caller)."""
    if data is None:
        return OutputFormat()
    if not isinstance(data, dict) or data.get("format") not in ("json", "numbered"):
        raise bad("'output' must be an object with \"format\": \"json\" or \"numbered\"")
    fields = data.get("fields")
    if not isinstance(fields, list) or not fields or not all(isinstance(f, str) and f for f in fields):
        raise bad("'output' needs its 'fields': a list of names")
    pairs = data.get("pairs")
    if not isinstance(pairs, dict) or not pairs or not set(pairs) <= set(fields):
        raise bad("'output' needs 'pairs': field -> the label of the pair (x1, field), for fields it names")
    anchor = data.get("anchor")
    if anchor is not None and (anchor not in fields or anchor in pairs):
        raise bad("'output' anchor must be one of its fields, and not one that makes a pair with itself")
    return OutputFormat(data["format"], FORMATS[data["format"]][1], tuple(fields), anchor,
                        tuple((str(f), str(label)) for f, label in pairs.items()))


def _adds_bos(tokenizer: Any) -> bool:
    """Whether tokenising a text puts the BOS token in front of it."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        return False
    ids = tokenizer("x", add_special_tokens=True)["input_ids"]
    return bool(ids) and ids[0] == bos_id


def load_task_spec(name_or_path: str, with_inputs: bool | None = None) -> TaskSpec:
    """Load a built-in spec by name or a DINO-format JSON file by path."""
    if name_or_path in BUILTIN_SPECS:
        text = files("dsgen.task_specs").joinpath(f"{name_or_path}.json").read_text(encoding="utf-8")
        source = name_or_path
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise DsgenError(f"task spec '{name_or_path}' is neither a built-in ({', '.join(BUILTIN_SPECS)}) nor a file")
        try:
            text, source = path.read_text(encoding="utf-8"), str(path)
        except UnicodeDecodeError as exc:
            raise DsgenError(f"task spec {name_or_path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DsgenError(f"task spec {source}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    return TaskSpec.from_dict(data, source=source, with_inputs=with_inputs)
