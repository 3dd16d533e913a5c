"""The Python agent frameworks people build on, driven against the embedded server (the session's
`server_url`) with a small model, greedy and with few tokens: openai-agents through the Responses API
and through Chat Completions, each running a function tool and answering with its result;
pydantic-ai's agent with a typed output and instructor, both in JSON-schema mode (`response_format`),
their answers validated into a pydantic model. Each runs the framework's own loop, unmodified, over
HTTP.

The tool round trip runs on the stand-in FENCED (tests/support/fenced_model.py, speculated with
'lookup'), not on qwen2.5-coder: that model writes its call as bare JSON text, which real Ollama too
returns as content (recordings 22-28: a call is parsed only in the syntax the model's template
defines), so no framework would see a call from it. FENCED is the same model with its template's
tool tag a ```json fence, the syntax it writes: its call is parsed, and the agent runs the tool. Given
the tool's result, this 0.5B model calls the tool again (every turn, on both APIs, until max_turns), so
the agent stops at the tool's output (`tool_use_behavior="stop_on_first_tool"`)."""

from __future__ import annotations

from collections.abc import Iterator

import instructor
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from pydantic import BaseModel
from pydantic_ai import Agent as TypedAgent
from pydantic_ai import NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.ollama import OllamaProvider

from tests.support.fenced_model import FENCED, fenced_server
from tests.support.models import TARGET

WEATHER = "14 degrees, light rain"
asked: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    asked.append(city)
    return WEATHER


class City(BaseModel):
    name: str
    country: str


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    """openai-agents exports traces to OpenAI by default: nothing leaves this machine."""
    set_tracing_disabled(True)
    asked.clear()


@pytest.fixture(scope="module")
def fenced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fenced_server(tmp_path_factory.mktemp("fenced-agents"), speculation=True,
                       args=("--pair", f"{FENCED}=lookup")) as url:
        yield url


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="ollama", max_retries=0, timeout=600)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_openai_agents_tool_round_trip(fenced: str, api: str) -> None:
    """The agent loop reads the model's call, runs the tool once, and ends with its result."""
    model = (OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel)(
        model=FENCED, openai_client=sdk(fenced))
    agent = Agent(name="weather", instructions="Answer with the get_weather tool.", model=model,
                  tools=[get_weather], model_settings=ModelSettings(temperature=0, max_tokens=80),
                  tool_use_behavior="stop_on_first_tool")
    result = await Runner.run(agent, "What is the weather in Paris?", max_turns=3)
    assert [city.lower() for city in asked] == ["paris"], (asked, result.final_output)
    assert result.final_output == WEATHER


async def test_pydantic_ai_typed_output(server_url: str) -> None:
    """pydantic-ai's agent on the Ollama provider returns its output validated as the declared type, asked
    as a JSON schema (`NativeOutput`: `response_format`, which the server holds the answer to)."""
    model = OpenAIChatModel(TARGET, provider=OllamaProvider(openai_client=sdk(server_url)))
    agent = TypedAgent(model, output_type=NativeOutput(City), model_settings={"temperature": 0, "max_tokens": 80})
    result = await agent.run("Which city is the capital of France?")
    assert isinstance(result.output, City)
    assert result.output.name.lower() == "paris", result.output


async def test_instructor_json_schema(server_url: str) -> None:
    """instructor in JSON-schema mode: the schema goes as `response_format`, the answer validates."""
    client = instructor.from_openai(sdk(server_url), mode=instructor.Mode.JSON_SCHEMA)
    city = await client.chat.completions.create(
        model=TARGET, response_model=City, max_retries=0, temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": "Which city is the capital of Japan?"}])
    assert isinstance(city, City)
    assert city.name.lower() == "tokyo" and city.country.lower() == "japan", city
