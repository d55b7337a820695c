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
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError

PLACEHOLDER = "<X1>"
CLOSING_QUOTES = {'"': '"', "\u201c": "\u201d"}  # an instruction's opening mark -> the mark that ends an output
OPENING_QUOTES = tuple(CLOSING_QUOTES)
BUILTIN_SPECS = ("sts-x2", "sts-x1", "gense", "sts-x2-chat")


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

    @property
    def labels(self) -> list[str]:
        return list(self.instructions)

    @property
    def close_quote(self) -> str:
        """The mark that ends a generated text: the partner of the instructions' opening quote."""
        return CLOSING_QUOTES[next(iter(self.instructions.values()))[-1]]

    @property
    def needs_inputs(self) -> bool:
        """True when the instructions continue an input x1 (they hold ``<X1>``)."""
        return PLACEHOLDER in next(iter(self.instructions.values()))

    def instruction(self, label: str, x1: str | None) -> str:
        """The instruction of ``label`` with ``x1`` in its placeholder (DINO's prompt)."""
        template = self.instructions[label]
        return template.replace(PLACEHOLDER, x1) if x1 is not None else template

    def turns(self, label: str, x1: str | None) -> tuple[list[dict[str, str]], str]:
        """A chat spec's messages (system, user) and the text that opens the assistant's turn."""
        user, _, opening = self.instruction(label, x1).rpartition("\n")
        messages = ([{"role": "system", "content": self.system}] if self.system else [])
        return messages + [{"role": "user", "content": user}], opening

    def prompt(self, label: str, x1: str | None, tokenizer: Any = None) -> str:
        """The text the model continues: the instruction, or for a chat spec the tokenizer's chat template
        of its turns followed by the opening of the assistant's answer."""
        if not self.chat:
            return self.instruction(label, x1)
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise DsgenError(f"task spec {self.source or self.name} asks for a chat template, which the generator's "
                             "tokenizer does not have; use an instruction-tuned model or a spec without \"chat\"")
        messages, opening = self.turns(label, x1)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        bos = getattr(tokenizer, "bos_token", None)
        if bos and text.startswith(bos) and _adds_bos(tokenizer):
            text = text[len(bos):]  # the tokenizer adds it again when the prompt is tokenised
        return text + opening

    def without_counter_labels(self) -> "TaskSpec":
        return TaskSpec(self.name, dict(self.instructions), {k: () for k in self.instructions},
                        self.source, self.raw, self.chat, self.system)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"task_name": self.name,
                               "labels": {lab: {"instruction": ins, "counter_labels": list(self.counter_labels[lab])}
                                          for lab, ins in self.instructions.items()}}
        if self.chat:
            out["chat"] = True
            if self.system:
                out["system"] = self.system
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
        for label, entry in labels.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("instruction"), str):
                raise bad(f"label '{label}' needs an 'instruction' string")
            ins = entry["instruction"]
            # the last quote must open a quotation: it ends the text and leaves an odd count of '"'
            if not ins.endswith(OPENING_QUOTES) or (ins.endswith('"') and ins.count('"') % 2 == 0):
                raise bad(f"the instruction of label '{label}' must end with an opening quotation mark (\")")
            n_placeholders = ins.count(PLACEHOLDER)
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
        if len({ins[-1] for ins in instructions.values()}) > 1:
            raise bad("every instruction must end with the same opening quotation mark (\" or \u201c)")
        has = {lab: PLACEHOLDER in ins for lab, ins in instructions.items()}
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
        spec = cls(name, instructions, counters, source, data, chat, system)
        if with_inputs is True and not spec.needs_inputs:
            raise bad(f"inputs were given but the instructions have no {PLACEHOLDER} placeholder; drop --inputs or add the placeholder")
        if with_inputs is False and spec.needs_inputs:
            raise bad(f"the instructions hold {PLACEHOLDER} but no inputs were given; pass --inputs")
        return spec


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
        text, source = path.read_text(encoding="utf-8"), str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DsgenError(f"task spec {source}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    return TaskSpec.from_dict(data, source=source, with_inputs=with_inputs)
