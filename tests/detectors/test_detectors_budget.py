import pytest
from detector_factory import bash, kinds, llm, tool, traj

from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.detectors import budget, parse_budget
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig

RUN = traj(llm("a", input_tokens=1000, output_tokens=50), tool("t1"), tool("t2"),
           llm("b", input_tokens=2000, output_tokens=70), tool("t3"), llm("c"), duration_s=42.0)

CASES: list[tuple[str, Trajectory, dict[str, float], list[tuple[str, float, float]]]] = [
    ("no budgets", RUN, {}, []),
    ("within every budget", RUN,
     {"steps": 3, "llm_calls": 3, "tool_calls": 3, "input_tokens": 3100, "output_tokens": 140,
      "duration_s": 42}, []),
    ("steps", RUN, {"steps": 2}, [("steps_exceeded", 3, 2)]),
    ("llm calls", RUN, {"llm_calls": 1}, [("llm_calls_exceeded", 3, 1)]),
    ("tool calls", RUN, {"tool_calls": 0}, [("tool_calls_exceeded", 3, 0)]),
    ("input tokens", RUN, {"input_tokens": 3000}, [("input_tokens_exceeded", 3100, 3000)]),
    ("output tokens", RUN, {"output_tokens": 100}, [("output_tokens_exceeded", 140, 100)]),
    ("wall time", RUN, {"duration_s": 30}, [("duration_s_exceeded", 42, 30)]),
    ("several, in budget-name order", RUN, {"duration_s": 1, "steps": 1},
     [("steps_exceeded", 3, 1), ("duration_s_exceeded", 42, 1)]),
    ("a shell action is one step",
     traj(bash("ls"), bash("cat a"), tool("inner", parent=2)), {"steps": 1},
     [("steps_exceeded", 2, 1)]),
]


@pytest.mark.parametrize(("trajectory", "budgets", "expected"),
                         [(t, b, e) for _, t, b, e in CASES], ids=[c[0] for c in CASES])
def test_budget_cases(trajectory: Trajectory, budgets: dict[str, float],
                      expected: list[tuple[str, float, float]]) -> None:
    found = budget.detect(trajectory, DetectorsConfig(), Context(budgets=budgets))
    assert [(f.kind, f.attributes["value"], f.attributes["limit"]) for f in found] == expected
    assert all(f.severity == "error" for f in found)


def test_steps_message_and_pointers() -> None:
    (f,) = budget.detect(RUN, DetectorsConfig(), Context(budgets={"steps": 2}))
    assert f.message == "3 steps against a budget of 2"
    assert f.step_indexes == [5]  # the call that blew it


def test_cost_from_spans_first() -> None:
    t = traj(llm("a", cost=0.4), llm("b", cost=0.3))
    (f,) = budget.detect(t, DetectorsConfig(), Context(budgets={"cost_usd": 0.5}))
    assert f.kind == "cost_usd_exceeded"
    assert f.message == "cost 0.7 USD against a budget of 0.5 USD"


def test_cost_from_litellm_price_map() -> None:
    prices = budget.model_prices("gpt-4o")
    assert prices is not None and prices[0] > 0
    t = traj(llm("a", input_tokens=1_000_000, output_tokens=0, model="openai/gpt-4o"))
    (f,) = budget.detect(t, DetectorsConfig(), Context(budgets={"cost_usd": 0.01}))
    assert f.attributes["value"] == pytest.approx(prices[0] * 1_000_000)


