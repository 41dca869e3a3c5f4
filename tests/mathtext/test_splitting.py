import pytest

from activelearn.stepgen.base import PromptTemplate, SampleOutcome, SamplingRecord, collect_candidates
from mathtext.splitting import FirstStep, dedupe, first_step, is_answer_step, split_steps

CASES = [
    # generated text after the prompt            -> first step, complete
    ("So $x = 7$.\nNext line", FirstStep("So $x = 7$.", True)),
    ("So $x = 7$.", FirstStep("So $x = 7$.", False)),
    ("  So $x = 7$.  \n", FirstStep("So $x = 7$.", True)),
    ("So $x = 7$.\r\nNext", FirstStep("So $x = 7$.", True)),
    ("\n\n  \nWe add.\n", FirstStep("We add.", True)),
    ("", FirstStep(None, False)),
    ("\n \n", FirstStep(None, False)),
    # the PRM800K trailer: the marker line runs through the answer line
    ("# Answer\n\n320,000", FirstStep("# Answer\n\n320,000", False)),
    ("# Answer\n\n320,000\n", FirstStep("# Answer\n\n320,000", True)),
    ("\n# Answer\n\n 7 \nmore text", FirstStep("# Answer\n\n7", True)),
    ("# Answer\n", FirstStep(None, False)),
    ("# Answer\n\n", FirstStep(None, False)),
    ("# Answer", FirstStep(None, False)),
    ("# Answer: 7\n", FirstStep("# Answer\n\n7", True)),
    ("# Answer 3", FirstStep("# Answer\n\n3", False)),
    # only a line that starts with the marker is an answer step
    ("# Answers differ by one.\n", FirstStep("# Answers differ by one.", True)),
    ("So $x=7$. # Answer 7\n", FirstStep("So $x=7$. # Answer 7", True)),
    ("So $x = 7$.\n\n# Answer\n\n7", FirstStep("So $x = 7$.", True)),
    # a display block is one step, complete once a newline follows its closing line
    ("\\[\nx = 1\n", FirstStep(None, False)),
    ("\\[\nx = 1\n\\]", FirstStep("\\[\nx = 1\n\\]", False)),
    ("\\[\nx = 1\n\\]\nSo", FirstStep("\\[\nx = 1\n\\]", True)),
    ("$$x$$\n", FirstStep("$$x$$", True)),
]


@pytest.mark.parametrize(("generated", "expected"), CASES)
def test_first_step_splits_one_line_or_one_answer_trailer(generated, expected):
    assert first_step(generated) == expected


SOLUTIONS = [
    # whole solution text -> its steps
    ("First.\n\n  Second.  \n\nThird.\n", ["First.", "Second.", "Third."]),
    (
        "We compute:\n\\[\n1 + 1\n= 2\n\\]\nSo the answer is $\\boxed{2}$.",
        ["We compute:", "\\[\n1 + 1\n= 2\n\\]", "So the answer is $\\boxed{2}$."],
    ),
    (
        "$$\na = b\n$$\n\\begin{align*}\nx &= 1 \\\\\ny &= 2\n\\end{align*}\n```\ncode\n```\nDone.",
        ["$$\na = b\n$$", "\\begin{align*}\nx &= 1 \\\\\ny &= 2\n\\end{align*}", "```\ncode\n```", "Done."],
    ),
    ("Thus\n\\[ x = 1 \\]\nDone.", ["Thus", "\\[ x = 1 \\]", "Done."]),
    # a reply cut off inside a display block keeps one step per line
    ("Start.\n\\[\nx = 1\nand more", ["Start.", "\\[", "x = 1", "and more"]),
    # the few-shot header is formatting, not a step
    ("Step-wise solution:\n1. a\n2. b", ["1. a", "2. b"]),
    # the PRM800K trailer is one step, whichever way it is written
    ("We add.\n\n$1+1=3$.\n# Answer 3", ["We add.", "$1+1=3$.", "# Answer\n\n3"]),
    ("$1+1=2$.\n\n# Answer\n\n2\n", ["$1+1=2$.", "# Answer\n\n2"]),
    ("So it is 7.\r\n# Answer\r\n\r\n7", ["So it is 7.", "# Answer\n\n7"]),
    ("\n\n", []),
]


@pytest.mark.parametrize(("text", "steps"), SOLUTIONS)
def test_split_steps_splits_whole_solutions(text, steps):
    assert split_steps(text) == steps


# The header is dropped only at the start of a whole solution, never mid-generation.
@pytest.mark.parametrize(("text", "steps"), [(t, s) for t, s in SOLUTIONS if s and not t.startswith("Step-wise")])
def test_the_first_step_of_finished_text_is_the_first_split_step(text, steps):
    # One splitter: step generation sees the same first step as splitting the whole text.
    assert first_step(text + "\n").text == steps[0]


@pytest.mark.parametrize(
    ("step", "expected"),
    [("# Answer\n\n7", True), ("# Answer: 7", True), ("# Answers differ", False), ("We add.", False)],
)
def test_is_answer_step(step, expected):
    assert is_answer_step(step) is expected


def test_dedupe_keeps_first_seen_order_and_drops_blanks():
    assert dedupe(["b", " a ", "b", "", "a", "c"]) == ["b", "a", "c"]


def record() -> SamplingRecord:
    return SamplingRecord("test", "m", 4, 1.0, 1.0, 8, None, ("\n",), "{problem}\n\n{steps}")


def test_collect_candidates_counts_every_dropped_sample():
    outcomes = [
        SampleOutcome(FirstStep("We add.", True), ended=False),
        SampleOutcome(FirstStep("We add.", True), ended=False),  # duplicate
        SampleOutcome(FirstStep("# Answer\n\n7", False), ended=True),  # ended right after the answer
        SampleOutcome(FirstStep(None, False), ended=True),  # the model ended the solution
        SampleOutcome(FirstStep("So we", False), ended=False),  # cut by max_tokens
        SampleOutcome(FirstStep(None, False), ended=False),
    ]
    result = collect_candidates(outcomes, sampling=record(), samples=6)

    assert result.texts == ("We add.", "# Answer\n\n7")
    assert (result.samples, result.duplicates, result.empty, result.incomplete) == (6, 1, 1, 2)
    assert result.as_dict()["texts"] == ["We add.", "# Answer\n\n7"]


def test_prompt_template_renders_prm800k_layout_and_keeps_latex_braces():
    template = PromptTemplate()
    assert template.render(problem="Find $\\frac{a}{b}$.", steps=[]) == "Find $\\frac{a}{b}$.\n\n"
    assert template.render(problem="P", steps=["s1", "s2"]) == "P\n\ns1\ns2\n"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{problem}", "exactly {problem} and {steps}"),
        ("{problem}{steps}{answer}", "exactly {problem} and {steps}"),
        ("{problem {steps}", "not a valid format string"),
    ],
)
def test_prompt_template_rejects_wrong_fields(template, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        PromptTemplate(template)
