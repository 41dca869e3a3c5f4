import socket
import time

import pytest

from activelearn.stepgen import OpenAICompletionsGenerator, PromptTemplate, SamplingParams, StepGenerationError
from tests.activelearn.stepgen.completions_server import Fail, RawBody, ServerState, Sleep, completions_server

PROBLEM = "What is $1+1$? Give {braces} too."
DOCUMENTS = [
    f"{PROBLEM}\n\nWe add.\nSo $1+1=2$.\n\n# Answer\n\n2",
    f"{PROBLEM}\n\nOne plus one.\nThat is $2$.\n\n# Answer\n\n2",
    f"{PROBLEM}\n\nWe add.\nSo it is $3$.\n\n# Answer\n\n3",
]


def generator(url: str, **options) -> OpenAICompletionsGenerator:
    params = options.pop("params", SamplingParams(k=4, temperature=0.8, top_p=0.95, max_tokens=64, seed=7))
    return OpenAICompletionsGenerator(base_url=url, model="math-gen", params=params, backoff_s=0, **options)


def test_it_asks_for_k_samples_stopping_at_newline_and_dedupes():
    state = ServerState(DOCUMENTS)
    with completions_server(state) as url:
        result = generator(url).generate(problem=PROBLEM, steps=[])

    assert result.texts == ("We add.", "One plus one.")
    assert (result.samples, result.duplicates, result.empty, result.incomplete) == (4, 2, 0, 0)
    [request] = state.requests
    assert request["prompt"] == f"{PROBLEM}\n\n"
    assert request["n"] == 4
    assert request["stop"] == ["\n"]
    assert (request["model"], request["temperature"], request["top_p"], request["max_tokens"], request["seed"]) == (
        "math-gen", 0.8, 0.95, 64, 7,
    )  # fmt: skip


def test_it_records_the_sampling_settings():
    with completions_server(ServerState(DOCUMENTS)) as url:
        result = generator(url).generate(problem=PROBLEM, steps=[], seed=11)

    assert result.sampling.as_dict() == {
        "backend": "openai",
        "model": "math-gen",
        "k": 4,
        "temperature": 0.8,
        "top_p": 0.95,
        "max_tokens": 64,
        "seed": 11,
        "stop": ["\n"],
        "prompt_template": "{problem}\n\n{steps}",
        "extra": {"url": f"{url}/v1/completions", "requests": 1},
    }


def test_it_continues_from_the_steps_so_far():
    state = ServerState(DOCUMENTS)
    with completions_server(state) as url:
        result = generator(url).generate(problem=PROBLEM, steps=["We add."])

    assert state.requests[0]["prompt"] == f"{PROBLEM}\n\nWe add.\n"
    assert result.texts == ("So $1+1=2$.", "So it is $3$.")


@pytest.mark.parametrize("report_stop_reason", [True, False], ids=["vllm", "no-stop-reason"])
def test_it_completes_the_answer_step_across_the_blank_lines(report_stop_reason):
    state = ServerState(DOCUMENTS, report_stop_reason=report_stop_reason)
    with completions_server(state) as url:
        result = generator(url).generate(problem=PROBLEM, steps=["We add.", "So $1+1=2$."])

    assert result.texts == ("# Answer\n\n2",)
    prefix = f"{PROBLEM}\n\nWe add.\nSo $1+1=2$.\n"
    assert [r["prompt"] for r in state.requests] == [
        prefix, prefix + "\n", prefix + "\n# Answer\n", prefix + "\n# Answer\n\n",
    ]  # fmt: skip
    assert [r["n"] for r in state.requests] == [4, 4, 4, 4]


def test_it_gives_up_on_samples_still_without_a_step_after_the_followups():
    state = ServerState(DOCUMENTS)
    params = SamplingParams(k=2, max_followups=1)
    with completions_server(state) as url:
        result = generator(url, params=params).generate(problem=PROBLEM, steps=["We add.", "So $1+1=2$."])

    assert result.texts == ()
    assert result.incomplete == 2
    assert len(state.requests) == 2


def test_it_drops_samples_cut_by_max_tokens():
    with completions_server(ServerState(DOCUMENTS)) as url:
        result = generator(url, params=SamplingParams(k=2, max_tokens=1)).generate(problem=PROBLEM, steps=[])

    assert result.texts == ()
    assert result.incomplete == 2


def test_it_retries_a_503_then_succeeds():
    state = ServerState(DOCUMENTS, script=[Fail(503, "warming up"), Fail(503, "warming up")])
    with completions_server(state) as url:
        result = generator(url, retries=2).generate(problem=PROBLEM, steps=[])

    assert result.texts == ("We add.", "One plus one.")
    assert len(state.requests) == 3


def test_it_gives_up_after_the_retries_naming_url_and_status():
    state = ServerState(DOCUMENTS, script=[Fail(502, "bad gateway")] * 3)
    with completions_server(state) as url, pytest.raises(StepGenerationError) as error:
        generator(url, retries=2).generate(problem=PROBLEM, steps=[])

    assert f"POST {url}/v1/completions failed after 3 attempt(s)" in str(error.value)
    assert "HTTP 502" in str(error.value) and "bad gateway" in str(error.value)
    assert len(state.requests) == 3