def test_price_table_read_without_litellm_matches_litellm_model_cost() -> None:
    """The prices are read from litellm's packaged JSON without importing litellm (idle RSS);
    every model name litellm itself serves (aliases resolved) must price the same."""
    from otel_eval.evaluate.judge.llm import litellm
    from otel_eval.evaluate.trajectory.prices import Prices, _price_map

    def rate(value: object) -> float | None:
        return float(value) if isinstance(value, int | float) else None

    rates = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost",
             "cache_creation_input_token_cost")

    def tiers(entry: dict[str, object]) -> tuple[tuple[float, ...], ...]:
        """<rate>_above_<N>[k]_tokens, without a service-tier suffix or a TTL."""
        found: dict[float, list[float | None]] = {}
        for key, value in entry.items():
            head, sep, tail = key.partition("_above_")
            size = tail.removesuffix("_tokens")
            if not (sep and head in rates and size != tail and rate(value) is not None):
                continue
            try:
                threshold = float(size.removesuffix("k")) * (1000 if size.endswith("k") else 1)
            except ValueError:
                continue
            found.setdefault(threshold, [None] * 4)[rates.index(head)] = rate(value)
        return tuple((t, *found[t]) for t in sorted(found))  # type: ignore[misc]

    tier_tables = set(_tier_table_rows())  # priced by the table (the test below)
    table = {name: p for name, p in _price_map().items() if name not in tier_tables}
    expected = {}
    for name, entry in litellm.model_cost.items():
        if name in tier_tables:
            continue
        inp, out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
        if isinstance(inp, int | float) and isinstance(out, int | float):
            flat = entry.get("litellm_provider") == "perplexity"  # (the test below)
            expected[name] = Prices(float(inp), float(out),
                                    rate(entry.get("cache_read_input_token_cost")),
                                    float(inp) if flat else
                                    rate(entry.get("cache_creation_input_token_cost")),
                                    () if flat else tiers(entry),  # type: ignore[arg-type]
                                    entry.get("litellm_provider") == "xai")
    assert len(expected) > 1000 and any(n.endswith("-latest") for n in expected)  # aliases
    assert sum(p.cache_read is not None for p in expected.values()) > 1000  # cache rates
    assert sum(bool(p.above) for p in expected.values()) > 100  # long-context tiers
    assert table == expected


def test_unknown_model_cost_is_unknown_not_an_error() -> None:
    t = traj(llm("a", model="no-such-model-xyz"), llm("b", cost=0.1))
    found = budget.detect(t, DetectorsConfig(), Context(budgets={"cost_usd": 1.0}))
    assert kinds(found) == ["budget/cost_unknown"]
    assert found[0].severity == "info"
    assert found[0].attributes["cost_unknown_models"] == ["no-such-model-xyz"]
    assert budget.model_prices("no-such-model-xyz") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("steps=5", ("steps", 5.0)), (" cost_usd = 0.25 ", ("cost_usd", 0.25)),
    ("duration_s=0", ("duration_s", 0.0)),
])
def test_parse_budget(text: str, expected: tuple[str, float]) -> None:
    assert parse_budget(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("steps", "expected NAME=VALUE"), ("=5", "expected NAME=VALUE"),
    ("steps=", "expected NAME=VALUE"), ("turns=5", "unknown name 'turns'"),
    ("steps=five", "'five' is not a number"), ("steps=-1", ">= 0"), ("steps=inf", "finite"),
])
def test_parse_budget_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_budget(text)


