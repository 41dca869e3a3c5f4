from activelearn.prm.data import LabeledSolution
from activelearn.simulation.domain import DomainConfig, build_dataset
from activelearn.simulation.oracle import OracleLabeler, true_ratings


def _ratings(labeled: LabeledSolution) -> list[int]:
    return [step.completions[step.chosen or 0].rating for step in labeled.steps]


def test_the_oracle_rates_positive_until_the_first_error_then_stops():
    dataset = build_dataset(30, 8, seed=2)
    oracle = OracleLabeler(neutral_fillers=True)
    texts = {p.problem_id: p.text for p in dataset.problems}
    for solution in dataset.all_solutions():
        labeled = oracle.label(texts[solution.problem_id], solution)
        ratings = _ratings(labeled)
        assert ratings == true_ratings(solution)
        assert [s.completions[0].text for s in labeled.steps] == list(solution.step_texts[: len(ratings)])
        if solution.first_error is None:
            assert -1 not in ratings and len(ratings) == len(solution.steps)
        else:
            assert len(ratings) == solution.first_error + 1 and ratings[-1] == -1
            assert all(r in (0, 1) for r in ratings[:-1])
        fillers = [i for i, s in enumerate(solution.steps[: len(ratings)]) if s.kind == "filler"]
        assert all(ratings[i] == 0 for i in fillers)
    assert oracle.solutions_labeled == 240
    assert oracle.step_labels == sum(len(true_ratings(s)) for s in dataset.all_solutions())


def test_without_neutral_fillers_every_correct_step_is_positive():
    dataset = build_dataset(20, 4, seed=2, config=DomainConfig(filler_rate=0.5))
    oracle = OracleLabeler(neutral_fillers=False)
    for solution in dataset.all_solutions():
        assert 0 not in _ratings(oracle.label("p", solution))


def test_a_noisy_oracle_flips_about_the_noise_rate_of_ratings():
    dataset = build_dataset(60, 8, seed=3, config=DomainConfig(solution_error_rate=0.0))
    oracle = OracleLabeler(noise_rate=0.1, neutral_fillers=False, seed=1)
    flipped = 0
    labeled_steps = 0
    for solution in dataset.all_solutions():
        ratings = _ratings(oracle.label("p", solution))
        labeled_steps += len(ratings)
        flipped += ratings.count(-1)  # every step is correct, so each -1 is a flip (and the labeler stops)
    assert 0.05 < flipped / labeled_steps < 0.15
