"""The text quotes the numbers the cells print: a figure in a notebook's prose that no cell prints drifts.

The rule, for every solved notebook (the learner's notebooks have the same markdown):

- a whole number written with thousands separators (``1,739``, ``$98{,}880$``) is a measured or
  counted figure: it must be printed by some cell of the notebook (with or without separators) or
  be a literal of its code (an input such as 1,024 examples);
- a decimal quoted to four places or more (``1.091608``) must be printed, or be in the code.

Code spans, fenced blocks (a terminal session shown as text) and self-check questions (a
question sets its own numbers) are not quotes of a result.
"""

from __future__ import annotations

import re

import pytest

from course import ROOT, read

SOLVED = sorted((ROOT / "solutions").glob("*.ipynb"))

_FENCED = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
_SELF_CHECK = re.compile(r"\*Self-check:\*.*?(?:\n\s*\n|\Z)", re.DOTALL)
_SEPARATED = re.compile(r"(?<![\w.,{])\d{1,3}(?:(?:,|\{,\})\d{3})+(?![\d,]|\{,\})")
_DECIMAL = re.compile(r"(?<![\w.^-])\d+\.\d{4,}(?!\d)")
_PRINTED_WHOLE = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?![\d])|(?<![\w.])\d+(?![\d.])")


def prose(markdown: str) -> str:
    """A markdown cell without its code, fenced blocks and self-check questions."""
    return _SELF_CHECK.sub(" ", _CODE_SPAN.sub(" ", _FENCED.sub(" ", markdown)))


def printed_text(notebook) -> str:
    return "\n".join(output.get("text", "") + output.get("data", {}).get("text/plain", "")
                     for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", []))


def whole_numbers(text: str) -> set[int]:
    return {int(token.replace(",", "")) for token in _PRINTED_WHOLE.findall(text)}


def unprinted_figures(notebook) -> list[str]:
    """The figures of the notebook's prose that no cell prints and no code holds."""
    printed = printed_text(notebook)
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    known = whole_numbers(printed) | whole_numbers(code)
    missing = []
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        text = prose(cell.source)
        missing += [token for token in _SEPARATED.findall(text)
                    if int(token.replace("{,}", "").replace(",", "")) not in known]
        missing += [token for token in _DECIMAL.findall(text) if token not in printed and token not in code]
    return missing


@pytest.mark.parametrize("path", SOLVED, ids=lambda p: p.stem)
def test_every_figure_the_text_quotes_is_one_a_cell_prints(path):
    notebook = read(path)
    assert any(cell.get("outputs") for cell in notebook.cells), "the solved notebook has no outputs"
    assert unprinted_figures(notebook) == []


def test_a_figure_that_drifted_from_its_output_is_found():
    """The rule catches a summary that quotes an old count, and leaves inputs and questions alone."""
    import nbformat
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("n = 1024\nprint(f'{1739:,} parameters, loss 1.091608')", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="1,739 parameters, loss 1.091608\n")]),
        nbformat.v4.new_markdown_cell("With 1,024 examples: 1,739 parameters and a loss of 1.091608. "
                                      "*Self-check:* and for $\\Psi = 1{,}000{,}003$?"),
        nbformat.v4.new_markdown_cell("In all, 1,123 parameters ($98{,}880$ in the big one), final loss 1.091624."),
    ])
    assert unprinted_figures(notebook) == ["1,123", "98{,}880", "1.091624"]