def test_a_model_the_map_lists_only_under_its_provider_is_priced_by_the_provider() -> None:
    """litellm's map lists Mistral's models only as ``mistral/<model>`` (xAI's, Vertex's,
    Perplexity's likewise): a span saying ``gen_ai.provider.name: mistral_ai`` and model
    ``mistral-large-latest`` had no price (cost unknown, no cost budget). The call's provider
    picks its row, as litellm looks a model up with its provider; with no provider, or one
    the map does not name, the model's own row or nothing."""
    from otel_eval.base.model import Span, Trace
    from otel_eval.evaluate.config import TrajectoryConfig
    from otel_eval.evaluate.trajectory import build_trajectory
    from otel_eval.evaluate.trajectory.prices import _price_map, provider

    row = _price_map()["mistral/mistral-large-latest"]
    assert budget.model_prices("mistral-large-latest") is None
    assert budget.model_prices("mistral-large-latest", "mistral_ai") == row
    assert budget.model_prices("mistral-large-latest", "no-such-provider") is None
    assert budget.model_prices("gpt-4o-mini", "openai") == budget.model_prices("gpt-4o-mini")
    assert provider({"ai.model.provider": "mistral.chat"}) == "mistral"
    assert provider({"gen_ai.system": "mistral_ai", "llm.provider": "x"}) == "mistral_ai"
    assert provider({"gen_ai.provider.name": ""}) is None
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "mistral_ai",
            "gen_ai.request.model": "mistral-large-latest", "gen_ai.usage.input_tokens": 1000,
            "gen_ai.usage.output_tokens": 100}
    run = Trace("ab" * 16, [Span("ab" * 16, "cd" * 8, None, "chat", 1, 2, attributes=chat)],
                "complete")
    t = build_trajectory(run, TrajectoryConfig())
    assert t.usage()["cost_usd"] == pytest.approx(1000 * row[0] + 100 * row[1])


def test_every_provider_the_genai_conventions_name_picks_its_row() -> None:
    """The well-known values of ``gen_ai.provider.name`` (semantic-conventions-genai's
    registry) each pick their provider's rows in litellm's map: Moonshot AI's models are
    listed only as ``moonshot/<model>``, and a span saying ``moonshot_ai`` and model
    ``kimi-k2.5`` had no price (cost unknown, no cost budget). ``gcp.gen_ai`` ("any Google
    generative AI endpoint", the backend unknown) names no one row."""
    from otel_eval.evaluate.trajectory.prices import PRICE_PREFIXES, _price_map

    named = {"anthropic", "aws.bedrock", "azure.ai.inference", "azure.ai.openai", "cohere",
             "deepseek", "gcp.gemini", "gcp.vertex_ai", "groq", "ibm.watsonx.ai", "mistral_ai",
             "moonshot_ai", "openai", "perplexity", "x_ai"}
    assert named <= PRICE_PREFIXES.keys()
    assert budget.model_prices("kimi-k2.5") is None
    assert budget.model_prices("kimi-k2.5", "moonshot_ai") == _price_map()["moonshot/kimi-k2.5"]


def test_a_long_context_call_is_priced_at_its_tier() -> None:
    """litellm's map prices a call whose input tokens exceed N at the row's
    ``*_above_<N>k_tokens`` rates, the whole call (``_get_token_base_cost``): a 300k-token
    gemini-2.5-pro call was priced at the 200k-and-under rates, half its cost."""
    from otel_eval.evaluate.judge.llm import litellm

    row = litellm.model_cost["gemini-2.5-pro"]
    assert row["input_cost_per_token_above_200k_tokens"] > row["input_cost_per_token"]
    long_call = llm("a", input_tokens=300_000, output_tokens=1_000, model="gemini-2.5-pro")
    short_call = llm("b", input_tokens=200_000, output_tokens=1_000, model="gemini-2.5-pro")
    assert budget.step_cost(long_call) == pytest.approx(
        300_000 * row["input_cost_per_token_above_200k_tokens"]
        + 1_000 * row["output_cost_per_token_above_200k_tokens"])
    assert budget.step_cost(short_call) == pytest.approx(  # not above: the base rates
        200_000 * row["input_cost_per_token"] + 1_000 * row["output_cost_per_token"])
    cached = llm("c", input_tokens=300_000, output_tokens=0, model="gemini-2.5-pro")
    cached.cache_read_tokens = 100_000  # part of the input tokens, at the tier's cache rate
    assert budget.step_cost(cached) == pytest.approx(
        200_000 * row["input_cost_per_token_above_200k_tokens"]
        + 100_000 * row["cache_read_input_token_cost_above_200k_tokens"])


@pytest.mark.parametrize("model", ["xai/grok-4.3", "gemini/gemini-2.5-pro",
                                   "oci/xai.grok-4.20-reasoning", "vertex_ai/xai/grok-4.3"])