def test_it_does_not_retry_a_400():
    state = ServerState(DOCUMENTS, script=[Fail(400, "The model `math-gen` does not exist.")])
    with completions_server(state) as url, pytest.raises(StepGenerationError) as error:
        generator(url, retries=3).generate(problem=PROBLEM, steps=[])

    assert f"POST {url}/v1/completions returned HTTP 400 (not retried)" in str(error.value)
    assert "does not exist" in str(error.value)
    assert len(state.requests) == 1


def test_it_times_out_on_a_silent_server_and_retries_once():
    state = ServerState(DOCUMENTS, script=[Sleep(1.0), Sleep(1.0)])
    started = time.monotonic()
    with completions_server(state) as url, pytest.raises(StepGenerationError) as error:
        generator(url, retries=1, timeout_s=0.2).generate(problem=PROBLEM, steps=[])

    assert time.monotonic() - started < 1.0
    assert "failed after 2 attempt(s); last: timed out after 0.2s" in str(error.value)
    assert len(state.requests) == 2


def test_it_retries_a_refused_connection():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StepGenerationError) as error:
        generator(f"http://127.0.0.1:{port}", retries=1).generate(problem=PROBLEM, steps=[])

    assert f"POST http://127.0.0.1:{port}/v1/completions failed after 2 attempt(s)" in str(error.value)
    assert "connection failed: ConnectionRefusedError" in str(error.value)


def test_a_body_that_is_not_json_is_a_clear_error():
    state = ServerState(DOCUMENTS, script=[RawBody("<html>proxy error</html>")])
    with completions_server(state) as url, pytest.raises(StepGenerationError) as error:
        generator(url).generate(problem=PROBLEM, steps=[])

    assert str(error.value) == f"POST {url}/v1/completions returned a body that is not JSON: '<html>proxy error</html>'"
    assert len(state.requests) == 1


def test_json_without_choices_is_a_clear_error():
    state = ServerState(DOCUMENTS, script=[RawBody('{"object": "error"}')])
    with completions_server(state) as url, pytest.raises(StepGenerationError, match="no usable 'choices'"):
        generator(url).generate(problem=PROBLEM, steps=[])


def test_it_sends_the_api_key_and_accepts_a_base_url_ending_in_v1():
    state = ServerState(DOCUMENTS)
    with completions_server(state) as url:
        generator(f"{url}/v1/", api_key="sk-lab").generate(problem=PROBLEM, steps=[])

    assert state.headers[0]["Authorization"] == "Bearer sk-lab"


def test_it_sends_no_seed_and_no_key_unless_configured():
    state = ServerState(DOCUMENTS)
    with completions_server(state) as url:
        result = generator(url, params=SamplingParams(k=1)).generate(problem=PROBLEM, steps=[])

    assert "seed" not in state.requests[0]
    assert "Authorization" not in state.headers[0]
    assert result.sampling.seed is None


def test_a_custom_prompt_template_shapes_the_prompt():
    template = PromptTemplate("Problem: {problem}\nSolution:\n{steps}")
    state = ServerState([f"Problem: {PROBLEM}\nSolution:\nWe add.\n"])
    with completions_server(state) as url:
        result = generator(url, prompt_template=template).generate(problem=PROBLEM, steps=[])

    assert state.requests[0]["prompt"] == f"Problem: {PROBLEM}\nSolution:\n"
    assert result.texts == ("We add.",)
    assert result.sampling.prompt_template == "Problem: {problem}\nSolution:\n{steps}"


@pytest.mark.parametrize(
    ("base_url", "model", "message"),
    [
        ("gpu-box:8000", "m", r"must be http\(s\)://host"),
        ("ftp://gpu-box", "m", r"must be http\(s\)://host"),
        ("http://gpu-box:8000", "", "model name is empty"),
    ],
)
def test_it_rejects_a_bad_configuration(base_url, model, message):
    with pytest.raises(ValueError, match=message):
        OpenAICompletionsGenerator(base_url=base_url, model=model)


def test_it_samples_whole_solutions_without_a_stop_string():
    state = ServerState(DOCUMENTS)
    with completions_server(state) as url:
        draws = generator(url, params=SamplingParams(max_tokens=64, seed=7)).sample_solutions(
            problem=PROBLEM, n=3, seed=7
        )

    [request] = state.requests
    assert "stop" not in request
    assert (request["prompt"], request["n"], request["seed"]) == (f"{PROBLEM}\n\n", 3, 7)
    assert [d.text for d in draws] == [doc[len(PROBLEM) + 2 :] for doc in DOCUMENTS]
    assert [(d.request_id, d.choice_index, d.seed, d.finish_reason) for d in draws] == [
        ("cmpl-test", 0, 7, "stop"), ("cmpl-test", 1, 7, "stop"), ("cmpl-test", 2, 7, "stop"),
    ]  # fmt: skip


def test_a_server_answering_one_choice_per_request_is_asked_again_with_the_seed_moved_on():
    state = ServerState(DOCUMENTS, max_choices=1)
    with completions_server(state) as url:
        draws = generator(url).sample_solutions(problem=PROBLEM, n=3, seed=10)

    assert [(r["n"], r["seed"]) for r in state.requests] == [(3, 10), (2, 11), (1, 12)]
    assert [d.seed for d in draws] == [10, 11, 12]


def test_a_server_answering_no_choices_is_a_clear_error():
    state = ServerState(DOCUMENTS, max_choices=0)
    with completions_server(state) as url, pytest.raises(StepGenerationError) as error:
        generator(url).sample_solutions(problem=PROBLEM, n=2, seed=None)

    assert str(error.value) == f"POST {url}/v1/completions returned no choices for n=2"