def test_a_call_at_a_tier_threshold_is_priced_as_litellm_prices_it(model: str) -> None:
    """litellm bills xAI's long-context tier from the threshold on (a call of exactly 200k input
    tokens at the higher rates: ``_INCLUSIVE_THRESHOLD_PROVIDERS``), the other providers'
    above it only: a 200,000-token grok-4.3 call was priced at half what litellm bills."""
    from otel_eval.evaluate.judge.llm import litellm

    for tokens in (199_999, 200_000, 200_001):
        call = llm("a", input_tokens=tokens, output_tokens=10, model=model)
        assert budget.step_cost(call) == pytest.approx(
            sum(litellm.cost_per_token(model=model, prompt_tokens=tokens, completion_tokens=10)))


def test_cost_unknown_says_which_rate_is_missing() -> None:
    """A model the map prices, with cache-read tokens and no cache-read rate, is not a model
    with no price: the message names the missing rate (and a call with no token counts
    says so)."""
    from otel_eval.evaluate.trajectory.prices import _price_map

    model = next(name for name, p in sorted(_price_map().items())
                 if p.cache_read is None and "/" not in name)
    cached = llm("a", model=model)
    cached.cache_read_tokens = 50
    uncounted = llm("b", model="gpt-4o")
    uncounted.input_tokens = uncounted.output_tokens = None  # type: ignore[assignment]
    found = budget.detect(traj(cached, uncounted), DetectorsConfig(),
                          Context(budgets={"cost_usd": 1.0}))
    assert kinds(found) == ["budget/cost_unknown"]
    assert found[0].message == (f"cost partly unknown (no cache-read price for {model}; "
                                "no token counts for gpt-4o)")
    assert found[0].attributes["cost_unknown_models"] == sorted([model, "gpt-4o"])


def _tier_table_rows() -> list[str]:
    from otel_eval.evaluate.judge.llm import litellm

    return sorted(name for name, row in litellm.model_cost.items()
                  if any("input_cost_per_token" in tier
                         for tier in row.get("tiered_pricing") or ()))


# litellm's Dashscope calculator imports typed dicts on its first call; pydantic warns about
# their `ReadOnly` items (not ours to fix; as in tests/judge/conftest.py)
@pytest.mark.filterwarnings(
    "ignore:Items? .* on TypedDict class .* using the `ReadOnly` qualifier:UserWarning")
def test_a_model_priced_by_a_tier_table_is_priced_as_litellm_prices_it() -> None:
    """litellm prices the Qwen rows of Dashscope (and its brand aliases), Volcengine's and
    OpenCode Go's by their ``tiered_pricing`` table (one tier, picked by the call's input
    tokens, for the whole call; the table outranks flat rates): read as no price, a
    ``dashscope/qwen-flash`` call's cost was unknown (no cost budget), and an
    ``opencode_go/grok-4.7`` call of 300k tokens was priced at the first tier, half its cost.
    Each row, at each tier's bounds and past the last, costs what ``litellm.cost_per_token``
    says; with cached tokens too where every tier lists a cache-read rate."""
    from otel_eval.evaluate.judge.llm import litellm

    names = _tier_table_rows()
    assert len(names) >= 50
    checked = 0
    for name in names:
        tiers = litellm.model_cost[name]["tiered_pricing"]
        bounds = {int(b) for tier in tiers for b in tier["range"]} - {0}
        cached = all("cache_read_input_token_cost" in tier for tier in tiers)
        for tokens in sorted({1_000} | {b + d for b in bounds for d in (-1, 0, 1)}):
            call = llm("a", input_tokens=tokens, output_tokens=10, model=name)
            expected = sum(litellm.cost_per_token(model=name, prompt_tokens=tokens,
                                                  completion_tokens=10))
            assert budget.step_cost(call) == pytest.approx(expected, rel=1e-9), (name, tokens)
            if cached:
                call.cache_read_tokens = tokens // 2
                expected = sum(litellm.cost_per_token(
                    model=name, prompt_tokens=tokens, completion_tokens=10,
                    cache_read_input_tokens=tokens // 2))
                assert budget.step_cost(call) == pytest.approx(expected, rel=1e-9), \
                    (name, tokens, "cached")
            checked += 1
    assert checked > 400


def test_a_perplexity_call_is_priced_at_the_flat_rates_as_litellm_prices_it() -> None:
    """litellm prices Perplexity's calls with its own calculator
    (``llms/perplexity/cost_calculator.py``), which reads a row's flat rates only (its
    ``*_above_<N>k_tokens`` keys ignored) and bills cache writes as input tokens: a 300k-token
    ``perplexity/xai/grok-4.3`` call was priced at the long-context rates, twice what litellm
    bills. Each Perplexity row with token rates, around each of its thresholds, with cache
    reads and writes where the row prices them, costs what ``litellm.cost_per_token`` says."""
    from otel_eval.evaluate.judge.llm import litellm

    rows = {name: row for name, row in litellm.model_cost.items()
            if row.get("litellm_provider") == "perplexity" and "input_cost_per_token" in row}
    assert sum(any("_above_" in key for key in row) for row in rows.values()) >= 10
    checked = 0
    for name, row in sorted(rows.items()):
        sizes = {key.rpartition("_above_")[2].removesuffix("_tokens") for key in row
                 if "_above_" in key}
        bounds = {int(float(size.removesuffix("k")) * (1000 if size.endswith("k") else 1))
                  for size in sizes}
        for tokens in sorted({1_000} | {b + d for b in bounds for d in (-1, 0, 1)}):
            for read, write in ((0, 0), (tokens // 2, 0), (0, tokens // 4)):
                if (read and "cache_read_input_token_cost" not in row) or \
                        (write and "cache_creation_input_token_cost" not in row):
                    continue
                call = llm("a", input_tokens=tokens, output_tokens=10, model=name)
                call.cache_read_tokens, call.cache_write_tokens = read or None, write or None
                expected = sum(litellm.cost_per_token(
                    model=name, prompt_tokens=tokens, completion_tokens=10,
                    cache_read_input_tokens=read, cache_creation_input_tokens=write))
                assert budget.step_cost(call) == pytest.approx(expected, rel=1e-9), \
                    (name, tokens, read, write)
                checked += 1
    assert checked > 200


@pytest.mark.filterwarnings(
    "ignore:Items? .* on TypedDict class .* using the `ReadOnly` qualifier:UserWarning")
def test_a_provider_named_as_litellm_names_it_picks_its_rows() -> None:
    """LiteLLM's own spans name the provider as litellm does (``gen_ai.system`` is its
    ``custom_llm_provider``) beside the model without its prefix: a call of
    ``dashscope/qwen-flash`` is ``gen_ai.system: dashscope``, ``gen_ai.request.model:
    qwen-flash``, and had no price (its row is listed only under ``dashscope/``; cost unknown,
    no cost budget). A provider the map has rows under picks them, as litellm looks a model
    up with its provider; a name it has none under still names no row."""
    from otel_eval.base.model import Span, Trace
    from otel_eval.evaluate.config import TrajectoryConfig
    from otel_eval.evaluate.judge.llm import litellm
    from otel_eval.evaluate.trajectory import build_trajectory
    from otel_eval.evaluate.trajectory.prices import _price_map

    assert budget.model_prices("qwen-flash") is None
    assert budget.model_prices("qwen-flash", "dashscope") == _price_map()["dashscope/qwen-flash"]
    assert budget.model_prices("qwen-flash", "strands-agents") is None
    for system, model in (("dashscope", "qwen-flash"), ("volcengine", "doubao-seed-2-0-pro-260215"),
                          ("together_ai", "meta-llama/Llama-3.3-70B-Instruct-Turbo")):
        chat = {"gen_ai.operation.name": "chat", "gen_ai.system": system,
                "gen_ai.request.model": model, "gen_ai.usage.input_tokens": 1000,
                "gen_ai.usage.output_tokens": 100}
        run = Trace("ab" * 16, [Span("ab" * 16, "cd" * 8, None, "litellm_request", 1, 2,
                                     attributes=chat)], "complete")
        expected = sum(litellm.cost_per_token(model=f"{system}/{model}", prompt_tokens=1000,
                                              completion_tokens=100))
        assert expected > 0
        usage = build_trajectory(run, TrajectoryConfig()).usage()
        assert usage["cost_usd"] == pytest.approx(expected, rel=1e-9), system


def test_a_cost_summing_past_a_float_is_unknown_not_over_budget() -> None:
    """Two steps of finite cost near 1e308 sum to infinity: the run's ``usage.cost_usd`` is
    then null (unknown), and the budget detector read the same sum as a cost over budget,
    an error finding whose ``value`` was ``"Infinity"`` in the JSON. A sum that is no number
    is unknown, never a reason for a finding: ``cost_unknown``, as an unpriced model's."""
    t = traj(llm("a", cost=1e308), llm("b", cost=1e308))
    found = budget.detect(t, DetectorsConfig(), Context(budgets={"cost_usd": 1.0}))
    assert kinds(found) == ["budget/cost_unknown"]
    assert found[0].severity == "info"
    assert found[0].attributes["value"] is None
    assert "largest float" in found[0].message


@pytest.mark.parametrize("side", ["input", "output"])
def test_a_call_recording_one_token_count_is_partly_priced_not_cheap(side: str) -> None:
    """A call that recorded its input tokens and no output count (or the other way) was priced
    with the missing count as 0: a run of such calls looked cheaper than it was, within a cost
    budget with no word that its cost was not all known. Its cost is unknown, as an unpriced
    model's or a missing cache rate's: the run's cost is a lower bound ("cost partly
    unknown"), and ``inspect`` says why."""
    from otel_eval.evaluate.trajectory.prices import price_steps

    one = llm("a", model="gpt-4o", input_tokens=1_000_000, output_tokens=1_000_000)
    setattr(one, f"{side}_tokens", None)
    assert budget.step_cost(one) is None
    price_steps([one])
    assert one.cost_usd is None
    assert one.unknown["cost_usd"] == f"no {side} token count for gpt-4o"
    found = budget.detect(traj(one, llm("b", cost=0.1)), DetectorsConfig(),
                          Context(budgets={"cost_usd": 1_000.0}))
    assert kinds(found) == ["budget/cost_unknown"]
    assert found[0].message == f"cost partly unknown (no {side} token count for gpt-4o)"
    assert found[0].attributes["value"] == pytest.approx(0.1)


def test_a_partly_priced_cost_over_its_budget_says_at_least() -> None:
    """A run whose known cost alone is past the budget, with a call of unknown cost, was
    reported "cost 0.5 USD against a budget of 0.1 USD", as if 0.5 were its cost: it is a
    lower bound, and the finding says so (as a conversation's does, and a partly priced
    cost within budget says "partly unknown")."""
    t = traj(llm("a", model="no-such-model-xyz"), llm("b", cost=0.5))
    (f,) = budget.detect(t, DetectorsConfig(), Context(budgets={"cost_usd": 0.1}))
    assert f.kind == "cost_usd_exceeded"
    assert f.message == "cost at least 0.5 USD against a budget of 0.1 USD"
    assert f.attributes["cost_unknown_models"] == ["no-such-model-xyz"]
    (f,) = budget.detect(traj(llm("b", cost=0.5)), DetectorsConfig(),
                         Context(budgets={"cost_usd": 0.1}))
    assert f.message == "cost 0.5 USD against a budget of 0.1 USD"  # all known: its cost
